"""GEMM time: output tiles in waves across SMs, a K loop with a fixed per-tile cost, a memory floor.

For a product ``(batch, m, k, n)`` a BLAS kernel with ``tm x tn`` output tiles
launches ``batch * ceil(m/tm) * ceil(n/tn)`` tiles, one per SM at a time, so
time moves in whole waves of ``num_sms`` tiles (wave and padding
quantization). A tile takes ``2*tm*tn*(k + k0)`` FLOPs' worth of time at the
per-SM share of the sustained peak, scaled by the tile's efficiency (larger
tiles reuse operands better: ``ai / (ai + ai0)`` with ``ai = tm*tn/(tm+tn)``).
Linear layers may pick any candidate tile and split K across tiles when the
grid is too small to fill the device; batched products use the library's
batched tiles. On CUDA cores the candidates are the tiles of the
architecture's own FP32 kernels where they are known
(:mod:`perfcast.catalog.blas_tiles`). The fixed per-tile cost ``k0`` is a time (prologue loads,
epilogue stores) counted in K steps at the rate of the units it was fitted on;
AMD's FP32 matrix cores (MFMA) take the tensor-core terms, and their FP32 rate is
a fraction of the FP16 one (a quarter on CDNA 1-2), so the same time spans that
fraction of the K steps. The compute time is blended with the DRAM time of the operands
(a smooth maximum), and no kernel is shorter than the launch floor.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfcast.catalog.blas_tiles import fp32_tiles
from perfcast.catalog.hardware import Hardware
from perfcast.coefficients.kernel import Coefficients, GemmPath
from perfcast.dtypes import DType
from perfcast.kernel.power import datapath, simt_issue_share, sustained_clock_frac

__all__ = ["GemmTimes", "gemm_times"]

_SMOOTH_MAX_P = 4.0
_GRID_LIMIT = 20_000  # above this many (gemm x tile x split) cells the loop uses less memory


@dataclass(frozen=True, slots=True)
class GemmTimes:
    """Per-GEMM times in seconds (arrays): total, compute part and memory part."""

    time_s: np.ndarray
    compute_s: np.ndarray
    memory_s: np.ndarray


def gemm_times(b: np.ndarray, m: np.ndarray, k: np.ndarray, n: np.ndarray, hw: Hardware, dtype: DType,
               coeffs: Coefficients, *, batched: bool, clock_frac: np.ndarray | float | None = None,
               operand_bytes: float | None = None) -> GemmTimes:
    """Times of GEMMs ``(b, m, k, n)`` (arrays of equal shape) on ``hw`` in ``dtype``.

    ``clock_frac`` overrides the sustained clock fraction (used to model short
    benchmark bursts); ``operand_bytes`` overrides the bytes per element read
    (weight-only quantization).
    """
    b, m, k, n = (np.asarray(v, dtype=float) for v in (b, m, k, n))
    path = datapath(hw, dtype)
    pc = coeffs.gemm.paths[path]
    x = sustained_clock_frac(hw, path, coeffs) if clock_frac is None else clock_frac
    issue = simt_issue_share(hw) if path == "simt" else 1.0
    peak_sm = hw.peak(dtype) * issue * np.asarray(x) * pc.max_efficiency / hw.num_sms
    ref = _tile_eff(128, 128, pc.tile_ai0)
    tiles = pc.batched_tiles if batched else pc.linear_tiles
    library = fp32_tiles(hw.architecture) if path == "simt" else None
    if library is not None:  # the tiles this architecture's FP32 kernels have (perfcast.catalog.blas_tiles)
        tiles = library.batched if batched else library.linear
    splits = [1] if batched else pc.split_k
    esize = dtype.bytes if operand_bytes is None else operand_bytes
    bw = hw.memory_bandwidth_Bps * pc.memory_efficiency
    shape = np.broadcast(b, m, k, n).shape
    pc = _per_tile_cost_at_rate(pc, hw, path)
    if b.size * len(tiles) * len(splits) <= _GRID_LIMIT:
        best = _best_grid(b, m, k, n, hw, pc, tiles, splits, peak_sm, ref, bw, coeffs.launch.kernel_min_s)
    else:
        best = np.full(shape, np.inf)
        for tm, tn in tiles:
            rate = peak_sm * (_tile_eff(tm, tn, pc.tile_ai0) / ref)
            num_tiles = b * np.ceil(m / tm) * np.ceil(n / tn)
            for s in splits:
                ks = np.ceil(k / s)
                t_tile = 2.0 * tm * tn * (ks + pc.k_overhead) / rate
                t = np.ceil(num_tiles * s / hw.num_sms) * t_tile
                if s > 1:
                    # partial sums written and reduced by a second kernel
                    t = t + b * m * n * 4.0 * (s + 1) / bw + coeffs.launch.kernel_min_s
                best = np.minimum(best, t)
    mem = b * (m * k * esize + k * n * esize + m * n * dtype.bytes) / bw
    p = _SMOOTH_MAX_P
    total = (best**p + mem**p) ** (1.0 / p) + coeffs.launch.kernel_min_s
    return GemmTimes(time_s=total, compute_s=best, memory_s=mem)


def _best_grid(b: np.ndarray, m: np.ndarray, k: np.ndarray, n: np.ndarray, hw: Hardware, pc: GemmPath,
               tiles: list[tuple[int, int]], splits: list[int], peak_sm: np.ndarray | float, ref: float,
               bw: float, kmin: float) -> np.ndarray:
    """The same search as the loop, on one (tile, split, gemm) grid: faster for a few GEMMs."""
    b, m, k, n = (np.ravel(np.broadcast_to(v, np.broadcast(b, m, k, n).shape)) for v in (b, m, k, n))
    tm = np.array([t[0] for t in tiles], dtype=float)[:, None, None]
    tn = np.array([t[1] for t in tiles], dtype=float)[:, None, None]
    s = np.array(splits, dtype=float)[None, :, None]
    eff = np.array([_tile_eff(a, c, pc.tile_ai0) for a, c in tiles])[:, None, None]
    rate = np.reshape(peak_sm, (1, 1, -1)) * (eff / ref)
    t = np.ceil(b * np.ceil(m / tm) * np.ceil(n / tn) * s / hw.num_sms) * (2.0 * tm * tn * (np.ceil(k / s)
                                                                                 + pc.k_overhead) / rate)
    t = t + np.where(s > 1, b * m * n * 4.0 * (s + 1) / bw + kmin, 0.0)
    return t.min(axis=(0, 1))


def _per_tile_cost_at_rate(pc: GemmPath, hw: Hardware, path: str) -> GemmPath:
    """``pc`` with its per-tile fixed cost in K steps of ``path``'s own rate: the FP32 matrix path takes the
    tensor-core terms, whose fixed time counts K steps at the FP16 matrix rate (``fp32_matrix / fp16`` as many
    steps at the FP32 matrix rate)."""
    p = hw.peak_flops_per_s
    half = p.fp16 or p.bf16
    if path != "matrix" or not p.fp32_matrix or not half:
        return pc
    return pc.model_copy(update={"k_overhead": pc.k_overhead * min(1.0, p.fp32_matrix / half)})


def _tile_eff(tm: int, tn: int, ai0: float) -> float:
    ai = tm * tn / (tm + tn)
    return ai / (ai + ai0)
