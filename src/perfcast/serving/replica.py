"""The explicit state of the engines a run simulates.

A replica with ``pipeline_parallel_size`` stages runs that many virtual engines (as vLLM does): each has its
own scheduler and share of the KV cache, and an iteration's latency is every stage's time, while the stages
overlap across the virtual engines. Engine ``e`` belongs to replica ``e // pp``.
"""

from __future__ import annotations

from perfcast.serving.schedulers import Batch, ReplicaScheduler

__all__ = ["VirtualEngine"]


class VirtualEngine:
    """One scheduler's engine: whether it runs, the batch in flight and when that leaves the last stage."""

    __slots__ = ("batch", "busy", "end_s", "sched", "steps")

    def __init__(self, sched: ReplicaScheduler) -> None:
        self.sched = sched
        self.busy = False  # an iteration is in flight (its end is on the event heap)
        self.batch: Batch | None = None  # the batch in flight
        self.steps = 1  # iterations the batch in flight stands for (a decode stretch runs many)
        self.end_s = 0.0  # when the batch in flight leaves the last pipeline stage (s)
