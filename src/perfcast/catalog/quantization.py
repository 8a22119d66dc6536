"""A checkpoint's ``quantization_config``: read into a typed value, or refused.

A Hugging Face ``config.json`` of a quantized checkpoint carries a
``quantization_config`` that says how its weights are stored. perfcast honours
the methods whose storage and kernels it can describe faithfully and refuses the
rest in one line (never ignores them: a 4-bit checkpoint priced as 16-bit is a
wrong number):

- ``fp8`` (transformers' FineGrainedFP8 / DeepSeek-V3): E4M3 weights with one
  fp32 scale per ``weight_block_size`` block (``[128, 128]``), or per tensor
  when no block is given; activations quantized dynamically (per token and
  128-wide group) or with a static scale;
- ``mxfp4`` (gpt-oss): OCP MX FP4 weights, 4 bits plus one 8-bit (E8M0) scale
  per 32 values, on every linear layer that ``modules_to_not_convert`` leaves:
  gpt-oss lists attention, the router, the embeddings and the LM head, so only
  the MoE experts are MXFP4 (model card: "MoE weights in MXFP4, every other
  tensor BF16"). A list that leaves attention or the router quantized is refused;
- ``awq`` (4-bit): unsigned 4-bit weights, one fp16 scale and one 4-bit zero
  point per ``group_size`` input elements (``zero_point``);
- ``gptq`` (4- or 8-bit): ``bits``-wide weights, one fp16 scale and one packed
  ``bits``-wide zero point per ``group_size`` input elements (GPTQ stores
  ``qzeros`` even when symmetric; ``group_size`` -1 = one group per output
  channel). The ``g_idx`` permutation (4 bytes per input row) is left out;
- ``modelopt`` (NVIDIA TensorRT Model Optimizer checkpoints, e.g.
  nvidia/Llama-3.3-70B-Instruct-FP8): ``quant_algo`` ``FP8`` is E4M3 weights and
  activations with one static fp32 scale per tensor; ``NVFP4`` is E2M1 (4-bit)
  weights and activations, one E4M3 (8-bit) scale per ``group_size`` = 16
  consecutive input elements plus one fp32 scale per tensor (the per-tensor fp32
  scales, 4 bytes per matrix, are left out of the bytes per weight);
  ``kv_cache_quant_algo`` ``FP8`` says the KV cache is stored in E4M3 with the
  checkpoint's calibrated scales (:attr:`QuantizationConfig.kv_cache_dtype`). The
  fields are read from the ``quantization_config`` of ``config.json`` or, in the
  ``hf_quant_config.json`` layout, from its ``quantization`` mapping; the list of
  unquantized modules is ``exclude_modules``. Other ``quant_algo`` values
  (``W4A8_AWQ``, ``MIXED_PRECISION``, ``FP8_PB_WO``...) are refused;
- ``quark`` (AMD Quark, e.g. amd/Llama-3.3-70B-Instruct-FP8-KV), its FP8 form only: ``global_quant_config``
  with ``weight`` and ``input_tensors`` both ``fp8_e4m3`` ``per_tensor`` (static scales: W8A8 FP8, as
  ModelOpt FP8), ``exclude`` listing the unquantized modules, and an FP8 KV cache when ``export.kv_cache_group``
  names layers (``*k_proj``, ``*v_proj``) whose ``layer_quant_config`` entry quantizes ``output_tensors`` to
  ``fp8_e4m3`` (how vLLM's Quark loader finds it). Other dtypes or schemes (MXFP4, INT8, per-channel or
  per-group), weight-only FP8 and per-layer overrides of the weight or input format are refused.

``modules_to_not_convert`` of fp8/awq/gptq may name what perfcast never
quantizes anyway (embeddings, LM head, MoE routers); any other entry would leave
part of the blocks unquantized in a way perfcast does not model, and is refused.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from perfcast.errors import UnsupportedError

__all__ = ["SUPPORTED_QUANTIZATION", "QuantizationConfig", "parse_quantization_config"]

SUPPORTED_QUANTIZATION = ("fp8 (e4m3, per-tensor or block-scaled)", "mxfp4 (MoE experts only, as gpt-oss)",
                          "awq (4-bit)", "gptq (4- or 8-bit)", "modelopt (FP8 or NVFP4, optional FP8 KV cache)",
                          "quark (per-tensor FP8 weights and activations, optional FP8 KV cache)")
_SUPPORTED = "; supported: " + ", ".join(SUPPORTED_QUANTIZATION)

_FP16_SCALE_BYTES = 2.0  # AWQ / GPTQ keep their per-group scales in fp16
_FP32_SCALE_BYTES = 4.0  # FP8 block scales (weight_scale_inv) are fp32
_MX_BLOCK = 32  # OCP MX: one shared E8M0 scale (1 byte) per 32 elements
_MX_SCALE_BYTES = 1.0
_NVFP4_GROUP = 16  # NVFP4: one E4M3 scale (1 byte) per 16 consecutive elements (ModelOpt group_size)
_NVFP4_SCALE_BYTES = 1.0
_DEFAULT_GROUP = 128  # AWQ and GPTQ default group size (transformers AwqConfig / GPTQConfig)

# modules_to_not_convert entries (their last name) that perfcast keeps in 16 bits anyway: embeddings, the LM
# head, norms and MoE routers ("gate" in Mixtral / Qwen-MoE, "router" in gpt-oss)
_NEVER_QUANTIZED = ("lm_head", "wte", "wpe", "router", "gate", "output_layer")


class QuantizationConfig(BaseModel):
    """How a checkpoint stores its quantized linear weights (see the module docstring for each method)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    method: Literal["fp8", "mxfp4", "awq", "gptq", "modelopt", "quark"] = Field(description="HF quant_method")
    weight_bits: int = Field(gt=0, le=8, description="bits per stored weight element")
    weight_format: Literal["fp8_e4m3", "mxfp4", "nvfp4", "int"] = Field(description="number format of the weights")
    group_size: int | None = Field(
        default=None, gt=0, description="input elements sharing one scale (AWQ/GPTQ groups, MX blocks of 32); "
        "None = one scale per output channel (GPTQ group_size -1) or per FP8 block / tensor")
    weight_block_size: tuple[int, int] | None = Field(
        default=None, description="FP8 (rows, columns) of a weight block sharing one fp32 scale; None = per tensor")
    zero_point: bool = Field(default=False, description="integer weights store a zero point per group")
    modules_to_not_convert: tuple[str, ...] = Field(default=(), description="modules left unquantized, as listed")
    activation_scheme: Literal["dynamic", "static"] | None = Field(
        default=None, description="FP8 activations: quantized per token group at run time, or one static scale")
    experts_only: bool = Field(default=False, description="only MoE expert weights are quantized (gpt-oss MXFP4)")
    kv_cache_dtype: Literal["fp8"] | None = Field(
        default=None, description="KV cache format the checkpoint is calibrated for (ModelOpt kv_cache_quant_algo "
        "FP8, Quark's kv_cache_group: E4M3 with per-tensor scales); None = the activation dtype")

    def bytes_per_weight(self, in_features: int) -> float:
        """Stored bytes per weight element, scales and zero points included, of a linear layer whose weight
        has ``in_features`` input elements (the axis AWQ/GPTQ groups run along)."""
        data = self.weight_bits / 8.0
        if self.method == "fp8":
            if self.weight_block_size is None:
                return data  # one scale per tensor
            rows, cols = self.weight_block_size
            return data + _FP32_SCALE_BYTES / (rows * cols)
        if self.method == "mxfp4":
            return data + _MX_SCALE_BYTES / _MX_BLOCK
        if self.method == "quark":  # per-tensor FP8
            return data
        if self.method == "modelopt":  # FP8: one fp32 scale per tensor; NVFP4: + an E4M3 scale per 16 elements
            return data if self.group_size is None else data + _NVFP4_SCALE_BYTES / self.group_size
        group = self.group_size or max(1, in_features)
        per_group = _FP16_SCALE_BYTES + (self.weight_bits / 8.0 if self.zero_point else 0.0)
        groups = math.ceil(max(1, in_features) / group)
        return data + per_group * groups / max(1, in_features)

    @property
    def label(self) -> str:
        """A short description for reports, e.g. ``gptq int4 (group 128)``."""
        if self.method == "fp8":
            block = "x".join(map(str, self.weight_block_size)) if self.weight_block_size else "per-tensor"
            return f"fp8 e4m3 ({block} scales)"
        if self.method == "mxfp4":
            return "mxfp4 (MoE experts)" if self.experts_only else "mxfp4"
        if self.method in ("modelopt", "quark"):
            kv = ", fp8 KV cache" if self.kv_cache_dtype else ""
            if self.method == "quark":
                return f"quark fp8 e4m3 (per-tensor scales{kv})"
            if self.weight_format == "nvfp4":
                return f"modelopt nvfp4 (e2m1, e4m3 scale per {self.group_size}{kv})"
            return f"modelopt fp8 e4m3 (per-tensor scales{kv})"
        group = f"group {self.group_size}" if self.group_size else "per-channel"
        return f"{self.method} int{self.weight_bits} ({group})"


def _refuse(message: str) -> UnsupportedError:
    return UnsupportedError(f"quantization_config {message}{_SUPPORTED}")


def _modules(raw: dict[str, Any]) -> tuple[str, ...]:
    value = raw.get("modules_to_not_convert")
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(m, str) for m in value):
        raise _refuse(f"modules_to_not_convert={value!r} is not a list of module names")
    return tuple(value)


def _names_only_unquantized(modules: tuple[str, ...]) -> list[str]:
    """Entries that name something perfcast would quantize (not embeddings, LM head, routers or norms)."""
    def kept(name: str) -> bool:
        last = name.rsplit(".", 1)[-1].strip("*")
        return last in _NEVER_QUANTIZED or "embed" in last or "norm" in last

    return [m for m in modules if not kept(m)]


def _int(raw: dict[str, Any], key: str, default: int) -> int:
    value = raw.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise _refuse(f"{key}={value!r} is not an integer")
    return value


def _fp8(raw: dict[str, Any], modules: tuple[str, ...]) -> dict[str, Any]:
    fmt = str(raw.get("fmt") or "e4m3").lower()
    if fmt not in ("e4m3", "float8_e4m3fn"):
        raise _refuse(f"fp8 with fmt={fmt!r} is not supported (e4m3 weights only)")
    block = raw.get("weight_block_size")
    if block is not None:
        if (not isinstance(block, list) or len(block) != 2
                or not all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)):
            raise _refuse(f"fp8 weight_block_size={block!r} is not two positive integers")
        block = (block[0], block[1])
    scheme = raw.get("activation_scheme") or "dynamic"
    if scheme not in ("dynamic", "static"):
        raise _refuse(f"fp8 activation_scheme={scheme!r} is not dynamic or static")
    return {"method": "fp8", "weight_bits": 8, "weight_format": "fp8_e4m3", "weight_block_size": block,
            "activation_scheme": scheme, "modules_to_not_convert": modules}


def _mxfp4(modules: tuple[str, ...]) -> dict[str, Any]:
    # gpt-oss: attention, router, embeddings and LM head stay BF16, so the MoE experts are MXFP4
    kept = " ".join(modules)
    if not ("self_attn" in kept or "attn" in kept) or "router" not in kept:
        raise _refuse(f"mxfp4 with modules_to_not_convert={list(modules)!r} quantizes attention or the router; "
                      "perfcast models MXFP4 on the MoE experts only (attention, router, embeddings and lm_head "
                      "kept in 16 bits, as gpt-oss ships)")
    return {"method": "mxfp4", "weight_bits": 4, "weight_format": "mxfp4", "group_size": _MX_BLOCK,
            "modules_to_not_convert": modules, "experts_only": True}


def _awq(raw: dict[str, Any], modules: tuple[str, ...]) -> dict[str, Any]:
    bits = _int(raw, "bits", 4) if "bits" in raw else _int(raw, "w_bit", 4)
    if bits != 4:
        raise _refuse(f"awq with bits={bits} is not supported (4-bit AWQ only)")
    group = _int(raw, "group_size", _DEFAULT_GROUP) if "group_size" in raw else _int(raw, "q_group_size",
                                                                                       _DEFAULT_GROUP)
    zero = raw.get("zero_point", True)
    return {"method": "awq", "weight_bits": 4, "weight_format": "int", "group_size": None if group == -1 else group,
            "zero_point": bool(True if zero is None else zero), "modules_to_not_convert": modules}


def _gptq(raw: dict[str, Any], modules: tuple[str, ...]) -> dict[str, Any]:
    bits = _int(raw, "bits", 4)
    if bits not in (4, 8):
        raise _refuse(f"gptq with bits={bits} is not supported (4- or 8-bit GPTQ only)")
    group = _int(raw, "group_size", _DEFAULT_GROUP)
    return {"method": "gptq", "weight_bits": bits, "weight_format": "int",
            "group_size": None if group == -1 else group, "zero_point": True, "modules_to_not_convert": modules}


_MODELOPT_ALGOS = ("FP8", "NVFP4")


def _modelopt(raw: dict[str, Any]) -> dict[str, Any]:
    """A ModelOpt checkpoint: the flat ``config.json`` form or ``hf_quant_config.json``'s ``quantization``."""
    nested = raw.get("quantization")
    fields = {**raw, **nested} if isinstance(nested, dict) else raw
    algo = fields.get("quant_algo")
    if not isinstance(algo, str) or algo.upper() not in _MODELOPT_ALGOS:
        raise _refuse(f"modelopt with quant_algo={algo!r} is not supported (FP8 or NVFP4 only)")
    kv = fields.get("kv_cache_quant_algo")
    if kv is not None and (not isinstance(kv, str) or kv.upper() != "FP8"):
        raise _refuse(f"modelopt with kv_cache_quant_algo={kv!r} is not supported (FP8 or none)")
    excluded = fields.get("exclude_modules")
    if excluded is None:
        excluded = fields.get("ignore")
    modules = _modules({"modules_to_not_convert": excluded})
    common = {"method": "modelopt", "modules_to_not_convert": modules,
              "kv_cache_dtype": "fp8" if kv is not None else None}
    if algo.upper() == "FP8":  # activations: one static (calibrated) scale per tensor
        return {**common, "weight_bits": 8, "weight_format": "fp8_e4m3", "activation_scheme": "static"}
    group = _int(fields, "group_size", _NVFP4_GROUP)
    if group != _NVFP4_GROUP:
        raise _refuse(f"modelopt NVFP4 with group_size={group} is not supported (NVFP4 scales 16 elements)")
    return {**common, "weight_bits": 4, "weight_format": "nvfp4", "group_size": group}


_QUARK_FP8 = {"dtype": "fp8_e4m3", "qscheme": "per_tensor"}


def _quark_fp8(spec: Any) -> bool:
    """Whether a Quark tensor spec is static per-tensor FP8 E4M3."""
    return (isinstance(spec, dict) and all(spec.get(k) == v for k, v in _QUARK_FP8.items())
            and not spec.get("is_dynamic"))


def _quark(raw: dict[str, Any]) -> dict[str, Any]:
    """An AMD Quark checkpoint in its per-tensor FP8 form (module docstring), else refused."""
    glob = raw.get("global_quant_config")
    if not isinstance(glob, dict) or not _quark_fp8(glob.get("weight")) or not _quark_fp8(glob.get("input_tensors")):
        specs = glob if isinstance(glob, dict) else {}
        what = {k: specs[k].get("dtype") if isinstance(specs.get(k), dict) else None
                for k in ("weight", "input_tensors")}
        raise _refuse(f"quark with global_quant_config {what} is not supported (static per-tensor fp8_e4m3 weights "
                      "and input_tensors only)")
    layers = raw.get("layer_quant_config") or {}
    if not isinstance(layers, dict):
        raise _refuse(f"quark layer_quant_config={_brief(layers)} is not a mapping of layer patterns")
    for pattern, spec in layers.items():
        if not isinstance(spec, dict) or not (_quark_fp8(spec.get("weight")) and _quark_fp8(spec.get("input_tensors"))):
            raise _refuse(f"quark layer_quant_config[{pattern!r}] quantizes that layer differently from the rest; "
                          "perfcast quantizes every linear layer of the blocks alike")
    export = raw.get("export") or {}
    group = export.get("kv_cache_group") if isinstance(export, dict) else None
    kv = None
    if group:
        outputs = [layers.get(name, {}).get("output_tensors") for name in group]
        if not all(_quark_fp8(o) for o in outputs):
            raise _refuse(f"quark with kv_cache_group {list(group)!r} whose output_tensors are not all static "
                          "per-tensor fp8_e4m3 is not supported (FP8 KV cache only)")
        kv = "fp8"
    modules = _modules({"modules_to_not_convert": raw.get("exclude")})
    return {"method": "quark", "weight_bits": 8, "weight_format": "fp8_e4m3", "activation_scheme": "static",
            "kv_cache_dtype": kv, "modules_to_not_convert": modules}


def _brief(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def parse_quantization_config(raw: dict[str, Any]) -> dict[str, Any] | None:
    """The fields of a :class:`QuantizationConfig` from a HF config (top level or ``text_config``), None when
    the checkpoint is not quantized; raises UnsupportedError for a method perfcast does not model."""
    quant = raw.get("quantization_config")
    if quant is None and isinstance(raw.get("text_config"), dict):
        quant = raw["text_config"].get("quantization_config")
    if quant is None or quant == {}:
        return None
    if not isinstance(quant, dict):
        raise _refuse(f"{quant!r} is not a mapping of fields")
    method = quant.get("quant_method")
    if method is None:
        if quant.get("load_in_4bit") or quant.get("load_in_8bit"):
            method = "bitsandbytes"
        else:
            raise _refuse("has no quant_method")
    method = str(method).lower()
    modules = _modules(quant)
    if method == "mxfp4":
        return _mxfp4(modules)
    if method in ("modelopt", "quark"):
        fields = _modelopt(quant) if method == "modelopt" else _quark(quant)
        modules = fields["modules_to_not_convert"]
    else:
        parsers = {"fp8": _fp8, "awq": _awq, "gptq": _gptq}
        if method not in parsers:
            raise _refuse(f"quant_method {method!r} is not supported")
        fields = parsers[method](quant, modules)
    others = _names_only_unquantized(modules)
    if others:
        raise _refuse(f"{method} with modules_to_not_convert {others!r} leaves block layers unquantized; perfcast "
                      "quantizes every linear layer of the blocks (routers, embeddings and lm_head stay 16-bit)")
    return fields
