"""Where a group of GPUs sits on a cluster, and the bandwidths and latencies its collectives see.

A group of ``n`` GPUs has ``g`` members in each of ``m = n / g`` scale-up domains (an
NVLink/xGMI domain: a node, or 72 GPUs of an NVL72 rack). Bandwidths here are per GPU,
per direction, and already *effective* for NCCL's Simple protocol: the link's nominal
bandwidth times the fitted efficiency of its class (``link_efficiency_frac``), or the
fitted rate of a host-staged path. Everything is closed-form in ``n``: nothing loops
over GPUs, so 16,384 GPUs cost what 8 do.

Network contention: the NICs of a node are shared by its GPUs (``shared_nics``, the
training case where every GPU of a node runs its own collective at once), so each GPU
gets ``nics_per_node * nic_bandwidth / gpus_per_node``; with ``shared_nics=False`` only the
group's members use the NICs (a benchmark on an otherwise idle node). A group spanning
more than ``nodes_per_leaf`` nodes (default 32) also pays the fat-tree ``oversubscription``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from perfcast.coefficients.collectives import CollectiveCoefficients
from perfcast.errors import ConfigError
from perfcast.system.cluster import Cluster

__all__ = ["Links", "Placement", "links", "members_per_domain", "place"]

# link class of each scale-up fabric (its Simple-protocol efficiency is fitted per class)
_CLASS = {"nvlink": "nvlink", "nvswitch": "nvlink", "xgmi": "xgmi", "pcie": "pcie", "ethernet": "network"}


@dataclass(frozen=True, slots=True)
class Placement:
    """``n`` GPUs, ``g`` per scale-up domain, ``m`` domains, spanning ``nodes`` physical nodes."""

    n: int
    g: int
    m: int
    nodes: int


@dataclass(frozen=True, slots=True)
class Links:
    """Effective bandwidths (B/s per GPU per direction, Simple protocol) and latencies (s) of one placement."""

    ring_Bps: float  # the bottleneck link of a ring through the g members of one domain
    pair_Bps: float  # point-to-point between two members of one domain (send/recv)
    a2a_Bps: float  # point-to-point from a GPU to the other g - 1 members of its domain (all-to-all)
    nvls_Bps: float  # in-switch reduction (NVLS); 0 without multicast
    net_Bps: float  # one GPU's share of the network (0 inside one domain)
    node_net_Bps: float  # the g members of one domain together
    p2p_net_Bps: float  # one GPU's point-to-point rate over the network (0 inside one domain)
    intra_latency_s: float
    inter_latency_s: float
    p2p_net_burst_Bps: float = 0.0  # socket transport: the wire's rate for messages that fit the socket buffers
    intra_staged_s: float = 0.0  # extra per step inside the domain when it is staged through host memory (SHM)
    inter_staged_s: float = 0.0  # extra per network step when the network is staged through host memory


def place(cluster: Cluster, group_size: int, gpus_per_node: int | None = None) -> Placement:
    """Check that the group fits the cluster; ConfigError names the constraint and the valid choices."""
    n = int(group_size)
    if n < 1 or n != group_size:
        raise ConfigError(f"group size must be a positive whole number of GPUs (got {group_size})")
    domain = cluster.domain
    g = members_per_domain(n, cluster.domain_share(n)) if gpus_per_node is None else int(gpus_per_node)
    if gpus_per_node is not None and (g < 1 or g != gpus_per_node):
        raise ConfigError(f"gpus_per_node must be a positive whole number (got {gpus_per_node})")
    if n > cluster.num_gpus:
        need = -(-n // cluster.gpus_per_node)  # whole-number ceiling: a float quotient overflows for huge n
        raise ConfigError(f"a group of {n} GPUs does not fit {cluster.id} with {cluster.nodes} node(s) x "
                          f"{cluster.gpus_per_node} GPUs = {cluster.num_gpus} GPUs; use at least {need} nodes")
    if g > domain:
        raise ConfigError(f"gpus_per_node={g} exceeds the {domain}-GPU scale-up domain of {cluster.id}; "
                          f"use 1..{domain}")
    if n % g:
        ok = [d for d in range(1, min(n, domain) + 1) if n % d == 0]
        raise ConfigError(f"{n} GPUs do not split evenly into groups of {g} per scale-up domain; "
                          f"use gpus_per_node in {{{', '.join(map(str, ok))}}}")
    m = n // g
    domains = max(1, math.ceil(cluster.num_gpus / domain))
    if m > domains:
        raise ConfigError(f"{n} GPUs at {g} per scale-up domain need {m} domains of {domain} GPUs; {cluster.id} "
                          f"with {cluster.nodes} node(s) has {domains}; add nodes or raise gpus_per_node")
    if m > 1 and (cluster.inter_node.nics_per_node == 0 or cluster.inter_node.nic_bandwidth_Bps == 0):
        raise ConfigError(f"{cluster.id} has no inter-node network (inter_node.nics_per_node = 0); a group must "
                          f"stay inside one {domain}-GPU domain")
    per_node = min(g, cluster.gpus_per_node)
    return Placement(n, g, m, m * math.ceil(g / per_node))


def members_per_domain(n: int, share: int) -> int:
    """Members of a group of ``n`` in each scale-up domain when up to ``share`` of them fit in one: the largest
    divisor of ``n`` that fits, so every domain holds the same number (a balanced placement)."""
    return max(k for k in range(1, min(n, share) + 1) if n % k == 0)


def links(cluster: Cluster, p: Placement, co: CollectiveCoefficients, *, shared_nics: bool = True) -> Links:
    """The effective bandwidths and latencies the placement ``p`` sees on ``cluster``."""
    intra = cluster.intra_node
    eff = co.link_efficiency_frac
    cls = _CLASS[intra.fabric]
    g = p.g
    if not intra.p2p:  # NCCL SHM: GPU -> host memory -> GPU, bounded by the host path, not the links
        staged = co.staged_bandwidth_Bps
        rate = min(intra.bandwidth_Bps * eff["pcie"], staged["shm"])
        if intra.numa_nodes > 1 and g > cluster.gpus_per_node // intra.numa_nodes:
            rate = min(rate, staged["shm_cross_socket"])  # the group spans CPU sockets
        rate = min(rate, co.staged_node_bandwidth_Bps["shm"] / max(g, 1))
        ring = rate
        pair = a2a = rate * co.p2p_bandwidth_frac["shm"]
    elif intra.topology == "mesh":  # one link to every other GPU of the domain
        link = intra.bandwidth_Bps / max(cluster.domain - 1, 1) * eff[cls]
        pair = link
        ring = a2a = link * max(g - 1, 1)
    elif intra.topology == "pairs":  # NVLink bridges in pairs, PCIe between the pairs
        assert intra.pair_bandwidth_Bps is not None  # the schema requires it
        bridge = intra.pair_bandwidth_Bps * eff[cls]
        pcie = intra.bandwidth_Bps * eff["pcie"]
        pair = bridge
        ring = bridge if g <= 2 else pcie
        # a GPU's data for its partner takes the bridge, for the g - 2 others PCIe, at the same time
        a2a = bridge if g <= 2 else (g - 1) / max(1.0 / bridge, (g - 2) / pcie)
    else:  # switch (NVSwitch), or PCIe switches / a ring of links
        rate = intra.bandwidth_Bps * eff[cls if intra.topology == "switch" else "pcie"]
        ring = pair = a2a = rate
    if intra.p2p:  # a copy does not run at a ring's reduce-and-forward speed, nor faster than the link itself
        pair = min(pair * co.p2p_bandwidth_frac["link"], _nominal_a2a(cluster, 2))
        a2a = min(a2a * co.p2p_bandwidth_frac["link"], _nominal_a2a(cluster, g))
    nvls = intra.bandwidth_Bps * co.nvls_efficiency_frac if intra.multicast and intra.p2p else 0.0
    net = node = p2p_net = burst = 0.0
    path = {"staged": "network", "socket": "socket"}.get(cluster.inter_node.transport)
    if p.m > 1:
        inter = cluster.inter_node
        gpn = cluster.gpus_per_node
        if shared_nics:
            share = inter.nics_per_node * inter.nic_bandwidth_Bps / gpn
        else:  # only the members use the node's NICs: each its own NICs' share, at least one NIC
            members = min(g, gpn)
            nics_used = min(inter.nics_per_node, members * max(1.0, inter.nics_per_node / gpn))
            share = inter.nic_bandwidth_Bps * nics_used / members
        taper = inter.oversubscription if p.nodes > inter.nodes_per_leaf else 1.0
        net = share * eff["network"]
        p2p_net = min(net * co.p2p_bandwidth_frac["link"], share)  # a copy never outruns the NICs' line rate
        if path:  # through host memory: bounded by that path, per GPU and per node
            # a copy over RDMA staged through host memory runs at its own fraction of a ring's rate; a TCP
            # socket streams any copy at the socket path's rate (so the two paths' fits stay independent)
            staged_p2p = co.p2p_bandwidth_frac["network"] if path == "network" else 1.0
            net = min(net, co.staged_bandwidth_Bps[path])
            p2p_net = min(p2p_net, co.staged_bandwidth_Bps[path] * staged_p2p)
        if path == "socket":  # what fits the socket buffers leaves at the wire's rate, not the host path's
            burst = max(share * eff["network"] / taper, p2p_net / taper)
        net, p2p_net = net / taper, p2p_net / taper
        node = net * g
        if path:
            cap = co.staged_node_bandwidth_Bps[path] * math.ceil(g / gpn) / taper
            node = min(node, cap)
            p2p_net = min(p2p_net, cap * staged_p2p / g)
    extra = co.staged_latency_s  # a host-memory bounce and the proxy thread, per step
    intra_staged = 0.0 if intra.p2p else extra.get("shm", 0.0)
    inter_staged = extra.get(path, 0.0) if p.m > 1 and path else 0.0
    return Links(ring, pair, a2a, nvls, net, node, p2p_net, intra.latency_s, cluster.inter_node.latency_s, burst,
                 intra_staged, inter_staged)


def _nominal_a2a(cluster: Cluster, g: int) -> float:
    """The line rate (B/s, per direction) from one GPU to the other g - 1 members of its domain, all at once."""
    intra = cluster.intra_node
    if intra.topology == "mesh":
        return intra.bandwidth_Bps / max(cluster.domain - 1, 1) * max(g - 1, 1)
    if intra.topology == "pairs" and intra.pair_bandwidth_Bps is not None:
        bridge, pcie = intra.pair_bandwidth_Bps, intra.bandwidth_Bps
        return bridge if g <= 2 else (g - 1) / max(1.0 / bridge, (g - 2) / pcie)
    return intra.bandwidth_Bps
