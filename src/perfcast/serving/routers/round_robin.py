"""``round_robin``: each pool's replicas in turn, whatever their load (vidur's round-robin global scheduler)."""

from __future__ import annotations

from perfcast.serving.routers.base import ReplicaLoads, Router
from perfcast.serving.routers.registry import ROUTERS

__all__ = ["RoundRobinRouter"]


@ROUTERS.register("round_robin")
class RoundRobinRouter(Router):
    """The next replica of the pool, one cursor per pool."""

    name = "round_robin"

    def __init__(self) -> None:
        self._turns: dict[int, int] = {}  # pool's first replica -> requests it has routed

    def pick(self, pool: range, loads: ReplicaLoads) -> int:
        turn = self._turns.get(pool.start, 0)
        self._turns[pool.start] = turn + 1
        return pool[turn % len(pool)]
