"""Measured collective tables: read VIDUR's network tables and the published collectives, and predict them.

VIDUR (``vidur/network/<cluster>/{all_reduce,send_recv}.csv``): one row is one NCCL
collective of ``size`` bytes over ``num_workers`` GPUs, ``devices_per_node`` per node;
``time_stats.<op>.median`` is rank 0's CUPTI kernel time in ms (no host launch). The other
GPUs of the nodes are idle, so the group's members have the NICs to themselves. A
``cluster_id`` the catalog does not carry (a VIDUR node SKU such as
``h100_pairwise_nvlink``) is priced on the catalog's cluster for the row's ``gpu_id``
(:func:`cluster_for_gpu`: its own node, or a node of its generation built from its
datasheet links) with the row's ``max_devices_per_node`` GPUs per node, not refused.

Published (``published/collectives.csv``): nccl-tests or ``all_reduce_bench.py`` runs with
``busbw_GBps``/``algbw_GBps`` (10^9 B/s) and sometimes ``time_us``. These are wall-clock
times: a benchmark that drives k GPUs from one thread (nccl-tests ``-g k``) cannot finish
an iteration before it has launched the collective k times, so the prediction is
``max(kernel time, k * benchmark_launch_s)``. A row names a GPU, not a cluster: it is
priced on the catalog cluster with that GPU that the row's text names (``p6-b200``,
``EFA``), else the vendor's reference system (DGX/HGX, or the vendor platform).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from perfcast.catalog.hardware import load_hardware
from perfcast.errors import ConfigError, PerfcastError, UnknownNameError
from perfcast.system.cluster import Cluster, cluster_for_gpu, list_clusters, load_cluster
from perfcast.system.collectives import (
    CollectiveCoefficients,
    bus_factor,
    collective_times,
    parse_op,
)

__all__ = ["CollectiveRows", "cluster_for_row", "predict_collective_rows", "published_collective_rows",
           "vidur_network_rows"]


@dataclass
class CollectiveRows:
    """Collective measurements in one shape: per row where, what, and the measured time (s; NaN if none)."""

    cluster: np.ndarray  # catalog cluster id ("" where the row could not be placed)
    op: np.ndarray
    n: np.ndarray
    g: np.ndarray
    size: np.ndarray
    launch_gpus: np.ndarray  # 0: kernel time; k: wall time of a benchmark driving k GPUs per thread
    measured_s: np.ndarray
    group: np.ndarray  # what validate reports per group (the cluster id)
    status: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return int(self.size.size)

    @cached_property
    def placements(self) -> list[tuple[str, str, int, int, np.ndarray]]:
        """(cluster, op, n, g, row indices) of every distinct placement among the ``ok`` rows."""
        ok = np.array([s == "ok" for s in self.status], dtype=bool)
        found: dict[tuple[str, str, int, int], list[int]] = {}
        for i in np.flatnonzero(ok):
            found.setdefault((str(self.cluster[i]), str(self.op[i]), int(self.n[i]), int(self.g[i])), []).append(int(i))
        return [(c, o, n, g, np.array(idx)) for (c, o, n, g), idx in found.items()]

    def subset(self, mask: np.ndarray) -> CollectiveRows:
        """Rows where ``mask`` is true."""
        return CollectiveRows(self.cluster[mask], self.op[mask], self.n[mask], self.g[mask], self.size[mask],
                              self.launch_gpus[mask], self.measured_s[mask], self.group[mask],
                              [s for s, k in zip(self.status, mask, strict=True) if k])

    @staticmethod
    def concat(parts: list[CollectiveRows]) -> CollectiveRows:
        """One table of several."""
        cat = np.concatenate
        return CollectiveRows(cat([p.cluster for p in parts]), cat([p.op for p in parts]), cat([p.n for p in parts]),
                              cat([p.g for p in parts]), cat([p.size for p in parts]),
                              cat([p.launch_gpus for p in parts]), cat([p.measured_s for p in parts]),
                              cat([p.group for p in parts]), [s for p in parts for s in p.status])


def _num(row: dict[str, str], key: str) -> float:
    v = row.get(key, "")
    try:
        return float(v) if v not in ("", None) else float("nan")
    except ValueError:
        return float("nan")


def _make(n_rows: int) -> dict[str, list]:
    return {k: [] for k in ("cluster", "op", "n", "g", "size", "launch", "meas", "group", "status")}


def _finish(d: dict[str, list]) -> CollectiveRows:
    return CollectiveRows(np.array(d["cluster"], dtype=object), np.array(d["op"], dtype=object),
                          np.array(d["n"], dtype=int), np.array(d["g"], dtype=int), np.array(d["size"], dtype=float),
                          np.array(d["launch"], dtype=int), np.array(d["meas"], dtype=float),
                          np.array(d["group"], dtype=object), d["status"])


def _append(d: dict[str, list], cluster: str, op: str, n: int, g: int, size: float, launch: int, meas: float,
            group: str, status: str) -> None:
    for k, v in zip(("cluster", "op", "n", "g", "size", "launch", "meas", "group", "status"),
                    (cluster, op, n, g, size, launch, meas, group, status), strict=True):
        d[k].append(v)


def _check_placement(cluster: Cluster, n: float, g: float) -> tuple[Cluster, int, int]:
    if not (np.isfinite(n) and np.isfinite(g)) or n < 1 or g < 1 or n != int(n) or g != int(g) or int(n) % int(g):
        raise ConfigError(f"GPU counts {n} / {g} per node are not whole numbers with the second dividing the first")
    nodes = int(n) // int(g) if int(g) <= cluster.gpus_per_node else max(1, -(-int(n) // cluster.gpus_per_node))
    return cluster.with_nodes(max(cluster.nodes, nodes)), int(n), int(g)


def _vidur_cluster(r: dict[str, str]) -> Cluster:
    """The row's cluster: its ``cluster_id`` from the catalog, else one built from its ``gpu_id`` and
    ``max_devices_per_node`` (module docstring)."""
    cid = r.get("cluster_id", "")
    try:
        return load_cluster(cid)
    except UnknownNameError:
        if not r.get("gpu_id"):
            raise
    base = cluster_for_gpu(r["gpu_id"])
    per = _num(r, "max_devices_per_node")
    if not np.isfinite(per) or per < 1 or per != int(per) or int(per) == base.gpus_per_node:
        return base.model_copy(update={"id": f"{base.id}+{_normalize_id(cid)}"})
    per_node = int(per)
    domain = None if base.domain == base.gpus_per_node else max(base.domain, per_node)
    return base.model_copy(update={"id": f"{base.id}+{_normalize_id(cid)}", "gpus_per_node": per_node,
                                   "scale_up_domain": domain})


def _normalize_id(name: str) -> str:
    """A cluster id made of a table's name: lower case, ``[a-z0-9.-_]`` only."""
    return re.sub(r"[^a-z0-9.\-_]+", "-", name.strip().lower()) or "cluster"


def vidur_network_rows(rows: list[dict[str, str]]) -> CollectiveRows:
    """VIDUR network rows; a row that cannot be placed keeps an ``unsupported: ...`` status."""
    d = _make(len(rows))
    for r in rows:
        cid, op, n, g, size = r.get("cluster_id", ""), r.get("collective", ""), float("nan"), 1, float("nan")
        status, meas = "ok", float("nan")
        try:
            o = parse_op(op)
            op = o.value
            cluster, n_, g = _check_placement(_vidur_cluster(r), _num(r, "num_workers"), _num(r, "devices_per_node"))
            n = n_
            cid = cluster.id
            size = _num(r, "size")
            if not np.isfinite(size) or size < 0:
                raise ConfigError(f"size {r.get('size')!r} is not a byte count")
            meas = _num(r, f"time_stats.{op}.median") * 1e-3
        except PerfcastError as exc:
            status, cid = f"unsupported: {exc}", ""
        _append(d, cid, op, int(n) if np.isfinite(n) else 0, g, size, 0, meas, cid or r.get("cluster_id", ""),
                status)
    return _finish(d)


def cluster_for_row(gpu_id: str, text: str) -> Cluster:
    """The catalog cluster a published row with this GPU ran on (see the module docstring)."""
    gpu = load_hardware(gpu_id).id
    found = [c for c in list_clusters() if load_hardware(c.gpu).id == gpu]
    if not found:
        raise ConfigError(f"no catalog cluster has {gpu} GPUs; add a cluster YAML (see `perfcast clusters list`)")
    low = text.lower()

    def named(c: Cluster) -> bool:
        words = [c.id, *c.aliases]
        tech = c.inter_node.technology.split(" ")[0].lower()
        return any(w.lower() in low for w in words) or (len(tech) >= 3 and tech in low and tech == "efa")

    return sorted(found, key=lambda c: (not named(c), "vidur" in c.name.lower(), c.id))[0]


_G_FLAG = re.compile(r"(?:^|\s)-g\s*(\d+)")


def published_collective_rows(rows: list[dict[str, str]]) -> CollectiveRows:
    """Published collective rows, each with one measured time (time_us, else from algbw or busbw)."""
    d = _make(len(rows))
    for r in rows:
        cid, op, n, g, size, launch, status = "", r.get("collective", ""), 0, 1, float("nan"), 1, "ok"
        meas, group = float("nan"), r.get("gpu_id", "")
        try:
            o = parse_op(op)
            op = o.value
            text = " ".join((r.get("interconnect", ""), r.get("note", ""), r.get("gpu", "")))
            cluster = cluster_for_row(r.get("gpu_id", ""), text)
            nodes = _num(r, "nodes")
            nodes = nodes if np.isfinite(nodes) and nodes >= 1 else 1.0
            total = _num(r, "num_gpus")
            cluster, n, g = _check_placement(cluster, total, total / nodes)
            cid = group = cluster.id
            size = _num(r, "size_bytes")
            if not np.isfinite(size) or size < 0:
                raise ConfigError(f"size_bytes {r.get('size_bytes')!r} is not a byte count")
            m = _G_FLAG.search(r.get("note", ""))
            launch = int(m.group(1)) if m else 1
            t_us, alg, bus = _num(r, "time_us"), _num(r, "algbw_GBps"), _num(r, "busbw_GBps")
            if np.isfinite(t_us) and t_us > 0:
                meas = t_us * 1e-6
            elif np.isfinite(alg) and alg > 0:
                meas = size / (alg * 1e9)
            elif np.isfinite(bus) and bus > 0:
                meas = size * bus_factor(o, n) / (bus * 1e9)
        except PerfcastError as exc:
            status, cid = f"unsupported: {exc}", ""
        _append(d, cid, op, n, g, size, launch, meas, group, status)
    return _finish(d)


def predict_collective_rows(rows: CollectiveRows, co: CollectiveCoefficients) -> np.ndarray:
    """Predicted time (s) per row as the row was measured, priced with ``co`` (NaN where the row is not ``ok``)."""
    out = np.full(len(rows), np.nan)
    for cid, op, n, g, sel in rows.placements:
        cluster = load_cluster(cid)
        nodes = max(1, -(-n // min(g, cluster.gpus_per_node)))
        cluster = cluster.with_nodes(max(cluster.nodes, nodes))
        t = collective_times(op, rows.size[sel], n, cluster, gpus_per_node=g, coeffs=co, shared_nics=False)
        out[sel] = np.maximum(t, rows.launch_gpus[sel] * co.benchmark_launch_s)
    return out
