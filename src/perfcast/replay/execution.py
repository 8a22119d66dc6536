"""Predict the steps of a PyTorch execution trace on a device (``perfcast replay ET.json --hardware H``).

An execution trace records each host operator with its shapes but no durations, so nothing is replayed as
recorded: :func:`perfcast.capture.execution_ops.execution_trace_steps` turns each step into workload ops, and
each step is composed as an eager PyTorch step by :func:`perfcast.compose.step.predict_step` (the host launches
each kernel-launching op at the fitted host time per eager op: the forward's ``eager_training_op_s`` in a
training step, else ``eager_op_s``, and ``autograd_op_s`` for backward and optimizer ops; the device runs them in
order: device clock = max(device clock, host clock) + kernel time, the max-plus queue of
:func:`~perfcast.compose.step.simulate_queue`). Collectives are priced by perfcast's collective model
(:func:`perfcast.system.collectives.collective_time` on a cluster of the device) at the group size the trace
records (``record_param_comms``) or ``world_size``, and copies between host and device at the PCIe link's one-way
bandwidth (half the catalog's bidirectional figure); both run in the same queue.

A Kineto trace of the same run (``kineto``) gives each step's measured time: its ``ProfilerStep`` annotation
whose ``Record function id`` is the step node's ``rf_id`` (by name when the ids are missing).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from perfcast.capture.execution_ops import EtStep, execution_trace_steps
from perfcast.capture.execution_trace import ExecutionTrace, load_execution_trace, read_trace_json
from perfcast.catalog.hardware import Hardware, load_hardware
from perfcast.compose.step import predict_step, simulate_queue
from perfcast.compose.types import OpTime
from perfcast.dtypes import DType
from perfcast.errors import ConfigError, UnsupportedError
from perfcast.kernel.types import Bound
from perfcast.workload.types import Mode, OpKind, Workload

__all__ = ["EtReplayResult", "EtStepTime", "kineto_step_times", "replay_execution_trace"]

_HOST_COPIES = ("h2d_copy", "d2h_copy")


@dataclass(frozen=True, slots=True)
class EtStepTime:
    """One step: predicted seconds, and measured seconds when a Kineto trace of the run gave them (else None)."""

    name: str
    predicted_s: float
    measured_s: float | None = None


@dataclass(frozen=True)
class EtReplayResult:
    """An execution trace's steps predicted on ``hardware``; ``priced`` counts the operators of all steps by how
    they were priced, ``unknown`` the names of the unknown ones priced as memory-bound."""

    trace: ExecutionTrace
    hardware: str
    steps: tuple[EtStepTime, ...]
    whole_trace: bool
    priced: Counter[str] = field(default_factory=Counter)
    unknown: Counter[str] = field(default_factory=Counter)
    world_size: int | None = None
    kineto: str | None = None

    @property
    def step_time_s(self) -> float:
        """Median predicted step time, s."""
        return statistics.median(s.predicted_s for s in self.steps)

    @property
    def measured_step_time_s(self) -> float | None:
        """Median measured step time, s (None without a linked Kineto trace)."""
        measured = [s.measured_s for s in self.steps if s.measured_s is not None]
        return statistics.median(measured) if measured else None

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` object (the Kineto replay's keys where they apply)."""
        measured = self.measured_step_time_s
        predicted = self.step_time_s
        return {
            "trace": self.trace.path,
            "input": "execution_trace",
            "schema": self.trace.schema,
            "hardware": self.hardware,
            "steps": [{"name": s.name, "measured_s": s.measured_s, "predicted_s": s.predicted_s} for s in self.steps],
            "step_time_s": predicted,
            "measured_step_time_s": measured,
            "error_pct": 100.0 * (predicted - measured) / measured if measured else None,
            "whole_trace": self.whole_trace,
            "world_size": self.world_size,
            "kineto": self.kineto,
            "ops": sum(self.priced.values()),
            "priced": dict(sorted(self.priced.items())),
            "unknown_ops": sum(self.unknown.values()),
            "unknown_op_names": dict(sorted(self.unknown.items())),
            "host_time": "eager PyTorch: the fitted host time per launched op",
        }


def replay_execution_trace(path: str | Path | ExecutionTrace, *, hardware: str | Hardware | None,
                           kineto: str | Path | None = None, world_size: int | None = None) -> EtReplayResult:
    """Predict each step of the execution trace at ``path`` on ``hardware`` (required: the trace has no times);
    ``kineto``: a Kineto trace of the same run for the measured step times; ``world_size``: the collectives'
    group when the trace does not record it."""
    if hardware is None:
        raise ConfigError("an execution trace records no durations: give --hardware to predict it on a device")
    if world_size is not None and world_size < 1:
        raise ConfigError(f"--dp {world_size}: the data-parallel size must be at least 1")
    trace = path if isinstance(path, ExecutionTrace) else load_execution_trace(path)
    hw = hardware if isinstance(hardware, Hardware) else load_hardware(hardware)
    steps, whole = execution_trace_steps(trace, group_size=world_size)
    if not any(s.ops for s in steps):
        raise ConfigError(f"{trace.path}: no operator of the execution trace launches device work (only views, "
                          "annotations and metadata)")
    measured = kineto_step_times(kineto, steps) if kineto is not None else {}
    priced: Counter[str] = Counter()
    unknown: Counter[str] = Counter()
    out: list[EtStepTime] = []
    for s in steps:
        priced.update(s.priced)
        unknown.update(s.unknown)
        out.append(EtStepTime(s.name, _predict(s, trace.path, hw), measured.get(s.name)))
    return EtReplayResult(trace, hw.id, tuple(out), whole, priced, unknown, world_size,
                          str(kineto) if kineto is not None else None)


def _predict(step: EtStep, path: str, hw: Hardware) -> float:
    """One step composed as an eager PyTorch step (module docstring), s; a step without device work costs the
    composer's fixed cost per step."""
    dtype = next((o.dtype for o in step.ops if o.kind is not OpKind.HOST), DType.FP32)
    wl = Workload(model_id=Path(path).name, mode=Mode.TRAINING if step.training else Mode.INFERENCE, batch_size=1,
                  seq_len=1, dtype=dtype, ops=step.ops)
    st = predict_step(wl, hw, framework="eager")
    if not any(o.kind is OpKind.COMM or o.op in _HOST_COPIES for o in step.ops):
        return st.time_s
    times = list(st.ops)
    overhead = st.time_s - simulate_queue(times)[0]  # the composer's fixed cost per step
    return simulate_queue([_priced_here(t, hw) for t in times])[0] + overhead


def _priced_here(t: OpTime, hw: Hardware) -> OpTime:
    """A collective by the collective model, a host-device copy at the PCIe link's one-way bandwidth (the kernel
    model prices neither); any other op as the composer priced it."""
    if t.op.op in _HOST_COPIES:
        bidir = hw.interconnect.pcie_bidir_bandwidth_Bps
        if not bidir:
            raise UnsupportedError(f"{hw.id} has no PCIe bandwidth in the catalog: the execution trace's "
                                   f"host-device copy {t.op.name} cannot be priced on it")
        return replace(t, kernel=replace(t.kernel, time_s=t.op.bytes_read / (bidir / 2), bound=Bound.MEMORY))
    if t.op.kind is not OpKind.COMM:
        return t
    from perfcast.system.cluster import cluster_for_gpu
    from perfcast.system.collectives import collective_time

    size, group = t.op.dims
    if group == 0:
        raise UnsupportedError(f"the execution trace's collective {t.op.name} records no group size; give "
                               "--world-size N")
    if group == 1:
        return t
    cluster = cluster_for_gpu(hw)
    nodes = max(1, math.ceil(group / cluster.gpus_per_node))
    if nodes > cluster.nodes:
        cluster = cluster.with_nodes(nodes)
    time_s = collective_time(t.op.op, float(size), int(group), cluster).time_s
    return replace(t, kernel=replace(t.kernel, time_s=time_s, bound=Bound.COMM))


def kineto_step_times(path: str | Path, steps: list[EtStep]) -> dict[str, float]:
    """Step name -> measured seconds from a Kineto trace of the same run: the annotation of the step's name whose
    ``Record function id`` is the step's ``rf_id`` (by name alone for a step without an ``rf_id``); a trace that
    holds none of the steps is a ConfigError (not the same run)."""
    data = read_trace_json(path)
    events = data.get("traceEvents") if isinstance(data, dict) else None
    if not isinstance(events, list):
        raise ConfigError(f"{path}: not a PyTorch profiler (Kineto) trace: no traceEvents list")
    names = {s.name for s in steps}
    by_rf: dict[tuple[str, int | None], float] = {}
    for e in events:
        if not (isinstance(e, dict) and e.get("ph") == "X" and e.get("name") in names
                and isinstance(e.get("dur"), (int, float))):
            continue
        args: dict[str, Any] = e["args"] if isinstance(e.get("args"), dict) else {}
        rf = args.get("Record function id")
        dur_s = float(e["dur"]) * 1e-6  # Kineto writes microseconds
        by_rf.setdefault((e["name"], rf if isinstance(rf, int) and not isinstance(rf, bool) else None), dur_s)
        by_rf.setdefault((e["name"], None), dur_s)
    out = {s.name: by_rf[(s.name, s.rf_id)] for s in steps if (s.name, s.rf_id) in by_rf}
    if not out:
        raise ConfigError(f"{path}: no step of the execution trace is in this Kineto trace (no ProfilerStep of the "
                          "same name and Record function id): not a trace of the same run")
    return out
