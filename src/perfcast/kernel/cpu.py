"""Per-op time on a CPU from the rates ``perfcast calibrate`` fitted on that machine.

A CPU runs one op at a time across its threads, so each op costs a fixed call
overhead (dispatch, packing, thread wake-up) plus the larger of its math and
its memory traffic:

- GEMM (linear, bmm): ``flops / (peak * eff)`` with a shape efficiency
  ``m/(m+m0) * n/(n+n0) * k/(k+k0)`` (thin products keep fewer vector lanes busy
  and reuse less of what they load), blended with the memory time. A weight stored
  ``(in, out)`` (GPT-2's Conv1D: ``addmm(x, W)``) takes ``gemm_in_out_factor`` times
  the compute of nn.Linear's ``(out, in)`` weight.
- Convolution: the implicit GEMM (``m = batch*out_hw**2``, ``k = in_ch/groups*kernel**2``,
  ``n = out_ch/groups``) divided by a fitted convolution efficiency (oneDNN), one for 1x1
  convolutions (a plain GEMM) and one for larger kernels, with shape constants of their own.
- Fused attention (SDPA): its FLOPs at a fitted fraction of the GEMM peak; a causal call
  takes ``attention_causal_factor`` times what its causal pairs' FLOPs price (measured with the
  mask passed as a tensor, as transformers passes it: the kernel then computes every pair).
- Vector ops (elementwise, reductions, pooling, gathers): their bytes at the
  streaming bandwidth times a fitted factor per op class.

Memory time streams ``cache_bytes`` at cache bandwidth and the rest at DRAM
bandwidth. An op whose output is at least ``fresh_output_bytes`` (glibc's largest
heap-served block, 32 MiB) writes it to freshly mapped pages on every call and pays
``page_fault_s`` per 4 KiB page on top (in-place ops, named ``..._``, allocate nothing).
Every rate is in :class:`perfcast.catalog.cpu.CpuEfficiency`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from perfcast.catalog.cpu import CpuEfficiency
from perfcast.catalog.hardware import Hardware
from perfcast.dtypes import DType
from perfcast.errors import UnsupportedError
from perfcast.kernel.types import Bound
from perfcast.workload.types import Op, OpKind

__all__ = ["OP_CLASSES", "PAGE_BYTES", "conv_shape", "cpu_gemm_memory_time_s", "cpu_gemm_time_s", "cpu_memory_time_s",
           "cpu_op_times", "fresh_pages_time_s", "op_class", "smooth_max"]

PAGE_BYTES = 4096.0

_SMOOTH_MAX_P = 4.0

OP_CLASSES = ("stream", "transcendental", "reduction", "pool", "gather")
_TRANSCENDENTAL = frozenset({"gelu", "tanh", "exp", "sigmoid", "silu", "erf", "gelu_mul", "silu_mul", "pow", "powu",
                             "rsqrt", "sqrt", "log"})
_REDUCTION = frozenset({"softmax", "layernorm", "rmsnorm", "mean", "sum", "max", "cross_entropy", "batchnorm"})


def op_class(op: str, kind: OpKind = OpKind.VECTOR, *, inputs: int | None = None) -> str:
    """The class of a memory-bound op whose factor prices it (see :data:`OP_CLASSES`).

    ``inputs`` is how many times the op reads its input (the IR's ``inputs`` meta): a batchnorm that reads it
    once runs in inference, a per-channel scale and shift with the running statistics, which streams like an
    elementwise op; reading it twice (batch statistics, then normalize) makes it a reduction.
    """
    if kind is OpKind.POOL:
        return "pool"
    if kind is OpKind.EMBEDDING:
        return "gather"
    if op == "batchnorm" and inputs == 1:
        return "stream"
    if op in _TRANSCENDENTAL:
        return "transcendental"
    if op in _REDUCTION:
        return "reduction"
    return "stream"


def _cpu(hw: Hardware) -> CpuEfficiency:
    if hw.cpu is None:
        raise UnsupportedError(f"{hw.id} has no fitted CPU model; run `perfcast calibrate` on that machine")
    return hw.cpu


def cpu_memory_time_s(bytes_moved: np.ndarray | float, hw: Hardware) -> np.ndarray:
    """Seconds to stream ``bytes_moved``: the first ``cache_bytes`` from cache, the rest from DRAM."""
    c = _cpu(hw)
    b = np.asarray(bytes_moved, dtype=float)
    return np.minimum(b, c.cache_bytes) / c.cache_bandwidth_Bps + np.maximum(b - c.cache_bytes, 0.0) / (
        hw.memory_bandwidth_Bps)


def fresh_pages_time_s(op: Op, hw: Hardware) -> float:
    """Seconds ``op`` spends mapping fresh pages for its output (0 below ``fresh_output_bytes`` or in place)."""
    c = _cpu(hw)
    if op.op.endswith("_") or op.bytes_written < c.fresh_output_bytes:
        return 0.0
    return op.bytes_written / PAGE_BYTES * c.page_fault_s


def smooth_max(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """How an op's compute and memory times combine: a smooth maximum (p-norm, ``p = 4``)."""
    p = _SMOOTH_MAX_P
    return np.asarray((a**p + b**p) ** (1.0 / p))


def cpu_gemm_time_s(b: np.ndarray | float, m: np.ndarray | float, k: np.ndarray | float, n: np.ndarray | float,
                    hw: Hardware, dtype: DType,
                    *, efficiency: float = 1.0, fixed_s: float | None = None,
                    cold_bytes: np.ndarray | float = 0.0,
                    shape: tuple[float, float, float] | None = None) -> np.ndarray:
    """Seconds of ``b`` products ``(m x k) @ (k x n)`` in ``dtype`` (arrays broadcast together).

    ``cold_bytes`` of the operands (a model's weights, when all of them together outgrow the cache) come
    from DRAM whatever the product's own size: they were evicted since the last forward pass touched them.
    ``shape`` replaces the GEMM's ``(m0, n0, k0)`` (convolutions have their own).
    """
    c = _cpu(hw)
    bb, mm, kk, nn = (np.asarray(v, dtype=float) for v in (b, m, k, n))
    m0, n0, k0 = shape or (c.gemm_m0, c.gemm_n0, c.gemm_k0)
    eff = mm / (mm + m0) * nn / (nn + n0) * kk / (kk + k0) * efficiency
    compute = 2.0 * bb * mm * kk * nn / (hw.peak(dtype) * eff)
    memory = cpu_gemm_memory_time_s(bb, mm, kk, nn, hw, dtype, cold_bytes=cold_bytes)
    return np.asarray(smooth_max(compute, memory) + (c.gemm_fixed_s if fixed_s is None else fixed_s))


def cpu_gemm_memory_time_s(b: np.ndarray | float, m: np.ndarray | float, k: np.ndarray | float,
                           n: np.ndarray | float, hw: Hardware, dtype: DType,
                           *, cold_bytes: np.ndarray | float = 0.0) -> np.ndarray:
    """Seconds to move the operands of ``b`` products ``(m x k) @ (k x n)``: ``cold_bytes`` of them from DRAM,
    the rest as :func:`cpu_memory_time_s` streams them."""
    bb, mm, kk, nn = (np.asarray(v, dtype=float) for v in (b, m, k, n))
    cold = np.asarray(cold_bytes, dtype=float)
    moved = bb * (mm * kk + kk * nn + mm * nn) * dtype.bytes
    return cpu_memory_time_s(np.maximum(moved - cold, 0.0), hw) + cold / hw.memory_bandwidth_Bps


def conv_shape(c: CpuEfficiency) -> tuple[float, float, float]:
    """A convolution's ``(m0, n0, k0)``: its own where fitted, else the GEMM's."""
    return (c.gemm_m0 if c.conv_m0 is None else c.conv_m0, c.gemm_n0 if c.conv_n0 is None else c.conv_n0,
            c.gemm_k0 if c.conv_k0 is None else c.conv_k0)


def cpu_op_times(ops: Sequence[Op], hw: Hardware) -> tuple[np.ndarray, list[Bound]]:
    """Seconds of one instance of each op on the CPU ``hw``, and what bounds each one."""
    c = _cpu(hw)
    n = len(ops)
    times = np.zeros(n)
    bounds = [Bound.LATENCY] * n
    # a forward pass touches each weight once: when the weights outgrow the cache, every GEMM streams its own
    # from DRAM, however small it is (a microbenchmark repeating one product keeps its operands cached)
    cold = sum(op.weight_bytes * op.count for op in ops) > c.cache_bytes
    for i, op in enumerate(ops):
        mem = float(cpu_memory_time_s(op.bytes, hw))
        if op.kind is OpKind.GEMM:
            bb, m, k, nn = op.dims
            layout = 1.0 / c.gemm_in_out_factor if op.get("weight_layout") == "in_out" else 1.0
            t = float(cpu_gemm_time_s(bb, m, k, nn, hw, op.dtype, efficiency=layout,
                                      cold_bytes=op.weight_bytes if cold else 0.0))
            compute = 2.0 * bb * m * k * nn / hw.peak(op.dtype)
        elif op.kind is OpKind.CONV:
            batch, cin, cout, kern, hw_in, stride, pad, groups = op.dims
            out = (hw_in + 2 * pad - kern) // stride + 1
            ce = c.conv_pointwise_efficiency if kern == 1 else c.conv_efficiency
            t = float(cpu_gemm_time_s(groups, batch * out * out, cin / groups * kern * kern, cout / groups, hw,
                                      op.dtype, efficiency=ce, fixed_s=c.conv_fixed_s,
                                      cold_bytes=op.weight_bytes if cold else 0.0, shape=conv_shape(c)))
            compute = op.flops / hw.peak(op.dtype)
        elif op.kind is OpKind.ATTENTION:
            compute = op.flops / (hw.peak(op.dtype) * c.attention_efficiency)
            if op.dims[-1]:  # causal: op.flops counts the causal pairs; a masked kernel computes them all
                compute *= c.attention_causal_factor
            t = float(smooth_max(np.asarray(compute), np.asarray(mem))) + c.attention_fixed_s
        elif op.kind in (OpKind.VECTOR, OpKind.POOL, OpKind.EMBEDDING):
            cls = op_class(op.op, op.kind, inputs=op.get("inputs"))  # type: ignore[arg-type]
            factor = c.op_factor.get(cls, c.op_factor.get("stream", 1.0))
            t = c.vector_fixed_s + mem * factor
            compute = 0.0
            mem = mem * factor
        elif op.kind is OpKind.SSM_SCAN:  # a roofline: vector FLOPs at the FP32 peak against the bytes streamed
            compute = op.flops / hw.peak(DType.FP32, matrix=False)
            t = max(compute, mem) + c.vector_fixed_s
        else:  # host and comm ops take no device time on one CPU
            bounds[i] = Bound.HOST if op.kind is OpKind.HOST else Bound.COMM
            continue
        t += fresh_pages_time_s(op, hw)
        times[i] = t
        if t < 2.0 * max(c.vector_fixed_s, 1e-9):
            bounds[i] = Bound.LATENCY
        else:
            bounds[i] = Bound.COMPUTE if compute >= mem else Bound.MEMORY
    return times, bounds
