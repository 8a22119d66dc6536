"""Hierarchical: reduce-scatter inside each domain, all-reduce across domains, all-gather inside.

After the intra-domain reduce-scatter each of the g members owns 1/g of the buffer and
all-reduces it with its counterparts in the other domains over its own NICs, so a node
sends 2(m-1)/m of the buffer over the network instead of a flat ring's 2(n-1)/n; the
phases are pipelined in chunks (as NCCL's NVLS-tree and CollNet chains are), so the time
is set by the busier level. With in-switch reduction (``intra_node.multicast``, NVLS) the
intra-domain phases move each byte once. Two-level all-reduce: Jia et al. 2018 (arXiv
1807.11205), Horovod's hierarchical all-reduce; NVLS-tree: NCCL 2.18 release notes.
"""

from __future__ import annotations

from perfcast.coefficients.collectives import CollectiveCoefficients
from perfcast.system.collectives.base import PROTOCOLS, Algorithm, Cost, log2_ceil, register
from perfcast.system.collectives.placement import Links, Placement
from perfcast.system.collectives.types import CollectiveOp

__all__ = ["Hierarchical"]

_OP = CollectiveOp


@register("hierarchical")
class Hierarchical(Algorithm):
    """Two-level all-reduce / all-gather / reduce-scatter: scale-up links inside, network across."""

    ops = frozenset({_OP.ALL_REDUCE, _OP.ALL_GATHER, _OP.REDUCE_SCATTER})
    nccl_ops = frozenset({_OP.ALL_REDUCE})
    summary = "intra-domain reduce-scatter, inter-domain all-reduce, intra-domain all-gather (pipelined)"

    def nccl_candidate(self, op: CollectiveOp, p: Placement, links: Links) -> bool:
        """NCCL's NVLS-tree: all-reduce across domains of a switch with in-switch reduction."""
        return op in self.nccl_ops and p.m > 1 and p.g > 1 and links.nvls_Bps > 0

    def cost(self, op: CollectiveOp, p: Placement, links: Links, co: CollectiveCoefficients) -> Cost:
        g, m = p.g, p.m
        phases = 2.0 if op is _OP.ALL_REDUCE else 1.0
        protocols: tuple[str, ...] = PROTOCOLS
        if g == 1:
            intra, steps_intra = 0.0, 0.0
        elif op is _OP.ALL_REDUCE and links.nvls_Bps > 0:  # NVLS inside: Simple protocol only
            intra, steps_intra, protocols = 1.0 / links.nvls_Bps, 2.0, ("simple",)
        else:
            intra, steps_intra = phases * (g - 1) / g / links.ring_Bps, phases * (g - 1)
        if m == 1:
            inter, steps_inter = 0.0, 0.0
        else:
            inter = phases * (m - 1) / m / links.node_net_Bps
            steps_inter = phases * min(m - 1, log2_ceil(m))
        return Cost(steps_intra, steps_inter, max(intra, inter), protocols=protocols)
