"""Convolutions as implicit GEMMs (what cuDNN/MIOpen mostly run).

A 2-D convolution ``(batch, in_ch, out_ch, kernel, in_hw, stride, padding, groups)``
is a GEMM with ``m = batch * out_hw**2`` output pixels, ``n = out_ch`` and
``k = in_ch/groups * kernel**2``. 3x3 stride-1 convolutions on CUDA cores (FP32,
the SIMT datapath) may use Winograd, which saves multiplies: its compute time is
divided by a fitted speedup. On tensor cores (FP16/BF16/FP8) cuDNN runs them as
implicit GEMMs, so no speedup applies there (the fit saw only FP32 rows). The
transforms around the GEMM stream the activations several times (a fitted
memory factor), and do not overlap with it.
"""

from __future__ import annotations

import numpy as np

from perfcast.catalog.hardware import Hardware
from perfcast.coefficients.kernel import Coefficients
from perfcast.dtypes import DType
from perfcast.kernel.gemm import gemm_times
from perfcast.kernel.power import datapath

__all__ = ["conv_times"]


def conv_times(dims: np.ndarray, hw: Hardware, dtype: DType, coeffs: Coefficients,
               clock_frac: np.ndarray | float | None = None) -> np.ndarray:
    """Seconds for convolutions; ``dims`` is an (N, 8) array of conv shapes."""
    d = np.asarray(dims, dtype=float).reshape(-1, 8)
    batch, cin, cout, kern, hw_in, stride, pad, groups = d.T
    out = np.floor((hw_in + 2 * pad - kern) / stride) + 1
    m = batch * out * out
    k = cin / groups * kern * kern
    g = gemm_times(groups, m / 1.0, k, cout / groups, hw, dtype, coeffs, batched=False, clock_frac=clock_frac)
    winograd = (kern == 3) & (stride == 1) & (datapath(hw, dtype) == "simt")
    speed = np.where(winograd, coeffs.conv.winograd_speedup, 1.0) * coeffs.conv.efficiency
    compute = g.compute_s / speed
    # activations in and out stream through DRAM (weights are small)
    memory = coeffs.conv.memory_factor * (batch * cin * hw_in**2 + batch * cout * out**2) * dtype.bytes / (
        hw.memory_bandwidth_Bps * coeffs.gemm.paths[datapath(hw, dtype)].memory_efficiency)
    return compute + memory + coeffs.conv.kernels_per_call * coeffs.launch.kernel_min_s
