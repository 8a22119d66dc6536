"""Direct (pairwise) exchange: every rank sends to every peer at once; NCCL's all-to-all and send/recv.

All-to-all: each rank sends 1/n of its buffer to each of the other n - 1 ranks, the part for
its own domain over the scale-up links and the rest over its share of the network, at the
same time. Each peer costs ``peer_latency_s`` to set up. Send/recv: one transfer between
two ranks (every member sends to its successor at once, e.g. pipeline stages).

NCCL runs point-to-point operations with the LL protocol up to 16 KiB per peer and with
Simple above (``NCCL_P2P_LL_THRESHOLD``, default 16384, github.com/NVIDIA/nccl src/enqueue.cc),
through its own kernels and channels: their latencies and bandwidths are the ``p2p_ll`` and
``p2p_simple`` protocol coefficients; a copy is not a reduction, so its bandwidth is
``p2p_bandwidth_frac`` times a ring's on the same path (placement.Links.pair_Bps).
"""

from __future__ import annotations

from perfcast.coefficients.collectives import CollectiveCoefficients
from perfcast.system.collectives.base import Algorithm, Cost, register
from perfcast.system.collectives.placement import Links, Placement
from perfcast.system.collectives.types import CollectiveOp

__all__ = ["P2P_LL_THRESHOLD_BYTES", "Direct"]

_OP = CollectiveOp
P2P_LL_THRESHOLD_BYTES = 16384.0


@register("direct")
class Direct(Algorithm):
    """Pairwise all_to_all and send_recv."""

    ops = frozenset({_OP.ALL_TO_ALL, _OP.SEND_RECV})
    nccl_ops = frozenset({_OP.ALL_TO_ALL, _OP.SEND_RECV})
    summary = "pairwise sends to every peer at once (NCCL all-to-all, send/recv)"

    def cost(self, op: CollectiveOp, p: Placement, links: Links, co: CollectiveCoefficients) -> Cost:
        n, g, m = p.n, p.g, p.m
        per_gpu_net = links.p2p_net_Bps
        steps = (1.0, 0.0) if m == 1 else (0.0, 1.0)
        protocols = ("p2p_ll", "p2p_simple")
        if op is _OP.SEND_RECV:
            rate = links.pair_Bps if m == 1 else per_gpu_net
            if m > 1 and links.p2p_net_burst_Bps > 0:  # TCP sockets: wire rate while the message fits the buffers
                return Cost(*steps, 1.0 / rate, protocols=protocols, ll_max_bytes=P2P_LL_THRESHOLD_BYTES,
                            burst_s_per_byte=1.0 / links.p2p_net_burst_Bps, burst_bytes=co.socket_buffer_bytes)
            return Cost(*steps, 1.0 / rate, protocols=protocols, ll_max_bytes=P2P_LL_THRESHOLD_BYTES)
        intra = (g - 1) / n / links.a2a_Bps if g > 1 else 0.0
        inter = (n - g) / n / per_gpu_net if m > 1 else 0.0
        return Cost(*steps, max(intra, inter), fixed_s=(n - 1) * co.peer_latency_s, protocols=protocols,
                    ll_max_bytes=P2P_LL_THRESHOLD_BYTES * n)
