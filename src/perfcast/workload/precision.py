"""Training precision recipes: which GEMM datapath each linear layer runs, and what quantizing for it costs.

A recipe names the tensor-core format of the three GEMMs of every linear layer of the transformer
blocks (forward ``fprop``, input gradient ``dgrad``, weight gradient ``wgrad``), how their operands are
scaled, which extra kernels run per GEMM input, and which low-precision copies memory holds. Embeddings,
the LM head, attention (FlashAttention in the activation dtype) and MoE routers stay in the activation
dtype in every recipe, as in Transformer Engine (TE) and Megatron-Core.

Per linear layer with input ``X`` (m x k), weight ``W`` (k x n) and output gradient ``dY`` (m x n):

- ``bf16`` / ``fp16`` / ``fp32``: no quantization; every GEMM in the activation dtype.
- ``fp8`` (TE ``DelayedScaling``, the TE default on Hopper): E4M3 forward / E5M2 gradients, one scale per
  tensor taken from the amax history of earlier steps, so no pass over the tensor before its cast. Priced
  as perfcast always has (the fitted ``fp8_gemm_efficiency`` was fitted on it): a cast of ``X`` (reads
  ``m k`` activation-dtype elements, writes ``m k`` bytes) before the GEMM, and in the backward a cast of
  the gradient of the same size written in the activation dtype's width (TE's fused cast-transpose writes
  the FP8 copy and its transpose). The transposed copy of ``X`` that Hopper's FP8 GEMMs need for ``wgrad``
  is written by the same fused kernel; its extra write is not priced separately (it is in the fitted
  efficiency).
- ``fp8-cs`` (TE ``Float8CurrentScaling``): as ``fp8``, plus an amax reduction before each cast (a full
  extra read of ``X`` in the forward and of the gradient in the backward): the scale comes from the
  tensor itself.
- ``fp8-block`` (DeepSeek-V3; TE ``Float8BlockScaling``): E4M3 everywhere, one fp32 scale per 1 x 128
  elements of activations and gradients and per 128 x 128 weight block. The scale is found inside the
  quantize kernel (no amax pass), but a 1 x 128 block runs along one dimension, so the transposed copy
  ``wgrad`` reads is quantized with its own scales: each quantize kernel writes both orientations.
- ``mxfp8`` (OCP MX, Blackwell): E4M3 with one E8M0 (1-byte) scale per 32 elements along the GEMM's
  reduction dimension; Blackwell's tensor cores read both layouts but the scales run along K, so TE
  quantizes row-wise and column-wise copies (both orientations) in one kernel. Needs MX tensor cores.
- ``nvfp4`` (NVIDIA's NVFP4 pretraining recipe, TE ``NVFP4BlockScaling``, Blackwell): FP4 E2M1 values
  with one E4M3 scale per 16 elements and one fp32 scale per tensor, for fprop, dgrad and wgrad alike.
  The per-tensor scale is the tensor's own amax (an amax pass before each quantize), both orientations are
  written, and the column-wise copies ``wgrad`` reads get a 16-point random Hadamard transform inside the
  quantize kernel (its FLOPs counted; stochastic rounding of gradients is free in the same kernel).
  The recipe's rule of keeping a few sensitive layers (the last blocks) in BF16 is not modelled: every
  block linear layer runs NVFP4 (TE applies the recipe to each layer inside its autocast region).

Weights are quantized once per optimizer step and the low-precision copies are cached across
micro-batches: that quantization's time is left out (as it always was for ``fp8``), its memory is
:attr:`PrecisionRecipe.weight_copy_bytes_per_param`. The input a linear layer saves for its weight
gradient is kept in the GEMM's format (the backward pass derives saved bytes from the GEMM's dtype).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Literal, get_args

from perfcast.catalog.hardware import Hardware
from perfcast.dtypes import DType
from perfcast.errors import ConfigError, UnsupportedError
from perfcast.workload.types import Op, OpKind, Phase

__all__ = ["RECIPES", "RECIPE_NAMES", "PrecisionRecipe", "RecipeName", "Scaling", "check_recipe_hardware",
           "get_recipe", "recipe_backward_ops", "to_recipe"]

RecipeName = Literal["bf16", "fp16", "fp32", "fp8", "fp8-cs", "fp8-block", "mxfp8", "nvfp4"]
RECIPE_NAMES: tuple[str, ...] = get_args(RecipeName)


class Scaling(StrEnum):
    """How a quantized tensor is scaled (the value is the spelling reports use)."""

    NONE = "none"
    DELAYED = "per-tensor delayed"
    CURRENT = "per-tensor current"
    BLOCK = "1x128 / 128x128 blocks, fp32 scales"
    MX = "32-element blocks, E8M0 scales"
    NVFP4 = "16-element blocks, E4M3 scales + fp32 per tensor"


@dataclass(frozen=True)
class PrecisionRecipe:
    """One training precision recipe (see the module docstring for each).

    ``block_elements``/``weight_block_elements``: elements sharing one scale of ``scale_bytes`` in activations
    and gradients / in weights (0: one scale per tensor, whose bytes are not counted). ``amax_pass``: a
    separate amax reduction reads each tensor before its quantize kernel. ``both_orientations``: the quantize
    kernel writes a row-wise and a separately scaled column-wise copy. ``weight_copies``: low-precision copies
    of each weight cached across micro-batches. ``hadamard_points``: size of the random Hadamard transform
    applied to the column-wise copies (0: none). ``needs_mx``: the GEMMs need MX block-scaled tensor cores.
    """

    name: str
    activation_dtype: DType
    fprop: DType
    dgrad: DType
    wgrad: DType
    scaling: Scaling = Scaling.NONE
    block_elements: int = 0
    weight_block_elements: int = 0
    scale_bytes: float = 0.0
    amax_pass: bool = False
    both_orientations: bool = False
    weight_copies: int = 0
    hadamard_points: int = 0
    needs_mx: bool = False

    @property
    def low_precision(self) -> bool:
        """Whether the blocks' linear layers run quantized GEMMs."""
        return self.fprop is not self.activation_dtype

    @property
    def element_bytes(self) -> float:
        """Bytes per quantized activation or gradient element, its share of the block scales included."""
        return self.fprop.bytes + (self.scale_bytes / self.block_elements if self.block_elements else 0.0)

    @property
    def weight_element_bytes(self) -> float:
        """Bytes per quantized weight element, its share of the block scales included."""
        return self.fprop.bytes + (self.scale_bytes / self.weight_block_elements if self.weight_block_elements
                                   else 0.0)

    @property
    def weight_copy_bytes_per_param(self) -> float:
        """Bytes per parameter of the low-precision weight copies cached across micro-batches."""
        return self.weight_copies * self.weight_element_bytes

    @property
    def orientations(self) -> int:
        """Copies each quantize kernel writes (row-wise, and column-wise when separately scaled)."""
        return 2 if self.both_orientations else 1


_BF16 = DType.BF16
RECIPES: dict[str, PrecisionRecipe] = {
    "bf16": PrecisionRecipe("bf16", _BF16, _BF16, _BF16, _BF16),
    "fp16": PrecisionRecipe("fp16", DType.FP16, DType.FP16, DType.FP16, DType.FP16),
    "fp32": PrecisionRecipe("fp32", DType.FP32, DType.FP32, DType.FP32, DType.FP32),
    "fp8": PrecisionRecipe("fp8", _BF16, DType.FP8, DType.FP8, DType.FP8, Scaling.DELAYED, weight_copies=1),
    "fp8-cs": PrecisionRecipe("fp8-cs", _BF16, DType.FP8, DType.FP8, DType.FP8, Scaling.CURRENT, amax_pass=True,
                              weight_copies=1),
    # DeepSeek-V3 (arXiv:2412.19437 Sec. 3.3.2): 1x128 tiles for activations, 128x128 blocks for weights
    "fp8-block": PrecisionRecipe("fp8-block", _BF16, DType.FP8, DType.FP8, DType.FP8, Scaling.BLOCK,
                                 block_elements=128, weight_block_elements=128 * 128, scale_bytes=4.0,
                                 both_orientations=True, weight_copies=2),
    # OCP Microscaling Formats (MX) v1.0: 32-element blocks, one E8M0 scale each
    "mxfp8": PrecisionRecipe("mxfp8", _BF16, DType.FP8, DType.FP8, DType.FP8, Scaling.MX, block_elements=32,
                             weight_block_elements=32, scale_bytes=1.0, both_orientations=True, weight_copies=2,
                             needs_mx=True),
    # NVIDIA, "Pretraining Large Language Models with NVFP4" (arXiv:2509.25149): 16-element E4M3 block scales
    # and an fp32 tensor scale; 16-point random Hadamard transforms on the wgrad inputs (16x16 weight blocks
    # have the same scale count per element as the 1x16 ones)
    "nvfp4": PrecisionRecipe("nvfp4", _BF16, DType.FP4, DType.FP4, DType.FP4, Scaling.NVFP4, block_elements=16,
                             weight_block_elements=16, scale_bytes=1.0, amax_pass=True, both_orientations=True,
                             weight_copies=2, hadamard_points=16, needs_mx=True),
}


def get_recipe(name: str) -> PrecisionRecipe:
    """The recipe named ``name`` (a :data:`RECIPE_NAMES` spelling), or ConfigError listing them."""
    try:
        return RECIPES[name]
    except KeyError:
        raise ConfigError(f"unknown precision recipe {name!r}; use one of {', '.join(RECIPE_NAMES)}") from None


def check_recipe_hardware(recipe: PrecisionRecipe, hw: Hardware) -> None:
    """Raise UnsupportedError (one line) when ``hw`` has no tensor cores for the recipe's block-scaled GEMMs.

    MX block-scaled GEMMs (MXFP8, NVFP4) run on NVIDIA's 5th-generation tensor cores: compute capability 10.0
    and later (B200, GB200, B300, RTX PRO 6000 Blackwell at 12.0). Other GPUs are refused, AMD's included:
    perfcast reads MX support from the compute capability only."""
    if not recipe.needs_mx:
        return
    cc = hw.compute_capability
    if hw.vendor != "nvidia" or cc is None or cc < 10.0:
        has = f"compute capability {cc:g}" if cc is not None else f"{hw.vendor} {hw.architecture or 'GPU'}"
        raise UnsupportedError(f"precision {recipe.name} needs MX block-scaled tensor cores (NVIDIA compute "
                               f"capability >= 10.0, Blackwell); {hw.id} has {has}")


_HIGH = (DType.FP32, DType.TF32, DType.FP16, DType.BF16)  # the formats a linear layer is quantized from


def _in_blocks(op: Op) -> bool:
    return op.name.startswith(("layers", "moe_layers"))


def _quantized(op: Op) -> bool:
    """A linear layer of the transformer blocks (routers stay in high precision, as in Megatron / TE)."""
    return (op.kind is OpKind.GEMM and op.op == "linear" and _in_blocks(op) and op.dtype in _HIGH
            and ".router." not in op.name)


def _kernel(gemm: Op, suffix: str, name: str, numel: int, read: float, written: float, flops: float,
            tp_split: str, phase: Phase, dtype: DType) -> Op:
    return Op(name=f"{gemm.name}.{suffix}", op=name, kind=OpKind.VECTOR, dims=(1, numel), dtype=dtype,
              flops=flops, bytes_read=read, bytes_written=written, count=gemm.count, phase=phase, group=gemm.group,
              tp_split=tp_split, meta=(("inputs", 1), ("outputs", 1 if name == "quantize" else 0)))


def _quantize_kernels(recipe: PrecisionRecipe, gemm: Op, what: str, numel: int, dtype: DType, tp_split: str,
                      phase: Phase) -> list[Op]:
    """The kernels that bring one GEMM operand of ``numel`` elements (``e`` bytes each) to the recipe's format:
    an amax pass when the scale is the tensor's own, then the quantize kernel writing each orientation (with the
    Hadamard transform's FLOPs on the column-wise copy)."""
    e = dtype.bytes
    out = []
    if recipe.amax_pass:
        out.append(_kernel(gemm, f"amax_{what}", "amax", numel, numel * e, 4.0, float(numel), tp_split, phase,
                           dtype))
    o = recipe.orientations
    flops = float(o * numel + (2 * recipe.hadamard_points * numel if o == 2 else 0))
    out.append(_kernel(gemm, f"quantize_{what}", "quantize", numel, numel * e, o * numel * recipe.element_bytes,
                       flops, tp_split, phase, dtype))
    return out


def _input_split(gemm: Op) -> str:
    return "column" if gemm.tp_split == "row" else "none"


def _output_split(gemm: Op) -> str:
    return "column" if gemm.tp_split in ("column", "vocab") else "none"


def to_recipe(ops: list[Op] | tuple[Op, ...], recipe: PrecisionRecipe) -> list[Op]:
    """The blocks' linear layers on the recipe's GEMM datapath, each preceded by the kernels quantizing its input.

    ``fp8`` is the per-tensor cast of :func:`perfcast.workload.transforms.to_fp8` (whose backward the backward
    pass derives: the gradient's cast); ``fp8-cs`` adds an amax pass before it. The block-scaled recipes use
    ``quantize`` kernels that have no autograd backward: their gradient-side kernels are
    :func:`recipe_backward_ops`. A recipe without low-precision GEMMs returns the ops unchanged.
    """
    if not recipe.low_precision:
        return list(ops)
    if len({recipe.fprop, recipe.dgrad, recipe.wgrad}) > 1:
        raise UnsupportedError(f"precision {recipe.name}: GEMMs of different formats per pass are not modelled")
    per_tensor = recipe.scaling in (Scaling.DELAYED, Scaling.CURRENT)
    low = recipe.fprop
    out: list[Op] = []
    for op in ops:
        if not _quantized(op):
            out.append(op)
            continue
        _, m, k, _ = op.dims
        e = op.dtype.bytes
        act = m * k
        if recipe.amax_pass and per_tensor:
            out.append(_kernel(op, "amax_fp8", "amax", act, act * e, 4.0, float(act), _input_split(op),
                               Phase.FORWARD, op.dtype))
        if per_tensor:
            # the input's cast (its backward: the cast of the output gradient, a pass of the same size)
            out.append(Op(name=f"{op.name}.cast_fp8", op="cast", kind=OpKind.VECTOR, dims=(1, act),
                          dtype=op.dtype, flops=float(act), bytes_read=act * e, bytes_written=float(act),
                          count=op.count, phase=op.phase, group=op.group, tp_split=_input_split(op),
                          meta=(("inputs", 1), ("outputs", 1))))
            read, weight = op.bytes_read / e, op.weight_bytes / e
        else:
            out.extend(_quantize_kernels(recipe, op, "input", act, op.dtype, _input_split(op), Phase.FORWARD))
            weight = op.weight_bytes * recipe.weight_element_bytes / e
            read = (op.bytes_read - op.weight_bytes) * recipe.element_bytes / e + weight
        meta = tuple((key, low.value if key == "weight_dtype" else v) for key, v in op.meta)
        out.append(op.with_(dtype=low, bytes_read=read, weight_bytes=weight, meta=meta))
    return out


def recipe_backward_ops(forward: list[Op] | tuple[Op, ...], recipe: PrecisionRecipe) -> list[Op]:
    """The gradient-side kernels of ``forward`` (rewritten by :func:`to_recipe`) that autograd's derivation does
    not give: per quantized linear layer, the amax pass over its output gradient (current per-tensor scaling,
    sized like the derived gradient cast) or the quantize kernels of its output gradient ``dY`` (m x n, block-
    scaled recipes: amax pass, quantize in both orientations)."""
    if not recipe.low_precision:
        return []
    out: list[Op] = []
    for op in forward:
        if op.kind is OpKind.VECTOR and op.op == "amax" and op.name.endswith(".amax_fp8"):
            # fp8-cs: the gradient's cast (derived from the input cast) is preceded by its own amax pass
            out.append(op.with_(name=f"{op.name}.grad", phase=Phase.BACKWARD))
            continue
        if not (op.kind is OpKind.GEMM and op.op == "linear" and op.dtype is recipe.fprop and _in_blocks(op)
                and recipe.scaling not in (Scaling.DELAYED, Scaling.CURRENT) and ".router." not in op.name):
            continue
        b, m, _, n = op.dims
        out.extend(_quantize_kernels(recipe, op, "grad_output", b * m * n, recipe.activation_dtype, _output_split(op),
                                     Phase.BACKWARD))
    return out
