"""Run a collective scenario: one predicted collective (:func:`perfcast.system.collectives.collective_time`)
per (op, size, group size) of each run.

A row: ``cluster, op, size_bytes, group_size, gpus_per_node, time_s, algbw_Bps,
busbw_Bps, algorithm, protocol``, and ``ratio_to_all_reduce`` where the scenario
also predicts an all-reduce of the same size on the same placement. Where a
VIDUR network table (``groundtruth``, read with
:func:`perfcast.groundtruth.collective_tables.vidur_network_rows`) measured the same
collective, the row adds ``measured_time_s`` and ``error_frac``; several
measurements of one run are summarised by their median. The scenario's notes give
the error over every measured row of each table (as ``perfcast validate`` prices them).
"""

from __future__ import annotations

import csv
import math
import statistics
from typing import TYPE_CHECKING

import numpy as np

from perfcast.coefficients.bundle import Calibration
from perfcast.errors import PerfcastError
from perfcast.results.scenario import ScenarioResult
from perfcast.scenarios.schema import CollectiveRun, CollectiveScenario
from perfcast.system.cluster import Cluster, load_cluster
from perfcast.system.collectives import collective_time, parse_op

if TYPE_CHECKING:
    from perfcast.groundtruth.collective_tables import CollectiveRows

__all__ = ["MeasuredKey", "measured_collectives", "run_collective_scenario"]

MeasuredKey = tuple[str, str, int, int, int]  # cluster id, op, group size, GPUs per node, size in bytes


def _tables(tables: list[str]) -> list[tuple[str, CollectiveRows]]:
    """The VIDUR network tables found, parsed (none without the ground truth)."""
    if not tables:
        return []
    from perfcast.groundtruth.collective_tables import vidur_network_rows
    from perfcast.groundtruth.files import find_groundtruth

    root = find_groundtruth(required=False)
    if root is None:
        return []
    out = []
    for table in tables:
        path = root / table
        if path.is_file():
            with path.open(encoding="utf-8", newline="") as fh:
                out.append((table, vidur_network_rows(list(csv.DictReader(fh)))))
    return out


def measured_collectives(tables: list[tuple[str, CollectiveRows]]) -> dict[MeasuredKey, float]:
    """Median measured time (s) per run of the parsed tables."""
    found: dict[MeasuredKey, list[float]] = {}
    for _, rows in tables:
        for i, status in enumerate(rows.status):
            t = float(rows.measured_s[i])
            if status != "ok" or not math.isfinite(t) or t <= 0:
                continue
            key = (str(rows.cluster[i]), str(rows.op[i]), int(rows.n[i]), int(rows.g[i]), int(rows.size[i]))
            found.setdefault(key, []).append(t)
    return {k: statistics.median(v) for k, v in found.items()}


def _whole_tables(tables: list[tuple[str, CollectiveRows]]) -> list[str]:
    """One line per table: the error over every measured row, predicted as ``perfcast validate`` does."""
    from perfcast.groundtruth.collective_tables import predict_collective_rows

    notes = []
    for name, rows in tables:
        pred = predict_collective_rows(rows, Calibration.shipped().collectives)
        ok = np.isfinite(pred) & np.isfinite(rows.measured_s) & (rows.measured_s > 0)
        if ok.any():
            err = np.abs(pred[ok] / rows.measured_s[ok] - 1.0)
            notes.append(f"{name}: all {int(ok.sum())} measured rows (sizes on a linear grid), "
                         f"MAPE {100 * float(err.mean()):.1f}%, median {100 * float(np.median(err)):.1f}%")
    return notes


def _sized(cluster: Cluster, n: int, g: int | None) -> Cluster:
    """The cluster with enough nodes for a group of ``n`` GPUs, ``g`` per scale-up domain."""
    per = min(g if g is not None else min(n, cluster.domain), cluster.gpus_per_node)
    return cluster.with_nodes(max(cluster.nodes, -(-n // max(1, per))))


def _run_rows(run: CollectiveRun, sc: CollectiveScenario, measured: dict[MeasuredKey, float]
              ) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    try:
        base = load_cluster(run.cluster)
    except PerfcastError as exc:
        return [{"cluster": run.cluster, "op": op, "status": "error", "error": str(exc)} for op in run.ops]
    for op in run.ops:
        for n in run.group_sizes:
            for size in run.sizes_bytes:
                row: dict[str, object] = {"cluster": base.id, "op": op, "size_bytes": size, "group_size": n,
                                          "gpus_per_node": run.gpus_per_node}
                try:
                    name = parse_op(op).value
                    ct = collective_time(name, float(size), n, _sized(base, n, run.gpus_per_node),
                                         gpus_per_node=run.gpus_per_node, algorithm=run.algorithm,
                                         shared_nics=sc.shared_nics)
                except PerfcastError as exc:
                    row.update(status="error", error=str(exc))
                    out.append(row)
                    continue
                row.update(op=name, gpus_per_node=ct.gpus_per_node, status="ok", time_s=ct.time_s,
                           algbw_Bps=ct.algbw_Bps, busbw_Bps=ct.busbw_Bps, algorithm=ct.algorithm,
                           protocol=ct.protocol)
                key = (base.id, name, n, ct.gpus_per_node, size)
                if key in measured:
                    row["measured_time_s"] = measured[key]
                    row["error_frac"] = ct.time_s / measured[key] - 1.0
                out.append(row)
    return out


def _add_ratios(rows: list[dict[str, object]], sc: CollectiveScenario) -> None:
    """Each op's time over the all-reduce of the same size on the same placement (and the reference's ratio)."""
    ar = {(r["cluster"], r["size_bytes"], r["group_size"], r["gpus_per_node"]): float(str(r["time_s"]))
          for r in rows if r["status"] == "ok" and r["op"] == "all_reduce"}
    for r in rows:
        if r["status"] != "ok":
            continue
        base = ar.get((r["cluster"], r["size_bytes"], r["group_size"], r["gpus_per_node"]))
        if base is None or base <= 0:
            continue
        r["ratio_to_all_reduce"] = float(str(r["time_s"])) / base
        ref = sc.reference
        if ref is not None and r["size_bytes"] == ref.size_bytes and r["group_size"] == ref.group_size \
                and str(r["op"]) in ref.ratios:
            r["reference_ratio_to_all_reduce"] = ref.ratios[str(r["op"])]


def run_collective_scenario(sc: CollectiveScenario) -> ScenarioResult:
    """Predict every collective of every run; one failure does not stop the others."""
    tables = _tables(sc.groundtruth)
    measured = measured_collectives(tables)
    res = ScenarioResult(sc.id, sc.title, "ok", kind="collective", notes=_whole_tables(tables))
    for run in sc.runs:
        res.rows.extend(_run_rows(run, sc, measured))
    _add_ratios(res.rows, sc)
    return res.settle()
