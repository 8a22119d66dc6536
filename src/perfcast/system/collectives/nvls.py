"""NVLS: all-reduce inside the NVLink switch (NVLink SHARP, third-generation NVSwitch and later).

Each GPU asks the switch for the reduced values of its 1/g of the buffer
(``multimem.ld_reduce``) and multicasts its result back (``multimem.st``), so each byte
crosses a GPU's link about once instead of a ring's 2(g-1)/g times. NCCL 2.17+ uses it by
default on NVSwitch systems, with the Simple protocol only; it is why nccl-tests busbw can
exceed the link speed (480 GB/s against 450 GB/s on H100-class nodes:
shared/groundtruth/published/README.md, ml-engineering notes). ``nvls_efficiency_frac``
is the achieved fraction of the per-direction NVLink bandwidth. One domain only: across
domains NCCL combines it with a tree (see ``hierarchical``).
"""

from __future__ import annotations

from perfcast.coefficients.collectives import CollectiveCoefficients
from perfcast.system.cluster import Cluster
from perfcast.system.collectives.base import Algorithm, Cost, register
from perfcast.system.collectives.placement import Links, Placement
from perfcast.system.collectives.types import CollectiveOp

__all__ = ["Nvls"]

_OP = CollectiveOp


@register("nvls")
class Nvls(Algorithm):
    """In-switch all-reduce / all-gather / reduce-scatter inside one NVLink domain."""

    ops = frozenset({_OP.ALL_REDUCE, _OP.ALL_GATHER, _OP.REDUCE_SCATTER})
    nccl_ops = frozenset({_OP.ALL_REDUCE, _OP.ALL_GATHER, _OP.REDUCE_SCATTER})
    summary = "in-switch reduction and multicast (NVLink SHARP), one NVLink domain"

    def unavailable(self, op: CollectiveOp, p: Placement, links: Links, cluster: Cluster) -> str | None:
        if links.nvls_Bps <= 0:
            return f"nvls needs in-switch reduction (intra_node.multicast); {cluster.id} has none; use ring"
        if p.m > 1:
            return (f"nvls works inside one NVLink domain, this group spans {p.m}; "
                    "use hierarchical (NVLS inside, network across)")
        return None

    def cost(self, op: CollectiveOp, p: Placement, links: Links, co: CollectiveCoefficients) -> Cost:
        g = p.g
        if op is _OP.ALL_REDUCE:
            return Cost(2.0, 0.0, 1.0 / links.nvls_Bps, protocols=("simple",))
        return Cost(1.0, 0.0, (g - 1) / g / links.nvls_Bps, protocols=("simple",))
