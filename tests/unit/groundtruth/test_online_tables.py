"""The online serving benchmark table (serving_online.csv): recognized by its columns, each row reproduced as the
benchmark ran it, every measured column predicted from one simulation."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import pytest

from perfcast.errors import ConfigError, UnknownNameError
from perfcast.groundtruth.online_columns import ONLINE_TARGETS
from perfcast.groundtruth.online_tables import LENGTH_RANGE_RATIO, PROMPTS_PER_CONCURRENCY, online_config
from perfcast.groundtruth.predict_batch import predict_batch
from perfcast.groundtruth.tables import recognize

ROW = {"framework": "vllm", "gpu_id": "h100-sxm-80gb", "gpu_memory_gib_catalog": "80", "num_gpus": "2", "tp": "2",
       "ep": "", "dp_attention": "", "disagg": "false", "spec_decode": "none",
       "model_id": "nvidia/Llama-3.3-70B-Instruct-FP8", "input_len": "1024", "output_len": "256",
       "max_concurrency": "8", "num_prompts": "", "total_tput_tok_s_per_gpu": "900", "output_tput_tok_s_per_gpu": "200",
       "ttft_ms_median": "100", "tpot_ms_median": "18"}


def test_a_row_runs_the_benchmark_client_and_its_engine_profile() -> None:
    cfg = online_config(ROW)
    w = cfg.workload
    assert (w.concurrency, w.qps, w.prompt_tokens, w.output_tokens) == (8, None, 1024, 256)
    assert w.length_range_ratio == LENGTH_RANGE_RATIO and w.num_requests == PROMPTS_PER_CONCURRENCY * 8
    assert cfg.engine == "vllm" and cfg.scheduler == "sarathi" and cfg.chunk_size == 8192  # V1 on an 80 GB GPU
    assert cfg.max_num_seqs == 8  # the NVIDIA vLLM scripts pass --max-num-seqs = concurrency
    sg = online_config(ROW | {"framework": "sglang", "gpu_id": "mi300x", "gpu_memory_gib_catalog": "192"})
    assert sg.engine == "sglang" and sg.scheduler == "sglang" and sg.max_num_seqs != 8
    assert online_config(ROW | {"num_prompts": "50"}).workload.num_requests == 50


def test_disaggregated_and_mtp_rows_run_as_pools_and_the_models_own_draft() -> None:
    dis = online_config(ROW | {"disagg": "true", "num_prefill_gpus": "4", "num_decode_gpus": "8"})
    assert (dis.num_replicas, dis.num_prefill_replicas, dis.tensor_parallel_size) == (6, 2, 2)
    mtp = online_config(ROW | {"model_id": "deepseek-ai/DeepSeek-R1-0528", "tp": "8", "num_gpus": "8",
                               "spec_decode": "mtp"})
    assert mtp.speculative_model == "mtp" and mtp.num_speculative_tokens > 0
    trt = online_config(ROW | {"framework": "tensorrt-llm"})
    assert trt.scheduler == "orca" and trt.gpu_memory_utilization > 0.9  # 90 % of what the weights leave


def test_rows_the_simulator_cannot_reproduce_are_refused_with_a_reason() -> None:
    with pytest.raises(ConfigError, match="not whole replicas of tp 2"):
        online_config(ROW | {"disagg": "true", "num_prefill_gpus": "3", "num_decode_gpus": "8"})
    with pytest.raises(ConfigError, match="spec_decode 'eagle'"):
        online_config(ROW | {"spec_decode": "eagle"})
    with pytest.raises(UnknownNameError, match="known: sglang, trtllm, vllm"):
        online_config(ROW | {"framework": "tgi"})
    with pytest.raises(ConfigError, match="num_gpus 3 is not a multiple of tp 2"):
        online_config(ROW | {"num_gpus": "3"})


def test_the_table_is_recognized_and_every_target_predicted(tmp_path: Path) -> None:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(ROW))
    writer.writeheader()
    writer.writerow(ROW)
    writer.writerow(ROW | {"framework": "tgi"})
    path = tmp_path / "online.csv"
    path.write_text(buf.getvalue(), encoding="utf-8")
    assert recognize(list(ROW)).name == "serving_online"
    res = predict_batch(path)
    assert res.targets == [t for t in ONLINE_TARGETS if t in ROW]
    p = res.prediction
    assert p.status[0] == "ok" and "unknown engine 'tgi'" in p.status[1]
    assert p.groups == ["h100-sxm-80gb vllm", "h100-sxm-80gb tgi"]
    assert all(math.isfinite(p.pred[t][0]) and p.pred[t][0] > 0 for t in ONLINE_TARGETS)
    assert all(math.isnan(p.pred[t][1]) for t in ONLINE_TARGETS)
    per_gpu, total = p.pred["total_tput_tok_s_per_gpu"][0], p.pred["total_tput_tok_s"][0]
    assert total == pytest.approx(2 * per_gpu)
    assert p.pred["input_tput_tok_s"][0] + p.pred["output_tput_tok_s"][0] == pytest.approx(total)
    assert p.pred["ttft_ms_median"][0] < p.pred["e2el_ms_median"][0]
    # the output throughput is the concurrency's requests each emitting its tokens at the TPOT (Little's law)
    tpot_s, e2e_s = p.pred["tpot_ms_mean"][0] / 1e3, p.pred["e2el_ms_mean"][0] / 1e3
    mean_out = (math.floor(0.8 * 256) + 256) / 2
    assert p.pred["output_tput_tok_s"][0] == pytest.approx(8 * mean_out / e2e_s, rel=0.15)
    assert tpot_s < e2e_s / (mean_out - 1)
