"""The defaults every command shares when the user leaves a choice to perfcast.

One rule per choice, so ``predict``, ``train`` and ``serve`` answer the same
question the same way.
"""

from __future__ import annotations

from perfcast.catalog.hardware import Hardware
from perfcast.catalog.models import ModelConfig
from perfcast.dtypes import DType

__all__ = ["default_dtype"]


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
