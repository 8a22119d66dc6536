"""Recursive halving and doubling (Rabenseifner's algorithm; Thakur, Rabenseifner & Gropp 2005).

Reduce-scatter by recursive halving exchanges half, a quarter, ... of the buffer with a
partner at distance 1, 2, 4, ...; all-gather by recursive doubling reverses it; all-reduce
is both. Partners inside a domain come first, so only (m-1)/(m g) of the buffer per rank
crosses the network. log2(n) steps each way, not pipelined. Needs a power-of-two group
(and a power-of-two number of members per domain). MPI libraries use it; NCCL does not,
so it is never picked automatically.
"""

from __future__ import annotations

from perfcast.coefficients.collectives import CollectiveCoefficients
from perfcast.system.cluster import Cluster
from perfcast.system.collectives.base import Algorithm, Cost, log2_ceil, register
from perfcast.system.collectives.placement import Links, Placement
from perfcast.system.collectives.types import CollectiveOp

__all__ = ["HalvingDoubling"]

_OP = CollectiveOp


def _pow2(x: int) -> bool:
    return x > 0 and x & (x - 1) == 0


@register("halving_doubling")
class HalvingDoubling(Algorithm):
    """Recursive halving (reduce-scatter) and doubling (all-gather)."""

    ops = frozenset({_OP.ALL_REDUCE, _OP.REDUCE_SCATTER, _OP.ALL_GATHER})
    summary = "recursive halving/doubling (Rabenseifner; MPI), power-of-two groups"

    def unavailable(self, op: CollectiveOp, p: Placement, links: Links, cluster: Cluster) -> str | None:
        if not (_pow2(p.g) and _pow2(p.m)):
            return (f"halving_doubling needs a power-of-two group and GPUs per domain (got {p.n} GPUs, "
                    f"{p.g} per domain); use ring or tree")
        return None

    def cost(self, op: CollectiveOp, p: Placement, links: Links, co: CollectiveCoefficients) -> Cost:
        g, m = p.g, p.m
        intra = (g - 1) / g / links.ring_Bps if g > 1 else 0.0
        inter = (m - 1) / m / g / (links.node_net_Bps / g) if m > 1 else 0.0
        phases = 2.0 if op is _OP.ALL_REDUCE else 1.0
        return Cost(phases * log2_ceil(g), phases * log2_ceil(m), phases * (intra + inter))
