"""Serving tables whose rows name an MLPerf workload (``mlperf:<benchmark>:<scenario>``) instead of lengths:
the deployment each row describes, and ``perfcast predict-batch`` filling their predictions."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from perfcast.errors import ConfigError
from perfcast.groundtruth.predict_batch import predict_batch, write_predictions
from perfcast.groundtruth.serving_tables import inference_config
from perfcast.serving.sources.mlperf import load_benchmark

HEADER = ["gpu_id", "model_id", "model", "gpu", "num_gpus", "tp", "pp", "precision", "input_len", "output_len",
          "batch_size", "concurrency", "workload", "metric", "value", "framework_version", "note", "source",
          "source_kind"]


def _row(**fields: str) -> dict[str, str]:
    return {k: fields.get(k, "") for k in HEADER}


def test_row_deployment_follows_the_row_and_the_preset() -> None:
    bench = load_benchmark("llama2-70b")
    row = _row(gpu_id="h100-sxm-80gb", num_gpus="8", tp="2", workload="mlperf:llama2-70b:server",
               metric="mlperf_server_tokens_per_s_total")
    cfg = inference_config(row)
    assert cfg.model == bench.model and cfg.hardware == "h100-sxm-80gb"
    assert (cfg.tensor_parallel_size, cfg.pipeline_parallel_size, cfg.num_replicas) == (2, 1, 4)
    assert cfg.quantization == "fp8"  # the preset's precision on a GPU with FP8 math
    assert cfg.slo_ttft_s == bench.scenarios["server"].ttft_p99_s
    assert cfg.slo_tpot_s == bench.scenarios["server"].tpot_p99_s
    assert cfg.workload.trace == "mlperf:llama2-70b"
    # the row's precision wins; without tp the smallest tp that leaves room for the KV cache
    cfg16 = inference_config({**row, "tp": "", "precision": "fp16"})
    assert cfg16.quantization == "none" and cfg16.tensor_parallel_size == 4 and cfg16.num_replicas == 2
    # an A100 has no FP8 math: the default precision falls back to 16-bit weights
    assert inference_config({**row, "gpu_id": "a100-sxm-80gb"}).quantization == "none"


@pytest.mark.parametrize("change, message", [
    ({"workload": "mlperf:llama2-70b:batch"}, "accepted: offline, server, interactive"),
    ({"workload": "mlperf:bert:offline"}, "unknown MLPerf benchmark"),
    ({"metric": "mlperf_offline_tokens_per_s_total"}, "does not belong to the row's workload"),
    ({"workload": "", "input_len": "128", "output_len": "128"}, "needs a workload column"),
    ({"num_gpus": "6", "tp": "4"}, "not a multiple of tp x pp"),
])
def test_bad_rows_say_what_is_wrong(change: dict[str, str], message: str) -> None:
    row = _row(gpu_id="h100-sxm-80gb", num_gpus="8", tp="2", workload="mlperf:llama2-70b:server",
               metric="mlperf_server_tokens_per_s_total")
    with pytest.raises(ConfigError, match=message):
        inference_config({**row, **change})


def test_predict_batch_fills_mlperf_rows(tmp_path: Path) -> None:
    rows = [
        _row(gpu_id="h100-sxm-80gb", model="GPT-J 6B", num_gpus="1", workload="mlperf:gptj:offline",
             metric="mlperf_offline_samples_per_s_total"),
        _row(gpu_id="h100-sxm-80gb", model="GPT-J 6B", num_gpus="1", workload="mlperf:gptj:offline",
             metric="mlperf_offline_tokens_per_s_total"),
        _row(gpu_id="h100-sxm-80gb", num_gpus="1", workload="mlperf:gptj:server",
             metric="mlperf_server_samples_per_s_total"),
        _row(gpu_id="h100-sxm-80gb", num_gpus="1", workload="mlperf:gptj:server", metric="mlperf_server_ttft_ms_p99"),
        _row(gpu_id="h100-sxm-80gb", num_gpus="1", workload="mlperf:resnet50:offline",
             metric="mlperf_offline_samples_per_s_total"),
    ]
    table = tmp_path / "mlperf.csv"
    with table.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=HEADER)
        writer.writeheader()
        writer.writerows(rows)
    result = predict_batch(table)
    assert result.kind.name == "published_inference" and result.targets == ["value"]
    out = tmp_path / "pred.csv"
    write_predictions(result, out)
    got = list(csv.DictReader(out.open()))
    values = [float(r["pred_value"]) if r["pred_value"] else math.nan for r in got]
    assert all(v > 0 for v in values[:4]) and math.isnan(values[4])
    assert [r["status"].split(":")[0] for r in got] == ["ok"] * 4 + ["unsupported"]
    assert "unknown MLPerf benchmark" in got[4]["status"]
    # the offline rows share one simulation: tokens/s over samples/s is the mean output length it drew
    assert values[1] / values[0] == pytest.approx(load_benchmark("gptj").output.mean_tokens, rel=0.05)
    # the server rate cannot exceed the offline rate on the same system
    assert values[2] <= values[0] * (1 + 1e-9)


def test_a_table_with_workloads_and_no_length_columns_is_recognized(tmp_path: Path) -> None:
    table = tmp_path / "mlperf_only.csv"
    table.write_text("gpu_id,num_gpus,workload,metric,value\n"
                     "h100-sxm-80gb,1,mlperf:gptj:offline,mlperf_offline_tokens_per_s_total,\n")
    result = predict_batch(table)
    assert result.kind.name == "published_inference"
    assert result.prediction.pred["value"][0] > 0 and result.prediction.status[0] == "ok"
