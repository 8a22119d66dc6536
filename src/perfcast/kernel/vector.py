"""Memory-bound kernels: elementwise ops, row reductions (softmax, norms), gathers, pooling.

Such a kernel streams its operands once: ``bytes / (bandwidth * e)``, where
``e`` is the fitted fraction of peak DRAM bandwidth a streaming kernel reaches
on that memory kind, times an op factor (a softmax or a LayerNorm makes extra
passes and synchronizes across a row, so it streams slower than an add).
Short rows cost more per element in row reductions (one block per row).
PyTorch's softmax over rows of at most :data:`PERSISTENT_SOFTMAX_MAX_COLS`
elements runs its warp-per-row kernel, which holds the row in registers: it
reads the input once and writes the output once, a single stream like an
elementwise op (op factor 1); longer rows take the block kernel, which makes
extra passes over the row (the fitted ``softmax`` factor).
Kernels with narrow (16-bit, non-vectorized) accesses are also bound by how
many elements the SMs can issue per cycle; the memory and issue times combine
as a smooth maximum.
"""

from __future__ import annotations

import numpy as np

from perfcast.catalog.hardware import Hardware
from perfcast.coefficients.kernel import Coefficients
from perfcast.kernel.power import memory_kind

__all__ = ["PERSISTENT_SOFTMAX_MAX_COLS", "REDUCTIONS", "vector_times"]

REDUCTIONS = frozenset({
    "softmax", "layernorm", "rmsnorm", "softmax_backward", "layernorm_backward", "rmsnorm_backward",
    "mean", "sum", "max", "cross_entropy", "cross_entropy_backward",
})

# PyTorch (aten/src/ATen/native/cuda/SoftMax.cu, persistent_softmax.cuh): rows of at most 1024 elements (and
# 4 KiB) go to the warp-per-row "persistent" softmax, one read and one write per element
PERSISTENT_SOFTMAX_MAX_COLS = 1024


def vector_times(ops: list[str], bytes_moved: np.ndarray, cols: np.ndarray, hw: Hardware,
                 coeffs: Coefficients, elements: np.ndarray | None = None) -> np.ndarray:
    """Seconds for memory-bound kernels named ``ops`` moving ``bytes_moved`` over rows of ``cols``.

    ``elements`` (output elements) prices the per-element issue cost; without it only bytes count.
    """
    vc = coeffs.vector
    eff = vc.memory_efficiency[memory_kind(hw)]
    factor = np.array([vc.op_factor.get(o, vc.op_factor.get(_family(o), 1.0)) for o in ops], dtype=float)
    is_row = np.array([o in REDUCTIONS for o in ops], dtype=bool)
    cols = np.maximum(np.asarray(cols, dtype=float), 1.0)
    persistent = np.array([o == "softmax" for o in ops], dtype=bool) & (cols <= PERSISTENT_SOFTMAX_MAX_COLS)
    factor = np.where(persistent, 1.0, factor)
    row = np.where(is_row, cols / (cols + vc.row_overhead_elems), 1.0)
    bw = hw.memory_bandwidth_Bps * eff * factor * row
    nbytes = np.asarray(bytes_moved, dtype=float)
    if vc.l2_hit_frac > 0:
        # operands produced by the previous kernel may still sit in L2: those reads cost less than DRAM
        hit = np.minimum(0.6 * nbytes, vc.l2_hit_frac * hw.l2_cache_bytes)
        nbytes = nbytes - hit * (1.0 - vc.l2_cost_frac)
    t = nbytes / bw
    if elements is not None and vc.sm_cycles_per_elem:
        cyc = np.array([vc.sm_cycles_per_elem.get(o, vc.sm_cycles_per_elem.get(_family(o), 0.0)) for o in ops])
        # issue rate: SMs x clock, times the ALU width per SM to a partial power (index and
        # conversion arithmetic scales with lanes, load/store issue does not)
        lanes = (hw.fp32_lanes_per_sm / 64.0) ** vc.issue_lane_exponent
        issue = np.asarray(elements, dtype=float) * cyc / (hw.num_sms * hw.boost_clock_hz * lanes)
        pw = np.array([vc.combine_p_op.get(o, vc.combine_p) for o in ops])
        t = (t**pw + issue**pw) ** (1.0 / pw)
    floor = np.array([vc.min_time_s.get(o, 0.0) for o in ops]) if vc.min_time_s else 0.0
    t = np.maximum(t + coeffs.launch.kernel_min_s, floor)
    return t


def _family(op: str) -> str:
    """Group names for op factors: ``*_backward`` kernels share a factor unless named."""
    if op.endswith("_backward"):
        return "backward"
    return op
