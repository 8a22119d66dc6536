"""``shortest_queue``: the replica with the fewest requests waiting for admission (join the shortest queue)."""

from __future__ import annotations

from perfcast.serving.routers.base import ReplicaLoads, Router
from perfcast.serving.routers.registry import ROUTERS

__all__ = ["ShortestQueueRouter"]


@ROUTERS.register("shortest_queue")
class ShortestQueueRouter(Router):
    """Fewest requests waiting (running ones do not count); ties to the lowest index."""

    name = "shortest_queue"

    def pick(self, pool: range, loads: ReplicaLoads) -> int:
        return min(pool, key=lambda i: (loads.num_waiting(i), i))
