"""The defaults every command shares when the user leaves a choice to perfcast.

One rule per choice, so ``predict``, ``train`` and ``serve`` answer the same
question the same way.
"""

from __future__ import annotations

from perfcast.catalog.hardware import Hardware
from perfcast.catalog.models import ModelConfig
from perfcast.dtypes import DType

__all__ = ["default_dtype", "describe_default_dtype"]


def default_dtype(cfg: ModelConfig, hw: Hardware | None = None, *, engine: bool = False) -> DType:
    """The dtype a model runs in when none is given: the checkpoint's.

    - the config's ``torch_dtype`` (``dtype`` in transformers 5), as ``from_pretrained(dtype="auto")``
      and vLLM's ``--dtype auto`` load it;
    - a config that names none: a quantized checkpoint (``quantization_config``) keeps its unquantized
      tensors in bf16 (gpt-oss model card: MoE weights in MXFP4, every other tensor BF16), any other
      loads in fp32 (transformers' default);
    - a serving engine (``engine=True``) does not run fp32: it serves fp32 checkpoints in fp16, as
      vLLM's ``--dtype auto`` does;
    - a GPU without bf16 math (V100, T4) runs bf16 checkpoints in fp16, as vLLM's ``auto`` does.
    """
    if cfg.torch_dtype is not None:
        dtype = DType(cfg.torch_dtype)
    elif cfg.hf_config.get("quantization_config"):
        dtype = DType.BF16
    else:
        dtype = DType.FP32
    if engine and dtype is DType.FP32:
        dtype = DType.FP16
    if dtype is DType.BF16 and hw is not None and not hw.peak_flops_per_s.bf16:
        dtype = DType.FP16
    return dtype


def describe_default_dtype(cfg: ModelConfig, dtype: DType, hw: Hardware | None = None) -> str:
    """Why ``dtype`` is what :func:`default_dtype` chose for ``cfg`` (on ``hw``), in words for a report: "the
    checkpoint's" only when the config names that dtype; a config that names none says so (a synthetic catalog
    model, or a checkpoint whose config.json has no ``torch_dtype``, runs in transformers' fp32 default)."""
    named = cfg.torch_dtype
    if named == dtype.value:
        return "the checkpoint's"
    if named is not None:
        if named == "bf16" and dtype is DType.FP16 and hw is not None and not hw.peak_flops_per_s.bf16:
            return f"the checkpoint's bf16 run in fp16: {hw.id} has no bf16 math"
        return f"the checkpoint's {named} run in {dtype.value}, as a serving engine runs it"
    if cfg.hf_config.get("quantization_config"):
        return "the quantized checkpoint's unquantized tensors"
    if dtype is DType.FP32:
        return "the config names no torch_dtype: transformers' fp32 default"
    return f"the config names no torch_dtype: {dtype.value}, as a serving engine runs fp32"
