"""Memory-bound kernels: elementwise ops, row reductions (softmax, norms), gathers, pooling.

Such a kernel streams its operands once: ``bytes / (bandwidth * e)``, where
``e`` is the fitted fraction of peak DRAM bandwidth a streaming kernel reaches
on that memory kind, times an op factor (a softmax or a LayerNorm makes extra
passes and synchronizes across a row, so it streams slower than an add).
Short rows cost more per element in row reductions (one block per row).
"""

from __future__ import annotations

import numpy as np

from perfcast.catalog.hardware import Hardware
from perfcast.kernel.coefficients import Coefficients
from perfcast.kernel.power import memory_kind

__all__ = ["REDUCTIONS", "vector_times"]

REDUCTIONS = frozenset({
    "softmax", "layernorm", "rmsnorm", "softmax_backward", "layernorm_backward", "rmsnorm_backward",
    "mean", "sum", "max", "cross_entropy", "cross_entropy_backward",
})


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
    row = np.where(is_row, cols / (cols + vc.row_overhead_elems), 1.0)
    bw = hw.memory_bandwidth_Bps * eff * factor * row
    t = np.asarray(bytes_moved, dtype=float) / bw + coeffs.launch.kernel_min_s
    if elements is not None and vc.sm_cycles_per_elem:
        cyc = np.array([vc.sm_cycles_per_elem.get(o, vc.sm_cycles_per_elem.get(_family(o), 0.0)) for o in ops])
        t = t + np.asarray(elements, dtype=float) * cyc / (hw.num_sms * hw.boost_clock_hz)
    return t


def _family(op: str) -> str:
    """Group names for op factors: ``*_backward`` kernels share a factor unless named."""
    if op.endswith("_backward"):
        return "backward"
    return op
