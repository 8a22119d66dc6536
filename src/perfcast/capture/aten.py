"""A PyTorch operator's recorded input shapes as one workload op (shared by the trace readers).

Profiler traces record each ATen operator with its input shapes and element types but not the kernel it
ran: :func:`aten_op` gives the workload op of a kernel class (``gemm``, ``attention``, ``conv``,
``elementwise``/``layout``, ``reduction``) from them. The Kineto replay (:mod:`perfcast.replay.reprice`) takes the
class from the kernel's name and the shapes from the launching CPU operator; the execution-trace reader
(:mod:`perfcast.capture.execution_trace`) takes both from the operator. Convolutions are assumed square with
stride 1 and "same" padding (neither trace records them as shapes).
"""

from __future__ import annotations

from collections.abc import Sequence

from perfcast.dtypes import DType
from perfcast.workload.graph import Graph
from perfcast.workload.types import Op

__all__ = ["ELEMENT_BYTES", "TORCH_DTYPES", "aten_op", "numel", "operator_dtype"]

Shape = tuple[int, ...]

# PyTorch's element type names (as the profiler records them) -> perfcast formats, and their sizes in bytes
TORCH_DTYPES = {"float": DType.FP32, "c10::Half": DType.FP16, "c10::BFloat16": DType.BF16, "double": DType.FP64,
                "half": DType.FP16, "bfloat16": DType.BF16}
ELEMENT_BYTES = {"float": 4, "int": 4, "unsigned int": 4, "long": 8, "long int": 8, "int64_t": 8, "double": 8,
                 "c10::Half": 2, "c10::BFloat16": 2, "short": 2, "signed char": 1, "unsigned char": 1, "bool": 1,
                 "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1}


def numel(shape: Sequence[int]) -> int:
    """Elements of a tensor of ``shape`` (a zero-size dimension counts as 1: the op still runs)."""
    out = 1
    for x in shape:
        out *= max(1, int(x))
    return out


def operator_dtype(input_types: Sequence[str], name_dtype: DType | None = None) -> DType:
    """The op's format: its first floating input type (FP32 when none); FP32 becomes TF32 when the kernel's name
    (``name_dtype``) says tensor-op FP32."""
    base = next((TORCH_DTYPES[t] for t in input_types if t in TORCH_DTYPES), DType.FP32)
    if base is DType.FP32 and name_dtype is DType.TF32:
        return DType.TF32
    return base


def aten_op(cls: str, name: str, input_dims: Sequence[Shape], input_types: Sequence[str],
            name_dtype: DType | None = None) -> Op | None:
    """A workload op of kernel class ``cls`` from the operator ``name``'s recorded input shapes (``()`` for an
    input that is not a tensor) and element types; None when the shapes do not fit a rule."""
    dims = [d for d in input_dims if d]
    if not dims:
        return None
    g = Graph(operator_dtype(input_types, name_dtype))
    short = name.split("::")[-1]
    if cls == "gemm":
        if short in ("addmm", "baddbmm") and len(dims) >= 3:
            dims = dims[1:]
        if short == "linear" and len(dims) >= 2 and len(dims[1]) == 2:
            act, weight = dims[0], dims[1]
            return g.bmm(name, 1, numel(act[:-1]), act[-1], weight[0]) if act[-1] == weight[1] else None
        if len(dims) >= 2 and len(dims[0]) >= 2 and len(dims[1]) >= 2 and dims[0][-1] == dims[1][-2]:
            lhs, rhs = dims[0], dims[1]
            batch = numel(lhs[:-2]) if len(lhs) > 2 else 1
            return g.bmm(name, batch, lhs[-2], lhs[-1], rhs[-1])
        return None
    if cls == "attention":
        if len(dims) >= 2 and len(dims[0]) == 4 and len(dims[1]) == 4:
            q, k = dims[0], dims[1]
            return g.attention(name, q[0], q[1], k[1], q[2], k[2], q[3], causal=False)
        return None
    if cls == "conv":
        if len(dims) >= 2 and len(dims[0]) == 4 and len(dims[1]) == 4 and "backward" not in short:
            x, w = dims[0], dims[1]
            groups = max(1, x[1] // max(1, w[1]))
            return g.conv2d(name, x[0], x[1], w[0], w[2], x[2], padding=w[2] // 2, groups=groups)
        return None
    if cls in ("elementwise", "layout"):
        size = numel(dims[0])
        inputs = sum(1 for d in dims if numel(d) == size)
        return g.pointwise(name, short, size, inputs=max(1, inputs))
    if cls == "reduction":
        d = dims[0]
        return g.reduction(name, short, numel(d[:-1]), d[-1])
    return None
