"""Read a PyTorch profiler (Kineto) Chrome trace: plain JSON or gzip, with the stdlib only (never pickle).

What is kept (times in seconds from the trace's first event, as floats; Kineto writes microseconds):

- host runtime calls (``cuda_runtime`` / ``cuda_driver``: ``cudaLaunchKernel``, ``cudaMemcpyAsync``,
  ``cudaStreamSynchronize``, ``hipLaunchKernel``...) with their thread and ``correlation`` id;
- GPU work (``kernel``, ``gpu_memcpy``, ``gpu_memset``) with device, stream and ``correlation`` id; a launch and
  its GPU op share the correlation id (the ``ac2g`` flow events carry the same link and are used where an op
  has no ``correlation`` arg);
- CPU operators (``cpu_op``) and user annotations with their input shapes and types where the profiler
  recorded them (``Input Dims`` / ``Input type``);
- ``ProfilerStep#N`` annotations of the host (their ``dur`` is the measured step time);
- ``cuda_sync`` events (newer Kineto: which stream a synchronization waited for);
- ``deviceProperties`` (the GPU's name) and ``distributedInfo`` (rank, world size).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfcast.capture.execution_trace import read_trace_json
from perfcast.errors import ConfigError
from perfcast.jsonio import json_int as _int

__all__ = ["CpuOp", "GpuOp", "HostCall", "KinetoTrace", "Step", "load_kineto", "parse_kineto"]

_US = 1e-6  # Kineto timestamps and durations are microseconds
_STEP = re.compile(r"^ProfilerStep#\d+$")
_RUNTIME_CATS = ("cuda_runtime", "cuda_driver")
_GPU_CATS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}


@dataclass(frozen=True, slots=True)
class HostCall:
    """One CUDA/HIP runtime call on a host thread (``start_s``/``dur_s``: seconds from the trace start)."""

    name: str
    thread: int
    start_s: float
    dur_s: float
    correlation: int | None

    @property
    def end_s(self) -> float:
        """When the call returned, seconds from the trace start."""
        return self.start_s + self.dur_s


@dataclass(frozen=True, slots=True)
class GpuOp:
    """One kernel, memory copy or memset on a device stream (``kind``: ``kernel`` | ``memcpy`` | ``memset``).

    ``bytes`` is the size a copy or set moved (0 when not recorded or for kernels).
    """

    name: str
    kind: str
    device: int
    stream: int
    start_s: float
    dur_s: float
    correlation: int | None
    bytes: float = 0.0

    @property
    def end_s(self) -> float:
        """When the op finished on the device, seconds from the trace start."""
        return self.start_s + self.dur_s


@dataclass(frozen=True, slots=True)
class CpuOp:
    """A CPU operator or user annotation with its recorded input shapes and types (empty when not recorded)."""

    name: str
    thread: int
    start_s: float
    dur_s: float
    external_id: int | None
    input_dims: tuple[tuple[int, ...], ...] = ()
    input_types: tuple[str, ...] = ()

    @property
    def end_s(self) -> float:
        """When the operator returned, seconds from the trace start."""
        return self.start_s + self.dur_s


@dataclass(frozen=True, slots=True)
class Step:
    """A ``ProfilerStep#N`` annotation on a host thread; ``dur_s`` is the measured step time, seconds."""

    name: str
    thread: int
    start_s: float
    dur_s: float

    @property
    def end_s(self) -> float:
        """When the step ended on the host, seconds from the trace start."""
        return self.start_s + self.dur_s


@dataclass(frozen=True, slots=True)
class KinetoTrace:
    """The parts of a Kineto trace the replay uses. ``origin_us`` is the first event's timestamp (µs)."""

    path: str
    device_name: str
    rank: int
    world_size: int
    origin_us: float
    calls: tuple[HostCall, ...]
    gpu_ops: tuple[GpuOp, ...]
    cpu_ops: tuple[CpuOp, ...]
    steps: tuple[Step, ...]
    sync_streams: dict[int, int] = field(default_factory=dict)  # runtime call correlation -> stream it waited on


def load_kineto(path: str | Path) -> KinetoTrace:
    """Read a Kineto trace file (``.json`` or ``.json.gz``); a missing or unreadable file is a ConfigError."""
    return parse_kineto(read_trace_json(path), str(path))


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _dims(value: Any) -> tuple[tuple[int, ...], ...]:
    if not isinstance(value, list):
        return ()
    out: list[tuple[int, ...]] = []
    for d in value:
        if isinstance(d, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in d):
            out.append(tuple(d))
        else:
            out.append(())  # a TensorList or a scalar: no shape
    return tuple(out)


def _device_name(data: dict[str, Any], device: int | None) -> str:
    props = data.get("deviceProperties")
    if not isinstance(props, list) or not props:
        return ""
    for p in props:
        if isinstance(p, dict) and p.get("id") == device and isinstance(p.get("name"), str):
            return str(p["name"])
    first = props[0]
    return str(first.get("name", "")) if isinstance(first, dict) else ""


def parse_kineto(data: Any, path: str = "<trace>") -> KinetoTrace:
    """The replay's view of a parsed Kineto trace (``data``: the JSON object). Not a Kineto trace -> ConfigError."""
    events = data.get("traceEvents") if isinstance(data, dict) else None
    if not isinstance(events, list):
        raise ConfigError(f"{path}: not a PyTorch profiler (Kineto) trace: no traceEvents list")
    xs = [e for e in events if isinstance(e, dict) and e.get("ph") == "X" and _num(e.get("ts")) is not None
          and _num(e.get("dur")) is not None and isinstance(e.get("name"), str)]
    if not xs:
        raise ConfigError(f"{path}: not a PyTorch profiler (Kineto) trace: no complete ('X') events")
    origin = min(float(e["ts"]) for e in xs)

    def t(e: dict[str, Any]) -> tuple[float, float]:
        return (float(e["ts"]) - origin) * _US, max(0.0, float(e["dur"])) * _US

    flows = _flow_links(events)
    calls: list[HostCall] = []
    gpu_ops: list[GpuOp] = []
    cpu_ops: list[CpuOp] = []
    steps: list[Step] = []
    sync_streams: dict[int, int] = {}
    for e in xs:
        cat = e.get("cat")
        args: dict[str, Any] = e["args"] if isinstance(e.get("args"), dict) else {}
        start, dur = t(e)
        if cat in _RUNTIME_CATS:
            corr = _int(args.get("correlation"))
            if corr is None:
                corr = flows.get((_int(e.get("pid")), _int(e.get("tid")), float(e["ts"])))
            calls.append(HostCall(e["name"], _int(e.get("tid")) or 0, start, dur, corr))
        elif cat in _GPU_CATS:
            stream = _int(args.get("stream"))
            stream = stream if stream is not None else _int(e.get("tid")) or 0
            corr = _int(args.get("correlation"))
            if corr is None:
                corr = flows.get((_int(e.get("pid")), _int(e.get("tid")), float(e["ts"])))
            device = _int(args.get("device"))
            gpu_ops.append(GpuOp(e["name"], _GPU_CATS[cat], device if device is not None else _int(e.get("pid")) or 0,
                                 stream, start, dur, corr, float(_num(args.get("bytes")) or 0.0)))
        elif cat == "cuda_sync":
            corr, stream = _int(args.get("correlation")), _int(args.get("stream"))
            if corr is not None and stream is not None and stream >= 0:
                sync_streams[corr] = stream
        elif cat in ("cpu_op", "user_annotation"):
            tid = _int(e.get("tid")) or 0
            if cat == "user_annotation" and _STEP.match(e["name"]):
                steps.append(Step(e["name"], tid, start, dur))
                continue
            types = args.get("Input type")
            cpu_ops.append(CpuOp(e["name"], tid, start, dur, _int(args.get("External id")),
                                 _dims(args.get("Input Dims")),
                                 tuple(str(x) for x in types) if isinstance(types, list) else ()))
    if not gpu_ops and not steps:
        raise ConfigError(f"{path}: not a PyTorch profiler (Kineto) trace with GPU work: no kernels, copies or "
                          "ProfilerStep annotations")
    info = data.get("distributedInfo") if isinstance(data.get("distributedInfo"), dict) else {}
    main_device = _main_device(gpu_ops)
    calls.sort(key=lambda c: (c.start_s, c.thread))
    gpu_ops.sort(key=lambda g: (g.start_s, g.stream))
    cpu_ops.sort(key=lambda c: (c.start_s, -c.dur_s))
    steps.sort(key=lambda s: s.start_s)
    return KinetoTrace(path=path, device_name=_device_name(data, main_device), rank=_int(info.get("rank")) or 0,
                       world_size=max(1, _int(info.get("world_size")) or 1), origin_us=origin, calls=tuple(calls),
                       gpu_ops=tuple(gpu_ops), cpu_ops=tuple(cpu_ops), steps=tuple(steps), sync_streams=sync_streams)


def _main_device(ops: list[GpuOp]) -> int | None:
    counts: dict[int, int] = {}
    for g in ops:
        counts[g.device] = counts.get(g.device, 0) + 1
    return max(counts, key=lambda d: counts[d]) if counts else None


def _flow_links(events: list[Any]) -> dict[tuple[int | None, int | None, float], int]:
    """``ac2g`` flow ends (pid, tid, ts) -> flow id: the launch/op link of traces whose events lack
    ``correlation`` args (the flow id is the correlation id). Both ends are keyed alike: profiler versions
    differ in which end ('s' or 'f') sits on the launch."""
    out: dict[tuple[int | None, int | None, float], int] = {}
    for e in events:
        if isinstance(e, dict) and e.get("cat") in ("ac2g", "async_cpu_to_gpu") and e.get("ph") in ("s", "f"):
            ident, ts = _int(e.get("id")), _num(e.get("ts"))
            if ident is not None and ts is not None:
                out[(_int(e.get("pid")), _int(e.get("tid")), ts)] = ident
    return out
