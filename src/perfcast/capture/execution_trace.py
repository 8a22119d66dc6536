"""Read a PyTorch execution trace (the host trace Chakra converts): its op tree with shapes, no durations.

``torch.profiler.ExecutionTraceObserver`` writes a JSON object ``{"schema": "1.1.1-chakra.0.0.4", "nodes":
[...]}``: one node per host operator or ``record_function`` annotation, each with its ``id`` (in start order),
its parent (``ctrl_deps``; ``parent`` in older schemas) and its inputs and outputs (values, shapes and types: as
``inputs: {values, shapes, types}`` since schema 1.0.2, as flat ``inputs``/``input_shapes``/``input_types``
lists before). It records shapes and data dependencies but no durations. This module reads the JSON directly
(stdlib json/gzip, never pickle); Chakra's own protobuf ``.et`` files are refused. A tensor argument's size is its
recorded shape times its element type's size; :mod:`perfcast.capture.execution_ops` turns the tree into
workload ops, step by step.
"""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfcast.capture.aten import ELEMENT_BYTES, numel
from perfcast.errors import ConfigError
from perfcast.jsonio import json_int as _int

__all__ = ["EtArg", "EtNode", "ExecutionTrace", "is_execution_trace", "load_execution_trace",
           "parse_execution_trace", "read_trace_json"]

Shape = tuple[int, ...]


@dataclass(frozen=True, slots=True)
class EtArg:
    """One input or output of a node: its shape (``()`` for a scalar, list or non-tensor), element type
    (``float``, ``c10::BFloat16``...; ``""`` for a non-tensor), the bytes of the tensor(s) it holds (a tensor
    list: all of them) and the recorded value."""

    shape: Shape
    dtype: str
    bytes: float
    value: Any = None

    @property
    def is_tensor(self) -> bool:
        """Whether the argument is one tensor (not a list, scalar or ``None``)."""
        return bool(self.dtype)


@dataclass(frozen=True, slots=True)
class EtNode:
    """One node of the trace. ``operator``: a dispatcher operator (it has an ``op_schema``) rather than an
    annotation or autograd node."""

    id: int
    name: str
    parent: int
    tid: int
    rf_id: int | None
    operator: bool
    inputs: tuple[EtArg, ...]
    outputs: tuple[EtArg, ...]

    @property
    def short(self) -> str:
        """The name without its namespace (``aten::add_`` -> ``add_``)."""
        return self.name.rsplit("::", 1)[-1].strip()


@dataclass(frozen=True)
class ExecutionTrace:
    """A read execution trace: its nodes in id (start) order and each node's children."""

    path: str
    schema: str
    nodes: tuple[EtNode, ...]
    children: dict[int, tuple[int, ...]] = field(default_factory=dict)

    by_id: dict[int, EtNode] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_id", {n.id: n for n in self.nodes})

    def node(self, node_id: int) -> EtNode:
        """The node of id ``node_id``."""
        return self.by_id[node_id]

def read_trace_json(path: str | Path) -> Any:
    """The JSON object of a trace file (plain or gzip). A missing file, a Chakra protobuf trace or a file that is
    not JSON is a one-line ConfigError."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"trace file {p} does not exist")
    try:
        with p.open("rb") as fh:
            head = fh.read(64)
    except OSError as exc:
        raise ConfigError(f"{p}: not a readable JSON trace ({type(exc).__name__}: {exc})") from None
    gz = head[:2] == b"\x1f\x8b"
    if p.suffix == ".et" or (not gz and _binary(head)):
        raise ConfigError(f"{p}: binary, not JSON: a Chakra protobuf execution trace (.et) is not read; give the "
                          "PyTorch execution trace JSON (ExecutionTraceObserver) or a Kineto trace (.json or .json.gz)")
    try:
        opener = gzip.open if gz else open
        with opener(p, "rt", encoding="utf-8") as fh:  # type: ignore[operator]
            return json.load(fh)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, EOFError) as exc:
        raise ConfigError(f"{p}: not a readable JSON trace ({type(exc).__name__}: {exc})") from None


def _binary(head: bytes) -> bool:
    """Bytes that are not text (control characters besides whitespace): a protobuf, not JSON."""
    return any(b < 9 or 13 < b < 32 for b in head)


def is_execution_trace(data: Any) -> bool:
    """Whether ``data`` (a parsed JSON value) is a PyTorch execution trace: top-level ``nodes`` and ``schema``."""
    return isinstance(data, dict) and isinstance(data.get("nodes"), list) and "schema" in data


def load_execution_trace(path: str | Path) -> ExecutionTrace:
    """Read the execution trace at ``path`` (``.json`` or ``.json.gz``)."""
    return parse_execution_trace(read_trace_json(path), str(path))


def _tensor_type(t: Any) -> str:
    """``Tensor(float)`` -> ``float``; ``""`` for anything else (lists, scalars, an undefined tensor)."""
    if isinstance(t, str) and t.startswith("Tensor(") and t.endswith(")"):
        inner = t[len("Tensor("):-1]
        return "" if inner.startswith("nullptr") else inner
    return ""


def _shape(s: Any) -> Shape:
    if isinstance(s, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in s):
        return tuple(s)
    return ()


def _list_bytes(shape: Any, typ: Any) -> float:
    """Bytes of the tensors of a ``GenericList[Tensor(...), ...]`` argument (0 for other lists)."""
    if not (isinstance(typ, str) and typ.startswith("GenericList[") and isinstance(shape, list)):
        return 0.0
    inner = [_tensor_type(t) for t in re.findall(r"Tensor\([^()]*(?:\([^()]*\))?[^()]*\)", typ)]
    total = 0.0
    for s, t in zip(shape, inner, strict=False):
        if t and isinstance(s, list):
            total += numel(_shape(s)) * ELEMENT_BYTES.get(t, 4)
    return total


def _args(values: Any, shapes: Any, types: Any) -> tuple[EtArg, ...]:
    shapes = shapes if isinstance(shapes, list) else []
    types = types if isinstance(types, list) else []
    values = values if isinstance(values, list) else []
    out: list[EtArg] = []
    for i, typ in enumerate(types):
        s = shapes[i] if i < len(shapes) else []
        v = values[i] if i < len(values) else None
        dt = _tensor_type(typ)
        if dt:
            shape = _shape(s)
            out.append(EtArg(shape, dt, float(numel(shape) * ELEMENT_BYTES.get(dt, 4)) if shape or s == [] else 0.0,
                             v))
        else:
            out.append(EtArg((), "", _list_bytes(s, typ), v))
    return tuple(out)


def _node(raw: dict[str, Any]) -> EtNode | None:
    ident, name = _int(raw.get("id")), raw.get("name")
    if ident is None or not isinstance(name, str):
        return None
    attrs: dict[str, Any] = {}
    if isinstance(raw.get("attrs"), list):  # schema >= 1.0.2: [{"name", "type", "value"}]
        attrs = {a["name"]: a.get("value") for a in raw["attrs"] if isinstance(a, dict) and "name" in a}
    for key in ("rf_id", "tid", "op_schema"):  # older schemas: top-level fields
        if key not in attrs and key in raw:
            attrs[key] = raw[key]
    parent = _int(raw.get("ctrl_deps", raw.get("parent")))
    if isinstance(raw.get("inputs"), dict):
        ins = raw["inputs"]
        outs: dict[str, Any] = raw["outputs"] if isinstance(raw.get("outputs"), dict) else {}
        inputs = _args(ins.get("values"), ins.get("shapes"), ins.get("types"))
        outputs = _args(outs.get("values"), outs.get("shapes"), outs.get("types"))
    else:  # schema 1.0.1 and before: flat lists
        inputs = _args(raw.get("inputs"), raw.get("input_shapes"), raw.get("input_types"))
        outputs = _args(raw.get("outputs"), raw.get("output_shapes"), raw.get("output_types"))
    schema = attrs.get("op_schema")
    if isinstance(schema, str) and "op_schema" in attrs:
        operator = bool(schema)
    else:  # no op_schema recorded: a namespaced name that is not an autograd node
        operator = bool(re.match(r"^\w+::\w+$", name)) and not name.startswith(("autograd::", "torch::"))
    return EtNode(ident, name, parent if parent is not None else -1, _int(attrs.get("tid")) or 0,
                  _int(attrs.get("rf_id")), operator, inputs, outputs)


def parse_execution_trace(data: Any, path: str = "<trace>") -> ExecutionTrace:
    """The reader's view of a parsed execution trace (``data``: the JSON object). Not one -> ConfigError."""
    if not is_execution_trace(data):
        raise ConfigError(f"{path}: not a PyTorch execution trace: no top-level 'nodes' list and 'schema'")
    nodes = sorted((n for n in (_node(r) for r in data["nodes"] if isinstance(r, dict)) if n is not None),
                   key=lambda n: n.id)
    if not nodes:
        raise ConfigError(f"{path}: a PyTorch execution trace without nodes")
    ids = {n.id for n in nodes}
    children: dict[int, list[int]] = {}
    for n in nodes:
        if n.parent in ids and n.parent != n.id:
            children.setdefault(n.parent, []).append(n.id)
    return ExecutionTrace(path=path, schema=str(data.get("schema")), nodes=tuple(nodes),
                          children={k: tuple(v) for k, v in children.items()})
