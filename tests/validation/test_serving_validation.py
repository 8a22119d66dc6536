"""Validation: simulated serving throughput against ``published/inference.csv`` (TensorRT-LLM offline runs).

Nothing is fitted on these rows: each benchmark's load is simulated with the packaged (prior) engine
coefficients. Bounds measured 2026-11-22 (comments hold the measured value; the bound adds headroom).
The issue's target is a MAPE of 15 %; the rows furthest from it are the L40S TP4/TP8 instances (PCIe
without peer-to-peer: the host-staged all-reduce path of that server is not published), the
RTX PRO 6000 pipeline of 8 stages and one L40S GPT-J row ten times below its neighbours.
"""

from __future__ import annotations

import csv

import numpy as np
import pytest

from perfcast.groundtruth.files import find_groundtruth
from perfcast.groundtruth.serving_tables import inference_config, predict_inference_rows

ROOT = find_groundtruth(required=False)
if ROOT is None or not (ROOT / "published" / "inference.csv").is_file():
    pytest.skip("serving ground truth not found: set PERFCAST_GROUNDTRUTH to the shared/groundtruth folder",
                allow_module_level=True)
assert ROOT is not None
ROWS = list(csv.DictReader((ROOT / "published" / "inference.csv").open(newline="", encoding="utf-8")))

# dense models on NVLink / single-GPU instances (A100, H100; TensorRT-LLM 0.11): the well-specified part
DENSE_NVLINK_MAPE_MAX = 0.13  # measured 0.123 on 96 rows (0.108 on the third the test runs; 0.106 / 0.092
# before the engine profiles' fitted serving coefficients)
# MoE models in TensorRT-LLM's PyTorch backend (Qwen3, Llama 4 on H100 and RTX PRO 6000), run with attention
# data parallelism and expert parallelism (serving_tables' assumption)
MOE_PYTORCH_MAPE_MAX = 0.19  # measured 0.154 on 94 rows (0.155 on the fifth the test runs; 0.156 / 0.162 before
# the busiest attention rank's own tokens and TensorRT-LLM's MoE expand kernel)
ALL_MAPE_MAX = 0.16  # measured 0.154 on 301 rows (0.155 before the busiest attention rank and the MoE expand
# kernel, 0.149 before the engine profiles' fitted serving coefficients, 0.233 before MoE all-reduce sizes,
# attention DP, the last pipeline stage's LM head and TensorRT-LLM's KV budget of free memory; 0.152 before FP8
# context FMHA)


def _mape(rows: list[dict[str, str]]) -> float:
    pred, status, _ = predict_inference_rows(rows)
    meas = np.array([float(r["value"]) for r in rows])
    assert all(s.startswith("ok") for s in status), {s for s in status if not s.startswith("ok")}
    return float(np.mean(np.abs(pred / meas - 1.0)))


def _dense_nvlink(r: dict[str, str]) -> bool:
    moe = any(t in r["model"] for t in ("Mixtral", "Qwen3", "Llama 4"))
    return r["gpu_id"] in ("a100-sxm-80gb", "h100-sxm-80gb") and "0.11" in r["framework_version"] and not moe


def test_dense_models_on_nvlink_gpus() -> None:
    rows = [r for r in ROWS if _dense_nvlink(r)][::3]  # every third: a third of the cost, the same mix
    assert len(rows) >= 25
    assert _mape(rows) <= DENSE_NVLINK_MAPE_MAX


def test_each_row_is_its_benchmarks_load() -> None:
    row = next(r for r in ROWS if r["input_len"] == "20000")  # longer than the token budget: chunked context
    cfg = inference_config(row)
    assert cfg.workload.prompt_tokens == 20000 and cfg.workload.qps is None and cfg.scheduler == "orca"
    pred, status, _ = predict_inference_rows([row])
    assert status == ["ok"] and pred[0] > 0


def test_moe_models_with_attention_dp() -> None:
    rows = [r for r in ROWS if any(t in r["model"] for t in ("Qwen3", "Llama 4"))][::5]
    assert len(rows) >= 15
    assert all(inference_config(r).attention_data_parallel for r in rows if int(r["tp"]) > 1)
    assert _mape(rows) <= MOE_PYTORCH_MAPE_MAX


@pytest.mark.slow
def test_every_published_row() -> None:
    assert _mape(ROWS) <= ALL_MAPE_MAX


def test_latency_and_closed_loop_rows() -> None:
    """Rows of other metrics and closed-loop (concurrency) benchmarks come from the same simulation."""
    base = next(r for r in ROWS if r["model"] == "LLaMA v2 7B" and r["gpu_id"] == "a100-sxm-80gb"
                and r["input_len"] == "128" and r["output_len"] == "128")
    rows = [{**base, "concurrency": "8", "metric": m, "value": "1"}
            for m in ("ttft_ms", "itl_ms", "e2e_latency_ms_median", "throughput_requests_per_s",
                      "output_tokens_per_s_total")]
    pred, status, _ = predict_inference_rows(rows)
    assert status == ["ok"] * len(rows)
    ttft_ms, itl_ms, e2e_ms, req_s, tok_s = pred
    assert 0 < ttft_ms < e2e_ms and 0 < itl_ms < e2e_ms
    assert e2e_ms == pytest.approx(ttft_ms + 127 * itl_ms, rel=0.05)  # every request is 128 output tokens
    assert tok_s == pytest.approx(128 * req_s, rel=1e-6)
    assert req_s <= 8 / (e2e_ms / 1e3) * 1.01  # Little's law: 8 clients, each waiting for its request
    unknown, status, _ = predict_inference_rows([{**base, "metric": "joules_per_token"}])
    assert np.isnan(unknown[0]) and status[0].startswith("unsupported: metric 'joules_per_token'")
