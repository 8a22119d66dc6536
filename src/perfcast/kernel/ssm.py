"""State-space scans (``ssm_scan`` ops: Mamba-1's selective scan, Mamba-2's SSD, Gated DeltaNet's chunked delta
rule): a roofline price.

A scan kernel streams x, dt, B, C (and the recurrent state when it is read or written) once and keeps the state on
chip, so its time is ``max(compute, memory) + launch``: memory is ``bytes / (bandwidth * e)`` with ``e`` the
fitted streaming efficiency of elementwise kernels on that memory kind (:mod:`perfcast.kernel.vector`); compute is
the op's vector FLOPs (the recurrence, exps, the D skip: FP32 CUDA-core math) at :data:`SCAN_VECTOR_EFFICIENCY` of
the device's FP32 vector peak, plus its ``matmul_flops`` (SSD's chunked contractions, on tensor cores) at
:data:`SCAN_MATRIX_EFFICIENCY` (:data:`DELTA_RULE_MATRIX_EFFICIENCY` for the delta rule) of the matrix peak in
the op's dtype. Both efficiencies are priors, not fitted: no
scan kernel is in the ground truth yet. Prefill scans of long sequences come out compute bound (Mamba-1: 8 FP32
FLOPs per channel, state and token), decode steps memory bound (the state read and written per sequence).
"""

from __future__ import annotations

import numpy as np

from perfcast.catalog.hardware import Hardware
from perfcast.coefficients.kernel import Coefficients
from perfcast.dtypes import DType
from perfcast.kernel.power import memory_kind

__all__ = ["DELTA_RULE_MATRIX_EFFICIENCY", "SCAN_MATRIX_EFFICIENCY", "SCAN_VECTOR_EFFICIENCY", "matrix_efficiency",
           "scan_times"]

SCAN_VECTOR_EFFICIENCY = 0.5  # prior: the selective-scan CUDA kernel's sequential FP32 recurrence, not fitted
SCAN_MATRIX_EFFICIENCY = 0.5  # prior: SSD's small per-chunk products (chunk 256, state 128), not fitted
# prior, not fitted: the chunked gated delta rule (fla's chunk_gated_delta_rule) runs its products on 64-token chunks
# (64 x 128 tiles, a quarter of SSD's chunk) over several kernels (the UT-transform solve, the chunk states, the
# output), each re-reading its chunk, so it keeps the tensor cores busier less of the time than SSD
DELTA_RULE_MATRIX_EFFICIENCY = 0.35


def matrix_efficiency(variant: object) -> float:
    """The hand-set tensor-core efficiency of a scan's ``matmul_flops`` by its ``version`` meta: 1 / 2 (Mamba) or
    ``gated_delta`` (Gated DeltaNet)."""
    return DELTA_RULE_MATRIX_EFFICIENCY if variant == "gated_delta" else SCAN_MATRIX_EFFICIENCY


def scan_times(flops: np.ndarray, matmul_flops: np.ndarray, bytes_moved: np.ndarray, hw: Hardware, dtype: DType,
               co: Coefficients, matrix_eff: np.ndarray | float = SCAN_MATRIX_EFFICIENCY,
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(time, compute time, memory time) in seconds of scans with ``flops`` FLOPs (of which ``matmul_flops`` are
    matrix products, run at ``matrix_eff`` of the matrix peak) moving ``bytes_moved`` bytes, in ``dtype`` on
    ``hw``."""
    eff = co.vector.memory_efficiency[memory_kind(hw)]
    memory = np.asarray(bytes_moved, dtype=float) / (hw.memory_bandwidth_Bps * eff)
    matmul = np.asarray(matmul_flops, dtype=float)
    vector = np.asarray(flops, dtype=float) - matmul
    compute = vector / (hw.peak(DType.FP32, matrix=False) * SCAN_VECTOR_EFFICIENCY)
    if np.any(matmul > 0):
        compute = compute + matmul / (hw.peak(dtype) * np.asarray(matrix_eff, dtype=float))
    return np.maximum(compute, memory) + co.launch.kernel_min_s, compute, memory
