"""Replay a trace end to end: read it, build its graph, reprice it if asked, replay it, and the Perfetto trace."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfcast.capture.execution_trace import (
    ExecutionTrace,
    is_execution_trace,
    parse_execution_trace,
    read_trace_json,
)
from perfcast.catalog.hardware import Hardware, load_hardware
from perfcast.errors import ConfigError, PerfcastError
from perfcast.replay.graph import NodeKind, ReplayGraph, build_graph
from perfcast.replay.kineto import KinetoTrace, load_kineto, parse_kineto
from perfcast.replay.reprice import Repricing, reprice
from perfcast.replay.simulate import Replay, replay

__all__ = ["ReplayResult", "load_trace", "recorded_hardware", "replay_chrome_trace", "replay_trace",
           "write_replay_trace"]

_PREFIXES = ("NVIDIA ", "AMD ", "Tesla ", "NVIDIA Tesla ")


def recorded_hardware(device_name: str) -> Hardware | None:
    """The catalog device the trace's ``deviceProperties`` name is an alias of (None when none is)."""
    names = [device_name] + [device_name[len(p):] for p in _PREFIXES if device_name.startswith(p)]
    for name in names:
        if not name.strip():
            continue
        try:
            return load_hardware(name)
        except PerfcastError:
            continue
    return None


def load_trace(path: str | Path) -> KinetoTrace | ExecutionTrace:
    """Read a trace file and tell its format from its top level: a Kineto trace (``traceEvents``) or a PyTorch
    execution trace (``nodes`` and ``schema``); anything else is a one-line ConfigError."""
    data = read_trace_json(path)
    if is_execution_trace(data):
        return parse_execution_trace(data, str(path))
    if isinstance(data, dict) and "traceEvents" in data:
        return parse_kineto(data, str(path))
    raise ConfigError(f"{path}: not a PyTorch profiler (Kineto) trace (no traceEvents list) nor a PyTorch execution "
                      "trace (no top-level nodes and schema)")


@dataclass(frozen=True)
class ReplayResult:
    """A replayed trace. ``hardware`` is the target device id (the recorded one without ``--hardware``; None
    when that is not in the catalog); ``methods`` counts how the GPU ops were priced."""

    trace: KinetoTrace
    graph: ReplayGraph
    replayed: Replay
    hardware: str | None
    recorded_hardware: str | None
    world_size: int
    target_world_size: int
    methods: Counter[str] = field(default_factory=Counter)

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` object."""
        r = self.replayed
        measured, predicted = r.measured_step_time_s, r.step_time_s
        return {
            "trace": self.trace.path,
            "hardware": self.hardware,
            "recorded_hardware": self.recorded_hardware,
            "recorded_device": self.trace.device_name,
            "steps": [{"name": s.name, "measured_s": s.measured_s, "predicted_s": s.predicted_s} for s in r.steps],
            "step_time_s": predicted,
            "measured_step_time_s": measured,
            "error_pct": 100.0 * (predicted - measured) / measured if measured > 0 else None,
            "whole_trace": self.graph.whole_trace,
            "world_size": self.world_size,
            "target_world_size": self.target_world_size,
            "gpu_ops": sum(1 for n in self.graph.nodes if n.kind is NodeKind.GPU),
            "host_calls": sum(1 for n in self.graph.nodes if n.kind is NodeKind.HOST),
            "launch_latency_s": self.graph.launch_latency_s,
            "launch_queue_depth": self.graph.queue_depth,
            "repriced": dict(sorted(self.methods.items())),
            "host_time": "as recorded",
        }


def replay_trace(path: str | Path | KinetoTrace, *, hardware: str | None = None, from_hardware: str | None = None,
                 world_size: int | None = None) -> ReplayResult:
    """Replay the Kineto trace at ``path`` (or already read): on its own GPU (``hardware`` None), or repriced for
    ``hardware`` and/or a data-parallel ``world_size`` (``from_hardware``: the recorded device when its name is not
    in the catalog)."""
    trace = path if isinstance(path, KinetoTrace) else load_kineto(path)
    graph = build_graph(trace)
    rec = load_hardware(from_hardware) if from_hardware else recorded_hardware(trace.device_name)
    new_world = world_size if world_size is not None else trace.world_size
    if world_size is not None and world_size < 1:
        raise ConfigError(f"--dp {world_size}: the data-parallel size must be at least 1")
    if hardware is None and new_world == trace.world_size:
        return ReplayResult(trace, graph, replay(graph), rec.id if rec else None, rec.id if rec else None,
                            trace.world_size, new_world, Counter({"as recorded": _gpu_count(graph)}))
    if rec is None:
        raise ConfigError(f"the trace's device {trace.device_name!r} is not in the hardware catalog; give "
                          "--from-hardware ID to say which device recorded it")
    target = load_hardware(hardware) if hardware else rec
    durations, methods = reprice(graph, trace, Repricing(rec, target, trace.world_size, new_world))
    return ReplayResult(trace, graph, replay(graph, durations), target.id, rec.id, trace.world_size, new_world,
                        methods)


def _gpu_count(graph: ReplayGraph) -> int:
    return sum(1 for n in graph.nodes if n.kind is NodeKind.GPU)


def replay_chrome_trace(result: ReplayResult) -> dict[str, Any]:
    """The replayed timeline as a Chrome trace (microseconds; open in https://ui.perfetto.dev): one process for
    the host (a lane per thread, plus the steps), one for the GPU (a lane per stream)."""
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "host (replayed)"}},
        {"name": "process_name", "ph": "M", "pid": 1,
         "args": {"name": f"GPU {result.hardware or result.trace.device_name} (replayed)"}},
    ]
    lanes: dict[tuple[int, str], int] = {}

    def lane(pid: int, name: str) -> int:
        if (pid, name) not in lanes:
            lanes[(pid, name)] = len(lanes) + 1
            events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": lanes[(pid, name)],
                           "args": {"name": name}})
        return lanes[(pid, name)]

    r = result.replayed
    steps_tid = lane(0, "steps")
    for sp, st in zip(result.graph.steps, r.steps, strict=True):
        start = r.start_s[sp.start] if sp.start is not None else min(r.start_s)
        events.append({"name": st.name, "ph": "X", "pid": 0, "tid": steps_tid, "ts": start * 1e6,
                       "dur": st.predicted_s * 1e6, "args": {"measured_us": st.measured_s * 1e6}})
    for n in result.graph.nodes:
        if n.kind is NodeKind.MARK:
            continue
        pid = 1 if n.kind is NodeKind.GPU else 0
        events.append({"name": n.name, "ph": "X", "pid": pid, "tid": lane(pid, n.lane), "ts": r.start_s[n.index] * 1e6,
                       "dur": max(0.0, r.end_s[n.index] - r.start_s[n.index]) * 1e6,
                       "args": {"recorded_ts_us": n.start_s * 1e6, "recorded_dur_us": n.dur_s * 1e6}})
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_replay_trace(result: ReplayResult, path: str | Path) -> None:
    """Write :func:`replay_chrome_trace` to ``path`` (JSON)."""
    Path(path).write_text(json.dumps(replay_chrome_trace(result)) + "\n", encoding="utf-8")
