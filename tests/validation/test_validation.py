"""Validation: predictions against the visible measured tables, with error bounds.

Every case names its source (ground-truth file and row filter) in its id. Bounds are named constants:
the error measured when this file was written plus a little headroom, so a change that makes
predictions worse fails here while a refit that moves errors by a point or two does not. Measured
values are only ever compared with, never fed in. Coefficients are fitted on NeuSight kernel rows with
``split=train`` (tested here on ``split=test``) and on VIDUR per-op tables (so the VIDUR bound below is
in-sample; the leave-one-GPU-out refit is ``perfcast validate``'s job, too slow for a test). The
NeuSight end-to-end rows and the published GEMM rows are never fitted on.

Bounds measured 2026-11-22 (repo at commit 8301d6b plus the fixes made with this suite; kernel
coefficients from ``perfcast fit --stages vector,gemm,conv,tensor,attention``); the measured value is in
each constant's comment.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from perfcast.coefficients.kernel import load_coefficients
from perfcast.groundtruth.files import find_groundtruth
from perfcast.groundtruth.kernel_tables import load_kernel_rows, predict_kernel_rows
from perfcast.groundtruth.predict_batch import predict_batch
from perfcast.groundtruth.vidur_tables import VIDUR_OPS, load_vidur_rows, predict_vidur_rows
from perfcast.validate.metrics import summarize

ROOT = find_groundtruth(required=False)
if ROOT is None:
    pytest.skip("ground truth not found: set PERFCAST_GROUNDTRUTH to the shared/groundtruth folder",
                allow_module_level=True)
assert ROOT is not None

# NeuSight end-to-end latency (neusight/e2e.csv, 60 rows: 6 GPUs, BERT/GPT-2/GPT-3/OPT/Switch, eager and fused)
# (bounds re-measured 2026-11-28 after the base-clock power anchor, the architectures' BLAS tiles and the CUDA-core
# energy ratio refitted on the GEMM and convolution rows together)
E2E_MAPE_MAX = 0.07  # measured 0.057
E2E_P90_APE_MAX = 0.16  # measured 0.136
# worst device measured 0.109 (A100-80GB: 7 of its 10 training forward passes measured 1.5-1.7x; T4 0.107)
E2E_DEVICE_MAPE_MAX = 0.13
E2E_EXTRA_MAPE_MAX = 0.20  # neusight/e2e_extra.csv (2 rows, Switch at seq 2048): measured 0.182
# leave-one-GPU-out (perfcast validate: each GPU with the kernel stages fitted without its rows)
E2E_LOGO_MAPE_MAX = 0.065  # measured 0.054
E2E_LOGO_DEVICE_MAPE_MAX = {"A100-PCIE-40GB": 0.045, "A100-PCIE-80GB": 0.13, "MI100": 0.07,  # measured 3.3, 10.9,
                            "P100-PCIE-16GB": 0.04, "T4": 0.13, "V100-PCIE-32GB": 0.045}  # 5.6, 2.0, 11.0, 2.8 %
# NeuSight standalone kernels, split=test (held out from the fit)
# (2026-11-28, with the architectures' BLAS tiles: 0.158 / 0.098 / 0.358 here, 0.154 leave-one-GPU-out, where it was
# 0.173 before; the gemm stage's own robust rms fell 0.169 -> 0.146)
GEMM_TEST_MAPE_MAX = 0.18  # measured 0.158
GEMM_TEST_MEDIAN_APE_MAX = 0.11  # measured 0.098
GEMM_TEST_P90_APE_MAX = 0.40  # measured 0.358
VECTOR_TEST_MAPE_MAX = 0.125  # measured 0.102
VECTOR_TEST_MEDIAN_APE_MAX = 0.085  # measured 0.072
VECTOR_TEST_P90_APE_MAX = 0.27  # measured 0.223
# published/gemm.csv: best-shape matmul TFLOP/s (stas00 ml-engineering MAMF table and vendor docs), 38 rows
PUBLISHED_GEMM_MAPE_MAX = 0.19  # measured 0.154
PUBLISHED_GEMM_P90_APE_MAX = 0.31  # measured 0.249
# VIDUR per-op kernel times, Llama-2-7B on A100 (vidur/compute/a100/meta-llama__Llama-2-7b-hf), 300 rows
# sampled with seed 0, all ten operators; in-sample (the tensor stage is fitted on every VIDUR GPU)
VIDUR_MAPE_MAX = 0.115  # measured 0.095
VIDUR_P90_APE_MAX = 0.28  # measured 0.240
VIDUR_OP_MAPE_MAX = 0.23  # worst operator measured 0.188 (input_layernorm)
VIDUR_SAMPLE_ROWS = 300


def _ape(measured: np.ndarray, predicted: np.ndarray) -> np.ndarray:
    ok = np.isfinite(measured) & np.isfinite(predicted) & (measured > 0)
    return np.abs(predicted[ok] / measured[ok] - 1.0)


def _require(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"{path} not in this ground truth")
    return path


# -- NeuSight end-to-end ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def e2e() -> tuple[np.ndarray, np.ndarray, list[dict[str, str]]]:
    res = predict_batch(_require(ROOT / "neusight" / "e2e.csv"))
    return res.measured("measured_ms"), res.prediction.pred["measured_ms"], res.rows


def test_e2e_every_visible_row_is_predicted(e2e: tuple[np.ndarray, np.ndarray, list]) -> None:
    measured, predicted, rows = e2e
    assert len(rows) == 60
    assert np.isfinite(predicted).all() and (predicted > 0).all()


@pytest.mark.parametrize("bound", ["mape", "p90"], ids=["neusight/e2e.csv all rows MAPE",
                                                        "neusight/e2e.csv all rows p90"])
def test_e2e_error(e2e: tuple[np.ndarray, np.ndarray, list], bound: str) -> None:
    measured, predicted, _ = e2e
    ape = _ape(measured, predicted)
    if bound == "mape":
        assert ape.mean() < E2E_MAPE_MAX
    else:
        assert np.quantile(ape, 0.9) < E2E_P90_APE_MAX


def test_e2e_error_per_device(e2e: tuple[np.ndarray, np.ndarray, list]) -> None:
    """No GPU is predicted much worse than the others (each has its own datasheet, nothing is per-device)."""
    measured, predicted, rows = e2e
    devices = np.array([r["device"] for r in rows])
    worst = {d: float(_ape(measured[devices == d], predicted[devices == d]).mean()) for d in np.unique(devices)}
    assert max(worst.values()) < E2E_DEVICE_MAPE_MAX, worst


def test_e2e_training_split_into_forward_and_backward() -> None:
    res = predict_batch(ROOT / "neusight" / "e2e.csv")
    p = res.prediction.pred
    train = np.array([r["mode"] == "training" for r in res.rows])
    assert train.any()
    assert np.allclose(p["measured_fw_ms"][train] + p["measured_bw_ms"][train], p["measured_ms"][train])
    assert (p["measured_bw_ms"][train] > p["measured_fw_ms"][train]).all()  # backward ~2x forward
    assert (p["measured_bw_ms"][~train] == 0).all()


def test_e2e_extra_rows() -> None:
    res = predict_batch(_require(ROOT / "neusight" / "e2e_extra.csv"))
    s = summarize(res.measured("measured_ms"), res.prediction.pred["measured_ms"])
    assert s.predicted == s.rows
    assert s.mape < E2E_EXTRA_MAPE_MAX


def test_e2e_leave_one_gpu_out() -> None:
    """What ``perfcast validate`` prints: each GPU predicted with kernel coefficients its own rows did not move."""
    from perfcast.validate.report import run_validation

    report = run_validation([_require(ROOT / "neusight" / "e2e.csv")])
    total = next(t for t in report.tables if t.target == "measured_ms" and "adapted" not in t.table)
    assert "leave-one-GPU-out" in total.note
    assert total.overall.mape < E2E_LOGO_MAPE_MAX
    worst = {g.group: g.summary.mape for g in total.groups}
    assert set(worst) == set(E2E_LOGO_DEVICE_MAPE_MAX)
    assert all(worst[d] < E2E_LOGO_DEVICE_MAPE_MAX[d] for d in worst), worst


# -- NeuSight kernels, held-out split -----------------------------------------------------------------------------
KERNEL_BOUNDS = {
    "gemm": (GEMM_TEST_MAPE_MAX, GEMM_TEST_MEDIAN_APE_MAX, GEMM_TEST_P90_APE_MAX),
    "vector": (VECTOR_TEST_MAPE_MAX, VECTOR_TEST_MEDIAN_APE_MAX, VECTOR_TEST_P90_APE_MAX),
}


@pytest.mark.parametrize("kind", ["gemm", "vector"],
                         ids=["neusight/kernels_gemm.csv.gz split=test", "neusight/kernels_vector.csv.gz split=test"])
def test_kernel_test_split_error(kind: str) -> None:
    rows = load_kernel_rows(_require(ROOT / "neusight" / f"kernels_{kind}.csv.gz"), kind)
    test = rows.subset((rows.split == "test") & np.isfinite(rows.latency_s))
    assert len(test) > 1000
    predicted = predict_kernel_rows(test, load_coefficients())
    ape = _ape(test.latency_s, predicted)
    assert ape.size == len(test)  # every test row predicted
    mape_max, median_max, p90_max = KERNEL_BOUNDS[kind]
    assert ape.mean() < mape_max
    assert np.median(ape) < median_max
    assert np.quantile(ape, 0.9) < p90_max


# -- published GEMM throughput ---------------------------------------------------------------------------------
def test_published_gemm_tflops() -> None:
    res = predict_batch(_require(ROOT / "published" / "gemm.csv"))
    measured, predicted = res.measured("tflops"), res.prediction.pred["tflops"]
    ok = [s == "ok" for s in res.prediction.status]
    assert all(ok), [s for s in res.prediction.status if s != "ok"]
    ape = _ape(measured, predicted)
    assert ape.mean() < PUBLISHED_GEMM_MAPE_MAX
    assert np.quantile(ape, 0.9) < PUBLISHED_GEMM_P90_APE_MAX
    # a prediction is a throughput below the device's dense peak
    from perfcast.catalog.hardware import load_hardware
    from perfcast.dtypes import parse_dtype

    for row, tflops in zip(res.rows, predicted, strict=True):
        peak = load_hardware(row["gpu_id"]).peak(parse_dtype(row["dtype"]))
        assert 0 < tflops * 1e12 < peak


# -- VIDUR per-op kernels (in-sample) -------------------------------------------------------------------------------
def test_vidur_llama2_7b_a100_per_op_error() -> None:
    paths = sorted((ROOT / "vidur" / "compute" / "a100" / "meta-llama__Llama-2-7b-hf").glob("mlp.csv*"))
    if not paths:
        pytest.skip("vidur/compute/a100/meta-llama__Llama-2-7b-hf not in this ground truth")
    rows = load_vidur_rows(paths)
    rng = np.random.default_rng(0)
    keep = np.zeros(len(rows), dtype=bool)
    keep[rng.choice(len(rows), min(VIDUR_SAMPLE_ROWS, len(rows)), replace=False)] = True
    rows = rows.subset(keep)
    predicted = predict_vidur_rows(rows, load_coefficients())
    ape = _ape(rows.measured_s.reshape(-1), predicted.reshape(-1))
    assert ape.size > 0.9 * predicted.size
    assert ape.mean() < VIDUR_MAPE_MAX
    assert np.quantile(ape, 0.9) < VIDUR_P90_APE_MAX
    per_op = {op: float(_ape(rows.measured_s[:, j], predicted[:, j]).mean()) for j, op in enumerate(VIDUR_OPS)}
    assert max(per_op.values()) < VIDUR_OP_MAPE_MAX, per_op
