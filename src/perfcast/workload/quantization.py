"""Which weight quantization a run uses, and how it runs on a given GPU.

A scheme names how a checkpoint's linear weights are stored
(:data:`QUANTIZATION_SCHEMES`):

- ``none``: 16-bit weights (the activation dtype);
- ``w4a16`` / ``w8a16``: integer weights (AWQ, GPTQ) dequantized into 16-bit GEMMs;
- ``w8a8``: INT8 weights and per-token INT8 activations, INT8 GEMMs;
- ``fp8``: E4M3 weights, FP8 GEMMs on per-token (or per-group) quantized activations;
- ``fp4``: NVFP4 weights and activations, FP4 GEMMs;
- ``mxfp4``: the MoE experts' weights in OCP MX FP4 (4 bits + an 8-bit scale per 32
  values; gpt-oss), everything else 16-bit.

``auto`` is the checkpoint's own scheme, read from its ``quantization_config``
(:class:`~perfcast.catalog.quantization.QuantizationConfig`: fp8, ModelOpt FP8 and Quark
FP8 -> ``fp8``, ModelOpt NVFP4 -> ``fp4``, mxfp4 -> ``mxfp4``, awq and 4-bit gptq ->
``w4a16``, 8-bit gptq -> ``w8a16``; an unquantized checkpoint -> ``none``), with the checkpoint's own group and block
sizes. An explicit scheme means a checkpoint quantized that way in the scheme's
generic format (one fp16 scale per 128 weights for ``w4a16``/``w8a16``, one scale
per tensor for ``fp8``, NVFP4's 8-bit scale per 16 values for ``fp4``).

How it runs depends on the GPU, and is stated, never invented:

- FP8 weights on a GPU without FP8 math (A100, V100, T4...) run weight-only: the
  FP8 weights are dequantized into 16-bit GEMMs (W8A16, vLLM's Marlin FP8 path);
  no FP8 peak is assumed;
- NVFP4 (``fp4``) runs FP4 GEMMs only on a GPU with FP4 tensor-core math (a
  ``fp4`` peak in its catalog entry: Blackwell). Elsewhere (H100, A100...) it runs
  weight-only: the 4-bit weights and their E4M3 group scales are dequantized into
  16-bit GEMMs, as vLLM runs NVFP4 checkpoints on GPUs without FP4 math (its Marlin
  FP4 kernels, "weight-only FP4 compression"); TensorRT-LLM builds NVFP4 engines
  for Blackwell only. Activations are then not quantized;
- MXFP4 experts run weight-only on every GPU: 4-bit weights dequantized into
  16-bit GEMMs, as vLLM runs them on Hopper (Marlin / Triton kernels) and by
  default on Blackwell (MXFP4 x BF16). GEMMs with FP4 or FP8 activations are not
  modelled.

Training ignores all of this: a training step runs in its training precision
(``WorkloadSpec.dtype``, ``ParallelPlan.precision``), as it would on a
dequantized copy of the checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass

from perfcast.catalog.hardware import Hardware
from perfcast.catalog.models import ModelConfig
from perfcast.catalog.quantization import QuantizationConfig
from perfcast.dtypes import DType
from perfcast.errors import ConfigError, UnsupportedError

__all__ = ["QUANTIZATION_CHOICES", "QUANTIZATION_SCHEMES", "Quantization", "checkpoint_scheme",
           "resolve_quantization"]

QUANTIZATION_SCHEMES = ("none", "w4a16", "w8a16", "w8a8", "fp8", "fp4", "mxfp4")
QUANTIZATION_CHOICES = ("auto", *QUANTIZATION_SCHEMES)
_WEIGHT_ONLY = ("w4a16", "w8a16", "mxfp4")


@dataclass(frozen=True, slots=True)
class Quantization:
    """A run's weight quantization, resolved against the model (and the GPU when known).

    ``scheme`` is how the weights are stored (:data:`QUANTIZATION_SCHEMES`);
    ``weight_only`` that the quantized GEMMs dequantize their weights into 16-bit
    math (always for ``w4a16``/``w8a16``/``mxfp4``; for ``fp8`` on a GPU without
    FP8 math); ``checkpoint`` the checkpoint's own format when the scheme came from
    it (``auto``), None for a scheme's generic format; ``note`` says in words what
    runs, for reports.
    """

    scheme: str = "none"
    weight_only: bool = False
    checkpoint: QuantizationConfig | None = None
    note: str = ""

    @property
    def label(self) -> str:
        """``scheme`` with how it runs, e.g. ``fp8 (weight-only w8a16: a100-sxm-80gb has no FP8 math)``."""
        return f"{self.scheme} ({self.note})" if self.note else self.scheme


def checkpoint_scheme(cfg: ModelConfig) -> str:
    """The scheme of the model's checkpoint (``none`` when it is not quantized)."""
    q = cfg.quantization
    if q is None:
        return "none"
    if q.method in ("fp8", "mxfp4"):
        return q.method
    if q.method in ("modelopt", "quark"):
        return "fp4" if q.weight_format == "nvfp4" else "fp8"
    return "w4a16" if q.weight_bits == 4 else "w8a16"


def _has_fp8_math(hw: Hardware) -> bool:
    return DType.FP8.value in hw.supported_dtypes()


def _has_fp4_math(hw: Hardware) -> bool:
    return DType.FP4.value in hw.supported_dtypes()


def resolve_quantization(cfg: ModelConfig, requested: str | Quantization = "auto",
                         hw: Hardware | None = None) -> Quantization:
    """The quantization ``requested`` (``auto`` or a scheme) for ``cfg``, run on ``hw`` (module docstring).

    Without ``hw``, FP8 and FP4 are taken to run on FP8 and FP4 math. Raises ConfigError for an unknown scheme and
    UnsupportedError for ``mxfp4`` on a model without MoE experts.
    """
    if isinstance(requested, Quantization):
        return requested
    if requested not in QUANTIZATION_CHOICES:
        raise ConfigError(f"unknown quantization {requested!r}; use one of {', '.join(QUANTIZATION_CHOICES)}")
    checkpoint = cfg.quantization if requested == "auto" else None
    scheme = checkpoint_scheme(cfg) if requested == "auto" else requested
    if scheme == "mxfp4" and cfg.moe is None:
        raise UnsupportedError(f"mxfp4 quantizes the MoE experts (gpt-oss); {cfg.id} has none (use w4a16, w8a16, "
                               "w8a8, fp8 or fp4 for a dense model)")
    note = ""
    if checkpoint is not None:
        note = f"the checkpoint's {checkpoint.label}"
    weight_only = scheme in _WEIGHT_ONLY
    if scheme == "fp8" and hw is not None and not _has_fp8_math(hw):
        weight_only = True
        note = (f"{note}; " if note else "") + (f"weight-only w8a16 on {hw.id}, which has no FP8 math: FP8 weights "
                                                "dequantized into GEMMs in the activation dtype")
    elif scheme == "fp4" and hw is not None and not _has_fp4_math(hw):
        weight_only = True
        note = (f"{note}; " if note else "") + (f"weight-only w4a16 on {hw.id}, which has no FP4 math: NVFP4 "
                                                "weights dequantized into GEMMs in the activation dtype")
    elif scheme == "mxfp4":
        note = (f"{note}; " if note else "") + ("weight-only: expert weights dequantized into GEMMs in the "
                                                "activation dtype")
    return Quantization(scheme=scheme, weight_only=weight_only, checkpoint=checkpoint, note=note)
