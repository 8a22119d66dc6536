"""Fit a CPU cost model (:class:`perfcast.catalog.cpu.CpuEfficiency`) to microbenchmark times.

Each family is fitted on its own benchmarks, in this order, with the formulas
of :mod:`perfcast.kernel.cpu` (so what is fitted is exactly what predicts):

1. streaming elementwise ops (add, copy, mul): a call overhead, the cache
   bandwidth, the DRAM bandwidth and the cache size where one gives way to the
   other (a grid over sizes, weighted least squares in relative error);
2. the other vector classes: their factor over a streaming op (median ratio);
3. GEMMs: the call overhead and the shape constants ``m0, n0, k0`` on a grid,
   the peak in closed form for each (geometric mean);
4. products with weights stored (in, out): their time factor over nn.Linear's layout (1-D search);
   convolutions: their own shape constants on a grid, then one efficiency for 1x1 and one for larger
   kernels (1-D search); fused attention: one efficiency; then causal attention (mask passed as a
   tensor): its factor over the causal pairs' FLOPs.

Before all of them, the cost of mapping a fresh page comes from a write into a new
64 MiB tensor minus the same write in place (``alloc`` benchmarks; none: no cost).
Errors are relative (log ratios), so a 20 us kernel counts as much as a 20 ms one.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from perfcast.calibrate.machine import MachineInfo, build_hardware
from perfcast.catalog.cpu import CpuEfficiency
from perfcast.catalog.hardware import Hardware
from perfcast.dtypes import DType
from perfcast.errors import DataError
from perfcast.kernel.cpu import (
    PAGE_BYTES,
    cpu_gemm_memory_time_s,
    cpu_memory_time_s,
    cpu_op_times,
    op_class,
    smooth_max,
)
from perfcast.workload.graph import causal_pairs
from perfcast.workload.types import Op, OpKind

__all__ = ["FAMILIES", "CpuFit", "Measurement", "fit_cpu", "measurement_op"]

FAMILIES = ("gemm", "vector", "conv", "attention")
_SHAPE_GRID = (0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0)
_CACHE_GRID = tuple(float(2**p) for p in range(18, 30))  # 256 KiB .. 512 MiB
_EFF_GRID = tuple(np.exp(np.linspace(np.log(0.02), np.log(4.0), 200)))
_CAUSAL_GRID = tuple(np.exp(np.linspace(np.log(0.5), np.log(4.0), 120)))
_MIN_CONVS_FOR_SHAPE = 10  # convolution benchmarks needed to fit their own shape constants


@dataclass(frozen=True, slots=True)
class Measurement:
    """One microbenchmark: an op of the workload IR and its measured seconds per call (see
    :mod:`perfcast.calibrate.bench` for the statistic)."""

    family: str
    op: Op
    time_s: float


@dataclass(frozen=True, slots=True)
class CpuFit:
    """Fitted peaks and efficiencies, and the relative error of the fit per family."""

    peak_fp32_flops_per_s: float
    memory_bandwidth_Bps: float
    efficiency: CpuEfficiency

    def hardware(self, info: MachineInfo, **kw: object) -> Hardware:
        """The hardware entry these rates describe on ``info``'s machine."""
        return build_hardware(info, peak_fp32_flops_per_s=self.peak_fp32_flops_per_s,
                              memory_bandwidth_Bps=self.memory_bandwidth_Bps, efficiency=self.efficiency,
                              **kw)  # type: ignore[arg-type]


def measurement_op(family: str, op: str, dims: tuple[int, ...], *, dtype: DType = DType.FP32) -> Op:
    """The IR op a benchmark of ``family`` runs (FLOPs and bytes as the workload builders count them)."""
    e = dtype.bytes
    if family == "gemm":
        b, m, k, n = dims
        # a linear's weight is cycled through copies larger than the caches (bench._call): it comes from DRAM
        weight = k * n * e if op.startswith("linear") else 0.0
        meta = (("weight_layout", "in_out"),) if op == "linear_in_out" else ()  # weight stored (in, out)
        return Op(op, "linear" if op.startswith("linear") else op, OpKind.GEMM, dims, dtype, 2.0 * b * m * k * n,
                  b * (m * k + k * n) * e, b * m * n * e, weight_bytes=weight, meta=meta)
    if family == "conv":
        batch, cin, cout, kern, hw_in, stride, pad, groups = dims
        out = (hw_in + 2 * pad - kern) // stride + 1
        w = cout * cin // groups * kern * kern
        return Op(op, "conv2d", OpKind.CONV, dims, dtype, 2.0 * batch * out * out * w,
                  (batch * cin * hw_in * hw_in + w) * e, batch * cout * out * out * e)
    if family == "attention":
        b, h, q, kv, d, causal = dims
        pairs = causal_pairs(q, kv) if causal else float(q * kv)  # as the workload builders count them
        return Op(op, "attention", OpKind.ATTENTION, (b, h, h, q, kv, d, causal), dtype, 4.0 * b * h * pairs * d,
                  b * h * (q + 2 * kv) * d * e, b * h * q * d * e)
    if family == "alloc":  # a write of rows*cols values, in place (fill_) or into a new tensor (fill)
        rows, cols = dims
        return Op(op, op, OpKind.VECTOR, dims, dtype, 0.0, 0.0, rows * cols * e)
    if family == "vector":
        rows, cols = dims
        numel = rows * cols
        inputs = 2 if op in ("add", "mul") else 1
        if op == "maxpool":  # rows = batch*channels, cols = side**2 of the input; 3x3 stride 2
            return Op(op, op, OpKind.POOL, dims, dtype, 9.0 * numel / 4, numel * e, numel * e / 4)
        if op == "embedding":  # rows = tokens, cols = dim
            return Op(op, op, OpKind.EMBEDDING, (rows, cols, 0), dtype, 0.0, numel * e + rows * 8, numel * e)
        out = rows if op == "sum" else numel  # a row sum writes one value per row
        return Op(op, op, OpKind.VECTOR, dims, dtype, float(numel), numel * inputs * e, out * e)
    raise ValueError(f"unknown benchmark family {family!r}")


def _log_err(pred: np.ndarray, meas: np.ndarray) -> np.ndarray:
    return np.abs(np.log(np.maximum(pred, 1e-12) / meas))


def _predict(ms: Sequence[Measurement], hw: Hardware) -> np.ndarray:
    times, _ = cpu_op_times([m.op for m in ms], hw)
    return times


def _best_shape(flops: np.ndarray, m: np.ndarray, k: np.ndarray, n: np.ndarray, busy: np.ndarray,
                mem: np.ndarray, fixed_s: float, meas: np.ndarray,
                groups: Sequence[np.ndarray]) -> tuple[float, tuple[float, float, float], list[float]]:
    """The shape constants ``(m0, n0, k0)`` on a grid for products of ``m x k x n`` (arrays, one per benchmark).

    For each candidate, each group of benchmarks (boolean masks) gets the compute rate (FLOP/s at full shape
    efficiency) that centres its compute-bound points (``busy`` seconds above twice ``mem``; the whole group
    when none is), and the candidate whose ``smooth_max(work / rate, mem) + fixed_s`` is closest to ``meas``
    (relative error) wins. Returns that error, the constants and each group's rate.
    """
    best: tuple[float, tuple[float, float, float], list[float]] | None = None
    for m0, n0, k0 in itertools.product(_SHAPE_GRID, repeat=3):
        work = flops / (m / (m + m0) * n / (n + n0) * k / (k + k0))
        pred = np.empty_like(meas)
        rates = []
        for sel in groups:
            use = sel & (busy > 2.0 * mem)
            use = use if use.any() else sel
            rate = float(np.exp(np.median(np.log(work[use] / busy[use]))))
            pred[sel] = smooth_max(work[sel] / rate, mem[sel]) + fixed_s
            rates.append(rate)
        e = _log_err(pred, meas)
        err = float(np.median(e) + 0.25 * np.mean(e))
        if best is None or err < best[0]:
            best = (err, (m0, n0, k0), rates)
    assert best is not None
    return best


def _conv_shape(convs: Sequence[Measurement], fixed_s: float, hw: Hardware) -> tuple[float, float, float]:
    """The shape constants ``(m0, n0, k0)`` of the convolutions' implicit GEMMs (:func:`_best_shape`, 1x1 and
    larger kernels each with a rate of their own; the caller then fits their efficiencies with the full formula).
    """
    dims = np.array([x.op.dims for x in convs], dtype=float)
    batch, cin, cout, kern, side, stride, pad, groups = dims.T
    out = np.floor((side + 2 * pad - kern) / stride) + 1
    m_, k, n = batch * out * out, cin / groups * kern * kern, cout / groups
    meas = np.array([x.time_s for x in convs])
    mem = cpu_memory_time_s(groups * (m_ * k + k * n + m_ * n) * 4.0, hw)
    kinds = [sel for sel in (kern > 1, kern == 1) if sel.any()]
    return _best_shape(2.0 * groups * m_ * k * n, m_, k, n, np.maximum(meas - fixed_s, 0.05 * meas), mem, fixed_s,
                       meas, kinds)[1]


@dataclass(frozen=True, slots=True)
class _FreshPages:
    """Mapping fresh pages: seconds per 4 KiB page, charged to an op that writes at least ``min_bytes`` into a
    new tensor (its name has no trailing ``_``)."""

    page_s: float
    min_bytes: float

    def time_s(self, op: Op) -> float:
        """The page-mapping seconds of one call of ``op``."""
        fresh_out = not op.op.endswith("_") and op.bytes_written >= self.min_bytes
        return op.bytes_written / PAGE_BYTES * self.page_s if fresh_out else 0.0


@dataclass(frozen=True, slots=True)
class _Streaming:
    """The streaming fit: a call overhead (s), cache and DRAM bandwidths (bytes/s) and the cache size (bytes)."""

    vector_fixed_s: float
    cache_bandwidth_Bps: float
    dram_bandwidth_Bps: float
    cache_bytes: float


@dataclass(frozen=True, slots=True)
class _Machine:
    """What every later step prices with: the machine, its threads, the fresh-page cost and the streaming fit."""

    info: MachineInfo
    threads: int
    pages: _FreshPages
    streaming: _Streaming

    def efficiency(self, **kw: object) -> CpuEfficiency:
        """A :class:`CpuEfficiency` with the streaming fit, neutral factors, and ``kw`` over them."""
        st = self.streaming
        base: dict[str, object] = dict(
            threads=self.threads, gemm_fixed_s=0.0, gemm_m0=0.0, gemm_n0=0.0, gemm_k0=0.0,
            cache_bandwidth_Bps=st.cache_bandwidth_Bps, cache_bytes=st.cache_bytes,
            vector_fixed_s=st.vector_fixed_s, op_factor={"stream": 1.0}, conv_efficiency=1.0,
            conv_pointwise_efficiency=1.0, conv_fixed_s=0.0, attention_efficiency=1.0, attention_fixed_s=0.0,
            page_fault_s=self.pages.page_s, fresh_output_bytes=self.pages.min_bytes)
        base.update(kw)
        return CpuEfficiency(**base)  # type: ignore[arg-type]

    def hardware(self, e: CpuEfficiency, peak_flops_per_s: float) -> Hardware:
        """The machine as a hardware entry with efficiency ``e`` and FP32 peak ``peak_flops_per_s``."""
        return build_hardware(self.info, peak_fp32_flops_per_s=peak_flops_per_s,
                              memory_bandwidth_Bps=self.streaming.dram_bandwidth_Bps, efficiency=e)


def fit_cpu(measurements: Sequence[Measurement], info: MachineInfo, threads: int) -> CpuFit:
    """Fit the CPU model to ``measurements`` (every family in :data:`FAMILIES` must be present), in the steps
    the module docstring lists."""
    by = {f: [m for m in measurements if m.family == f] for f in FAMILIES}
    missing = [f for f, ms in by.items() if not ms]
    if missing:
        raise DataError(f"calibration needs benchmarks of every family; missing: {', '.join(missing)}")
    stream = [m for m in by["vector"] if op_class(m.op.op, m.op.kind) == "stream"]
    if len(stream) < 3:
        raise DataError("calibration needs at least 3 streaming elementwise benchmarks (add, mul, copy)")
    pages = _fresh_pages(measurements)
    mc = _Machine(info, threads, pages, _fit_streaming(stream, pages))
    peak_guess = 2.0 * info.vector_lanes_fp32 * 2 * info.clock_hz * threads  # only until the GEMM fit sets it
    factors = _vector_factors(by["vector"], mc, peak_guess)
    m0, n0, k0, peak, gemm_fixed = _fit_gemm(by["gemm"], mc, peak_guess)
    gemm_kw: dict[str, object] = dict(gemm_fixed_s=gemm_fixed, gemm_m0=m0, gemm_n0=n0, gemm_k0=k0,
                                      op_factor=factors)
    final = _fit_conv_attention(by, mc, gemm_kw, gemm_fixed, peak)
    hw = mc.hardware(final, peak)
    errors = {}
    for family, ms in by.items():
        errors[family] = float(np.median(np.abs(_predict(ms, hw) / np.array([x.time_s for x in ms]) - 1.0)))
    final = final.model_copy(update={"fit_error_frac": errors})
    return CpuFit(peak_fp32_flops_per_s=peak, memory_bandwidth_Bps=mc.streaming.dram_bandwidth_Bps,
                  efficiency=final)


def _fresh_pages(measurements: Sequence[Measurement]) -> _FreshPages:
    """Step 0, mapping fresh pages: a write into a new 64 MiB tensor minus the same write in place, per 4 KiB
    page; taken off every benchmark whose output the allocator maps anew, before the rates are fitted."""
    allocs = {m.op.op: m for m in measurements if m.family == "alloc"}
    page_fault = 0.0
    if "fill" in allocs and "fill_" in allocs:
        fresh, in_place = allocs["fill"], allocs["fill_"]
        page_fault = max(fresh.time_s - in_place.time_s, 0.0) / (fresh.op.bytes_written / PAGE_BYTES)
    return _FreshPages(page_fault, float(CpuEfficiency.model_fields["fresh_output_bytes"].default))


def _fit_streaming(stream: Sequence[Measurement], pages: _FreshPages) -> _Streaming:
    """Step 1, streaming: t = fixed + min(B, c)/bw_cache + max(B - c, 0)/bw_dram, weighted by 1/t, the cache
    size c on a grid."""
    nbytes = np.array([m.op.bytes for m in stream])
    t = np.array([m.time_s - pages.time_s(m.op) for m in stream])
    best: tuple[float, float, float, float, float] | None = None
    for cache in _CACHE_GRID:
        a = np.stack([np.ones_like(nbytes), np.minimum(nbytes, cache), np.maximum(nbytes - cache, 0.0)], axis=1)
        coef, *_ = np.linalg.lstsq(a / t[:, None], np.ones_like(t), rcond=None)
        fixed, inv_c, inv_m = float(max(coef[0], 0.0)), float(max(coef[1], 1e-14)), float(max(coef[2], 1e-14))
        if not (nbytes > cache).any():
            inv_m = inv_c  # nothing measured beyond this cache size: DRAM no faster than cache is all we know
        inv_m = max(inv_m, inv_c)  # DRAM is never faster than cache
        pred = fixed + np.minimum(nbytes, cache) * inv_c + np.maximum(nbytes - cache, 0.0) * inv_m
        err = float(np.median(_log_err(pred, t)) + 0.25 * np.mean(_log_err(pred, t)))
        if best is None or err < best[0]:
            best = (err, cache, fixed, 1.0 / inv_c, 1.0 / inv_m)
    assert best is not None
    _, cache_bytes, vector_fixed, bw_cache, bw_dram = best
    return _Streaming(vector_fixed, bw_cache, bw_dram, cache_bytes)


def _vector_factors(vector: Sequence[Measurement], mc: _Machine, peak_guess: float) -> dict[str, float]:
    """Step 2: each other vector class's time factor over a streaming op (median ratio)."""
    factors = {"stream": 1.0}
    base_hw = mc.hardware(mc.efficiency(), peak_guess)
    for cls in ("transcendental", "reduction", "pool", "gather"):
        ms = [m for m in vector if op_class(m.op.op, m.op.kind) == cls]
        if not ms:
            continue
        mem = np.array([m.op.bytes for m in ms])
        ratio = ((np.array([m.time_s - mc.pages.time_s(m.op) for m in ms]) - mc.streaming.vector_fixed_s)
                 / cpu_memory_time_s(mem, base_hw))
        factors[cls] = float(max(np.median(ratio), 0.1))
    return factors


def _fit_gemm(gemms: Sequence[Measurement], mc: _Machine,
              peak_guess: float) -> tuple[float, float, float, float, float]:
    """Step 3, GEMMs: the call overhead and the shape constants on a grid, the peak in closed form for each
    (nn.Linear's (out, in) weights and bmm; weights stored (in, out) get their factor in step 4).
    Returns ``(m0, n0, k0, peak FLOP/s, overhead s)``."""
    g = [x for x in gemms if x.op.get("weight_layout") != "in_out"] or list(gemms)
    gt = np.array([m.time_s for m in g])
    dims = np.array([m.op.dims for m in g], dtype=float)
    b, m_, k, n = dims.T
    flops = 2.0 * b * m_ * k * n
    mem_hw = mc.hardware(mc.efficiency(), peak_guess)
    cold = np.array([x.op.weight_bytes for x in g])  # cycled weights stream from DRAM, as in a model
    mem_t = cpu_gemm_memory_time_s(b, m_, k, n, mem_hw, DType.FP32, cold_bytes=cold)
    # the overhead is searched, not read off the smallest product: that one streams its weights from DRAM
    fixed_grid = [0.0, *np.geomspace(1e-6, max(0.8 * float(np.min(gt)), 2e-6), 16)]
    best_g: tuple[float, float, float, float, float, float] | None = None
    everything = [np.ones(len(g), dtype=bool)]
    for gemm_fixed in fixed_grid:
        busy = np.maximum(gt - gemm_fixed, 0.05 * gt)
        err, (m0, n0, k0), (peak,) = _best_shape(flops, m_, k, n, busy, mem_t, gemm_fixed, gt, everything)
        if best_g is None or err < best_g[0]:
            best_g = (err, m0, n0, k0, peak, float(gemm_fixed))
    assert best_g is not None
    return best_g[1:]


def _fit_conv_attention(by: dict[str, list[Measurement]], mc: _Machine, gemm_kw: dict[str, object],
                        gemm_fixed: float, peak: float) -> CpuEfficiency:
    """Step 4: the (in, out) weight layout's factor, the convolutions' shape constants and efficiencies, and
    attention's efficiency and causal factor, each a 1-D search with the full formula."""

    def one_d(family: str, key: str, fixed_key: str, keep: Callable[[Op], bool] = lambda op: True,
              grid: Sequence[float] = _EFF_GRID, **known: object) -> float:
        ms = [x for x in by[family] if keep(x.op)] or by[family]
        meas = np.array([x.time_s for x in ms])
        best_e, best_err = 1.0, np.inf
        for value in grid:
            hw = mc.hardware(mc.efficiency(**{**gemm_kw, **known, key: float(value), fixed_key: gemm_fixed}), peak)
            e = _log_err(_predict(ms, hw), meas)
            err = float(np.median(e) + 0.25 * np.mean(e))
            if err < best_err:
                best_e, best_err = float(value), err
        return best_e

    in_out = [x for x in by["gemm"] if x.op.get("weight_layout") == "in_out"]
    in_out_factor = one_d("gemm", "gemm_in_out_factor", "gemm_fixed_s",
                          lambda op: op.get("weight_layout") == "in_out", grid=_CAUSAL_GRID) if in_out else 1.0
    gemm_kw = {**gemm_kw, "gemm_in_out_factor": in_out_factor}
    # three shape constants and two efficiencies need at least twice as many convolutions (calibrate --quick
    # times four): with fewer, convolutions keep the GEMM's constants
    shape = _conv_shape(by["conv"], gemm_fixed, mc.hardware(mc.efficiency(), peak)) \
        if len(by["conv"]) >= _MIN_CONVS_FOR_SHAPE else (None, None, None)
    conv_m0, conv_n0, conv_k0 = shape
    conv_kw = dict(conv_m0=conv_m0, conv_n0=conv_n0, conv_k0=conv_k0)
    conv_eff = one_d("conv", "conv_efficiency", "conv_fixed_s", lambda op: op.dims[3] > 1,
                     conv_m0=conv_m0, conv_n0=conv_n0, conv_k0=conv_k0)
    pointwise_eff = one_d("conv", "conv_pointwise_efficiency", "conv_fixed_s", lambda op: op.dims[3] == 1,
                          conv_m0=conv_m0, conv_n0=conv_n0, conv_k0=conv_k0)
    attn_eff = one_d("attention", "attention_efficiency", "attention_fixed_s", lambda op: not op.dims[-1])
    causal = [x for x in by["attention"] if x.op.dims[-1]]
    causal_factor = one_d("attention", "attention_causal_factor", "attention_fixed_s", lambda op: bool(op.dims[-1]),
                          grid=_CAUSAL_GRID, attention_efficiency=attn_eff) if causal else 1.0
    return mc.efficiency(**gemm_kw, **conv_kw, conv_efficiency=conv_eff, conv_pointwise_efficiency=pointwise_eff,
                         conv_fixed_s=gemm_fixed, attention_efficiency=attn_eff, attention_fixed_s=gemm_fixed,
                         attention_causal_factor=causal_factor)
