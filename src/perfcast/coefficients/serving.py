"""Serving-engine coefficients (layer 4): ``data/coefficients/serving.json``, versioned JSON, never pickle.

Kernel and collective times come from the layers below; what they cannot see is
the engine's own work on the CPU between two iterations of the GPU: scheduling,
building the batch's input tensors and block tables, sampling and detokenizing.
Per engine, two numbers carry it: a fixed time per iteration and a time per
sequence in the batch. The shipped values are priors (``fitted_on`` says so):
Python engines (vLLM 0.x, the engine VIDUR profiles) spend a few milliseconds
per iteration; C++ runtimes with in-flight batching (TensorRT-LLM) a fraction of one.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from perfcast.datafiles import data_path
from perfcast.jsonio import CanonicalJson, versioned_loader

__all__ = ["SERVING_SCHEMA_VERSION", "EngineOverhead", "ServingCoefficients", "load_serving_coefficients"]

SERVING_SCHEMA_VERSION = 1


class EngineOverhead(BaseModel):
    """CPU time of one engine iteration outside the GPU kernels (seconds)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    iteration_overhead_s: float = Field(ge=0)
    per_sequence_overhead_s: float = Field(ge=0)


class ServingCoefficients(CanonicalJson):
    """Every layer-4 coefficient (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: int
    produced_by: str
    fitted_on: dict[str, str]
    engines: dict[str, EngineOverhead]


_LOAD = versioned_loader(data_path("coefficients", "serving.json"), ServingCoefficients,
                         version=SERVING_SCHEMA_VERSION, what="serving coefficients")


def load_serving_coefficients(path: str | Path | None = None) -> ServingCoefficients:
    """Load serving coefficients (the package's own when ``path`` is None)."""
    return _LOAD(path)
