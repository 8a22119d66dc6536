"""Numeric formats and their storage size.

``DType`` values are the exact spellings used in YAML files and on the command
line. A format's *compute* path (tensor core or not) is the kernel layer's
business; here a dtype only knows its storage size.
"""

from __future__ import annotations

from enum import StrEnum

from perfcast.errors import ConfigError

__all__ = ["DType", "parse_dtype"]


class DType(StrEnum):
    """A numeric format; the value is the YAML/CLI spelling."""

    FP64 = "fp64"
    FP32 = "fp32"
    TF32 = "tf32"
    FP16 = "fp16"
    BF16 = "bf16"
    FP8 = "fp8"
    INT8 = "int8"
    INT4 = "int4"
    FP4 = "fp4"

    @property
    def bytes(self) -> float:
        """Storage bytes per element (TF32 is stored as FP32)."""
        return _BYTES[self]


_BYTES = {
    DType.FP64: 8.0,
    DType.FP32: 4.0,
    DType.TF32: 4.0,
    DType.FP16: 2.0,
    DType.BF16: 2.0,
    DType.FP8: 1.0,
    DType.INT8: 1.0,
    DType.INT4: 0.5,
    DType.FP4: 0.5,
}

_ALIASES = {
    "float64": DType.FP64,
    "float32": DType.FP32,
    "float": DType.FP32,
    "float16": DType.FP16,
    "half": DType.FP16,
    "bfloat16": DType.BF16,
    "float8": DType.FP8,
    "fp8_e4m3": DType.FP8,
    "fp8_e5m2": DType.FP8,
    "nvfp4": DType.FP4,
    "mxfp4": DType.FP4,
}


def parse_dtype(text: str | DType) -> DType:
    """Read a dtype spelling ("bf16", "bfloat16", "torch.float32") or raise ConfigError."""
    if isinstance(text, DType):
        return text
    key = str(text).strip().lower().removeprefix("torch.")
    # "fp8_e4m3 (1x128 block-scaled)" -> "fp8_e4m3"; "amp_bf16" -> "bf16"
    head = key.split("(")[0].split()
    key = head[0] if head else key
    key = key.removeprefix("amp_")
    try:
        return DType(key)
    except ValueError:
        if key in _ALIASES:
            return _ALIASES[key]
        if key.startswith(("fp8", "float8", "e4m3", "e5m2", "mxfp8")):
            return DType.FP8
        if key.startswith(("fp4", "nvfp4", "mxfp4")):
            return DType.FP4
    raise ConfigError(f"unknown dtype {text!r}; use one of {', '.join(d.value for d in DType)}")
