"""Capture an ONNX file into the workload IR: parse with onnx, infer shapes, map every node.

Input shapes come from the file; a dynamic dimension (``batch``, ``sequence``)
needs a value from ``input_shapes`` (``--input-shape name=1x128``). Weights are
the graph's initializers: a ``MatMul``/``Gemm`` by an initializer is a linear
layer, a ``Gather`` from a float initializer an embedding. onnx is imported here only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from perfcast.capture.emit import Call, Emitter
from perfcast.capture.merge import merge_repeated
from perfcast.dtypes import DType
from perfcast.errors import ConfigError
from perfcast.workload.types import Mode, Workload

__all__ = ["capture_onnx", "import_onnx"]

_FLOAT_TYPES = {1: DType.FP32, 10: DType.FP16, 16: DType.BF16, 11: DType.FP64}
_OPS = {"Gemm": "linear", "MatMul": "matmul", "Conv": "conv2d", "Softmax": "softmax",
        "LayerNormalization": "layer_norm", "BatchNormalization": "batch_norm", "MaxPool": "max_pool2d",
        "AveragePool": "avg_pool2d", "GlobalAveragePool": "adaptive_avg_pool2d", "Gather": "embedding",
        "SimplifiedLayerNormalization": "rms_norm", "RMSNormalization": "rms_norm"}


def import_onnx() -> Any:
    """onnx, or a one-line error saying how to install it."""
    try:
        import onnx
    except ImportError:
        raise ConfigError("capturing ONNX files needs onnx; install it with pip install 'perfcast[torch]'") from None
    return onnx


def _dims(tensor_type: Any) -> list[int | str]:
    out: list[int | str] = []
    for d in tensor_type.shape.dim:
        if d.HasField("dim_value"):
            out.append(int(d.dim_value))
        else:
            out.append(d.dim_param or "?")
    return out


def _attrs(node: Any) -> dict[str, Any]:
    import onnx

    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def capture_onnx(path: str | Path, *, input_shapes: dict[str, tuple[int, ...]] | None = None,
                 model_id: str | None = None, merge: bool = True) -> Workload:
    """The inference forward of the ONNX model at ``path`` as a workload (identical consecutive layers merged
    into ops with ``count`` = layers unless ``merge`` is false; torch.onnx names nodes by module path)."""
    onnx = import_onnx()
    p = Path(path)
    model = _load(onnx, p)
    init_names = {t.name for t in model.graph.initializer}
    graph_inputs = [i for i in model.graph.input if i.name not in init_names]
    _set_input_shapes(graph_inputs, dict(input_shapes or {}), p)
    try:
        model = onnx.shape_inference.infer_shapes(model)
    except Exception as exc:  # noqa: BLE001
        raise ConfigError(f"{p}: ONNX shape inference failed ({str(exc).splitlines()[0]})") from None
    g = model.graph
    shapes, elem = _tensor_types(g)
    dtype = next((_FLOAT_TYPES[t.data_type] for t in g.initializer if t.data_type in _FLOAT_TYPES), DType.FP32)
    em = Emitter(dtype)
    for i, node in enumerate(g.node):
        call = _call(node, i, shapes, elem, init_names)
        if call is not None:
            em.emit(call)
    first = shapes.get(graph_inputs[0].name, (1, 1)) if graph_inputs else (1, 1)
    captured = Workload(model_id=model_id or p.stem, mode=Mode.INFERENCE, batch_size=int(first[0]) if first else 1,
                        seq_len=int(first[1]) if len(first) > 1 else 1, dtype=dtype, ops=tuple(em.graph.ops))
    return merge_repeated(captured) if merge else captured


def _load(onnx: Any, p: Path) -> Any:
    """The ONNX model at ``p``, or a one-line ConfigError (missing, unparsable, no nodes)."""
    if not p.is_file():
        raise ConfigError(f"ONNX file {p} does not exist")
    try:
        model = onnx.load(str(p))
    except Exception as exc:  # noqa: BLE001 - a broken file is one line
        raise ConfigError(f"{p} does not parse as an ONNX model ({type(exc).__name__}: "
                          f"{str(exc).splitlines()[0] if str(exc) else 'invalid protobuf'})") from None
    if not model.graph.node:
        raise ConfigError(f"{p} does not parse as an ONNX model (no graph nodes)")
    return model


def _set_input_shapes(graph_inputs: list[Any], overrides: dict[str, tuple[int, ...]], p: Path) -> None:
    """Give every graph input a static shape: ``--input-shape``'s where given, else its own (refused when
    dynamic, with an example of the option that fixes it)."""
    unknown_overrides = set(overrides) - {i.name for i in graph_inputs}
    if unknown_overrides:
        raise ConfigError(f"--input-shape names {', '.join(sorted(unknown_overrides))}, not inputs of {p.name}; "
                          f"its inputs: {', '.join(i.name for i in graph_inputs)}")
    for inp in graph_inputs:
        dims = _dims(inp.type.tensor_type)
        if inp.name in overrides:
            shape = overrides[inp.name]
            if len(shape) != len(dims):
                raise ConfigError(f"--input-shape {inp.name}: {len(shape)} dims given, the input has {len(dims)}")
        elif any(isinstance(d, str) for d in dims):
            example = "x".join(str(d) if isinstance(d, int) else "1" for d in dims)
            raise ConfigError(f"input {inp.name!r} of {p.name} has dynamic dims {dims}; give its shape with "
                              f"--input-shape {inp.name}={example}")
        else:
            shape = tuple(int(d) for d in dims)
        del inp.type.tensor_type.shape.dim[:]
        for d in shape:
            inp.type.tensor_type.shape.dim.add().dim_value = int(d)


def _tensor_types(g: Any) -> tuple[dict[str, tuple[int, ...]], dict[str, int]]:
    """Every tensor's static shape (where shape inference found one) and ONNX element type, by name."""
    shapes: dict[str, tuple[int, ...]] = {}
    elem: dict[str, int] = {}
    for vi in [*g.input, *g.value_info, *g.output]:
        tt = vi.type.tensor_type
        dims = _dims(tt)
        elem[vi.name] = tt.elem_type
        if all(isinstance(d, int) for d in dims):
            shapes[vi.name] = tuple(int(d) for d in dims)  # type: ignore[arg-type]
    for t in g.initializer:
        shapes[t.name] = tuple(int(d) for d in t.dims)
        elem[t.name] = t.data_type
    return shapes, elem


def _call(node: Any, i: int, shapes: dict[str, tuple[int, ...]], elem: dict[str, int],
          init_names: set[str]) -> Call | None:
    """Node ``i`` as the call the emitter prices (None: a node that is a view or lacks the shapes to price)."""
    name = node.name or f"{node.op_type.lower()}_{i}"
    at = _attrs(node)
    op = _OPS.get(node.op_type, node.op_type.lower())
    ins: list[tuple[int, ...] | None] = [shapes.get(x) if x else None for x in node.input]
    params = [x in init_names for x in node.input]
    outs = tuple(shapes[o] for o in node.output[:1] if o in shapes)
    float_out = bool(node.output) and elem.get(node.output[0], 1) in _FLOAT_TYPES
    attrs: dict[str, object] = {"module": _module_path(name)}
    weight = next((x for x, is_init in zip(node.input, params, strict=True) if is_init), None)
    if weight is not None:
        attrs["weight_id"] = weight
    if node.op_type == "Gemm":
        a, b = ins[0], ins[1]
        if a is None or b is None:
            return None
        if at.get("transA", 0):
            a = (a[1], a[0])
        w = b if at.get("transB", 0) else (b[1], b[0])  # as (out, in)
        if not params[1]:
            op, ins = "matmul", [a, (w[1], w[0])]
        else:
            ins = [a, w, ins[2] if len(ins) > 2 else None]
    elif node.op_type == "MatMul" and len(ins) > 1 and ins[1] is not None and params[1] and len(ins[1]) == 2:
        b = ins[1]
        op, ins = "linear", [ins[0], (b[1], b[0]), None]
    elif node.op_type == "Conv":
        attrs.update(stride=(at.get("strides") or [1])[0], padding=(at.get("pads") or [0])[0],
                     groups=at.get("group", 1))
    elif node.op_type in ("MaxPool", "AveragePool"):
        kern = (at.get("kernel_shape") or [2])[0]
        attrs.update(kernel=kern, stride=(at.get("strides") or [kern])[0], padding=(at.get("pads") or [0])[0])
    elif node.op_type == "Gather":
        if not (params[0] and elem.get(node.input[0], 0) in _FLOAT_TYPES):
            return None  # indexing a shape or an activation: a view
        attrs["weight_first"] = True
    elif node.op_type == "LayerNormalization":
        x = ins[0]
        axis = int(at.get("axis", -1))
        if x is not None:
            attrs["normalized_numel"] = int(_prod(x[axis:]))
    return Call(name=name, op=op, inputs=tuple(ins), outputs=outs, attrs=attrs, params=tuple(params),
                float_out=float_out)


def _module_path(node_name: str) -> str:
    """The module path in a node name as torch.onnx writes it (``/transformer/h.0/attn/MatMul`` ->
    ``transformer.h.0.attn``), or ``""``."""
    if not node_name.startswith("/"):
        return ""
    return ".".join(p for p in node_name.strip("/").split("/")[:-1] if p)


def _prod(xs: tuple[int, ...]) -> int:
    out = 1
    for x in xs:
        out *= int(x)
    return out
