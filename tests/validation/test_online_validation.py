"""Validation: the online serving benchmarks (``serving_online/serving_online.csv``: vLLM and SGLang on H100 and
MI300X under a closed-loop client), with error bounds.

The serving coefficients (data/coefficients/serving.json: the engines' CPU and front-end times, the custom
all-reduce latency, ROCm's kernel efficiency) are fitted on these rows; ``held_out`` keeps one fit per GPU
without that GPU's rows, so each GPU's rows are also predicted as if it had never been measured
(leave-one-GPU-out). The test runs the concurrency-4 and -64 rows at 1k/1k tokens (a third of the cost of the
whole table, every deployment of it). Bounds measured 2026-11-28; each comment holds the measured value, the
bound adds a little headroom. The issue's targets, leave-one-GPU-out on every row: throughput per GPU <= 10 %,
median TPOT <= 10 %, median TTFT <= 20 %; see README's accuracy table for where perfcast stands.
"""

from __future__ import annotations

import csv

import numpy as np
import pytest

from perfcast.coefficients.bundle import Calibration
from perfcast.groundtruth.files import find_groundtruth
from perfcast.groundtruth.online_tables import predict_online_rows

ROOT = find_groundtruth(required=False)
TABLE = ROOT / "serving_online" / "serving_online.csv" if ROOT is not None else None
if TABLE is None or not TABLE.is_file():
    pytest.skip("serving_online ground truth not found: set PERFCAST_GROUNDTRUTH to the shared/groundtruth folder",
                allow_module_level=True)
assert TABLE is not None
ROWS = [r for r in csv.DictReader(TABLE.open(newline="", encoding="utf-8"))
        if r["max_concurrency"] in ("4", "64") and r["input_len"] == r["output_len"] == "1024"]
TARGETS = ("total_tput_tok_s_per_gpu", "tpot_ms_median", "ttft_ms_median")

# (in-sample, leave-one-GPU-out) MAPE bounds per target over the 44 rows of the subset; the whole table
# (perfcast validate) measures 11.6 / 13.0 % (throughput per GPU), 12.1 / 10.6 % (median TPOT), 22.8 / 27.8 %
# (median TTFT), SGLang's DeepSeek-R1 rows on MI300X 50.6 / 31.5 / 47.7 % of it leave-one-GPU-out
BOUNDS = {
    "total_tput_tok_s_per_gpu": (0.12, 0.16),  # measured 0.107, 0.139
    "tpot_ms_median": (0.12, 0.13),  # measured 0.109, 0.112
    "ttft_ms_median": (0.26, 0.31),  # measured 0.236, 0.285
}


def _mape(pred: dict[str, np.ndarray], rows: list[dict[str, str]], target: str) -> float:
    meas = np.array([float(r[target]) for r in rows])
    return float(np.mean(np.abs(pred[target] / meas - 1.0)))


@pytest.fixture(scope="module")
def predictions() -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    cal = Calibration.shipped()
    fitted, status, _ = predict_online_rows(ROWS, cal)
    assert all(s == "ok" for s in status), set(status)
    held = {t: np.full(len(ROWS), np.nan) for t in TARGETS}
    for gpu in sorted({r["gpu_id"] for r in ROWS}):
        assert gpu in cal.serving.held_out, f"no fit without {gpu} in serving.json"
        idx = [i for i, r in enumerate(ROWS) if r["gpu_id"] == gpu]
        part, _, _ = predict_online_rows([ROWS[i] for i in idx], cal.with_serving(cal.serving.without(gpu)))
        for t in TARGETS:
            held[t][idx] = part[t]
    return fitted, held


@pytest.mark.parametrize("target", TARGETS)
def test_in_sample_and_leave_one_gpu_out_errors(target: str,
                                                predictions: tuple[dict[str, np.ndarray],
                                                                   dict[str, np.ndarray]]) -> None:
    fitted, held = predictions
    in_sample, logo = BOUNDS[target]
    assert _mape(fitted, ROWS, target) <= in_sample
    assert _mape(held, ROWS, target) <= logo


def test_the_held_out_fits_differ_from_the_full_one() -> None:
    sc = Calibration.shipped().serving
    assert set(sc.held_out) >= {r["gpu_id"] for r in ROWS}  # and the energy rows' GPUs (vLLM 0.5's fit)
    # without the AMD GPU, ROCm's efficiency has no row to move it: it stays at its prior
    assert "rocm" not in sc.held_out["mi300x"].stacks or sc.held_out["mi300x"].stacks["rocm"] != sc.stacks["rocm"]
    assert sc.held_out["h100-sxm-80gb"].engines["vllm"] != sc.engines["vllm"]
