"""Small synthetic PyTorch execution traces written by the tests, and the recorded ones in ``data/``.

:class:`EtBuilder` appends nodes as ``ExecutionTraceObserver`` writes them (schema 1.1.1: ``inputs``/``outputs`` as
``{values, shapes, types}``, ``attrs`` as a list); ``flat=True`` writes the schema 1.0.1 layout (flat
``inputs``/``input_shapes``/``input_types`` lists, fields at the top level, ``parent`` for the parent id).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

DATA = Path(__file__).with_name("data")
MLP_ET = DATA / "mlp_et.json.gz"  # make_execution_traces.py: 2-layer MLP, batch 64, 256 -> 512 -> 10, 3 steps
MLP_KINETO = DATA / "mlp_kineto.json.gz"  # the Kineto trace of the same run
TRANSFORMER_ET = DATA / "transformer_et.json.gz"  # one encoder block, 4 x 64 tokens, width 128, 3 steps

Arg = tuple[list[int] | list[list[int]] | None, str, Any]  # shape, type, value


def tensor(*shape: int, dtype: str = "float", device: str = "cuda:0") -> Arg:
    """A tensor argument (its value: id, storage id, offset, elements, element size, device)."""
    n = 1
    for s in shape:
        n *= s
    return list(shape), f"Tensor({dtype})", [0, 0, 0, n, 4, device]


def tensor_list(*shapes: tuple[int, ...], dtype: str = "float") -> Arg:
    """A list-of-tensors argument (``GenericList[Tensor(float),...]``), as c10d collectives take."""
    args = [tensor(*s, dtype=dtype) for s in shapes]
    return [a[0] for a in args], "GenericList[" + ",".join(a[1] for a in args) + "]", [a[2] for a in args]


def scalar(value: Any, typ: str = "Int") -> Arg:
    """A non-tensor argument."""
    return [], typ, value


class EtBuilder:
    """Build the nodes of one execution trace; node ids grow in call order, as the observer assigns them."""

    def __init__(self, *, flat: bool = False) -> None:
        self.flat = flat
        self.next_id = 3
        self.nodes: list[dict[str, Any]] = []
        self.process = self._raw(1, "[pytorch|profiler|execution_trace|process]", 1, [], [], "", 0)
        self.thread = self._raw(2, "[pytorch|profiler|execution_trace|thread]", 1, [], [], "", 1)

    def _raw(self, ident: int, name: str, parent: int, inputs: list[Arg], outputs: list[Arg], schema: str,
             tid: int) -> int:
        fields = {"rf_id": ident, "fw_parent": 0, "seq_id": -1, "scope": 0, "tid": tid, "fw_tid": 0,
                  "op_schema": schema}
        node: dict[str, Any] = {"id": ident, "name": name}
        if self.flat:
            node.update(fields, parent=parent, inputs=[a[2] for a in inputs], input_shapes=[a[0] for a in inputs],
                        input_types=[a[1] for a in inputs], outputs=[a[2] for a in outputs],
                        output_shapes=[a[0] for a in outputs], output_types=[a[1] for a in outputs])
        else:
            node.update(ctrl_deps=parent,
                        inputs={"values": [a[2] for a in inputs], "shapes": [a[0] for a in inputs],
                                "types": [a[1] for a in inputs], "strides": []},
                        outputs={"values": [a[2] for a in outputs], "shapes": [a[0] for a in outputs],
                                 "types": [a[1] for a in outputs], "strides": []},
                        attrs=[{"name": k, "type": "uint64", "value": v} for k, v in fields.items()])
        self.nodes.append(node)
        return ident

    def op(self, name: str, parent: int | None = None, inputs: tuple[Arg, ...] = (), outputs: tuple[Arg, ...] = (),
           *, operator: bool = True, tid: int = 1) -> int:
        """A node under ``parent`` (the thread root when None); ``operator``: it has an op_schema (an ATen op)."""
        ident = self.next_id
        self.next_id += 1
        schema = f"{name}(Tensor self) -> Tensor" if operator else ""
        return self._raw(ident, name, self.thread if parent is None else parent, list(inputs), list(outputs),
                         schema, tid)

    def annotation(self, name: str, parent: int | None = None) -> int:
        """A ``record_function`` annotation (no op_schema)."""
        return self.op(name, parent, operator=False)

    def linear(self, parent: int | None, tokens: int, n_in: int, n_out: int) -> int:
        """``aten::linear`` with its ``aten::t`` and ``aten::addmm`` children, as eager PyTorch records it."""
        lin = self.op("aten::linear", parent, (tensor(tokens, n_in), tensor(n_out, n_in), tensor(n_out)),
                      (tensor(tokens, n_out),))
        self.op("aten::t", lin, (tensor(n_out, n_in),), (tensor(n_in, n_out),))
        self.op("aten::addmm", lin, (tensor(n_out), tensor(tokens, n_in), tensor(n_in, n_out), scalar(1),
                                     scalar(1)), (tensor(tokens, n_out),))
        return lin

    def data(self) -> dict[str, Any]:
        """The trace's JSON object."""
        return {"schema": "1.0.1" if self.flat else "1.1.1-chakra.0.0.4", "pid": 1, "time": "", "start_ts": 0,
                "finish_ts": 1, "nodes": self.nodes}

    def write(self, path: Path) -> Path:
        """Write the trace to ``path`` (gzip when it ends in ``.gz``)."""
        text = json.dumps(self.data())
        if path.suffix == ".gz":
            with gzip.open(path, "wt", encoding="utf-8") as fh:
                fh.write(text)
        else:
            path.write_text(text, encoding="utf-8")
        return path
