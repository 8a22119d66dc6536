"""Tree: NCCL's double binary tree across domains with a chain inside each domain.

All-reduce reduces up the trees and broadcasts down, pipelined in chunks, so the time is
set by the busier of the two levels (Sanders, Speck & Träff 2009 for double binary trees;
NCCL 2.4 "Massively scale your deep learning training with NCCL 2.4"). Per rank the chain
inside a domain moves 2(g-1)/g of the buffer; between domains each node moves about
2(m-1)/m of it (the buffer once up and once down at m = 2). Latency grows with log2(m)
instead of the ring's n, which is why NCCL picks trees for small and mid-size messages
across many nodes. ``tree_efficiency_frac`` is NCCL trees' lower achieved bandwidth.
"""

from __future__ import annotations

from perfcast.coefficients.collectives import CollectiveCoefficients
from perfcast.system.collectives.base import Algorithm, Cost, log2_ceil, register
from perfcast.system.collectives.placement import Links, Placement
from perfcast.system.collectives.types import CollectiveOp

__all__ = ["Tree"]

_OP = CollectiveOp


@register("tree")
class Tree(Algorithm):
    """Double binary tree between domains, chain within: all_reduce and broadcast."""

    ops = frozenset({_OP.ALL_REDUCE, _OP.BROADCAST})
    nccl_ops = frozenset({_OP.ALL_REDUCE})
    summary = "double binary tree across domains, chain inside (NCCL tree; log-latency)"

    def cost(self, op: CollectiveOp, p: Placement, links: Links, co: CollectiveCoefficients) -> Cost:
        g, m = p.g, p.m
        if op is _OP.ALL_REDUCE:
            intra = 2.0 * (g - 1) / g / links.ring_Bps if g > 1 else 0.0
            inter = 2.0 * (m - 1) / m / links.node_net_Bps if m > 1 else 0.0
            steps_intra, steps_inter = 2.0 * (g - 1), 2.0 * log2_ceil(m)
        else:  # broadcast down the tree and the chains
            intra = 1.0 / links.ring_Bps if g > 1 else 0.0
            inter = 1.0 / links.node_net_Bps if m > 1 else 0.0
            steps_intra, steps_inter = float(g - 1), float(log2_ceil(m))
        return Cost(steps_intra, steps_inter, max(intra, inter) / co.tree_efficiency_frac)
