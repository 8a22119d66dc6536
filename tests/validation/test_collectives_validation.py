"""Validation: predicted collective times against the visible measured tables, with error bounds.

Tables: ``vidur/network/<cluster>/{all_reduce,send_recv}.csv`` (NCCL kernel time, median of 3 x 11 launches,
rank 0) and ``published/collectives.csv`` (nccl-tests / all_reduce_bench.py wall-clock rows). The collectives
stage is fitted on every one of these rows (the tables have no split), so the in-sample bounds below say how
well the model can describe them; the leave-one-cluster-out bounds (each cluster predicted with coefficients
refitted without its rows) say how it transfers. Measured values are compared with, never fed in.

Bounds measured 2026-11-28 with ``perfcast fit --stages collectives`` (data/coefficients/collectives.json as shipped:
NCCL's intra/network step split, host-staged per-step latencies, point-to-point copies bounded by line rate);
each constant's comment has the measured value, the bound adds a little headroom. The issue's target is a
MAPE of 10 %: single-node rows meet it in-sample; the rows between nodes of the VIDUR clusters, whose
networks are undocumented and host-staged (see their cluster YAMLs), do not.
"""

from __future__ import annotations

import numpy as np
import pytest

from perfcast.coefficients.bundle import Calibration
from perfcast.groundtruth.files import find_groundtruth
from perfcast.groundtruth.predict_batch import predict_batch
from perfcast.validate.fit_collectives import leave_one_cluster_out, load_collective_rows

ROOT = find_groundtruth(required=False)
if ROOT is None or not (ROOT / "vidur" / "network").is_dir():
    pytest.skip("collective ground truth not found: set PERFCAST_GROUNDTRUTH to the shared/groundtruth folder",
                allow_module_level=True)
assert ROOT is not None

# in-sample MAPE of every visible collective row (20,422 rows: 6 VIDUR tables + published/collectives.csv)
ALL_MAPE_MAX = 0.135  # measured 0.123
SINGLE_NODE_MAPE_MAX = 0.10  # rows inside one node (13,464): measured 0.095
# leave-one-cluster-out (5 clusters: a100-dgx, a100-pairwise-nvlink, a40-pairwise-nvlink, dgx-a100, mi300x)
LOCO_MAPE_MAX = 0.21  # measured 0.196 (0.204 before the NCCL step split)
LOCO_SINGLE_NODE_MAPE_MAX = 0.17  # measured 0.152
# per table, in-sample: (table, target column) -> bound
TABLE_MAPE_MAX = {
    ("vidur/network/a100_dgx/all_reduce.csv", "time_stats.all_reduce.median"): 0.195,  # measured 0.181
    ("vidur/network/a100_dgx/send_recv.csv", "time_stats.send_recv.median"): 0.09,  # measured 0.079
    ("vidur/network/a100_pairwise_nvlink/all_reduce.csv", "time_stats.all_reduce.median"): 0.055,  # measured 0.046
    # measured 0.197 (0.160 before copies were bounded by line rate: rank 0's send kernel here ends before the last
    # bytes have arrived, so 16 MiB over the 300 GB/s bridge appears to run at 322 GB/s)
    ("vidur/network/a100_pairwise_nvlink/send_recv.csv", "time_stats.send_recv.median"): 0.21,
    ("vidur/network/a40_pairwise_nvlink/all_reduce.csv", "time_stats.all_reduce.median"): 0.105,  # measured 0.096
    ("vidur/network/a40_pairwise_nvlink/send_recv.csv", "time_stats.send_recv.median"): 0.11,  # measured 0.100
    ("published/collectives.csv", "time_us"): 0.175,  # measured 0.162 (20 nccl-tests A100 rows)
    ("published/collectives.csv", "busbw_GBps"): 0.195,  # measured 0.180 (also the 2 MI300X rows)
}


def _mape(measured: np.ndarray, predicted: np.ndarray) -> float:
    ok = np.isfinite(measured) & (measured > 0)
    assert np.all(np.isfinite(predicted[ok])), "a measured row without a prediction"
    return float(np.mean(np.abs(predicted[ok] / measured[ok] - 1.0)))


@pytest.fixture(scope="module")
def rows() -> tuple:
    return load_collective_rows(ROOT)


@pytest.mark.parametrize(("table", "target"), sorted(TABLE_MAPE_MAX),
                         ids=[f"{t} {c}" for t, c in sorted(TABLE_MAPE_MAX)])
def test_table_mape_in_sample(table: str, target: str) -> None:
    path = ROOT / table
    if not path.exists():
        pytest.skip(f"{table} not in this ground truth")
    res = predict_batch(path)
    assert all(s == "ok" for s in res.prediction.status), {s for s in res.prediction.status if s != "ok"}
    assert _mape(res.measured(target), res.prediction.pred[target]) < TABLE_MAPE_MAX[(table, target)]


def test_every_visible_row_in_sample(rows: tuple) -> None:
    from perfcast.groundtruth.collective_tables import predict_collective_rows

    data, _ = rows
    pred = predict_collective_rows(data, Calibration.shipped().collectives)
    assert len(data) > 20000
    assert _mape(data.measured_s, pred) < ALL_MAPE_MAX
    single = data.n == data.g
    assert _mape(data.measured_s[single], pred[single]) < SINGLE_NODE_MAPE_MAX


def test_leave_one_cluster_out(rows: tuple) -> None:
    data, labels = rows
    pred, notes = leave_one_cluster_out(data, labels)
    assert len(notes) >= 5
    assert _mape(data.measured_s, pred) < LOCO_MAPE_MAX
    single = data.n == data.g
    assert _mape(data.measured_s[single], pred[single]) < LOCO_SINGLE_NODE_MAPE_MAX


def test_published_bandwidths_are_consistent_with_time() -> None:
    res = predict_batch(ROOT / "published" / "collectives.csv")
    p = res.prediction.pred
    sizes = np.array([float(r["size_bytes"]) for r in res.rows])
    assert np.allclose(p["algbw_GBps"], sizes / (p["time_us"] * 1e-6) / 1e9)
    assert np.all(p["busbw_GBps"] >= p["algbw_GBps"])  # all_reduce busbw = algbw * 2(n-1)/n >= algbw for n >= 2
    assert np.all(res.prediction.low["busbw_GBps"] <= p["busbw_GBps"])
    assert np.all(res.prediction.high["time_us"] >= p["time_us"])
