"""Replay a :class:`~perfcast.replay.graph.ReplayGraph`: a small discrete-event simulation.

Each node's start and end are events. An event fires once every edge into it has fired; its time is the
latest (source time + lag) over those edges, a root start keeping its recorded time. A non-blocking node ends
``duration`` after it starts (the GPU ops' durations are what repricing changes); a blocking host call ends
its ``own`` time after both its start and the ends of what it waits for. Events are popped from a heap in
time order (ties by node), so the replayed timeline is deterministic. Resources are not shared beyond what the
graph says: ops on different streams overlap freely, as they did in the recording.
"""

from __future__ import annotations

import heapq
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from perfcast.errors import PerfcastError
from perfcast.replay.graph import NodeKind, ReplayGraph

__all__ = ["Replay", "StepTime", "replay"]


@dataclass(frozen=True, slots=True)
class StepTime:
    """One step: measured (the recorded ``ProfilerStep`` duration) and replayed, seconds."""

    name: str
    measured_s: float
    predicted_s: float


@dataclass(frozen=True, slots=True)
class Replay:
    """Replayed start and end of every node (seconds from the trace start) and the steps' times."""

    start_s: tuple[float, ...]
    end_s: tuple[float, ...]
    steps: tuple[StepTime, ...]

    @property
    def step_time_s(self) -> float:
        """Median replayed step time, s."""
        return statistics.median(s.predicted_s for s in self.steps)

    @property
    def measured_step_time_s(self) -> float:
        """Median measured step time, s."""
        return statistics.median(s.measured_s for s in self.steps)


def replay(graph: ReplayGraph, durations_s: Sequence[float] | None = None) -> Replay:
    """Replay ``graph`` with each node's duration (``durations_s``: one per node; the recorded ones when None)."""
    nodes = graph.nodes
    n = len(nodes)
    dur = [nd.dur_s for nd in nodes] if durations_s is None else list(durations_s)
    if len(dur) != n:
        raise ValueError(f"{len(dur)} durations for {n} nodes")
    # endpoint 2*i = start of node i, 2*i+1 = its end
    out: list[list[tuple[int, float]]] = [[] for _ in range(2 * n)]
    indeg = [0] * (2 * n)
    for i, nd in enumerate(nodes):
        own = nd.own_s if nd.own_s is not None and nd.kind is NodeKind.HOST else dur[i]
        out[2 * i].append((2 * i + 1, own))
        indeg[2 * i + 1] += 1
    for e in graph.edges:
        src = 2 * e.src + (1 if e.src_end else 0)
        dst = 2 * e.dst + (1 if e.dst_end else 0)
        out[src].append((dst, e.lag_s))
        indeg[dst] += 1
    time = [float("-inf")] * (2 * n)
    heap: list[tuple[float, int]] = []
    for i, nd in enumerate(nodes):
        if indeg[2 * i] == 0:
            time[2 * i] = nd.start_s
            heap.append((nd.start_s, 2 * i))
    heapq.heapify(heap)
    fired = 0
    while heap:
        t, ep = heapq.heappop(heap)
        fired += 1
        for dst, lag in out[ep]:
            if t + lag > time[dst]:
                time[dst] = t + lag
            indeg[dst] -= 1
            if indeg[dst] == 0:
                heapq.heappush(heap, (time[dst], dst))
    if fired != 2 * n:
        raise PerfcastError(f"the trace's dependency graph has a cycle ({2 * n - fired} events never fired); "
                            "the trace's timestamps contradict its launch/stream order")
    starts = tuple(time[0::2])
    ends = tuple(time[1::2])
    steps = []
    for sp in graph.steps:
        if sp.start is None or sp.end is None:
            predicted = max(ends) - min(starts)
        else:
            predicted = starts[sp.end] - starts[sp.start]
        steps.append(StepTime(sp.name, sp.measured_s, predicted))
    return Replay(starts, ends, tuple(steps))
