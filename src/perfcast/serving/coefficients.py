"""Serving-engine coefficients (layer 4): ``serving/coefficients.json``, versioned JSON, never pickle.

Kernel and collective times come from the layers below; what they cannot see is
the engine's own work on the CPU between two iterations of the GPU: scheduling,
building the batch's input tensors and block tables, sampling and detokenizing.
Per engine, two numbers carry it: a fixed time per iteration and a time per
sequence in the batch. The shipped values are priors (``fitted_on`` says so):
Python engines (vLLM 0.x, the engine VIDUR profiles) spend a few milliseconds
per iteration; C++ runtimes with in-flight batching (TensorRT-LLM) a fraction of one.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from perfcast.jsonio import load_versioned

__all__ = ["SERVING_SCHEMA_VERSION", "EngineOverhead", "ServingCoefficients", "load_serving_coefficients"]

SERVING_SCHEMA_VERSION = 1


class EngineOverhead(BaseModel):
    """CPU time of one engine iteration outside the GPU kernels (seconds)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    iteration_overhead_s: float = Field(ge=0)
    per_sequence_overhead_s: float = Field(ge=0)


class ServingCoefficients(BaseModel):
    """Every layer-4 coefficient (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: int
    produced_by: str
    fitted_on: dict[str, str]
    engines: dict[str, EngineOverhead]

    def to_json(self) -> str:
        """Canonical JSON text."""
        return json.dumps(self.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"


def load_serving_coefficients(path: str | Path | None = None) -> ServingCoefficients:
    """Load serving coefficients (the package's own when ``path`` is None)."""
    if path is None:
        return _default()
    return _load(Path(path))


@lru_cache(maxsize=1)
def _default() -> ServingCoefficients:
    return _load(Path(str(resources.files("perfcast.serving") / "coefficients.json")))


def _load(path: Path) -> ServingCoefficients:
    return load_versioned(path, ServingCoefficients, version=SERVING_SCHEMA_VERSION, what="serving coefficients")
