"""Price a list of IR ops on one device: the entry point of layer 1."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import cast

import numpy as np

from perfcast.catalog.corrections import correct_kernel
from perfcast.catalog.hardware import Hardware, load_hardware
from perfcast.coefficients.bundle import Calibration, resolve_calibration
from perfcast.coefficients.kernel import Coefficients
from perfcast.digest import content_digest
from perfcast.dtypes import DType
from perfcast.kernel.attention import attention_times
from perfcast.kernel.conv import conv_times
from perfcast.kernel.cpu import cpu_op_times
from perfcast.kernel.energy import energy_arrays
from perfcast.kernel.gemm import gemm_times
from perfcast.kernel.ssm import matrix_efficiency, scan_times
from perfcast.kernel.types import Bound, KernelTime
from perfcast.kernel.vector import vector_times
from perfcast.workload.types import Op, OpKind

__all__ = ["KernelTime", "predict_kernel", "predict_ops", "price_ops"]


def predict_kernel(op: Op, hardware: Hardware | str, calibration: Calibration | None = None) -> KernelTime:
    """Device time of one instance of ``op`` on ``hardware`` (``calibration``: the shipped one when None)."""
    return predict_ops([op], hardware, calibration)[0]


def predict_ops(ops: Sequence[Op], hardware: Hardware | str, calibration: Calibration | None = None,
                *, clock_frac: float | None = None) -> list[KernelTime]:
    """Device time of one instance of each op on ``hardware`` (see :func:`price_ops`; ``calibration``: the
    shipped one when None)."""
    hw = hardware if isinstance(hardware, Hardware) else load_hardware(hardware)
    return price_ops(ops, hw, resolve_calibration(calibration).kernel, clock_frac=clock_frac)


# per (hardware content, kernel coefficients content): the times of each op shape priced so far
_CACHE: dict[tuple[str, str], dict[tuple[object, ...], KernelTime]] = {}
_CACHE_LIMIT = 200_000


def _shape_key(op: Op) -> tuple[object, ...]:
    """What an op's time depends on (not its name, count, phase or group)."""
    return (op.kind, op.op, op.dims, op.dtype, op.flops, op.bytes_read, op.bytes_written, op.get("weight_dtype"),
            op.get("training"))


def price_ops(ops: Sequence[Op], hw: Hardware, co: Coefficients, *,
              clock_frac: float | None = None) -> list[KernelTime]:
    """Device time of one instance of each op priced with the kernel coefficients ``co`` (vectorized by kind,
    cached per op shape and the contents of ``hw`` and ``co``).

    ``clock_frac`` overrides the sustained-clock model (benchmark bursts); such calls are not cached.
    """
    co = correct_kernel(co, hw.corrections)  # a device adapted to its own measurements (catalog.corrections)
    if clock_frac is not None:
        return _predict_ops(ops, hw, co, clock_frac)
    owner = (content_digest(hw), content_digest(co))
    cache = _CACHE.get(owner)
    if cache is None:
        if len(_CACHE) > 64:
            _CACHE.clear()
        cache = _CACHE[owner] = {}
    keys = [_shape_key(o) for o in ops]
    missing = [i for i, k in enumerate(keys) if k not in cache]
    if missing:
        if len(cache) > _CACHE_LIMIT:
            cache.clear()
        fresh = _predict_ops([ops[i] for i in missing], hw, co, None)
        for i, kt in zip(missing, fresh, strict=True):
            cache[keys[i]] = kt
    return [cache[k] for k in keys]


def _predict_ops(ops: Sequence[Op], hw: Hardware, co: Coefficients, clock_frac: float | None) -> list[KernelTime]:
    """Each op's time and bound: ops grouped by kind (and dtype), each group priced by its kind's model."""
    n = len(ops)
    if hw.cpu is not None:  # a calibrated CPU: its own fitted rates (kernel/cpu.py), no GPU coefficients
        cpu_times, cpu_bounds = cpu_op_times(ops, hw)
        return _with_energy(ops, np.asarray(cpu_times, dtype=float), list(cpu_bounds), hw, co)
    times = np.zeros(n)
    bounds = [Bound.LATENCY] * n
    groups: dict[tuple[OpKind, object], list[int]] = {}
    for i, op in enumerate(ops):
        key: tuple[OpKind, object]
        if op.kind is OpKind.GEMM:
            key = (op.kind, (op.op == "bmm", op.dtype, op.get("weight_dtype")))
        elif op.kind in (OpKind.ATTENTION, OpKind.CONV, OpKind.SSM_SCAN):
            key = (op.kind, op.dtype)
        else:
            key = (op.kind, None)
        groups.setdefault(key, []).append(i)
    for (kind, sub), idx in groups.items():
        sel = [ops[i] for i in idx]
        if kind in (OpKind.HOST, OpKind.COMM):  # priced by the layers above: only their bound here
            for i in idx:
                bounds[i] = Bound.HOST if kind is OpKind.HOST else Bound.COMM
            continue
        t, b = _GROUP_PRICERS[kind](sel, sub, hw, co, clock_frac)
        for j, i in enumerate(idx):
            times[i] = t[j]
            bounds[i] = b[j]
    return _with_energy(ops, times, bounds, hw, co)


def _price_gemms(sel: list[Op], sub: object, hw: Hardware, co: Coefficients,
                 clock_frac: float | None) -> tuple[np.ndarray, list[Bound]]:
    """GEMMs of one (batched, dtype, weight dtype): the tile model's seconds, bound by its larger part."""
    batched, dtype, wdtype = cast(tuple[bool, DType, str | None], sub)
    d = np.array([o.dims for o in sel], dtype=float)
    operand = None
    if wdtype and wdtype != dtype.value:
        operand = DType(wdtype).bytes  # weight-only quantization: weights stream narrower
    g = gemm_times(d[:, 0], d[:, 1], d[:, 2], d[:, 3], hw, dtype, co, batched=batched, clock_frac=clock_frac,
                   operand_bytes=operand)
    kmin = co.launch.kernel_min_s
    t = g.time_s
    return t, [_bound(g.compute_s[j], g.memory_s[j], t[j], kmin) for j in range(len(sel))]


def _price_attention(sel: list[Op], sub: object, hw: Hardware, co: Coefficients,
                     clock_frac: float | None) -> tuple[np.ndarray, list[Bound]]:
    """Fused attention calls of one dtype: memory-bound when decoding one query token, else compute-bound."""
    fl = np.array([o.flops for o in sel])
    by = np.array([o.bytes for o in sel])
    bwd = np.array([o.op == "attention_backward" for o in sel])
    seqs = np.array([o.dims[0] for o in sel], dtype=float)
    train = np.array([bool(o.get("training", False)) for o in sel])
    t = attention_times(fl, by, hw, sub, co, backward=bwd, sequences=seqs,  # type: ignore[arg-type]
                        training=train)
    return t, [Bound.MEMORY if o.dims[3] == 1 else Bound.COMPUTE for o in sel]


def _price_convs(sel: list[Op], sub: object, hw: Hardware, co: Coefficients,
                 clock_frac: float | None) -> tuple[np.ndarray, list[Bound]]:
    """Convolutions of one dtype (implicit GEMMs): compute-bound."""
    d = np.array([o.dims for o in sel], dtype=float)
    t = conv_times(d, hw, sub, co, clock_frac=clock_frac)  # type: ignore[arg-type]
    return t, [Bound.COMPUTE] * len(sel)


def _price_vectors(sel: list[Op], sub: object, hw: Hardware, co: Coefficients,
                   clock_frac: float | None) -> tuple[np.ndarray, list[Bound]]:
    """Elementwise, embedding and pooling kernels: streaming bytes, or the launch floor when tiny."""
    kind = sel[0].kind
    names = [o.op for o in sel]
    by = np.array([o.bytes for o in sel])
    cols = np.array([o.dims[1] if kind is OpKind.VECTOR else o.dims[-1] for o in sel], dtype=float)
    elems = np.array([o.dims[0] * o.dims[1] if kind is OpKind.VECTOR else o.bytes_written / o.dtype.bytes
                      for o in sel], dtype=float)
    t = vector_times(names, by, cols, hw, co, elements=elems)
    kmin = co.launch.kernel_min_s
    return t, [Bound.MEMORY if t[j] > 2 * kmin else Bound.LATENCY for j in range(len(sel))]


def _price_scans(sel: list[Op], sub: object, hw: Hardware, co: Coefficients,
                 clock_frac: float | None) -> tuple[np.ndarray, list[Bound]]:
    """Selective scans / SSD / delta rules of one dtype: a roofline on the vector and matrix peaks
    (:mod:`perfcast.kernel.ssm`)."""
    mm = np.array([float(o.get("matmul_flops", 0.0)) for o in sel])  # type: ignore[arg-type]
    eff = np.array([matrix_efficiency(o.get("version")) for o in sel])
    st, sc, sm = scan_times(np.array([o.flops for o in sel]), mm, np.array([o.bytes for o in sel]), hw,
                            sub, co, eff)  # type: ignore[arg-type]
    kmin = co.launch.kernel_min_s
    return st, [_bound(sc[j], sm[j], st[j], kmin) for j in range(len(sel))]


_GroupPricer = Callable[[list[Op], object, Hardware, Coefficients, float | None], tuple[np.ndarray, list[Bound]]]
# each kind of op that runs a kernel: how a group of them is priced (seconds per op, and what bounds each)
_GROUP_PRICERS: dict[OpKind, _GroupPricer] = {
    OpKind.GEMM: _price_gemms,
    OpKind.ATTENTION: _price_attention,
    OpKind.CONV: _price_convs,
    OpKind.VECTOR: _price_vectors,
    OpKind.EMBEDDING: _price_vectors,
    OpKind.POOL: _price_vectors,
    OpKind.SSM_SCAN: _price_scans,
}


def _with_energy(ops: Sequence[Op], times: np.ndarray, bounds: list[Bound], hw: Hardware,
                 co: Coefficients) -> list[KernelTime]:
    """The ops' times with the energy of each instance beside them (:func:`perfcast.kernel.energy.energy_arrays`)."""
    flops = np.array([o.flops for o in ops], dtype=float)
    nbytes = np.array([o.bytes for o in ops], dtype=float)
    energy, _, dynamic, _ = energy_arrays([o.kind for o in ops], [o.dtype for o in ops], times, bounds, flops, nbytes,
                                          hw, co)
    return [KernelTime(time_s=float(times[i]), bound=bounds[i], flops=ops[i].flops, bytes=ops[i].bytes,
                       energy_J=float(energy[i]), dynamic_J=float(dynamic[i])) for i in range(len(ops))]


def _bound(compute: float, memory: float, total: float, kmin: float) -> Bound:
    if total < 2 * kmin:
        return Bound.LATENCY
    return Bound.COMPUTE if compute >= memory else Bound.MEMORY
