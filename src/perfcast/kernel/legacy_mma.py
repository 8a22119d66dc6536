"""Attention kernels built for Ampere's ``mma.sync`` running on Hopper and later GPUs.

FlashAttention-2 (PyTorch's SDPA flash backend, flash-attn 2, torchtitan's and llm-foundry's attention) issues
Ampere's warp-level ``mma.sync``. On Hopper only the warpgroup ``wgmma`` instructions reach the tensor peak,
``mma.sync`` about two thirds of it (Shah et al. 2024, FlashAttention-3, Sec. 1: FA2 runs at ~35 % of an H100's
peak where FA3 and cuDNN reach 60-75 %), so its kernels take 1.5x what the GPU's native ones take. The kernel
model prices native kernels; this module slows the attention ops a caller knows to run FA2.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from perfcast.catalog.hardware import Hardware
from perfcast.coefficients.kernel import Coefficients
from perfcast.dtypes import DType
from perfcast.kernel.energy import ops_energy
from perfcast.kernel.power import datapath
from perfcast.kernel.types import KernelTime
from perfcast.workload.types import Op, OpKind

__all__ = ["FA2_LEGACY_MMA_SLOWDOWN", "fa2_attention", "legacy_mma_slowdown"]

FA2_LEGACY_MMA_SLOWDOWN = 1.5


def legacy_mma_slowdown(hw: Hardware, dtype: DType) -> float:
    """How much longer an ``mma.sync`` attention kernel of ``dtype`` takes on ``hw`` than a native one: 1.5 on
    tensor cores of compute capability 9.0 and later, else 1 (Ampere and older, CUDA-core FP32, AMD)."""
    if (hw.compute_capability or 0.0) >= 9.0 and datapath(hw, dtype) == "tensor":
        return FA2_LEGACY_MMA_SLOWDOWN
    return 1.0


def fa2_attention(ops: Sequence[Op], kernels: Sequence[KernelTime], hw: Hardware,
                  co: Coefficients) -> list[KernelTime]:
    """``kernels`` (one per op) with each attention op's time slowed as FlashAttention-2 runs on ``hw``
    (:func:`legacy_mma_slowdown`) and its energy priced again at that time (joules; the other ops unchanged)."""
    out = list(kernels)
    slow = [i for i, o in enumerate(ops) if o.kind is OpKind.ATTENTION and legacy_mma_slowdown(hw, o.dtype) > 1.0]
    if not slow:
        return out
    slowed = [replace(kernels[i], time_s=kernels[i].time_s * legacy_mma_slowdown(hw, ops[i].dtype)) for i in slow]
    energies = ops_energy([ops[i] for i in slow], slowed, hw, co)
    for i, kt, e in zip(slow, slowed, energies, strict=True):
        out[i] = replace(kt, energy_J=e.energy_J, dynamic_J=e.dynamic_J)
    return out
