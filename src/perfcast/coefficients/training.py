"""Training-run coefficients (layer 3): ``data/coefficients/training.json``, versioned JSON, never pickle.

Kernel tables time kernels in isolation; a training run keeps the GPU busy for
minutes, interleaves collectives with compute and runs framework code around
every kernel. Five numbers carry what the kernel and collective models cannot
see, and ``perfcast fit --stages training`` fits them on the published training
table (``fitted_on`` says which rows; ``perfcast validate`` reports the error
leave-one-GPU-out so the figure printed is not the in-sample one):

- ``compute_efficiency``: sustained fraction of the kernel model's rate over a
  long run (clocks under sustained power and heat, allocator and framework
  work the kernel tables do not include);
- ``kernel_gap_s``: idle time between consecutive kernels of a training step
  (dependency waits and stream bookkeeping even when the host runs ahead);
- ``fp8_gemm_efficiency``: FP8 GEMM throughput relative to what the kernel model
  gives the same GEMM at the FP8 peak (per-tensor scaling, amax bookkeeping);
- ``overlap_interference``: share of a hidden collective's time that still slows
  the compute it overlaps (NCCL kernels take SMs and memory bandwidth);
- ``attention_time_scale``: training attention kernels (forward saving the
  log-sum-exp, and the backward) relative to the kernel model's priors for them;
  the kernel tables time serving attention only, so training rows are the only
  measurement of these kernels.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ConfigDict, Field

from perfcast.datafiles import data_path
from perfcast.jsonio import CanonicalJson, versioned_loader

__all__ = ["TRAINING_SCHEMA_VERSION", "TrainingCoefficients", "load_training_coefficients"]

TRAINING_SCHEMA_VERSION = 1


class TrainingCoefficients(CanonicalJson):
    """Every layer-3 coefficient (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: int
    produced_by: str
    fitted_on: dict[str, str]
    compute_efficiency: float = Field(gt=0, le=1.5)
    kernel_gap_s: float = Field(ge=0)
    fp8_gemm_efficiency: float = Field(gt=0, le=1.5)
    overlap_interference: float = Field(ge=0, le=1)
    attention_time_scale: float = Field(default=1.0, gt=0, le=4)


_LOAD = versioned_loader(data_path("coefficients", "training.json"), TrainingCoefficients,
                         version=TRAINING_SCHEMA_VERSION, what="training coefficients")


def load_training_coefficients(path: str | Path | None = None) -> TrainingCoefficients:
    """Load training coefficients (the package's own when ``path`` is None)."""
    return _LOAD(path)
