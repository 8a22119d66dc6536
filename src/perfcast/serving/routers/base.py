"""What every global router shares: it picks the replica of a pool that takes an arriving request.

A router sees the replicas' load through :class:`ReplicaLoads` (the engine): how many requests each holds
and how many wait in its queues. A request arrives at a pool (every replica, or under disaggregated serving
the prefill or the decode pool); a pool of one replica needs no router. Ties go to the lowest replica
index, so runs repeat.
"""

from __future__ import annotations

from typing import ClassVar, Protocol

__all__ = ["ReplicaLoads", "Router"]


class ReplicaLoads(Protocol):
    """The replicas' load as a router reads it."""

    @property
    def outstanding(self) -> list[int]:
        """Requests routed to each replica and neither finished nor handed over (by replica index)."""
        ...

    def num_waiting(self, replica: int) -> int:
        """Requests waiting for admission on ``replica`` (every pipeline virtual engine of it)."""
        ...


class Router:
    """Base policy: one instance per run (a policy may keep state, such as a round-robin cursor)."""

    name: ClassVar[str] = ""

    def pick(self, pool: range, loads: ReplicaLoads) -> int:  # pragma: no cover - every policy overrides it
        """The replica of ``pool`` (two or more replicas) that takes the next request."""
        raise NotImplementedError
