"""The output tiles a GPU architecture's BLAS offers its FP32 GEMMs (``data/defaults/blas_tiles.yaml``).

cuBLAS ships one family of FP32 SIMT kernels per architecture, each with a few fixed output tiles, and picks
one per shape: Pascal's linear layers run 32x128, 64x64 and 128x32 tiles where Volta's run 128x64 and 128x128,
and that choice moves a GEMM's efficiency by tens of percent. The table names the tiles the recorded kernel
names show; an architecture without recorded kernels gets None (the coefficient file's generic tiles).
"""

from __future__ import annotations

from functools import cache

from pydantic import BaseModel, ConfigDict, Field

from perfcast.datafiles import data_path
from perfcast.errors import CatalogError
from perfcast.yamlio import load_model_file

__all__ = ["ArchitectureTiles", "BlasTiles", "fp32_tiles"]

Tile = tuple[int, int]


class ArchitectureTiles(BaseModel):
    """One architecture's FP32 kernel tiles (rows x columns of the output), by op layout."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    batched: list[Tile] = Field(min_length=1, description="tiles of batched products (torch.bmm)")
    linear: list[Tile] = Field(min_length=1, description="tiles of linear layers (nn.Linear)")


class BlasTiles(BaseModel):
    """The table: where its tiles were read and the tiles per architecture (catalog ``architecture`` names)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str = Field(min_length=1)
    fp32: dict[str, ArchitectureTiles] = Field(min_length=1)


@cache
def _table() -> BlasTiles:
    table: BlasTiles = load_model_file(data_path("defaults", "blas_tiles.yaml"), BlasTiles, what="BLAS tile table",
                                       error=CatalogError)
    return table


def fp32_tiles(architecture: str | None) -> ArchitectureTiles | None:
    """The FP32 kernel tiles of ``architecture`` (a hardware entry's ``architecture``), or None when the table
    does not list it."""
    if not architecture:
        return None
    return _table().fp32.get(architecture)
