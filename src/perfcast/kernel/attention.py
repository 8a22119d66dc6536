"""Fused attention kernels (FlashAttention / SDPA): scores stay on chip.

Prefill is compute-bound on the matrix units (the causal half of the score
matrix is skipped); decode reads the whole KV cache once per step and is
memory-bound. Both are a smooth maximum of the two, plus the launch floor.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from perfcast.catalog.hardware import Hardware
from perfcast.coefficients.kernel import Coefficients
from perfcast.dtypes import DType
from perfcast.kernel.power import datapath, sustained_clock_frac

__all__ = ["AttentionRates", "attention_rates", "attention_times"]


class AttentionRates(NamedTuple):
    """An inference attention kernel's cost rates on one device: seconds per FLOP on the matrix units,
    seconds per DRAM byte, the fixed seconds per launch and the seconds per sequence in the batch.

    ``time_s = ((flops * s_per_flop)**4 + (bytes * s_per_byte)**4)**0.25 + fixed_s + per_sequence_s * seqs``
    is :func:`attention_times` for a serving-engine forward, in scalars (the simulator's hot path).
    """

    s_per_flop: float
    s_per_byte: float
    fixed_s: float
    per_sequence_s: float

    def time_s(self, flops: float, bytes_moved: float, sequences: float) -> float:
        """Seconds of one kernel (scalar :func:`attention_times`)."""
        c = flops * self.s_per_flop
        m = bytes_moved * self.s_per_byte
        return (c * c * c * c + m * m * m * m) ** 0.25 + self.fixed_s + self.per_sequence_s * sequences


def attention_rates(hw: Hardware, dtype: DType, coeffs: Coefficients) -> AttentionRates:
    """The constants of an inference (serving-engine) attention kernel on ``hw`` in ``dtype``."""
    ac = coeffs.attention
    x = sustained_clock_frac(hw, datapath(hw, dtype), coeffs)
    return AttentionRates(1.0 / (hw.peak(dtype) * x * ac.compute_efficiency),
                          1.0 / (hw.memory_bandwidth_Bps * ac.memory_efficiency),
                          coeffs.launch.kernel_min_s + ac.fixed_s, ac.per_sequence_s)


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
