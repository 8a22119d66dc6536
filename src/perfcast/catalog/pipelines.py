"""Diffusers text-to-image pipelines: which catalog UNet and VAE a pipeline id runs, and its defaults.

A benchmark names a whole pipeline (``stabilityai/stable-diffusion-xl-base-1.0``), not its networks. Each
``perfcast/data/models/pipelines/<slug>.yaml`` maps one pipeline repo id to the catalog entries of its
denoising UNet and VAE (:mod:`perfcast.catalog.diffusion`) and the pipeline's own defaults that change the
work: the image side, whether classifier-free guidance runs (the UNet then sees the conditional and the
unconditional latents, 2x the batch) and whether the VAE decoder is upcast to FP32 (diffusers' SDXL pipelines
with a ``force_upcast`` VAE). Its ``source`` says where each was read.

:func:`load_pipeline` resolves a pipeline id (or the file's slug); a pipeline listed in
``data/models/unmodelled/`` (video pipelines, Kandinsky, SD3...) is refused with that entry's one-line reason,
any other name with :class:`~perfcast.errors.UnknownNameError`.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from perfcast.catalog.paths import catalog_dirs, normalize_name
from perfcast.catalog.unmodelled import unmodelled_refusal
from perfcast.errors import CatalogError, UnknownNameError
from perfcast.yamlio import load_model_file

__all__ = ["DiffusionPipeline", "diffusion_pipelines", "load_pipeline"]

FOLDER = "pipelines"  # under each catalog ``models`` folder


class DiffusionPipeline(BaseModel):
    """One diffusers text-to-image pipeline: its networks (catalog ids) and the defaults that set its work."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1, description="the pipeline's Hugging Face repo id, as benchmarks name it")
    pipeline_class: str = Field(min_length=1, description="the diffusers pipeline class (model_index.json)")
    unet: str = Field(min_length=1, description="catalog id of the denoising UNet")
    vae: str = Field(min_length=1, description="catalog id of the VAE whose decoder makes the pixels")
    resolution_px: int = Field(gt=0, le=16384, description="default image side (height = width), pixels")
    guidance: bool = Field(description="classifier-free guidance at the pipeline's default guidance scale (each "
                           "step runs the UNet on 2x the batch)")
    vae_upcast: bool = Field(default=False, description="the VAE's up blocks decode in FP32 when the pipeline runs "
                             "in FP16 (diffusers' SDXL pipelines with a force_upcast VAE)")
    text_encoders: tuple[str, ...] = Field(default=(), description="the text encoders run once per prompt, in words "
                                           "(not priced)")
    source: tuple[str, ...] = Field(min_length=1, description="where the mapping and each default were read")
    notes: str = ""


def _read(path: Path) -> DiffusionPipeline:
    pipe: DiffusionPipeline = load_model_file(path, DiffusionPipeline, what="diffusion pipeline file",
                                              error=CatalogError)
    return pipe


@lru_cache(maxsize=1)
def diffusion_pipelines() -> dict[str, DiffusionPipeline]:
    """Every pipeline by its normalized repo id and file slug: package data first, then the user catalog folders
    (whose files replace a packaged pipeline of the same id)."""
    out: dict[str, DiffusionPipeline] = {}
    for folder in catalog_dirs("models"):
        seen: dict[str, str] = {}
        for path in sorted((folder / FOLDER).glob("*.yaml")):
            pipe = _read(path)
            for name in (pipe.id, path.stem):
                key = normalize_name(name)
                if seen.get(key, pipe.id) != pipe.id:
                    raise CatalogError(f"{path}: name {name!r} is already taken by pipeline {seen[key]!r}")
                seen[key] = pipe.id
                out[key] = pipe
    return out


def load_pipeline(name: str) -> DiffusionPipeline:
    """The pipeline ``name`` names (a repo id or a slug). Raises UnsupportedError for a pipeline perfcast lists
    as not modelled, UnknownNameError for any other name."""
    pipe = diffusion_pipelines().get(normalize_name(name))
    if pipe is not None:
        return pipe
    refusal = unmodelled_refusal(name)
    if refusal is not None:
        raise refusal
    raise UnknownNameError("diffusion pipeline", name, sorted({p.id for p in diffusion_pipelines().values()}))
