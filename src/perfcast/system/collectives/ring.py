"""Ring: every rank sends to its successor; NCCL's default for large messages.

Per rank, ``all_reduce`` moves 2(n-1)/n of the buffer in 2(n-1) steps (reduce-scatter then
all-gather), ``all_gather``/``reduce_scatter`` (n-1)/n in n-1 steps, ``broadcast`` the
buffer once in a pipelined chain. ``all_to_all`` over a ring relays every block hop by hop
(as ASTRA-sim's ring all-to-all does), so each link carries (n-1)/2 of the buffer: about
n/4 times an all-reduce's traffic. NCCL's all-to-all is direct instead (see ``direct``).

Across scale-up domains NCCL builds the ring domain by domain, one ring per NIC, so each
node's traffic leaves through all its NICs: the bottleneck is the slower of the ring's
link inside the domain and the node's network share (Patarasuk & Yuan 2009 for the ring;
NCCL's topology-aware rings: github.com/NVIDIA/nccl src/graph/rings.cc).
"""

from __future__ import annotations

from perfcast.coefficients.collectives import CollectiveCoefficients
from perfcast.system.collectives.base import Algorithm, Cost, register
from perfcast.system.collectives.placement import Links, Placement
from perfcast.system.collectives.types import CollectiveOp

__all__ = ["Ring"]

_OP = CollectiveOp


@register("ring")
class Ring(Algorithm):
    """Ring all-reduce / all-gather / reduce-scatter / broadcast / relayed all-to-all."""

    ops = frozenset({_OP.ALL_REDUCE, _OP.ALL_GATHER, _OP.REDUCE_SCATTER, _OP.BROADCAST, _OP.ALL_TO_ALL})
    nccl_ops = frozenset({_OP.ALL_REDUCE, _OP.ALL_GATHER, _OP.REDUCE_SCATTER, _OP.BROADCAST})
    summary = "ring through the group, domain by domain (NCCL's default for large messages)"

    def cost(self, op: CollectiveOp, p: Placement, links: Links, co: CollectiveCoefficients) -> Cost:
        n = p.n
        if op is _OP.ALL_REDUCE:
            volume, steps = 2.0 * (n - 1) / n, 2.0 * (n - 1)
        elif op in (_OP.ALL_GATHER, _OP.REDUCE_SCATTER):
            volume, steps = (n - 1) / n, float(n - 1)
        elif op is _OP.BROADCAST:
            volume, steps = 1.0, float(n - 1)
        else:  # all_to_all relayed along the ring
            volume, steps = (n - 1) / 2.0, float(n - 1)
        if p.m == 1:
            return Cost(steps, 0.0, volume / links.ring_Bps)
        # a chunk crosses the network once per domain per pass (NCCL's nInterSteps: 2m for all-reduce, m - 1
        # for all-gather / reduce-scatter / broadcast, src/graph/tuning.cc); the other steps stay inside
        inter = min(steps, 2.0 * p.m if op is _OP.ALL_REDUCE else float(p.m - 1))
        return Cost(steps - inter, inter, volume / min(links.ring_Bps, links.node_net_Bps))
