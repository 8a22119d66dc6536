"""Clusters: nodes of GPUs, the fabric inside a node (or NVLink domain) and the network between them.

A cluster is one YAML file (``perfcast/data/clusters/<id>.yaml``, base SI units, with its
``source``) or a user's own file. Bandwidths are per GPU and per direction
(what one GPU can send while it also receives), unlike the bidirectional
totals vendors quote.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from perfcast.catalog.hardware import Hardware, base_hardware_id, load_hardware
from perfcast.catalog.paths import normalize_name
from perfcast.datafiles import data_dir
from perfcast.errors import CatalogError, UnknownNameError
from perfcast.yamlio import load_model_file

__all__ = ["Cluster", "InterNode", "IntraNode", "cluster_for_gpu", "list_clusters", "load_cluster"]


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class IntraNode(_Frozen):
    """The scale-up fabric among the GPUs of one node / NVLink domain.

    ``topology``: ``switch`` (NVSwitch: every GPU reaches every other at
    ``bandwidth_Bps``), ``mesh`` (point-to-point links to every other GPU of the
    node, e.g. AMD xGMI: ``bandwidth_Bps`` is the GPU's total over its
    ``gpus_per_node - 1`` links, so a group of k GPUs uses k - 1 of them),
    ``pairs`` (NVLink bridges join GPU pairs at ``pair_bandwidth_Bps``; other
    traffic crosses PCIe / the host at ``bandwidth_Bps``), ``ring`` or ``pcie``
    (everything through PCIe switches).

    ``p2p`` (optional, default true): GPUs read and write each other's memory
    directly (CUDA peer-to-peer over NVLink or PCIe). ``false`` means NCCL's SHM
    transport, which stages every transfer through host memory; its bandwidth is
    then a fitted property of that path (``collectives.json``), not of the links,
    and slower between GPUs on different CPU sockets (``numa_nodes``, optional).
    """

    fabric: Literal["nvlink", "nvswitch", "xgmi", "pcie", "ethernet"]
    topology: Literal["switch", "mesh", "pairs", "ring", "pcie"] = "switch"
    bandwidth_Bps: float = Field(gt=0, description="per GPU, per direction")
    pair_bandwidth_Bps: float | None = Field(default=None, gt=0, description="per GPU per direction within a pair")
    latency_s: float = Field(default=3e-6, ge=0)
    multicast: bool = Field(default=False, description="in-switch reductions (NVLink SHARP / NVLS)")
    p2p: bool = Field(default=True, description="direct GPU-to-GPU copies; false = staged through host memory")
    numa_nodes: int = Field(default=1, ge=1, description="CPU sockets the GPUs are spread over, in index order; "
                                                         "a staged (p2p: false) transfer between sockets is slower")


class InterNode(_Frozen):
    """The network between nodes: NICs per node into a fabric of switches.

    Optional fields (defaults keep older files valid): ``nodes_per_leaf`` is how many
    nodes hang off one leaf switch (a group spanning more pays ``oversubscription``);
    ``transport`` is how NCCL moves data to the NIC: ``gpudirect`` (default: GPUDirect
    RDMA over InfiniBand, RoCE or EFA, the NIC reads and writes GPU memory), ``staged``
    (an RDMA NIC used through host-memory bounce buffers, without GPUDirect RDMA) or
    ``socket`` (NCCL's TCP socket transport over Ethernet). The bandwidth of the two
    host-staged paths is a fitted property of the path (``collectives.json``).
    """

    nics_per_node: int = Field(ge=0)
    nic_bandwidth_Bps: float = Field(ge=0, description="per NIC, per direction")
    topology: Literal["fat-tree", "switch", "rail", "ring", "none"] = "fat-tree"
    oversubscription: float = Field(default=1.0, ge=1.0, description="fat-tree taper above the leaf switches")
    nodes_per_leaf: int = Field(default=32, gt=0, description="nodes under one leaf switch")
    latency_s: float = Field(default=5e-6, ge=0)
    transport: Literal["gpudirect", "staged", "socket"] = Field(
        default="gpudirect", description="GPUDirect RDMA, RDMA through host memory, or TCP sockets")
    technology: str = ""


class Cluster(_Frozen):
    """A cluster type; ``nodes`` is the default size (commands may override it)."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9.\-_]*$")
    name: str
    gpu: str = Field(description="hardware catalog id of every GPU")
    gpus_per_node: int = Field(gt=0)
    nodes: int = Field(default=1, gt=0)
    scale_up_domain: int | None = Field(default=None, gt=0,
                                        description="GPUs sharing the intra-node fabric (72 on NVL72); "
                                                    "default gpus_per_node")
    intra_node: IntraNode
    inter_node: InterNode = InterNode(nics_per_node=0, nic_bandwidth_Bps=0.0, topology="none")
    aliases: tuple[str, ...] = ()
    source: tuple[str, ...] = Field(min_length=1)
    notes: str = ""

    @model_validator(mode="after")
    def _check(self) -> Cluster:
        if self.intra_node.topology == "pairs" and self.intra_node.pair_bandwidth_Bps is None:
            raise ValueError("a 'pairs' topology needs intra_node.pair_bandwidth_Bps")
        return self

    @property
    def domain(self) -> int:
        """GPUs that share the scale-up fabric."""
        return self.scale_up_domain or self.gpus_per_node

    def domain_share(self, gpus: int) -> int:
        """GPUs of a job of ``gpus`` GPUs that share one scale-up domain.

        A job that fills whole domains (or fits in one) uses every GPU of each. A rack-scale domain (NVL72:
        72 GPUs in trays of 4) can also be partly used: a job of 128 GPUs runs as 64 + 64 on two racks (a
        scheduler places it in whole nodes and keeps its ranks balanced, as the 64-of-72 layouts NVL72
        training jobs use), so the share is the largest divisor of ``gpus`` that is whole nodes and at most
        the domain.
        """
        d = self.domain
        if gpus <= d or gpus % d == 0:
            return min(gpus, d)
        gpn = self.gpus_per_node
        fits = [k for k in range(gpn, d + 1, gpn) if gpus % k == 0]
        return max(fits) if fits else gpn

    @property
    def num_gpus(self) -> int:
        """GPUs in the default-size cluster."""
        return self.nodes * self.gpus_per_node

    def hardware(self) -> Hardware:
        """The GPU's catalog entry."""
        return load_hardware(self.gpu)

    def with_nodes(self, nodes: int) -> Cluster:
        """The same cluster type with ``nodes`` nodes."""
        return self.model_copy(update={"nodes": nodes})

    @property
    def inter_bandwidth_per_gpu_Bps(self) -> float:
        """Network bandwidth per GPU per direction (NICs shared by the node's GPUs)."""
        n = self.inter_node
        return n.nics_per_node * n.nic_bandwidth_Bps / self.gpus_per_node if self.gpus_per_node else 0.0


def _dir() -> Path:
    return data_dir("clusters")


@lru_cache(maxsize=1)
def _catalog() -> tuple[dict[str, Cluster], dict[str, str]]:
    by_id: dict[str, Cluster] = {}
    names: dict[str, str] = {}
    for path in sorted(_dir().glob("*.yaml")):
        c: Cluster = load_model_file(path, Cluster, what="cluster file", error=CatalogError)
        if path.stem != c.id:
            raise CatalogError(f"{path}: file name must be the id ({c.id}.yaml)")
        by_id[c.id] = c
        for alias in (c.id, *c.aliases):
            key = normalize_name(alias)
            if key in names and names[key] != c.id:
                raise CatalogError(f"{path}: name {alias!r} is already taken by cluster {names[key]!r}")
            names[key] = c.id
    return by_id, names


def list_clusters() -> list[Cluster]:
    """Every catalog cluster, sorted by id."""
    by_id, _ = _catalog()
    return [by_id[k] for k in sorted(by_id)]


def load_cluster(name: str | Path | Cluster, *, nodes: int | None = None) -> Cluster:
    """A cluster by id, alias or YAML path (``nodes`` overrides its size)."""
    if isinstance(name, Cluster):
        c = name
    else:
        text = str(name)
        if text.endswith((".yaml", ".yml")):
            path = Path(text)
            if not path.is_file():
                raise CatalogError(f"cluster file {text} does not exist")
            c = load_model_file(path, Cluster, what="cluster file", error=CatalogError)
        else:
            by_id, names = _catalog()
            key = names.get(normalize_name(text))
            if key is None:
                raise UnknownNameError("cluster", text, by_id.keys(), list_command="perfcast clusters list")
            c = by_id[key]
    if nodes is not None:
        if nodes < 1:
            from perfcast.errors import ConfigError

            raise ConfigError(f"--nodes must be a positive integer (got {nodes})")
        c = c.with_nodes(nodes)
    return c


def cluster_for_gpu(gpu_id: str | Hardware) -> Cluster:
    """A catalog cluster of this GPU (a full DGX/HGX-style node first; for a GPU with a memory override, its
    catalog entry's cluster carrying it), or a cluster of the same generation (compute capability) carrying it
    in place of its own GPU."""
    hw = load_hardware(gpu_id)
    clusters = list_clusters()
    entry = base_hardware_id(hw.id)  # a GPU with a memory override sits in its catalog entry's clusters
    same = [c for c in clusters if c.gpu in (hw.id, entry)]
    if same:
        # a full node of the GPU (DGX/HGX) before pairs or rack-scale domains
        best = min(same, key=lambda c: (c.gpu != hw.id, c.domain != c.gpus_per_node, -c.gpus_per_node,
                                        not c.id.startswith(("dgx-", "hgx-")), c.id))
        return best if best.gpu == hw.id else best.model_copy(update={"gpu": hw.id, "id": f"{best.id}+{hw.id}"})
    scale_up = _has_scale_up(hw)
    kin = [c for c in clusters if load_hardware(c.gpu).compute_capability == hw.compute_capability
           and c.domain == c.gpus_per_node and _has_scale_up(load_hardware(c.gpu)) == scale_up]
    if kin:
        base = min(kin, key=lambda c: (-c.gpus_per_node, c.id))
        return base.model_copy(update={"gpu": hw.id, "id": f"{base.id}+{hw.id}"})
    return _node_from_specs(hw)


def _has_scale_up(hw: Hardware) -> bool:
    link = hw.interconnect
    return str(getattr(link.fabric, "value", link.fabric)) in ("nvlink", "xgmi") and bool(
        link.fabric_bidir_bandwidth_Bps)


def _node_from_specs(hw: Hardware) -> Cluster:
    """One 8-GPU server of ``hw`` built from its datasheet links: its scale-up fabric when it has
    one (NVLink / xGMI, as a switch), else PCIe through the host; no network between nodes."""
    link = hw.interconnect
    fabric = str(getattr(link.fabric, "value", link.fabric))
    scale_up = _has_scale_up(hw)
    bidir = link.fabric_bidir_bandwidth_Bps if scale_up else (link.pcie_bidir_bandwidth_Bps or 32e9)
    intra = IntraNode(fabric=fabric if scale_up else "pcie",  # type: ignore[arg-type]
                      topology="switch" if scale_up else "pcie", bandwidth_Bps=float(bidir or 32e9) / 2)
    return Cluster(id=f"server-{hw.id}", name=f"8x {hw.name} (built from its datasheet links)", gpu=hw.id,
                   gpus_per_node=8, intra_node=intra,
                   source=(f"the {hw.id} hardware entry's interconnect (no catalog cluster carries this GPU)",))
