"""Published training configurations (``data/presets/published_plans.yaml``) a search compares its best plans with."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from perfcast.catalog.models import ModelConfig
from perfcast.datafiles import data_path
from perfcast.errors import CatalogError
from perfcast.sweep.space import SearchSpace
from perfcast.workload.precision import RecipeName
from perfcast.yamlio import load_model_file

__all__ = ["PublishedPlan", "find_published", "load_published"]


class PublishedPlan(BaseModel):
    """One published run: where it ran, its degrees and settings, and the throughput reported."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    label: str
    model: str
    gpu: str = Field(description="hardware catalog id")
    gpus: int = Field(gt=0)
    seq_len: int = Field(gt=0)
    global_batch: int = Field(gt=0)
    tp: int = Field(ge=1)
    cp: int = Field(ge=1)
    pp: int = Field(ge=1)
    dp: int = Field(ge=1)
    ep: int = Field(default=1, ge=1)
    etp: Literal["tp", 1] = Field(default="tp", description="expert tensor parallelism (ParallelPlan.etp)")
    micro_batch: int = Field(default=1, ge=1)
    zero: Literal[0, 1, 2, 3] = 1
    recompute: Literal["none", "selective", "full"] = "none"
    precision: RecipeName = Field(default="bf16", description="the run's training precision recipe")
    tflops_per_gpu: float = Field(gt=0, description="model TFLOP/s per GPU the source reports")


class _Published(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str = Field(min_length=1)
    plans: list[PublishedPlan]


def _path() -> Path:
    return data_path("presets", "published_plans.yaml")


@lru_cache(maxsize=1)
def load_published() -> tuple[str, tuple[PublishedPlan, ...]]:
    """The source and the entries of the shipped file."""
    data: _Published = load_model_file(_path(), _Published, what="published plans file", error=CatalogError)
    return data.source, tuple(data.plans)


def find_published(space: SearchSpace, cfg: ModelConfig, gpu_id: str) -> list[PublishedPlan]:
    """Published runs of this model on this GPU with one of the space's GPU counts, its sequence length, its
    global batch and one of its precision recipes (the run is predicted in its own)."""
    _, plans = load_published()
    return [p for p in plans if p.model == cfg.id and p.gpu == gpu_id and p.gpus in space.gpus
            and p.seq_len == space.seq_len and p.global_batch == space.global_batch
            and p.precision in space.precisions]
