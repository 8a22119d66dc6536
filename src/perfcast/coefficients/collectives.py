"""Fitted collective-model coefficients: ``data/coefficients/collectives.json`` (versioned JSON, never pickle).

``perfcast fit --stages collectives`` writes it; ``fitted_on`` names the measured rows each
group of coefficients came from, and says which ones are priors (no visible rows identify them).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from perfcast.datafiles import data_path
from perfcast.jsonio import CanonicalJson, versioned_loader

__all__ = ["COLLECTIVES_SCHEMA_VERSION", "CollectiveCoefficients", "ProtocolCoefficients",
           "load_collective_coefficients"]

COLLECTIVES_SCHEMA_VERSION = 1


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ProtocolCoefficients(_Model):
    """One NCCL protocol (LL, LL128, Simple; point-to-point LL and Simple): bandwidth and latencies."""

    bandwidth_frac: float = Field(gt=0, le=2, description="bandwidth as a fraction of the effective link "
                                                          "bandwidth (link_efficiency_frac times the link)")
    base_latency_s: float = Field(ge=0, description="fixed time of one collective kernel")
    hop_latency_frac: float = Field(ge=0, description="time of one sequential step inside a scale-up domain as a "
                                                      "multiple of the link's latency (intra_node.latency_s)")
    net_hop_latency_frac: float | None = Field(
        default=None, ge=0, description="time of one sequential step across the network as a multiple of the "
                                        "network's latency (inter_node.latency_s); None: hop_latency_frac")

    @property
    def net_hop_frac(self) -> float:
        """``net_hop_latency_frac``, or ``hop_latency_frac`` where it is not set."""
        return self.hop_latency_frac if self.net_hop_latency_frac is None else self.net_hop_latency_frac


class CollectiveCoefficients(_Model, CanonicalJson):
    """Every coefficient of the collective cost model (see :mod:`perfcast.system.collectives.model`)."""

    schema_version: int
    produced_by: str
    fitted_on: dict[str, str]
    link_efficiency_frac: dict[str, float] = Field(
        description="Simple-protocol bandwidth as a fraction of the per-direction link bandwidth, by link "
                    "class: nvlink (bridges and NVSwitch), pcie, xgmi, network (GPUDirect RDMA)")
    staged_bandwidth_Bps: dict[str, float] = Field(
        description="per-GPU bandwidth of paths staged through host memory: shm (intra-node, no P2P), "
                    "shm_cross_socket (the same between CPU sockets), network (RDMA without GPUDirect), "
                    "socket (NCCL's TCP transport)")
    staged_node_bandwidth_Bps: dict[str, float] = Field(
        description="what one node's host-memory path carries for all its GPUs together (shm, network, socket)")
    staged_latency_s: dict[str, float] = Field(
        default_factory=dict,
        description="extra time of one sequential step over a path staged through host memory (a bounce-buffer "
                    "copy and NCCL's proxy thread): shm (intra-node, per step inside the node), network (RDMA "
                    "without GPUDirect) and socket (TCP), per step across the network; missing: 0")
    protocols: dict[str, ProtocolCoefficients] = Field(
        description="collectives: ll, ll128, simple; point-to-point (send/recv, all-to-all): p2p_ll, p2p_simple")
    p2p_bandwidth_frac: dict[str, float] = Field(
        description="send/recv and all-to-all bandwidth relative to a ring collective's on the same path (a copy, "
                    "not a reduction), by path: link (direct GPU-to-GPU and GPUDirect RDMA), shm, network "
                    "(RDMA staged through host memory; a TCP socket streams a copy at the socket rate)")
    tree_efficiency_frac: float = Field(gt=0, le=1, description="NCCL tree bandwidth relative to a ring's")
    nvls_efficiency_frac: float = Field(gt=0, le=2, description="in-switch (NVLS) reduction bandwidth as a "
                                                                "fraction of the per-direction NVLink bandwidth")
    socket_buffer_bytes: float = Field(
        default=4.0 * 2**20, gt=0,
        description="bytes a host-staged TCP (socket transport) path absorbs at the wire's rate before it "
                    "streams at the sustained staged rate (Linux tcp_wmem/tcp_rmem maxima are 4-6 MiB per socket)")
    peer_latency_s: float = Field(ge=0, description="per peer of a direct (pairwise) exchange")
    benchmark_launch_s: float = Field(ge=0, description="host time to launch one collective on one GPU; a "
                                                        "benchmark driving k GPUs from one thread (nccl-tests "
                                                        "-g k) cannot run faster than k of these")

    priors: dict[str, float] = Field(default_factory=dict,
                                     description="the value of every fitted coefficient before fitting (dotted "
                                                 "path -> value): each fit starts from and is pulled towards them")


_LOAD = versioned_loader(data_path("coefficients", "collectives.json"), CollectiveCoefficients,
                         version=COLLECTIVES_SCHEMA_VERSION, what="collective coefficients")


def load_collective_coefficients(path: str | Path | None = None) -> CollectiveCoefficients:
    """Load collective coefficients (the package's own ``data/coefficients/collectives.json`` when ``path`` is None)."""
    return _LOAD(path)
