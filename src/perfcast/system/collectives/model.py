"""Price a collective: place the group, derive its links, cost every algorithm and protocol, pick one.

Time of one algorithm with one protocol (NCCL's LL, LL128 or Simple)::

    t = base_latency_s[proto] + fixed_s
        + intra_steps * (hop_latency_frac[proto] * intra_node.latency_s + staged_s[shm])
        + inter_steps * (net_hop_latency_frac[proto] * inter_node.latency_s + staged_s[network path])
        + size_bytes * s_per_byte / bandwidth_frac[proto]

This is NCCL's own tuning model (github.com/NVIDIA/nccl src/graph/tuning.cc, ``ncclTopoTuneModel``:
``baseLat[algo][proto] + nIntraSteps * hwLat[NVLINK|PCI][algo][proto] + nInterSteps * hwLat[NET][algo][proto]``,
time = latency + bytes / (nChannels x per-channel busBw x protocol fraction)); the priors of every
coefficient are NCCL's values (``data/coefficients/collectives.json`` ``fitted_on`` names the version), and
``staged_s`` is the extra of a path NCCL stages through host memory (its SHM transport, RDMA without
GPUDirect, TCP sockets), which NCCL's table does not price.

except on a host-staged TCP path (the ``socket`` transport), where ``s_per_byte`` blends from
the wire's rate, for messages that fit the socket buffers (``socket_buffer_bytes``), into the
sustained rate of the host path for larger ones (see ``_s_per_byte``).

Choice when no algorithm is asked for (what NCCL does, github.com/NVIDIA/nccl
src/graph/tuning.cc and src/enqueue.cc): among the algorithms NCCL implements for the op
that can run on the placement (all_reduce: ring, tree, nvls inside one domain with
in-switch reduction, hierarchical = NVLS-tree across such domains; all_gather and
reduce_scatter: ring, nvls; broadcast: ring; all_to_all and send_recv: direct), and each
protocol it allows, the one with the smallest predicted time. ``halving_doubling`` and
the ring all-to-all are priced only when asked for.
"""

from __future__ import annotations

import math

import numpy as np

from perfcast.coefficients.bundle import Calibration, resolve_calibration
from perfcast.coefficients.collectives import CollectiveCoefficients
from perfcast.errors import ConfigError
from perfcast.system.cluster import Cluster, load_cluster
from perfcast.system.collectives.base import ALGORITHMS, Algorithm, Cost
from perfcast.system.collectives.placement import Links, Placement, links, place
from perfcast.system.collectives.types import CollectiveOp, CollectiveTime, bus_factor, parse_op

__all__ = ["candidates", "check_buffer_fits", "collective_time", "collective_times", "price_collective"]


def _s_per_byte(cost: Cost, sizes: np.ndarray) -> np.ndarray | float:
    """Seconds per byte at each size: one rate, or the burst rate blending into the sustained one.

    A host-staged TCP path moves a message that fits its socket buffers at the wire's rate; a
    larger one streams at the sustained rate of the host path (``burst_bytes`` sets the crossover,
    a smooth blend ``1 / (1 + (S/B)^2)`` so the time stays increasing in the size).
    """
    if cost.burst_s_per_byte is None or cost.burst_bytes <= 0:
        return cost.s_per_byte
    fits = 1.0 / (1.0 + (sizes / cost.burst_bytes) ** 2)
    return cost.s_per_byte + (cost.burst_s_per_byte - cost.s_per_byte) * fits


def _protocol_times(cost: Cost, sizes: np.ndarray, lk: Links, co: CollectiveCoefficients
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Per size: the best time over the allowed protocols and the index (into cost.protocols) of it."""
    best = np.full(sizes.shape, np.inf)
    which = np.zeros(sizes.shape, dtype=int)
    for i, name in enumerate(cost.protocols):
        pc = co.protocols[name]
        hops_s = (cost.intra_steps * (pc.hop_latency_frac * lk.intra_latency_s + lk.intra_staged_s)
                  + cost.inter_steps * (pc.net_hop_frac * lk.inter_latency_s + lk.inter_staged_s))
        latency = pc.base_latency_s + cost.fixed_s + hops_s
        t = latency + sizes * (_s_per_byte(cost, sizes) / pc.bandwidth_frac)
        if name.endswith("ll") and math.isfinite(cost.ll_max_bytes):
            t = np.where(sizes <= cost.ll_max_bytes, t, np.inf)
        better = t < best
        best = np.where(better, t, best)
        which = np.where(better, i, which)
    return best, which


def candidates(op: CollectiveOp, p: Placement, lk: Links, cluster: Cluster, algorithm: str | None
               ) -> list[Algorithm]:
    """The algorithm asked for (checked), or every algorithm NCCL would consider here."""
    if algorithm is not None:
        alg = ALGORITHMS.get(algorithm)
        if op not in alg.ops:
            can = [name for name, a in ALGORITHMS.items() if op in a.ops]
            raise ConfigError(f"algorithm {alg.name!r} does not implement {op.value}; use one of {', '.join(can)}")
        reason = alg.unavailable(op, p, lk, cluster)
        if reason:
            raise ConfigError(reason)
        return [alg]
    out = [a for _, a in ALGORITHMS.items()
           if a.nccl_candidate(op, p, lk) and a.unavailable(op, p, lk, cluster) is None]
    assert out, f"no algorithm for {op}"  # ring or direct is always there
    return out


def _setup(op: str | CollectiveOp, group_size: int, cluster: Cluster | str, gpus_per_node: int | None,
           co: CollectiveCoefficients, shared_nics: bool
           ) -> tuple[CollectiveOp, Cluster, Placement, Links, CollectiveCoefficients]:
    o = parse_op(op)
    c = cluster if isinstance(cluster, Cluster) else load_cluster(cluster)
    p = place(c, group_size, gpus_per_node)
    return o, c, p, links(c, p, co, shared_nics=shared_nics), co


def _check_sizes(sizes: np.ndarray) -> None:
    if sizes.size and (not np.all(np.isfinite(sizes)) or np.any(sizes < 0)):
        bad = sizes[~np.isfinite(sizes) | (sizes < 0)][0]
        raise ConfigError(f"collective size {bad!r} bytes is invalid; sizes are finite and >= 0 bytes")


def check_buffer_fits(size_bytes: float, cluster: Cluster) -> None:
    """A collective a user asks for moves a buffer that one GPU holds: nccl-tests' size (module
    :mod:`perfcast.system.collectives.types`) is each GPU's buffer, so it is at most the GPU's memory."""
    _check_sizes(np.array([float(size_bytes)]))
    hw = cluster.hardware()
    if size_bytes > hw.memory_bytes:
        raise ConfigError(f"a collective of {size_bytes:.4g} bytes needs a buffer larger than the "
                          f"{hw.memory_bytes / 2**30:.0f} GiB of one {hw.id} ({cluster.id}); sizes are at most "
                          f"{hw.memory_bytes:.4g} bytes")


def collective_time(op: str | CollectiveOp, size_bytes: float, group_size: int, cluster: Cluster | str, *,
                    gpus_per_node: int | None = None, algorithm: str | None = None,
                    calibration: Calibration | None = None, shared_nics: bool = True) -> CollectiveTime:
    """Predicted time of one collective over ``group_size`` GPUs placed on ``cluster`` (priced by
    :func:`price_collective` with ``calibration``'s collective coefficients; the shipped ones when None)."""
    return price_collective(op, size_bytes, group_size, cluster, resolve_calibration(calibration).collectives,
                            gpus_per_node=gpus_per_node, algorithm=algorithm, shared_nics=shared_nics)


def price_collective(op: str | CollectiveOp, size_bytes: float, group_size: int, cluster: Cluster | str,
                     coeffs: CollectiveCoefficients, *, gpus_per_node: int | None = None,
                     algorithm: str | None = None, shared_nics: bool = True) -> CollectiveTime:
    """Time of one collective over ``group_size`` GPUs placed on ``cluster``, priced with ``coeffs``.

    ``size_bytes`` follows nccl-tests (see :mod:`perfcast.system.collectives.types`);
    ``gpus_per_node`` is how many members share one scale-up domain (default
    ``min(group_size, cluster.domain)``; a data-parallel group spread one rank per node is 1);
    ``algorithm=None`` picks what NCCL would (module docstring). ``shared_nics`` (default)
    assumes every GPU of a node uses the network at once, as in training.
    """
    sizes = np.array([float(size_bytes)])
    _check_sizes(sizes)
    o, c, p, lk, co = _setup(op, group_size, cluster, gpus_per_node, coeffs, shared_nics)
    algs = candidates(o, p, lk, c, algorithm)
    S = float(size_bytes)
    if p.n == 1 or S == 0.0:  # nothing to move: NCCL returns without a kernel
        return CollectiveTime(o.value, algs[0].name, S, p.n, 0.0, math.inf if S else 0.0, 0.0, "none", p.g)
    best: tuple[float, str, str] = (math.inf, "", "")
    for alg in algs:
        cost = alg.cost(o, p, lk, co)
        t, which = _protocol_times(cost, sizes, lk, co)
        if t[0] < best[0]:
            best = (float(t[0]), alg.name, cost.protocols[int(which[0])])
    time_s, name, proto = best
    algbw = S / time_s
    return CollectiveTime(o.value, name, S, p.n, time_s, algbw, algbw * bus_factor(o, p.n), proto, p.g)


def collective_times(op: str | CollectiveOp, sizes: np.ndarray, group_size: int, cluster: Cluster | str, *,
                     gpus_per_node: int | None = None, algorithm: str | None = None,
                     coeffs: CollectiveCoefficients, shared_nics: bool = True) -> np.ndarray:
    """``price_collective(...).time_s`` for every size in ``sizes`` at once (numpy; for sweeps and fits)."""
    arr = np.asarray(sizes, dtype=float)
    _check_sizes(arr)
    o, c, p, lk, co = _setup(op, group_size, cluster, gpus_per_node, coeffs, shared_nics)
    algs = candidates(o, p, lk, c, algorithm)
    if p.n == 1:
        return np.zeros(arr.shape)
    best = np.full(arr.shape, np.inf)
    for alg in algs:
        t, _ = _protocol_times(alg.cost(o, p, lk, co), arr, lk, co)
        best = np.minimum(best, t)
    return np.where(arr > 0, best, 0.0)
