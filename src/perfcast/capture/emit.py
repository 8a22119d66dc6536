"""Turn captured framework ops (a name, tensor shapes, attributes) into workload IR ops.

Every front end (torch.fx, torch.export, ONNX) reduces a node to a :class:`Call`
with a canonical op name (``linear``, ``matmul``, ``conv2d``, ``sdpa``,
``layer_norm``, ``softmax``, ``embedding``, ``batch_norm``, ``max_pool2d``,
``adaptive_avg_pool2d``, an elementwise name...) and :class:`Emitter` adds the
IR ops through :class:`perfcast.workload.graph.Graph`, the builder the catalog
models use, so a captured op costs exactly what a built one does.

Views (reshape, permute, transpose, slicing...) launch no kernel and emit
nothing; neither does dropout (a capture is an inference forward), whose rate
and size the op before it keeps in ``meta`` for training; ops on integer or
boolean tensors (position ids, mask bookkeeping) are skipped too. Non-square
convolution inputs are priced as the square image of the same area. An op that
is none of these is refused (UnsupportedError naming it), never guessed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from perfcast.dtypes import DType
from perfcast.errors import UnsupportedError
from perfcast.workload.graph import Graph

__all__ = ["ELEMENTWISE", "VIEWS", "Call", "Emitter", "numel"]

Shape = tuple[int, ...]

VIEWS = frozenset({
    "view", "reshape", "_unsafe_view", "permute", "transpose", "t", "flatten", "unflatten", "unsqueeze", "squeeze",
    "expand", "expand_as", "size", "dim", "getitem", "getattr", "slice", "select", "narrow", "alias", "detach",
    "split", "chunk", "unbind", "as_strided", "contiguous_view", "identity", "dropout", "feature_dropout",
    "sym_size", "sym_numel", "lift_fresh_copy", "arange", "full", "ones", "zeros", "empty", "ones_like",
    "zeros_like", "full_like", "empty_like", "scalar_tensor", "tensor", "_assert_tensor_metadata", "item",
    "to", "type_as", "float", "_to_copy", "shape", "constant", "constantofshape", "range", "unsqueeze_copy",
    "squeeze_copy", "view_copy", "dropout_", "finfo", "masked_fill_", "eq", "ne", "lt", "gt", "le", "ge",
    "long", "int", "bool", "cumsum", "triu", "tril", "new_ones", "new_zeros", "_set_grad_enabled", "assert",
    "detach_", "diff", "__and__", "__or__", "and", "or", "not", "equal", "resolve_conj", "resolve_neg",
})
ELEMENTWISE = {
    "add": "add", "sub": "sub", "rsub": "sub", "mul": "mul", "div": "div", "truediv": "div", "neg": "mulu",
    "relu": "relu", "gelu": "gelu", "tanh": "tanh", "sigmoid": "sigmoid", "silu": "silu", "exp": "exp",
    "erf": "erf", "pow": "powu", "sqrt": "sqrt", "rsqrt": "rsqrt", "reciprocal": "divu", "abs": "mulu",
    "clamp": "max", "clip": "max", "maximum": "max", "minimum": "max", "where": "where", "masked_fill": "masked_fill",
    "hardtanh": "max", "leaky_relu": "relu", "elu": "relu", "softplus": "exp", "log": "log", "cos": "tanh",
    "sin": "tanh", "iadd": "add", "imul": "mul", "floordiv": "div", "relu_": "relu", "add_": "add", "mul_": "mul",
    "clone": "copy", "contiguous": "copy", "copy": "copy", "cat": "cat", "concat": "cat", "stack": "cat",
    "hardswish": "silu", "hardsigmoid": "sigmoid", "mish": "silu", "cast": "cast",
}
_UNARY_FORMS = {"add": "addu", "sub": "subu", "mul": "mulu", "div": "divu"}
_DROPOUT = ("dropout", "feature_dropout", "dropout_")
_ROW_REDUCTIONS = {"mean": "mean", "sum": "sum", "amax": "max", "max": "max", "var": "mean", "std": "mean",
                   "reducemean": "mean", "reducesum": "sum", "reducemax": "max", "norm": "sum", "logsumexp": "sum"}


def _iattr(c: Call, key: str, default: int) -> int:
    value = c.attrs.get(key, default)
    return int(value) if isinstance(value, (int, float)) else default


def numel(shape: Shape) -> int:
    """Elements of a tensor of ``shape``."""
    return int(math.prod(shape))


@dataclass(frozen=True, slots=True)
class Call:
    """One captured op: canonical name, input shapes (tensors only, ``None`` for a missing optional
    tensor), output shapes, and which inputs are parameters (weights held by the model)."""

    name: str
    op: str
    inputs: tuple[Shape | None, ...]
    outputs: tuple[Shape, ...]
    attrs: dict[str, object] = field(default_factory=dict)
    params: tuple[bool, ...] = ()
    float_out: bool = True

    def is_param(self, i: int) -> bool:
        """Whether input ``i`` is a parameter."""
        return i < len(self.params) and self.params[i]


class Emitter:
    """Adds the IR ops of captured calls to a :class:`Graph` in ``dtype``."""

    def __init__(self, dtype: DType) -> None:
        self.graph = Graph(dtype)
        self._tables: set[object] = set()  # embedding tables seen (a linear reading one is a tied LM head)

    def emit(self, c: Call) -> None:
        """Add the ops of one call (nothing for views); each op's ``meta`` keeps the module path that issued it
        (``module``), which :func:`perfcast.capture.merge.merge_repeated` reads."""
        start = len(self.graph.ops)
        p = c.attrs.get("p", 0.0)
        if c.op.lower() in _DROPOUT and isinstance(p, float) and p > 0 and start and c.outputs:
            # dropout runs only in training: the op before it keeps its rate and size, and the training
            # forward (perfcast.capture.training) adds the kernel there
            last = self.graph.ops[-1]
            self.graph.ops[-1] = last.with_(meta=(*last.meta, ("dropout_p", p), ("dropout_numel", numel(c.outputs[0]))))
            return
        self._emit(c)
        module = c.attrs.get("module")
        if module is not None:
            ops = self.graph.ops
            for i in range(start, len(ops)):
                ops[i] = ops[i].with_(meta=(*ops[i].meta, ("module", str(module))))

    def _tied(self, c: Call) -> bool:
        wid = c.attrs.get("weight_id")
        return wid is not None and wid in self._tables

    def _emit(self, c: Call) -> None:
        op = c.op.lower()
        if op in VIEWS or not c.outputs:
            return
        if not c.float_out and op not in ("embedding", "gather"):
            return
        handler = getattr(self, f"_{op}", None)
        if handler is not None:
            handler(c)
            return
        if op in ELEMENTWISE:
            self._elementwise(c, ELEMENTWISE[op])
            return
        if op in _ROW_REDUCTIONS:
            self._reduce(c, _ROW_REDUCTIONS[op])
            return
        raise UnsupportedError(
            f"unsupported op {c.op!r} at node {c.name!r}; perfcast captures linear/matmul/bmm, conv2d, "
            "attention (scaled_dot_product_attention), layer_norm, batch_norm, softmax, embedding, pooling, "
            "row reductions and elementwise ops")

    # -- matrix ops ----------------------------------------------------------------------------
    def _linear(self, c: Call) -> None:
        x, w = c.inputs[0], c.inputs[1]
        assert x is not None and w is not None
        out_f, in_f = (w[0], w[1]) if not c.attrs.get("transposed_weight") else (w[1], w[0])
        bias = len(c.inputs) > 2 and c.inputs[2] is not None
        self.graph.linear(c.name, numel(x) // in_f, in_f, out_f, bias=bias, tied=self._tied(c))

    def _addmm(self, c: Call) -> None:  # bias, mat1 (m x k), mat2 (k x n)
        _, a, b = c.inputs
        assert a is not None and b is not None
        if c.is_param(2):
            self.graph.linear(c.name, a[0], a[1], b[1], bias=True, tied=self._tied(c))
        else:
            self.graph.bmm(c.name, 1, a[0], a[1], b[1])

    def _matmul(self, c: Call) -> None:
        a, b = c.inputs[0], c.inputs[1]
        assert a is not None and b is not None
        if len(b) == 2 and c.is_param(1):  # x @ W with W a parameter: a linear layer without bias
            self.graph.linear(c.name, numel(a) // a[-1], a[-1], b[1], bias=False, tied=self._tied(c))
            return
        a2 = a if len(a) >= 2 else (1, *a)
        b2 = b if len(b) >= 2 else (*b, 1)
        m, k, n = a2[-2], a2[-1], b2[-1]
        out = c.outputs[0]
        batch = numel(out) // max(m * n, 1) if out else 1
        self.graph.bmm(c.name, max(batch, 1), m, k, n)

    _mm = _matmul
    _bmm = _matmul

    def _conv2d(self, c: Call) -> None:
        x, w = c.inputs[0], c.inputs[1]
        assert x is not None and w is not None
        if len(x) != 4 or len(w) != 4:
            raise UnsupportedError(f"unsupported op {c.op!r} at node {c.name!r}: only 2-D convolutions (NCHW) "
                                   "are captured")
        stride, pad, groups = (_iattr(c, k, d) for k, d in (("stride", 1), ("padding", 0), ("groups", 1)))
        side = x[2] if x[2] == x[3] else int(round(math.sqrt(x[2] * x[3])))
        bias = len(c.inputs) > 2 and c.inputs[2] is not None
        self.graph.conv2d(c.name, x[0], x[1], w[0], w[2], side, stride=stride, padding=pad, groups=groups,
                          bias=bias)

    def _sdpa(self, c: Call) -> None:
        q, k = c.inputs[0], c.inputs[1]
        assert q is not None and k is not None
        batch = numel(q[:-3]) if len(q) > 3 else 1
        heads, q_len, hd = q[-3], q[-2], q[-1]
        kv_heads, kv_len = k[-3], k[-2]
        self.graph.attention(c.name, batch, heads, kv_heads, q_len, kv_len, hd,
                             causal=bool(c.attrs.get("causal", False)))

    # -- vector ops ----------------------------------------------------------------------------
    def _elementwise(self, c: Call, op: str) -> None:
        if op in _UNARY_FORMS and sum(1 for s in c.inputs if s is not None) == 1:
            op = _UNARY_FORMS[op]  # a tensor and a Python number (x * 0.5): one backward kernel, not two
        out = numel(c.outputs[0])
        full = sum(1 for s in c.inputs if s is not None and numel(s) == out)
        small = sum(numel(s) for s in c.inputs if s is not None and numel(s) != out)
        weights = sum(numel(s) for i, s in enumerate(c.inputs) if s is not None and c.is_param(i))  # x * norm.weight
        self.graph.pointwise(c.name, op, out, inputs=max(full, 1 if op not in ("cat",) else full),
                             extra_read_bytes=small * self.graph.esize, rows=None, params=weights)

    def _reduce(self, c: Call, op: str) -> None:
        x = c.inputs[0]
        assert x is not None
        out = max(numel(c.outputs[0]), 1)
        total = numel(x)
        self.graph.reduction(c.name, op, out, max(total // out, 1), out_cols=1)

    def _softmax(self, c: Call) -> None:
        x = c.inputs[0]
        assert x is not None
        self.graph.reduction(c.name, "softmax", numel(x) // x[-1], x[-1])

    _log_softmax = _softmax

    def _layer_norm(self, c: Call) -> None:
        x = c.inputs[0]
        assert x is not None
        cols = _iattr(c, "normalized_numel", x[-1])
        affine = len(c.inputs) > 1 and c.inputs[1] is not None
        bias = len(c.inputs) > 2 and c.inputs[2] is not None
        self.graph.norm(c.name, "layernorm", numel(x) // cols, cols, affine=affine, bias=bias)

    def _rms_norm(self, c: Call) -> None:
        x = c.inputs[0]
        assert x is not None
        affine = len(c.inputs) > 1 and c.inputs[1] is not None
        self.graph.norm(c.name, "rmsnorm", numel(x) // x[-1], x[-1], affine=affine)

    def _batch_norm(self, c: Call) -> None:
        x = c.inputs[0]
        assert x is not None
        channels = x[1] if len(x) > 1 else x[0]
        self.graph.reduction(c.name, "batchnorm", channels, numel(x) // channels, params=2 * channels)

    def _embedding(self, c: Call) -> None:
        w, ids = (c.inputs[0], c.inputs[1]) if c.attrs.get("weight_first", True) else (c.inputs[1], c.inputs[0])
        assert w is not None and ids is not None
        if c.attrs.get("weight_id") is not None:
            self._tables.add(c.attrs["weight_id"])
        self.graph.embedding(c.name, numel(ids), w[-1], w[0])

    def _max_pool2d(self, c: Call) -> None:
        self._pool2d(c, "maxpool")

    def _avg_pool2d(self, c: Call) -> None:
        self._pool2d(c, "avgpool")

    def _pool2d(self, c: Call, kind: str) -> None:
        x = c.inputs[0]
        assert x is not None
        k, s, p = (_iattr(c, a, d) for a, d in (("kernel", 2), ("stride", 0), ("padding", 0)))
        side = x[2] if x[2] == x[3] else int(round(math.sqrt(x[2] * x[3])))
        self.graph.pool(c.name, kind, x[0], x[1], side, k, s or k, padding=p)

    def _adaptive_avg_pool2d(self, c: Call) -> None:
        x = c.inputs[0]
        assert x is not None
        out = c.outputs[0]
        if len(out) == 4 and out[2] * out[3] != 1:
            self._elementwise(c, "mean")
            return
        side = x[2] if x[2] == x[3] else int(round(math.sqrt(x[2] * x[3])))
        self.graph.pool(c.name, "avgpool", x[0], x[1], side, side, 1)
