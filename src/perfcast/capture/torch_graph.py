"""Capture a ``torch.nn.Module`` with torch.fx (or torch.export) into the workload IR.

torch.fx's ``symbolic_trace`` records the module's calls (``nn.Linear``,
``F.scaled_dot_product_attention``, ``torch.matmul``, ``x.softmax``...);
shape propagation with the example inputs gives every tensor's shape. Modules
with control flow on tensor values cannot be traced that way: the error names
the line and suggests ``torch.export``, which records ATen ops with their
shapes instead (``--method export``; ``auto`` tries fx, then export). Each node
becomes a :class:`~perfcast.capture.emit.Call` and
:class:`~perfcast.capture.emit.Emitter` prices it. torch is imported here only.
"""

from __future__ import annotations

import contextlib
import io
import logging
import operator
import traceback
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from perfcast.capture.emit import Call, Emitter
from perfcast.capture.merge import merge_repeated
from perfcast.dtypes import DType
from perfcast.errors import ConfigError, PerfcastError
from perfcast.workload.types import Mode, Workload

__all__ = ["METHODS", "capture_module"]

METHODS = ("auto", "fx", "export")

_ALIASES = {
    "scaled_dot_product_attention": "sdpa", "_scaled_dot_product_flash_attention_for_cpu": "sdpa",
    "_scaled_dot_product_flash_attention": "sdpa", "_scaled_dot_product_efficient_attention": "sdpa",
    "_scaled_dot_product_attention_math": "sdpa", "convolution": "conv2d", "conv2d": "conv2d",
    "native_layer_norm": "layer_norm", "_softmax": "softmax", "max_pool2d_with_indices": "max_pool2d",
    "_native_batch_norm_legit_no_training": "batch_norm", "_native_batch_norm_legit": "batch_norm",
    "_adaptive_avg_pool2d": "adaptive_avg_pool2d", "getitem": "getitem", "truediv": "div", "floordiv": "div",
    "native_dropout": "dropout", "gelu_": "gelu", "silu_": "silu",
}
_MODULES = {
    "Linear": "linear", "Conv2d": "conv2d", "LayerNorm": "layer_norm", "RMSNorm": "rms_norm",
    "Embedding": "embedding", "BatchNorm2d": "batch_norm", "BatchNorm1d": "batch_norm", "ReLU": "relu",
    "GELU": "gelu", "Tanh": "tanh", "Sigmoid": "sigmoid", "SiLU": "silu", "Softmax": "softmax",
    "Dropout": "dropout", "Identity": "identity", "MaxPool2d": "max_pool2d", "AvgPool2d": "avg_pool2d",
    "AdaptiveAvgPool2d": "adaptive_avg_pool2d", "Flatten": "flatten", "LeakyReLU": "leaky_relu",
    "Hardswish": "hardswish", "ReLU6": "hardtanh", "Hardtanh": "hardtanh", "ELU": "elu", "Mish": "mish",
}
_DTYPES = {"float32": DType.FP32, "float16": DType.FP16, "bfloat16": DType.BF16, "float64": DType.FP64}


def _first(v: Any) -> int:
    if isinstance(v, (list, tuple)):
        return int(v[0]) if v else 0
    return int(v)


def _shape_of(meta: Any) -> tuple[int, ...] | None:
    shape = getattr(meta, "shape", None)
    if shape is None:
        return None
    try:
        return tuple(int(d) for d in shape)
    except TypeError:  # a symbolic size
        return None


def _is_float(meta: Any) -> bool:
    dtype = getattr(meta, "dtype", None)
    return bool(getattr(dtype, "is_floating_point", False))


def _metas(node: Any) -> list[Any]:
    """Tensor metadata of a node's output(s) (fx ShapeProp's ``tensor_meta`` or export's ``val``)."""
    meta = node.meta.get("tensor_meta", node.meta.get("val"))
    if getattr(meta, "shape", None) is not None:  # fx's TensorMetadata is itself a (named) tuple
        return [meta]
    if isinstance(meta, (list, tuple)):
        return [m for m in meta if getattr(m, "shape", None) is not None]
    return [meta] if getattr(meta, "shape", None) is not None else []


def _flatten(args: Iterable[Any]) -> list[Any]:
    out: list[Any] = []
    for a in args:
        if isinstance(a, (list, tuple)):
            out += _flatten(a)
        else:
            out.append(a)
    return out


def _user_frame(exc: BaseException) -> str:
    """``file:line `code``` of the innermost frame outside torch (where the model code failed)."""
    import torch

    torch_dir = str(Path(torch.__file__).parent)
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith(torch_dir)
              and "perfcast" not in f.filename.replace("\\", "/").split("/site-packages/")[-1].split("/")[0:2][-1:]]
    frames = [f for f in frames if "/perfcast/capture/" not in f.filename.replace("\\", "/")]
    if not frames:
        return ""
    f = frames[-1]
    code = (f.line or "").strip()
    return f" at {Path(f.filename).name}:{f.lineno}" + (f" (`{code}`)" if code else "")


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


class _Collector:
    """Walks a traced graph and emits its calls."""

    def __init__(self, gm: Any, params: set[str], *, aten_only: bool = False) -> None:
        self.gm = gm
        self.params = params  # placeholder / get_attr names that hold parameters or buffers
        self.aten_only = aten_only  # an exported graph: only ATen ops launch kernels (the rest are helpers)
        self.emitter: Emitter | None = None
        self.names: set[str] = set()

    def _arg_shape(self, a: Any) -> tuple[tuple[int, ...] | None, bool]:
        import torch.fx as fx

        if isinstance(a, fx.Node):
            metas = _metas(a)
            shape = _shape_of(metas[0]) if metas else None
            return shape, a.name in self.params or a.op == "get_attr"
        return None, False

    def _param_id(self, a: Any) -> str | None:
        """A name for the parameter tensor ``a`` is (None for activations)."""
        import torch.fx as fx

        if not isinstance(a, fx.Node):
            return None
        if a.name in self.params:
            return a.name
        if a.op == "get_attr":
            target = str(a.target)
            return f"param@{id(self.gm.get_parameter(target))}" if _is_parameter(self.gm, target) else a.name
        return None

    def call(self, node: Any) -> Call | None:
        op, attrs, inputs, params = self._describe(node)
        if op is None:
            return None
        outs = _metas(node)
        shapes = tuple(s for s in (_shape_of(m) for m in outs) if s is not None)
        if op in _MAYBE_COPY and node.args and shapes:
            op = "copy" if _copies(node.args[0], shapes[0]) else "view"
        path = _module_path(node)
        attrs["module"] = path
        name = path if node.op == "call_module" else f"{path}.{node.name}" if path else node.name
        if name in self.names:
            name = f"{name}.{node.name}"
        self.names.add(name)
        return Call(name=name, op=op, inputs=tuple(inputs), outputs=shapes[:1], attrs=attrs,
                    params=tuple(params), float_out=bool(outs) and _is_float(outs[0]))

    def _describe(self, node: Any) -> tuple[str | None, dict[str, object], list[Any], list[bool]]:
        """``node`` as (op, attributes, input shapes, which inputs are parameters); op None for a node that
        runs no kernel (a getitem, a placeholder, a non-aten call in an aten graph)."""
        if node.op == "call_module":
            return self._describe_module(node)
        packet = None
        if node.op == "call_function":
            target = node.target
            packet = getattr(target, "_overloadpacket", None)
            raw = str(getattr(packet, "__name__", None) or getattr(target, "__name__", None) or target)
            if target in (operator.getitem,) or (self.aten_only and packet is None):
                return None, {}, [], []
        elif node.op == "call_method":
            raw = str(node.target)
        else:
            return None, {}, [], []
        return self._describe_function(node, raw, packet)

    def _describe_module(self, node: Any) -> tuple[str | None, dict[str, object], list[Any], list[bool]]:
        """A ``call_module`` node: its module's op, its weight and bias as parameter inputs, its settings."""
        attrs: dict[str, object] = {}
        mod = self.gm.get_submodule(node.target)
        kind = type(mod).__name__
        op = _MODULES.get(kind)
        if op is None:
            raise _Unsupported(f"unsupported module {kind} at node {node.name!r}")
        inputs: list[Any] = [self._arg_shape(a)[0] for a in node.args]
        params = [False] * len(inputs)
        if op in ("linear", "conv2d", "layer_norm", "rms_norm", "batch_norm"):
            w = getattr(mod, "weight", None)
            b = getattr(mod, "bias", None)
            inputs = inputs[:1] + [tuple(w.shape) if w is not None else None,
                                   tuple(b.shape) if b is not None else None]
            params = [False, True, True]
            attrs["weight_id"] = f"param@{id(w)}" if w is not None else None
        if op == "dropout":
            attrs["p"] = float(getattr(mod, "p", 0.0))
        if op == "embedding":
            inputs, params = [tuple(mod.weight.shape), inputs[0]], [True, False]
            attrs.update(weight_first=True, weight_id=f"param@{id(mod.weight)}")
        if op == "conv2d":
            attrs.update(stride=_first(mod.stride), padding=_padding(mod.padding, mod.kernel_size),
                         groups=int(mod.groups))
        if op in ("max_pool2d", "avg_pool2d"):
            attrs.update(kernel=_first(mod.kernel_size), stride=_first(mod.stride or mod.kernel_size),
                         padding=_first(mod.padding))
        return op, attrs, inputs, params

    def _describe_function(self, node: Any, raw: str,
                           packet: Any) -> tuple[str | None, dict[str, object], list[Any], list[bool]]:
        """A function or method call named ``raw`` (``packet``: its aten overload packet, None for a Python
        function): its op, argument shapes, the parameter tensor it reads, and its settings from the arguments."""
        attrs: dict[str, object] = {}
        name = raw.split(".")[-1]
        op = _ALIASES.get(name, name)
        args = list(node.args)
        kw = dict(node.kwargs)
        flat = _flatten(args) if op in ("cat", "concat", "stack") else args
        shaped = [self._arg_shape(a) for a in flat]
        inputs = [s for s, _ in shaped]
        params = [p for _, p in shaped]
        # which parameter tensor a weight is (a tied LM head reads the embedding's)
        weights = [self._param_id(a) for a in flat]
        attrs["weight_id"] = next((w for w in (weights[1:] if op != "addmm" else weights[2:]) if w), None)
        if op == "embedding":
            attrs["weight_id"] = next((w for w in weights if w), None)
        if op == "conv2d":
            groups = args[8] if name == "convolution" and len(args) > 8 else args[6] if len(args) > 6 else \
                kw.get("groups", 1)
            stride = args[3] if len(args) > 3 else kw.get("stride", 1)
            pad = args[4] if len(args) > 4 else kw.get("padding", 0)
            w = inputs[1] if len(inputs) > 1 else None
            attrs.update(stride=_first(stride), padding=_padding(pad, (w[2],) if w else (1,)), groups=int(groups))
            inputs, params = inputs[:3], params[:3]
        elif op == "sdpa":
            causal = kw.get("is_causal", args[5] if len(args) > 5 and name == "scaled_dot_product_attention"
                            else args[4] if len(args) > 4 and name != "scaled_dot_product_attention" else False)
            attrs["causal"] = bool(causal) if isinstance(causal, bool) else False
            inputs = inputs[:3]
        elif op in ("dropout", "feature_dropout"):
            p = args[1] if len(args) > 1 else kw.get("p", 0.5)
            attrs["p"] = float(p) if isinstance(p, (int, float)) else 0.0
        elif op in ("max_pool2d", "avg_pool2d"):
            k = args[1] if len(args) > 1 else kw.get("kernel_size", 2)
            s = args[2] if len(args) > 2 else kw.get("stride", None)
            p = args[3] if len(args) > 3 else kw.get("padding", 0)
            attrs.update(kernel=_first(k), stride=_first(s) if s not in (None, [], ()) else _first(k),
                         padding=_first(p))
        elif op == "embedding":
            attrs["weight_first"] = packet is not None  # aten.embedding(weight, ids); F.embedding(ids, weight)
        elif op == "layer_norm":
            shape = args[1] if len(args) > 1 else kw.get("normalized_shape")
            if isinstance(shape, (list, tuple)) and shape:
                total = 1
                for d in shape:
                    total *= int(d)
                attrs["normalized_numel"] = total
            inputs = [inputs[0], *([inputs[2]] if len(inputs) > 2 else []), *([inputs[3]] if len(inputs) > 3
                                                                              else [])]
            if len(args) > 2:
                inputs = [self._arg_shape(args[0])[0], self._arg_shape(args[2])[0],
                          self._arg_shape(args[3])[0] if len(args) > 3 else None]
        return op, attrs, inputs, params


_MAYBE_COPY = ("reshape", "flatten", "contiguous")  # a view when the strides allow one, else a copy kernel


def _copies(arg: Any, out_shape: tuple[int, ...]) -> bool:
    """Whether reshaping ``arg`` (an fx node) to ``out_shape`` copies: its strides admit no view (a
    transposed or expanded tensor: GPT-2's merged heads, Llama's repeated K/V heads)."""
    import torch
    import torch.fx as fx

    metas = _metas(arg) if isinstance(arg, fx.Node) else []
    if not metas:
        return False
    shape = _shape_of(metas[0])
    stride = getattr(metas[0], "stride", None)
    stride = stride() if callable(stride) else stride
    if shape is None or stride is None:
        return False
    try:
        t = torch.empty_strided(shape, tuple(int(x) for x in stride), device="meta")
        t.view(out_shape)
    except (RuntimeError, TypeError, ValueError):
        return True
    return False


def _is_parameter(gm: Any, target: str) -> bool:
    try:
        gm.get_parameter(target)
    except AttributeError:
        return False
    return True


def _module_path(node: Any) -> str:
    """The dotted path of the innermost module that issued ``node`` (``transformer.h.0.attn``), or ``""``."""
    if node.op == "call_module":
        return str(node.target)
    stack = node.meta.get("nn_module_stack")
    if not stack:
        return ""
    path = list(stack.values())[-1][0]
    return str(path).removeprefix("L['self'].").removeprefix("L__self__.")


def _padding(pad: Any, kernel: Any) -> int:
    if isinstance(pad, str):
        return (_first(kernel) - 1) // 2 if pad == "same" else 0
    return _first(pad)


class _Unsupported(Exception):
    pass


def _emit(gm: Any, params: set[str] | None, dtype: DType, model_id: str, batch: int, seq: int) -> Workload:
    col = _Collector(gm, params or set(), aten_only=params is not None)
    em = Emitter(dtype)
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "output", "get_attr"):
            continue
        try:
            call = col.call(node)
        except _Unsupported as exc:
            from perfcast.errors import UnsupportedError

            raise UnsupportedError(f"{exc}; perfcast captures torch.nn layers (Linear, Conv2d, norms, "
                                   "activations, pooling, Embedding) and the functions they call") from None
        if call is not None:
            em.emit(call)
    return Workload(model_id=model_id, mode=Mode.INFERENCE, batch_size=batch, seq_len=seq, dtype=dtype,
                    ops=tuple(em.graph.ops))


def _split_inputs(example: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    if isinstance(example, dict):
        return (), dict(example)
    if isinstance(example, (list, tuple)):
        return tuple(example), {}
    return (example,), {}


def _batch_seq(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[int, int]:
    for t in [*args, *kwargs.values()]:
        shape = getattr(t, "shape", None)
        if shape is not None and len(shape) == 4 and getattr(t, "is_floating_point", lambda: False)():
            return int(shape[0]), int(shape[-1])  # images (NCHW): the side, as catalog CNNs report seq_len
        if shape is not None and len(shape) >= 1:
            return int(shape[0]), int(shape[1]) if len(shape) >= 2 else 1
    return 1, 1


def _dtype_of(module: Any) -> DType:
    for p in module.parameters():
        if p.is_floating_point():
            return _DTYPES.get(str(p.dtype).replace("torch.", ""), DType.FP32)
    return DType.FP32


def _fx(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, set[str] | None]:
    import torch
    import torch.fx as fx
    from torch.fx.passes.shape_prop import ShapeProp

    name = type(module).__name__
    try:
        gm = fx.symbolic_trace(module)
    except Exception as exc:  # noqa: BLE001 - any tracing failure becomes one line
        raise _TraceFailed(f"torch.fx cannot trace {name}: {_one_line(exc)}{_user_frame(exc)}") from exc
    positional = list(args)
    values = []
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        if node.target in kwargs:
            values.append(kwargs[node.target])
        elif positional:
            values.append(positional.pop(0))
        else:
            values.append(node.args[0] if node.args else None)
    try:
        with torch.no_grad():
            ShapeProp(gm).propagate(*values)
    except Exception as exc:  # noqa: BLE001
        raise _TraceFailed(f"torch.fx traced {name} but running it on the example inputs failed: "
                           f"{_one_line(exc)}{_user_frame(exc)}") from exc
    return gm, None  # parameters are get_attr nodes or module attributes


def _export(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, set[str] | None]:
    import torch

    quiet = logging.getLogger("torch")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)  # a failing export logs the partial graph: the error line says enough
    try:
        sink = io.StringIO()
        with torch.no_grad(), warnings.catch_warnings(), contextlib.redirect_stderr(sink), \
                contextlib.redirect_stdout(sink):
            warnings.simplefilter("ignore")
            ep = torch.export.export(module, args, kwargs)
    except Exception as exc:  # noqa: BLE001
        raise ConfigError(f"torch.export cannot export {type(module).__name__}: {_one_line(exc)}"
                          f"{_user_frame(exc)}") from None
    finally:
        quiet.setLevel(level)
    sig = ep.graph_signature
    params = set(sig.inputs_to_parameters) | set(sig.inputs_to_buffers)
    return ep.graph_module, params


class _TraceFailed(Exception):
    pass


def capture_module(module: Any, example_inputs: Any, *, method: str = "auto", model_id: str | None = None,
                   merge: bool = True, dtype: DType | None = None) -> Workload:
    """The inference forward of ``module`` on ``example_inputs`` (a tensor, a tuple of positional inputs or a
    dict of keyword inputs) as a workload.

    ``method``: ``fx`` (torch.fx symbolic trace), ``export`` (torch.export) or ``auto`` (fx, then export).
    ``merge``: identical consecutive layers become one set of ops with ``count`` = layers
    (:func:`perfcast.capture.merge.merge_repeated`). ``dtype``: price the ops in this format instead of
    the module parameters' dtype.
    """
    if method not in METHODS:
        raise ConfigError(f"unknown capture method {method!r}; use one of {', '.join(METHODS)}")
    args, kwargs = _split_inputs(example_inputs)
    module = module.eval()
    mid = model_id or type(module).__name__.lower()
    batch, seq = _batch_seq(args, kwargs)
    dtype = dtype or _dtype_of(module)
    if method in ("fx", "auto"):
        try:
            gm, params = _fx(module, args, kwargs)
        except _TraceFailed as exc:
            if method == "fx":
                raise ConfigError(f"{exc}; try --method export (torch.export)") from None
            try:
                gm, params = _export(module, args, kwargs)
            except PerfcastError as exc2:
                raise ConfigError(f"{exc}; and {exc2}") from None
    else:
        gm, params = _export(module, args, kwargs)
    w = _emit(gm, params, dtype, mid, batch, seq)
    return merge_repeated(w) if merge else w

