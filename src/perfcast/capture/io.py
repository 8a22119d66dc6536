"""Captured workloads as versioned JSON files, and the user's model factory (``file.py:function``)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

from perfcast.dtypes import DType
from perfcast.errors import ConfigError, DataError
from perfcast.jsonio import read_json
from perfcast.workload.types import Mode, Op, OpKind, Phase, Workload

__all__ = ["WORKLOAD_SCHEMA_VERSION", "load_factory", "load_workload", "save_workload", "workload_from_dict",
           "workload_to_dict"]

WORKLOAD_SCHEMA_VERSION = 1


def workload_to_dict(w: Workload, *, source: str = "") -> dict[str, Any]:
    """A JSON-ready dict of ``w`` (every op with its shape, FLOPs and bytes)."""
    ops = [{"name": o.name, "op": o.op, "kind": o.kind.value, "dims": list(o.dims), "dtype": o.dtype.value,
            "flops": o.flops, "bytes_read": o.bytes_read, "bytes_written": o.bytes_written, "count": o.count,
            "phase": o.phase.value, "group": o.group, "chain": o.chain, "fused_bytes": o.fused_bytes,
            "weight_bytes": o.weight_bytes, "tp_split": o.tp_split, "params": o.params,
            "meta": [[k, v] for k, v in o.meta]} for o in w.ops]
    return {"schema_version": WORKLOAD_SCHEMA_VERSION, "produced_by": "perfcast capture", "source": source,
            "model_id": w.model_id, "mode": w.mode.value, "batch_size": w.batch_size, "seq_len": w.seq_len,
            "dtype": w.dtype.value, "flops": w.flops, "bytes": w.bytes, "ops": ops}


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{value!r} is not text")
    return value


def _scalar(value: Any) -> Any:
    if value is not None and not isinstance(value, (str, int, float)):
        raise TypeError(f"{value!r} is not a number or text")
    return value


# the shape each kind of op carries (what the kernel models read; perfcast.workload.graph builds them so):
# GEMM (batch, m, k, n); VECTOR (rows, cols); ATTENTION (batch, heads, kv_heads, q_len, keys, head_dim,
# causal); CONV (batch, in_ch, out_ch, kernel, in_hw, stride, padding, groups); POOL (batch, channels, in_hw,
# kernel, stride); EMBEDDING (tokens, dim, vocab);
# SSM_SCAN (batch, q_len, heads, head_dim, state, groups, chunk); COMM and HOST at least one size
_DIMS = {OpKind.GEMM: 4, OpKind.VECTOR: 2, OpKind.ATTENTION: 7, OpKind.CONV: 8, OpKind.POOL: 5, OpKind.EMBEDDING: 3,
         OpKind.SSM_SCAN: 7}


def _dims(kind: OpKind, value: Any) -> tuple[int, ...]:
    dims = tuple(int(d) for d in value)
    want = _DIMS.get(kind)
    if (len(dims) != want) if want is not None else not dims:
        raise ValueError(f"a {kind.value} op has {len(dims)} dims; it carries "
                         f"{want if want is not None else 'at least 1'}")
    if any(d < 0 for d in dims):
        raise ValueError(f"dims {list(dims)} has a negative size")
    return dims


def workload_from_dict(data: dict[str, Any], *, where: str = "workload") -> Workload:
    """The workload of a :func:`workload_to_dict` dict (DataError naming what is wrong)."""
    if data.get("schema_version") != WORKLOAD_SCHEMA_VERSION:
        raise DataError(f"{where}: schema_version {data.get('schema_version')!r} is not "
                        f"{WORKLOAD_SCHEMA_VERSION}; capture the model again with `perfcast capture`")
    try:
        ops = tuple(Op(name=_text(o["name"]), op=_text(o["op"]), kind=OpKind(o["kind"]),
                       dims=_dims(OpKind(o["kind"]), o["dims"]), dtype=DType(o["dtype"]), flops=float(o["flops"]),
                       bytes_read=float(o["bytes_read"]), bytes_written=float(o["bytes_written"]),
                       count=int(o["count"]), phase=Phase(o["phase"]), group=str(o["group"]),
                       chain=None if o["chain"] is None else _text(o["chain"]),
                       fused_bytes=None if o["fused_bytes"] is None else float(o["fused_bytes"]),
                       weight_bytes=float(o["weight_bytes"]), tp_split=str(o["tp_split"]), params=int(o["params"]),
                       meta=tuple((_text(k), _scalar(v)) for k, v in o["meta"])) for o in data["ops"])
        return Workload(model_id=str(data["model_id"]), mode=Mode(data["mode"]), batch_size=int(data["batch_size"]),
                        seq_len=int(data["seq_len"]), dtype=DType(data["dtype"]), ops=ops)
    except (KeyError, TypeError, ValueError) as exc:
        raise DataError(f"{where}: not a captured workload ({type(exc).__name__}: {exc})") from None


def save_workload(w: Workload, path: Path, *, source: str = "") -> Path:
    """Write ``w`` as JSON to ``path`` (the caller checks overwrites)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(workload_to_dict(w, source=source), indent=1) + "\n")
    return path


def load_workload(path: str | Path) -> Workload:
    """Read a workload written by ``perfcast capture``."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"workload file {p} does not exist; write one with `perfcast capture ... --out {p}`")
    data = read_json(p, what="captured workload (JSON from `perfcast capture`)", error=DataError)
    if not isinstance(data, dict):
        raise DataError(f"{p} is not a captured workload (a JSON object)")
    return workload_from_dict(data, where=str(p))


def load_factory(spec: str) -> Any:
    """The function named by ``path/to/file.py:function`` (the file is run as a module)."""
    path_text, sep, func = spec.rpartition(":")
    if not sep or not path_text.endswith(".py") or not func:
        raise ConfigError(f"{spec!r} is not FILE.py:FUNCTION; give a Python file and the function that returns "
                          "the module (or (module, example_inputs)), e.g. model.py:build")
    path = Path(path_text)
    if not path.is_file():
        raise ConfigError(f"model file {path} does not exist")
    name = f"perfcast_user_model_{abs(hash(str(path.resolve())))}"
    mod_spec = importlib.util.spec_from_file_location(name, path)
    if mod_spec is None or mod_spec.loader is None:
        raise ConfigError(f"cannot import {path} as a Python module")
    module = importlib.util.module_from_spec(mod_spec)
    sys.modules[name] = module
    try:
        mod_spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - the user's file failing to import is one line
        raise ConfigError(f"importing {path} failed: {type(exc).__name__}: {exc}") from None
    fn = getattr(module, func, None)
    if not callable(fn):
        known = sorted(k for k, v in vars(module).items() if callable(v) and not k.startswith("_"))
        raise ConfigError(f"{path} has no function {func!r}; callables there: {', '.join(known[:10]) or 'none'}")
    return fn
