"""A PyTorch execution trace's steps as workload ops: which operators launch device work and what they cost.

Which ops cost GPU time (one rule per node, walking each step's op tree of
:class:`~perfcast.capture.execution_trace.ExecutionTrace` from the top):

- **A class perfcast models** (``aten::linear/addmm/mm/bmm/matmul/baddbmm``, scaled-dot-product attention and
  its backward, convolution and its backward, 2-D max/average pooling and its backward, norms/softmax/reductions,
  elementwise ops, ``embedding``): the
  OUTERMOST such op is priced by :func:`perfcast.capture.aten.aten_op` (the Kineto replay's rule) from its
  recorded input shapes and types, and its children are not counted again (an ``aten::linear`` and the
  ``aten::addmm`` it calls are one GEMM). Convolutions take their stride and padding from the recorded values.
  Backward ops (under ``autograd::engine::evaluate_function: ...``) are priced like forward ops;
  ``*attention*_backward`` and ``convolution_backward`` as :func:`perfcast.workload.backward.backward_ops` derives
  them from the forward op (FlashAttention's backward; a data and a weight gradient convolution).
- **Collectives** (``c10d::*`` ops, ``nccl:*`` annotations): a ``comm`` op of the first tensor argument's
  bytes (this rank's buffer, the nccl-tests convention) over the group size the trace's ``record_param_comms``
  names (0 when it names none: the caller must give it).
- **Copies between host and device** (``copy_`` whose source and destination tensors name ``cpu`` and a device):
  an ``h2d_copy``/``d2h_copy`` op of the source's bytes, priced on the device's PCIe link by the replay.
- **Views and metadata** (view, reshape of a contiguous tensor, t, expand, size, detach, empty, ``record_param_comms``
  bookkeeping, the ``[pytorch|profiler|execution_trace|...]`` roots, annotations and autograd nodes themselves):
  no GPU time. ``aten::_local_scalar_dense`` (``.item()``) is a host synchronization.
- **Anything else**: its children are walked; a LEAF operator of unknown kind that moves tensors is priced as
  one memory-bound kernel reading its input tensors and writing its output tensors (their recorded sizes), and
  counted as an unknown op (:attr:`EtStep.unknown_ops`).

Steps: each ``ProfilerStep#N`` node (or a ``record_function`` named like a step: ``step 3``, ``## iteration 2
##``) is one step; ops of other threads (the autograd engine's on a GPU run) join the step whose span of node
ids holds theirs. A trace without such nodes is one step, the whole trace.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from perfcast.capture.aten import aten_op, numel, operator_dtype
from perfcast.capture.execution_trace import EtArg, EtNode, ExecutionTrace
from perfcast.jsonio import json_int as _int
from perfcast.workload.backward import backward_ops
from perfcast.workload.graph import Graph
from perfcast.workload.types import Op, OpKind, Phase

__all__ = ["EtStep", "execution_trace_steps"]

_STEP = re.compile(r"^(ProfilerStep#\d+|(train_?)?(step|iteration|iter)[ #_:-]*\d+"
                   r"|##\s*(train_?)?(step|iteration|iter)\b.*##)$", re.IGNORECASE)
_ROOT = re.compile(r"^\[pytorch\|profiler\|execution_(trace|graph)\|(process|thread)\]$")  # "graph": PyTorch 1.13

# classes perfcast models, by operator name without namespace and without an in-place trailing "_"
_GEMM = {"linear", "addmm", "mm", "bmm", "matmul", "baddbmm", "addbmm", "_addmm_activation"}
_ATTENTION = {"scaled_dot_product_attention", "_scaled_dot_product_flash_attention",
              "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_efficient_attention",
              "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_fused_attention_overrideable",
              "_flash_attention_forward", "_efficient_attention_forward"}
_CONV = {"convolution", "_convolution", "conv2d", "cudnn_convolution", "mkldnn_convolution", "miopen_convolution",
         "convolution_overrideable"}
_CONV_BACKWARD = {"convolution_backward", "convolution_backward_overrideable", "mkldnn_convolution_backward",
                  "cudnn_convolution_backward", "miopen_convolution_backward"}
_POOL = {"max_pool2d": "maxpool", "max_pool2d_with_indices": "maxpool", "avg_pool2d": "avgpool",
         "max_pool2d_with_indices_backward": "maxpool", "avg_pool2d_backward": "avgpool"}
_REDUCTION = {"layer_norm", "native_layer_norm", "group_norm", "native_group_norm", "batch_norm", "native_batch_norm",
              "_native_batch_norm_legit", "_native_batch_norm_legit_no_training", "_batch_norm_impl_index",
              "rms_norm", "_fused_rms_norm", "softmax", "_softmax", "log_softmax", "_log_softmax", "_safe_softmax",
              "sum", "mean", "amax", "amin", "argmax", "argmin", "var", "std", "var_mean", "std_mean", "norm",
              "linalg_vector_norm", "logsumexp", "prod", "nll_loss_forward", "nll_loss2d_forward",
              "native_layer_norm_backward", "native_group_norm_backward", "native_batch_norm_backward",
              "_softmax_backward_data", "_log_softmax_backward_data", "_fused_rms_norm_backward"}
_ELEMENTWISE = {
    "add", "sub", "rsub", "mul", "div", "neg", "abs", "relu", "gelu", "silu", "tanh", "sigmoid", "exp", "log",
    "log1p", "sqrt", "rsqrt", "pow", "reciprocal", "sign", "clamp", "clamp_min", "clamp_max", "hardtanh",
    "leaky_relu", "elu", "softplus", "mish", "hardswish", "hardsigmoid", "erf", "sin", "cos", "where",
    "masked_fill", "copy", "clone", "fill", "zero", "lerp", "addcmul", "addcdiv", "maximum", "minimum", "eq", "ne",
    "lt", "le", "gt", "ge", "logical_not", "logical_and", "logical_or", "threshold", "threshold_backward",
    "gelu_backward", "silu_backward", "tanh_backward", "sigmoid_backward", "hardtanh_backward",
    "leaky_relu_backward", "elu_backward", "softplus_backward", "native_dropout", "native_dropout_backward",
    "bernoulli", "uniform", "normal", "cat", "index_select", "gather", "scatter", "scatter_add", "index_add",
    "index", "index_put", "nll_loss_backward", "nll_loss2d_backward", "square", "floor", "ceil", "round",
    "trunc", "remainder", "fmod", "bitwise_and", "bitwise_or", "bitwise_not", "isnan", "isinf", "nan_to_num",
    "triu", "tril", "cumsum", "sort", "topk",
}
# no GPU time, children not walked (a view's children are views)
_VIEWS = {
    "view", "_unsafe_view", "as_strided", "t", "transpose", "permute", "expand", "expand_as", "slice", "select",
    "narrow", "squeeze", "unsqueeze", "split", "split_with_sizes", "chunk", "unbind", "detach", "alias",
    "lift_fresh", "_reshape_alias", "resolve_conj", "resolve_neg", "size", "sym_size", "stride", "sym_stride",
    "numel", "sym_numel", "dim", "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
    "resize", "set", "broadcast_tensors", "unflatten", "movedim", "swapaxes", "diagonal", "view_as",
    "record_param_comms", "_has_compatible_shallow_copy_type", "is_same_size", "_nested_tensor_from_mask_left_aligned",
    "result_type", "can_cast", "promote_types", "requires_grad", "retain_grad", "_version",
    "barrier", "monitored_barrier",
}
# no GPU time of their own; their children carry it (a leaf one is a no-op: contiguous of a contiguous tensor,
# a conversion to the same type, dropout with p=0 or in eval)
_WRAPPERS = {"reshape", "flatten", "contiguous", "to", "_to_copy", "type_as", "dropout", "feature_dropout",
             "alpha_dropout", "cross_entropy_loss", "nll_loss_nd", "nll_loss", "ones_like", "zeros_like",
             "full_like", "zeros", "ones", "full", "new_zeros", "new_ones", "new_full", "item", "is_nonzero",
             "float", "half", "bfloat16", "long", "int", "bool"}
_COLLECTIVES = (("allreduce", "all_reduce"), ("allgather", "all_gather"), ("reducescatter", "reduce_scatter"),
                ("broadcast", "broadcast"), ("alltoall", "all_to_all"), ("send", "send_recv"), ("recv", "send_recv"),
                ("reduce", "all_reduce"))
_SYNC = {"_local_scalar_dense"}

@dataclass(frozen=True)
class EtStep:
    """One step's ops in launch order (``ops``), how many operators each rule priced (``priced``: ``kernel model``,
    ``collective``, ``host sync``, ``unknown: memory-bound``) and the names of the unknown ones. ``rf_id`` is the
    step node's record-function id (a Kineto trace of the same run names it), None for the whole trace."""

    name: str
    ops: tuple[Op, ...]
    priced: dict[str, int]
    unknown: tuple[str, ...]
    rf_id: int | None = None
    training: bool = False

    @property
    def unknown_ops(self) -> int:
        """Leaf operators of unknown kind priced as memory-bound."""
        return len(self.unknown)


# -- steps -----------------------------------------------------------------------------------------------------------
def _tops(trace: ExecutionTrace) -> list[EtNode]:
    """The nodes right under the trace's roots (the thread roots' children), in id order."""
    roots = {n.id for n in trace.nodes if n.parent == n.id or _ROOT.match(n.name)}
    return [n for n in trace.nodes if n.id not in roots and (n.parent in roots or n.parent not in trace.by_id)]


def _descendants(trace: ExecutionTrace, node_id: int) -> Iterator[int]:
    stack = [node_id]
    while stack:
        i = stack.pop()
        yield i
        stack.extend(trace.children.get(i, ()))


def execution_trace_steps(trace: ExecutionTrace, *, group_size: int | None = None) -> tuple[list[EtStep], bool]:
    """Each step's ops (module docstring), and whether the whole trace is one step (no step annotations).
    ``group_size``: the collectives' group when the trace names none (their ``dims[1]`` stays 0 otherwise)."""
    by_id = trace.by_id
    steps = _step_nodes(trace)
    tops = _tops(trace)
    if not steps:
        return [_price("whole trace", tops, trace, None, group_size)], True
    spans: list[tuple[EtNode, int, int]] = []
    for i, s in enumerate(steps):
        end = steps[i + 1].id if i + 1 < len(steps) else max(_descendants(trace, s.id)) + 1
        spans.append((s, s.id, end))
    out: list[EtStep] = []
    step_ids = {s.id for s in steps}
    inside: set[int] = set()
    for s in steps:
        inside.update(_descendants(trace, s.id))
    for s, lo, hi in spans:
        members = [by_id[c] for c in trace.children.get(s.id, ())]
        # other threads' top-level ops (the autograd engine's) that ran during the step
        members += [t for t in tops if t.id not in step_ids and t.id not in inside and lo <= t.id < hi]
        members.sort(key=lambda n: n.id)
        out.append(_price(s.name, members, trace, s.rf_id, group_size))
    return out, False


def _step_nodes(trace: ExecutionTrace) -> list[EtNode]:
    """The outermost step-like nodes, in id order."""
    found = [n for n in trace.nodes if not n.operator and _STEP.match(n.name.strip())]
    ids = {n.id for n in found}
    by_id = trace.by_id
    outer = []
    for n in found:
        p, seen = n.parent, 0
        nested = False
        while p in by_id and seen < 10_000:
            if p in ids:
                nested = True
                break
            if by_id[p].parent == p:
                break
            p, seen = by_id[p].parent, seen + 1
        if not nested:
            outer.append(n)
    return outer


# -- pricing ---------------------------------------------------------------------------------------------------------
class _Pricer:
    def __init__(self, trace: ExecutionTrace, group_size: int | None) -> None:
        self.trace = trace
        self.group_size = group_size
        self.ops: list[Op] = []
        self.priced: Counter[str] = Counter()
        self.unknown: list[str] = []
        self.training = False

    def walk(self, node: EtNode, phase: Phase) -> None:
        name = node.name
        if name.startswith("autograd::engine::evaluate_function"):
            phase, self.training = Phase.BACKWARD, True
        elif name.startswith(("Optimizer.step#", "Optimizer.zero_grad#")):
            phase = Phase.OPTIMIZER
        if _ROOT.match(name):
            return self._children(node, phase)
        if not node.operator:
            collective = _collective_name(name) if name.startswith("nccl:") else None
            if collective is not None and self._collective(node, collective, phase):
                return None
            return self._children(node, phase)
        short = node.short
        key = short[:-1] if short.endswith("_") and not short.endswith("__") else short  # in place: add_ -> add
        if key in _VIEWS or short in _VIEWS:
            return None
        if key in _WRAPPERS:
            return self._children(node, phase)
        if key in _SYNC:
            self._add(Graph(operator_dtype([]), phase=phase).host(name, "sync"), "host sync")
            return None
        if node.name.startswith(("c10d::", "_c10d_functional::", "c10d_functional::")):
            collective = _collective_name(short)
            if collective is not None and self._collective(node, collective, phase):
                return None
            return self._children(node, phase)
        ops = self._modelled(node, key, phase)
        if ops:
            for o in ops:
                self._add(o, "kernel model")
            return None
        if self.trace.children.get(node.id):
            return self._children(node, phase)
        self._leaf(node, phase)
        return None

    def _children(self, node: EtNode, phase: Phase) -> None:
        for c in self.trace.children.get(node.id, ()):
            self.walk(self.trace.node(c), phase)

    def _add(self, op: Op, how: str) -> None:
        self.ops.append(op)
        self.priced[how] += 1

    def _modelled(self, node: EtNode, key: str, phase: Phase) -> list[Op]:
        dims = tuple(a.shape or ((1,) if a.is_tensor else ()) for a in node.inputs)  # a 0-d tensor is 1 element
        types = tuple(a.dtype for a in node.inputs)
        op: Op | None = None
        if key == "copy" and (host_copy := _host_copy(node, phase)) is not None:
            return [host_copy]
        if key in _GEMM:
            if key == "matmul" and len(dims) >= 2 and len(dims[0]) > 2 and len(dims[1]) == 2:
                dims = ((numel(dims[0][:-1]), dims[0][-1]), dims[1])  # x @ W folds x's batch into rows (one mm)
            op = aten_op("gemm", node.name, dims, types)
        elif key in _ATTENTION:
            op = aten_op("attention", node.name, dims, types)
        elif "attention" in key and key.endswith("backward"):
            fwd = aten_op("attention", node.name, dims[1:], types[1:])  # grad_out first, then q, k, v
            return [o.with_(phase=phase) for o in backward_ops([fwd])] if fwd is not None else []
        elif key in _CONV:
            op = _conv(node)
        elif key in _CONV_BACKWARD:
            fwd = _conv(node, first=1)  # grad_output, input, weight, ...
            return [o.with_(phase=phase) for o in backward_ops([fwd])] if fwd is not None else []
        elif key in _POOL:
            fwd = _pool(node, _POOL[key], first=1 if key.endswith("backward") else 0)
            if fwd is None or not key.endswith("backward"):
                return [fwd.with_(phase=phase)] if fwd is not None else []
            return [o.with_(phase=phase) for o in backward_ops([fwd])]
        elif key in ("embedding", "embedding_dense_backward", "embedding_backward"):
            return _embedding(node, key, phase)
        elif key in _REDUCTION:
            op = aten_op("reduction", node.name, dims, types)
        elif key in _ELEMENTWISE or key.startswith("_foreach_"):
            if key.startswith("_foreach_"):
                return [self._memory_op(node, phase, "multi_tensor")] if _moved(node) else []
            op = aten_op("elementwise", node.name, dims, types)
        return [op.with_(phase=phase)] if op is not None else []

    def _memory_op(self, node: EtNode, phase: Phase, op_name: str) -> Op:
        read, written = _moved_bytes(node)
        dtype = operator_dtype([a.dtype for a in node.inputs + node.outputs])
        elements = max(1, int((read + written) / dtype.bytes))
        return Graph(dtype, phase=phase).add_op(node.name, op_name, OpKind.VECTOR, (1, elements), flops=0.0,
                                                read=read, written=written)

    def _leaf(self, node: EtNode, phase: Phase) -> None:
        if not _moved(node):
            return
        self._add(self._memory_op(node, phase, "unknown"), "unknown: memory-bound")
        self.unknown.append(node.name)

    def _collective(self, node: EtNode, collective: str, phase: Phase) -> bool:
        size = next((a.bytes for a in node.inputs if a.bytes > 0), 0.0)
        if size <= 0:
            return False
        group = _group_size(self.trace, node) or self.group_size or 0
        dtype = operator_dtype([a.dtype for a in node.inputs])
        self._add(Op(name=node.name, op=collective, kind=OpKind.COMM, dims=(int(size), group), dtype=dtype,
                     flops=0.0, bytes_read=float(size), bytes_written=0.0, phase=phase), "collective")
        return True


def _collective_name(name: str) -> str | None:
    key = re.sub(r"[^a-z]", "", name.lower().split(":")[-1])
    key = re.sub(r"^(c10d|nccl|base)", "", key)
    if key.startswith("barrier"):
        return None
    return next((v for k, v in _COLLECTIVES if key.startswith(k)), None)


def _group_size(trace: ExecutionTrace, node: EtNode) -> int | None:
    """The group size a ``record_param_comms`` node under (or around) ``node`` recorded: its last integer argument
    (PyTorch's ``record_param_comms(..., global_rank_start, global_rank_stride, world_size)``)."""
    candidates = [trace.node(c) for c in trace.children.get(node.id, ())]
    if node.parent in trace.by_id:
        candidates.append(trace.node(node.parent))
    for c in candidates:
        if c.short == "record_param_comms":
            ints = [v.value for v in c.inputs if isinstance(v.value, int) and not isinstance(v.value, bool)]
            if ints and ints[-1] > 0:
                return int(ints[-1])
    return None


def _device(arg: EtArg) -> str:
    """The device a tensor argument's recorded value names (``cuda:0`` -> ``cuda``; ``""`` when none)."""
    v = arg.value
    if arg.is_tensor and isinstance(v, list) and len(v) >= 6 and isinstance(v[5], str):
        return v[5].split(":")[0]
    return ""


def _host_copy(node: EtNode, phase: Phase) -> Op | None:
    """``copy_(dst, src)`` between host memory and a device: an ``h2d_copy``/``d2h_copy`` op of the source's bytes,
    which the replay prices on the device's PCIe link (None for a copy within one memory)."""
    tensors = [a for a in node.inputs if a.is_tensor]
    if len(tensors) < 2:
        return None
    dst, src = _device(tensors[0]), _device(tensors[1])
    if not dst or not src or dst == src or "cpu" not in (dst, src):
        return None
    size = tensors[1].bytes
    g = Graph(operator_dtype([tensors[1].dtype]), phase=phase)
    return g.add_op(node.name, "h2d_copy" if src == "cpu" else "d2h_copy", OpKind.VECTOR,
                    (1, max(1, numel(tensors[1].shape))), flops=0.0, read=size, written=size)


def _moved(node: EtNode) -> bool:
    return sum(_moved_bytes(node)) > 0


def _moved_bytes(node: EtNode) -> tuple[float, float]:
    return sum(a.bytes for a in node.inputs), sum(a.bytes for a in node.outputs)


def _ints(value: Any) -> list[int] | None:
    if isinstance(value, list) and value and all(_int(v) is not None for v in value):
        return [int(v) for v in value]
    i = _int(value)
    return [i] if i is not None else None


def _conv(node: EtNode, first: int = 0) -> Op | None:
    """A 2-D convolution from ``convolution(input, weight, bias, stride, padding, ...)``'s (``conv2d``'s alike)
    recorded shapes and values (``first``: index of ``input``; the backward's is 1); stride 1 and "same" padding
    where the values are not integers."""
    args = node.inputs[first:]
    if len(args) < 2 or len(args[0].shape) != 4 or len(args[1].shape) != 4:
        return None
    x, w = args[0].shape, args[1].shape
    scalars = [a.value for a in args[3:] if not a.dtype]  # conv2d's padding may be "same"/"valid": the default
    stride = (_ints(scalars[0]) if len(scalars) > 0 else None) or [1]
    padding = (_ints(scalars[1]) if len(scalars) > 1 else None) or [w[2] // 2]
    groups = max(1, x[1] // max(1, w[1]))
    dtype = operator_dtype([args[0].dtype])
    side = x[2] if x[2] == x[3] else int(round((x[2] * x[3]) ** 0.5))
    return Graph(dtype).conv2d(node.name, x[0], x[1], w[0], w[2], side, stride=stride[0], padding=padding[0],
                               groups=groups)


def _pool(node: EtNode, kind: str, first: int = 0) -> Op | None:
    """2-D pooling from ``max_pool2d(input, kernel_size, stride, padding, ...)`` (``avg_pool2d`` alike; the
    backward's ``input`` is its second argument); an empty stride is the kernel size, as PyTorch takes it."""
    args = node.inputs[first:]
    if not args or len(args[0].shape) != 4 or len(args) < 2:
        return None
    x = args[0].shape
    kernel = _ints(args[1].value)
    if not kernel:
        return None
    stride = (_ints(args[2].value) if len(args) > 2 else None) or kernel
    padding = (_ints(args[3].value) if len(args) > 3 else None) or [0]
    side = x[2] if x[2] == x[3] else int(round((x[2] * x[3]) ** 0.5))
    return Graph(operator_dtype([args[0].dtype])).pool(node.name, kind, x[0], x[1], side, kernel[0], stride[0],
                                                       padding=padding[0])


def _embedding(node: EtNode, key: str, phase: Phase) -> list[Op]:
    """``embedding(weight, indices)``; its backward ``embedding_dense_backward(grad, indices, num_weights, ...)``
    as :func:`~perfcast.workload.backward.backward_ops` derives it from the forward lookup."""
    a = node.inputs
    if key == "embedding":
        if len(a) < 2 or len(a[0].shape) != 2 or not a[1].shape:
            return []
        g = Graph(operator_dtype([a[0].dtype]), phase=phase)
        return [g.embedding(node.name, numel(a[1].shape), a[0].shape[1], a[0].shape[0])]
    vocab = _int(a[2].value) if len(a) > 2 else None
    if len(a) < 3 or not a[0].shape or not a[1].shape or vocab is None:
        return []
    fwd = Graph(operator_dtype([a[0].dtype])).embedding(node.name, numel(a[1].shape), a[0].shape[-1], vocab)
    return [o.with_(phase=phase) for o in backward_ops([fwd])]


def _price(name: str, members: Sequence[EtNode], trace: ExecutionTrace, rf_id: int | None,
           group_size: int | None) -> EtStep:
    pricer = _Pricer(trace, group_size)
    for n in members:
        pricer.walk(n, Phase.FORWARD)
    ops = pricer.ops
    if pricer.training:  # attention kernels of a training step run their training variant (workload.graph)
        ops = [o.with_(meta=tuple((k, True if k == "training" else v) for k, v in o.meta))
               if o.kind is OpKind.ATTENTION else o for o in ops]
    return EtStep(name=name, ops=tuple(ops), priced=dict(sorted(pricer.priced.items())),
                  unknown=tuple(pricer.unknown), rf_id=rf_id, training=pricer.training)
