"""``perfcast fit --stages collectives``: fit the collective-model coefficients on the measured tables.

Rows: every row of ``vidur/network/*/{all_reduce,send_recv}.csv`` (median kernel time) and of
``published/collectives.csv`` (time_us, else algbw or busbw). The tables have no split, so
``perfcast validate`` reports them in-sample and also leave-one-cluster-out (refit without a
cluster's rows, then predict them).

The residual of a row is ``log(predicted / measured)`` under a soft-L1 loss (a few regime
jumps of NCCL between algorithms must not drag the fit), and every (table, GPUs, GPUs per
node) group weighs ``sqrt(rows)`` in total, so a 2,000-row sweep does not drown the 22
published rows. Every fit starts from the priors recorded in the coefficient file and is
weakly pulled towards them (one unit of loss per e-fold of a coefficient), which keeps what
the rows cannot tell apart near the priors. Coefficients that no visible row identifies
are not fitted and say so in ``fitted_on``: the GPUDirect RDMA network efficiency and per-step
network latencies (every visible multi-node row is host-staged; they stay at NCCL's values), NVLS
and the per-peer latency of all-to-all.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from perfcast.coefficients.bundle import Calibration, resolve_calibration
from perfcast.coefficients.dotted import get_path, set_path
from perfcast.groundtruth.collective_tables import (
    CollectiveRows,
    predict_collective_rows,
    published_collective_rows,
    vidur_network_rows,
)
from perfcast.groundtruth.files import find_groundtruth, read_rows
from perfcast.system.collectives import CollectiveCoefficients
from perfcast.validate.optimize import fit_least_squares

__all__ = ["COLLECTIVE_PARAMS", "PRIOR_ONLY", "fit_collectives", "leave_one_cluster_out", "load_collective_rows"]

# (dotted path in collectives.json, transform) of every fitted coefficient
COLLECTIVE_PARAMS: tuple[tuple[str, str], ...] = (
    ("link_efficiency_frac.nvlink", "logit"), ("link_efficiency_frac.pcie", "logit"),
    ("link_efficiency_frac.xgmi", "logit"),
    ("staged_bandwidth_Bps.shm", "log"), ("staged_bandwidth_Bps.shm_cross_socket", "log"),
    ("staged_bandwidth_Bps.network", "log"), ("staged_node_bandwidth_Bps.network", "log"),
    ("staged_bandwidth_Bps.socket", "log"),
    ("protocols.ll.bandwidth_frac", "logit"), ("protocols.ll128.bandwidth_frac", "logit"),
    ("protocols.ll.base_latency_s", "log"), ("protocols.ll128.base_latency_s", "log"),
    ("protocols.simple.base_latency_s", "log"),
    ("protocols.ll.hop_latency_frac", "log"), ("protocols.ll128.hop_latency_frac", "log"),
    ("protocols.simple.hop_latency_frac", "log"),
    ("protocols.p2p_ll.bandwidth_frac", "logit"), ("p2p_bandwidth_frac.link", "log"), ("p2p_bandwidth_frac.shm", "log"),
    ("p2p_bandwidth_frac.network", "log"),
    ("protocols.p2p_ll.base_latency_s", "log"), ("protocols.p2p_simple.base_latency_s", "log"),
    ("tree_efficiency_frac", "logit"), ("benchmark_launch_s", "log"), ("socket_buffer_bytes", "log"),
    ("staged_latency_s.shm", "log"), ("staged_latency_s.network", "log"), ("staged_latency_s.socket", "log"),
)
PRIOR_ONLY = {
    "link_efficiency_frac.network": "prior 0.9: no visible row crosses a GPUDirect RDMA network (every visible "
                                    "multi-node row is host-staged); nccl-tests on InfiniBand with GPUDirect "
                                    "RDMA typically reach ~90% of line rate",
    "nvls_efficiency_frac": "prior 0.61: NVLS all-reduce busbw 480 GB/s on 450 GB/s-per-direction NVLink "
                            "(published/README.md, ml-engineering); no visible NVLS rows",
    "peer_latency_s": "prior 0.5 us per peer of a direct all-to-all; no visible all-to-all rows",
    "staged_node_bandwidth_Bps.shm": "prior 40 GB/s: no visible row is limited by it",
    "staged_node_bandwidth_Bps.socket": "prior 10 GB/s: every visible socket row uses one GPU per node",
    "protocols.p2p_*.hop_latency_frac": "prior: every visible point-to-point row is one step, so the base "
                                        "latency absorbs it",
    "protocols.*.net_hop_latency_frac": "prior, NCCL 2.18 src/graph/tuning.cc hwLat[NET] of the tree (LL 5.0, "
                                        "LL128 8.5, Simple 14 us per network step on InfiniBand) over the 5 us "
                                        "InfiniBand latency of the catalog clusters: 1.0, 1.7, 2.8 (scaled by "
                                        "each cluster's inter_node.latency_s: RoCE, EFA and TCP sockets are "
                                        "slower); not fitted: no visible row crosses a GPUDirect network, the "
                                        "host-staged rows' extra goes to staged_latency_s",
    "priors (NCCL)": "NCCL 2.18 src/graph/tuning.cc: LL bandwidth 1/4 of Simple (ring all-reduce), LL128 0.92 "
                     "(120/128 per line), tree 0.92 x 0.85 = 0.78 of a ring; base and per-step latencies keep "
                     "their earlier priors (6, 14, 30 us; 0.3, 0.6, 1.5 x the link latency): NCCL's baseLat (6.6, "
                     "14, 8.4 us) and NVLink hwLat (0.6, 1.9, 3.4 us) are its tuner's selection constants, below "
                     "the profiled kernel times (10 us at 2 KiB on 2 GPUs, about 60 us on 8); as priors they "
                     "pulled latency into the link efficiency (published/collectives.csv leave-one-cluster-out "
                     "time MAPE 19.2 % instead of 16.7 %)",
    "staged_latency_s": "priors shm 2 us, network 10 us, socket 10 us per step (a bounce-buffer copy through "
                        "host memory and NCCL's proxy thread; an estimate, not a published figure); fitted on "
                        "the a40 SHM rows, the a100_dgx host-staged rows and the TCP socket rows",
}
_SOFT_L1_SCALE = 0.1
_PRIOR_SCALE = 1.0


def _free(x: np.ndarray, kinds: Sequence[str]) -> np.ndarray:
    """Parameters in the optimizer's space (log for positive values, logit for fractions)."""
    out = np.log(np.maximum(x, 1e-300))
    logit = np.array([k == "logit" for k in kinds])
    out[logit] = np.log(x[logit] / np.maximum(1.0 - x[logit], 1e-300))
    return out


def load_collective_rows(root: Path | None = None) -> tuple[CollectiveRows, np.ndarray]:
    """Every visible collective row (status ``ok``) and its table label."""
    base = root or find_groundtruth()
    assert base is not None
    parts: list[CollectiveRows] = []
    labels: list[str] = []
    for path in sorted((base / "vidur" / "network").glob("*/*.csv*")):
        part = vidur_network_rows(list(read_rows(path)))
        parts.append(part)
        labels += [f"vidur/network/{path.parent.name}/{path.name}"] * len(part)
    pub = base / "published" / "collectives.csv"
    if pub.exists():
        part = published_collective_rows(list(read_rows(pub)))
        parts.append(part)
        labels += ["published/collectives.csv"] * len(part)
    rows = CollectiveRows.concat(parts)
    keep = np.array([s == "ok" for s in rows.status]) & np.isfinite(rows.measured_s) & (rows.measured_s > 0)
    return rows.subset(keep), np.array(labels, dtype=object)[keep]


def fit_collectives(groundtruth: Path | None = None, *, calibration: Calibration | None = None,
                    exclude_clusters: Sequence[str] = (), log: Callable[[str], None] = print,
                    rows: tuple[CollectiveRows, np.ndarray] | None = None) -> CollectiveCoefficients:
    """Fit :data:`COLLECTIVE_PARAMS` on the visible collective rows (without ``exclude_clusters``).

    The fit starts from the priors recorded in ``calibration.collectives.priors`` (else its own values; the
    shipped calibration when None) and is weakly pulled towards them, so refitting never starts from, or leans
    on, an earlier fit.
    """
    co = resolve_calibration(calibration).collectives
    data, labels = rows if rows is not None else load_collective_rows(groundtruth)
    keep = ~np.isin(data.group.astype(str), list(exclude_clusters))
    data, labels = data.subset(keep), labels[keep]
    raw = co.model_dump(mode="json")
    names = [p for p, _ in COLLECTIVE_PARAMS]
    kinds = [k for _, k in COLLECTIVE_PARAMS]
    keys = np.char.add(labels.astype(str), np.char.add(data.n.astype(str), "/" + data.g.astype(str)))
    _, inverse, counts = np.unique(keys, return_inverse=True, return_counts=True)
    weight = np.sqrt(1.0 / np.sqrt(counts[inverse]))  # each group weighs sqrt(rows) in the squared loss
    measured = data.measured_s

    def make(x: np.ndarray) -> CollectiveCoefficients:
        r: dict[str, Any] = copy.deepcopy(raw)
        for p, v in zip(names, x, strict=True):
            set_path(r, p, v)
        return CollectiveCoefficients.model_validate(r)

    prior = {p: float(co.priors.get(p, get_path(raw, p))) for p in names}  # never the previous fit's values
    x0 = np.array([prior[p] for p in names])
    z0 = _free(x0, kinds)

    def residuals(x: np.ndarray) -> np.ndarray:
        pred = predict_collective_rows(data, make(x))
        r = weight * (pred / measured - 1.0) / _SOFT_L1_SCALE
        r = _SOFT_L1_SCALE * np.sign(r) * np.sqrt(2.0 * (np.sqrt(1.0 + r * r) - 1.0))
        # a weak pull towards the priors (one unit per e-fold) keeps directions no row identifies in place
        return np.concatenate([r, (_free(x, kinds) - z0) / _PRIOR_SCALE])

    x, mse = fit_least_squares(residuals, list(x0), kinds)
    out = make(x)
    pred = predict_collective_rows(data, out)
    mape = float(np.mean(np.abs(pred / measured - 1.0)))
    excluded = f" without {', '.join(exclude_clusters)}" if exclude_clusters else ""
    log(f"fit collectives: {len(data)} rows{excluded}, rms robust log error {np.sqrt(mse):.3f}, "
        f"in-sample MAPE {mape:.3f}")
    for p, v in zip(names, x, strict=True):
        log(f"  {p} = {v:.6g}")
    dumped = out.model_dump(mode="json")
    tables = sorted(set(labels.tolist()))
    dumped["fitted_on"] = {
        "fitted": f"{', '.join(tables)}{excluded} ({len(data)} rows; every row, no split; "
                  "validate reports leave-one-cluster-out)",
        **PRIOR_ONLY,
    }
    dumped["produced_by"] = "perfcast fit --stages collectives"
    dumped["priors"] = prior
    return CollectiveCoefficients.model_validate(dumped)


def leave_one_cluster_out(rows: CollectiveRows, labels: np.ndarray, *, calibration: Calibration | None = None,
                          log: Callable[[str], None] = lambda _m: None) -> tuple[np.ndarray, dict[str, str]]:
    """Predict every cluster's rows with coefficients fitted on the other clusters' rows only.

    Returns the predicted times (s, NaN where a row is not ``ok``) and, per cluster, what its
    coefficients were fitted on. Each refit starts from the priors recorded in ``calibration``'s collective
    coefficients (the shipped calibration when None), never from values fitted on the held-out rows.
    """
    cal = resolve_calibration(calibration)
    co = cal.collectives
    out = np.full(len(rows), np.nan)
    notes: dict[str, str] = {}
    clusters = sorted({str(g) for g in rows.group})
    for cluster in clusters:
        others = [c for c in clusters if c != cluster]
        fitted = (fit_collectives(calibration=cal, exclude_clusters=[cluster], rows=(rows, labels), log=log)
                  if others else co)
        sel = rows.group.astype(str) == cluster
        out[sel] = predict_collective_rows(rows.subset(sel), fitted)
        notes[cluster] = f"fitted on {', '.join(others)}" if others else "in-sample (no other cluster)"
    return out, notes
