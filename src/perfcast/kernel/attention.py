"""Fused attention kernels (FlashAttention / SDPA): scores stay on chip.

Prefill is compute-bound on the matrix units (the causal half of the score
matrix is skipped); decode reads the whole KV cache once per step and is
memory-bound. Both are a smooth maximum of the two, plus the launch floor.
"""

from __future__ import annotations

import numpy as np

from perfcast.catalog.hardware import Hardware
from perfcast.dtypes import DType
from perfcast.kernel.coefficients import Coefficients
from perfcast.kernel.power import datapath, sustained_clock_frac

__all__ = ["attention_times"]


def attention_times(flops: np.ndarray, bytes_moved: np.ndarray, hw: Hardware, dtype: DType, coeffs: Coefficients,
                    *, backward: np.ndarray | None = None, sequences: np.ndarray | None = None,
                    training: np.ndarray | None = None) -> np.ndarray:
    """Seconds for fused attention kernels with the given FLOPs, DRAM bytes and batch of sequences.

    ``training`` marks forwards of training graphs, which run the training libraries' kernels
    (FlashAttention-2, cuDNN) rather than a serving engine's paged-cache kernels.
    """
    ac = coeffs.attention
    path = datapath(hw, dtype)
    x = sustained_clock_frac(hw, path, coeffs)
    eff = np.full(np.shape(flops), ac.compute_efficiency)
    if training is not None:
        eff = np.where(training, ac.training_efficiency, eff)
    if backward is not None:
        eff = np.where(backward, ac.backward_efficiency, eff)
    compute = np.asarray(flops, dtype=float) / (hw.peak(dtype) * x * eff)
    memory = np.asarray(bytes_moved, dtype=float) / (hw.memory_bandwidth_Bps * ac.memory_efficiency)
    seqs = np.zeros(np.shape(flops)) if sequences is None else np.asarray(sequences, dtype=float)
    return ((compute**4 + memory**4) ** 0.25 + coeffs.launch.kernel_min_s + ac.fixed_s
            + ac.per_sequence_s * seqs)
