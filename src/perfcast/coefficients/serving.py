"""Serving-engine coefficients (layer 4): ``data/coefficients/serving.json``, versioned JSON, never pickle.

Kernel and collective times come from the layers below; what they cannot see is
the engine's own work on the CPU between two iterations of the GPU: scheduling,
building the batch's input tensors and block tables, sampling and detokenizing.
Per engine (keyed by its profile id, :mod:`perfcast.serving.engines`), two numbers carry it: the time an
iteration exposes (not hidden behind the GPU) and a time per sequence in the batch.

Two more things the kernel layer's fit cannot see come from the same serving measurements:

- ``custom_allreduce``: the engines' own one-shot / two-shot all-reduce kernels for small tensor-parallel
  messages (vLLM's, SGLang's, TensorRT-LLM's): a latency per call and the share of the links' bandwidth the
  copies reach;
- ``stacks``: per software stack other than CUDA (``rocm``), the share of the GPU's datasheet matrix peak and
  memory bandwidth its serving kernels reach relative to what perfcast's kernel model (fitted on CUDA
  kernels) assumes.

``held_out`` keeps, per GPU, the same coefficients fitted without that GPU's rows: ``perfcast validate``
predicts a GPU's rows with them (leave-one-GPU-out). ``fitted_on`` says what each was fitted on, or that it is
a prior.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from perfcast.datafiles import data_path
from perfcast.jsonio import CanonicalJson, versioned_loader

__all__ = ["SERVING_SCHEMA_VERSION", "CustomAllReduce", "EngineOverhead", "ServingCoefficients", "ServingFit",
           "StackEfficiency", "load_serving_coefficients", "stack_of"]

SERVING_SCHEMA_VERSION = 1


class EngineOverhead(BaseModel):
    """CPU time of one engine iteration outside the GPU kernels, and of its front end per request (seconds)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    iteration_overhead_s: float = Field(ge=0)
    per_sequence_overhead_s: float = Field(ge=0)
    request_overhead_s: float = Field(default=0.0, ge=0, description="the engine's front end per request: from "
                                      "the client's send to the scheduler and the first token back (s)")
    prompt_token_overhead_s: float = Field(default=0.0, ge=0, description="the front end's time per prompt token "
                                           "(s): tokenizing the prompt's text on the API server's CPU")
    tp_sync_per_layer_s: float = Field(default=0.0, ge=0, description="under tensor parallelism, the CPU time per "
                                       "layer an iteration exposes, per doubling of the ranks (s; x log2 tp): "
                                       "every rank's worker process launches the layer's kernels and all must "
                                       "reach its all-reduce, so the slowest paces (engines whose ranks replay "
                                       "captured graphs from one process: 0)")
    image_overhead_s: float = Field(default=0.0, ge=0, description="CPU time per image the engine's own process "
                                    "spends before the request's prefill (s): fetching and decoding it and the HF "
                                    "image processor (resize, crop, normalize), in the iteration that starts the "
                                    "request; 0 where a separate front-end process does it beside the GPU work")


class CustomAllReduce(BaseModel):
    """An engine's all-reduce kernel over the GPUs' direct links: a fixed time per call (s; its flag
    handshakes) and the share of the links' per-direction bandwidth its copies reach."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    latency_s: float = Field(default=8e-6, ge=0)
    bandwidth_frac: float = Field(default=0.7, gt=0, le=1)


class StackEfficiency(BaseModel):
    """A software stack's serving kernels relative to the kernel model's: multipliers on the GPU's datasheet
    matrix peaks and memory bandwidth (1 = as the model assumes)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    matrix_flops_frac: float = Field(default=1.0, gt=0, le=2)
    memory_bandwidth_frac: float = Field(default=1.0, gt=0, le=2)


# hardware vendor -> software stack whose kernels serve on it (absent: CUDA, the kernel model's own)
_STACKS = {"amd": "rocm", "intel": "gaudi"}


def stack_of(vendor: str) -> str:
    """The software stack a GPU of ``vendor`` serves with (``cuda`` for NVIDIA and unknown vendors)."""
    return _STACKS.get(vendor.lower(), "cuda")


class ServingFit(BaseModel):
    """The serving coefficients one fit produces (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    engines: dict[str, EngineOverhead]
    custom_allreduce: CustomAllReduce = CustomAllReduce()
    stacks: dict[str, StackEfficiency] = {}


class ServingCoefficients(ServingFit, CanonicalJson):
    """Every layer-4 coefficient (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: int
    produced_by: str
    fitted_on: dict[str, str]
    held_out: dict[str, ServingFit] = {}

    def stack(self, vendor: str) -> StackEfficiency:
        """The efficiency of the stack GPUs of ``vendor`` serve with (identity for CUDA)."""
        return self.stacks.get(stack_of(vendor), StackEfficiency())

    def with_fit(self, fit: ServingFit) -> ServingCoefficients:
        """These coefficients with ``fit``'s in place of their own (the rest, ``held_out`` included, kept)."""
        return self.model_copy(update={"engines": fit.engines, "custom_allreduce": fit.custom_allreduce,
                                       "stacks": fit.stacks})

    def without(self, gpu: str) -> ServingCoefficients:
        """These coefficients as fitted without ``gpu``'s rows (themselves when no such fit is stored)."""
        fold = self.held_out.get(gpu)
        return self if fold is None else self.with_fit(fold)


_LOAD = versioned_loader(data_path("coefficients", "serving.json"), ServingCoefficients,
                         version=SERVING_SCHEMA_VERSION, what="serving coefficients")


def load_serving_coefficients(path: str | Path | None = None) -> ServingCoefficients:
    """Load serving coefficients (the package's own when ``path`` is None)."""
    return _LOAD(path)
