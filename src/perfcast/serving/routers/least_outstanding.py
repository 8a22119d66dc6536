"""``least_outstanding``: the replica holding the fewest requests (vidur's least-outstanding-requests)."""

from __future__ import annotations

from perfcast.serving.routers.base import ReplicaLoads, Router
from perfcast.serving.routers.registry import ROUTERS

__all__ = ["LeastOutstandingRouter"]


@ROUTERS.register("least_outstanding")
class LeastOutstandingRouter(Router):
    """Fewest requests routed and not yet finished; ties to the lowest index."""

    name = "least_outstanding"

    def pick(self, pool: range, loads: ReplicaLoads) -> int:
        outstanding = loads.outstanding
        return min(pool, key=lambda i: (outstanding[i], i))
