"""Composition coefficients (layer 2): host-side costs of launching kernels.

Like the kernel coefficients they are a versioned JSON file (``data/coefficients/compose.json``)
naming what they were fitted on; ``perfcast fit`` writes them. Schema 2 dropped version 1's ``comm``
(link efficiencies of predict's own parallel model): links between GPUs are the collectives'
(``data/coefficients/collectives.json``).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from perfcast.datafiles import data_path
from perfcast.jsonio import CanonicalJson, versioned_loader

__all__ = ["COMPOSE_SCHEMA_VERSION", "ComposeCoefficients", "load_compose_coefficients"]

COMPOSE_SCHEMA_VERSION = 2


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class HostCoefficients(_Model):
    """Host (CPU) time per launched kernel, seconds, including the framework ops around it (views, sizes)."""

    eager_op_s: float = Field(description="eager PyTorch forward under no_grad (inference)")
    diffusers_op_s: float | None = Field(default=None, gt=0, description="an eager diffusers pipeline's networks "
                                         "(their Python does more per kernel: attention processors, reshapes, "
                                         "scheduler steps); None: eager_op_s")
    eager_training_op_s: float = Field(description="eager PyTorch forward with autograd recording (training)")
    autograd_op_s: float = Field(description="backward kernels, dispatched by the C++ autograd engine")
    compiled_op_s: float = Field(description="a torch.compile (Inductor) graph's kernels")
    sync_s: float = Field(description="a host synchronization (nonzero, item) besides waiting for the device")
    step_overhead_s: float = Field(description="fixed cost of one step (Python call, allocator)")


class ComposeCoefficients(_Model, CanonicalJson):
    """All layer-2 coefficients."""

    schema_version: int
    produced_by: str
    fitted_on: dict[str, str]
    host: HostCoefficients


_LOAD = versioned_loader(data_path("coefficients", "compose.json"), ComposeCoefficients,
                         version=COMPOSE_SCHEMA_VERSION, what="composition coefficients")


def load_compose_coefficients(path: str | Path | None = None) -> ComposeCoefficients:
    """Load composition coefficients (the package's own when ``path`` is None)."""
    return _LOAD(path)
