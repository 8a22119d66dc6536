"""The ML.ENERGY serving tables (energy/llm_serving_energy.csv, mllm_serving_energy.csv): recognized by their
columns, each row run as the benchmark ran it; energy over that run, throughput over the steady state taken as
the difference of two runs."""

from __future__ import annotations

import pytest

from perfcast.errors import ConfigError
from perfcast.groundtruth.energy_columns import ENERGY_TARGETS
from perfcast.groundtruth.energy_tables import energy_config, request_repeats, steady_state_figures
from perfcast.groundtruth.tables import recognize
from perfcast.serving.experiments.run import Simulation, run_experiment
from perfcast.serving.outcomes import RequestStatus

ROW = {"task": "v2-chat", "model_id": "meta-llama/Meta-Llama-3.1-8B-Instruct", "gpu": "NVIDIA A100-SXM4-40GB",
       "gpu_id": "a100-sxm-40gb", "gpu_memory_GB": "40", "gpu_power_limit_W": "300", "num_gpus": "1",
       "vllm_tensor_parallel_size": "1", "vllm_pipeline_parallel_size": "1", "vllm_data_parallel_size": "1",
       "vllm_enable_expert_parallel": "false", "engine": "vLLM (instrumented image v0.5.4)", "engine_version": "0.5.4",
       "max_num_seqs": "16", "max_model_len": "4096", "max_num_batched_tokens": "", "num_prompts": "40",
       "num_request_repeats": "data-dup-factor 4 in most queue files", "max_output_tokens": "1024",
       "mean_output_tokens": "120", "energy_per_output_token_J": "0.2", "avg_power_per_gpu_W": "150"}


def test_the_table_is_recognized_by_its_columns() -> None:
    assert recognize(list(ROW)).name == "serving_energy"


def test_a_row_runs_vllm_0_5_under_its_power_limit_with_every_request_at_once() -> None:
    cfg = energy_config(ROW)
    assert cfg.engine == "vllm-0.5" and cfg.scheduler == "vllm" and not cfg.enable_chunked_prefill
    assert cfg.hardware == "a100-sxm-40gb@300w" and cfg.max_num_seqs == 16 and cfg.max_num_batched_tokens == 4096
    w = cfg.workload
    assert w.qps is None and w.concurrency is None and w.num_requests == 40 * 4
    assert w.trace == "dataset:sharegpt" and w.output_tokens_mean == 120 and w.output_tokens_max == 1024
    assert energy_config(ROW, scale=2).workload.num_requests == 320
    v1 = energy_config(ROW | {"engine_version": "0.11.0"})  # a newer release: the V1 profile
    assert v1.engine == "vllm" and v1.scheduler == "sarathi"
    code = energy_config(ROW | {"task": "v2-code", "num_prompts": ""})  # HumanEval+'s 164 problems
    assert code.workload.trace == "dataset:humaneval-plus" and code.workload.num_requests == 164 * 4
    assert energy_config(ROW | {"task": "v2-visual-chat"}).workload.images_per_request == 1
    with pytest.raises(ConfigError, match="task"):
        energy_config(ROW | {"task": "v3-agents"})


def test_the_repeat_factor_is_read_per_gpu_where_the_row_names_one_per_gpu() -> None:
    both = "data-dup-factor 20 (A100) / 10 (H100) in pegasus queue files"
    assert request_repeats(ROW | {"num_request_repeats": both}) == 20
    assert request_repeats(ROW | {"num_request_repeats": both, "gpu": "NVIDIA H100 80GB HBM3"}) == 10
    assert request_repeats(ROW | {"num_request_repeats": "data-dup-factor 2 in pegasus queue files"}) == 2
    assert request_repeats(ROW | {"num_request_repeats": ""}) == 4


def test_energy_is_the_whole_runs_and_throughput_the_steady_states() -> None:
    short = run_experiment(Simulation(energy_config(ROW)))
    long = run_experiment(Simulation(energy_config(ROW, scale=2)))
    fig = steady_state_figures(short, long)
    assert set(fig) == set(ENERGY_TARGETS)
    es, el = short.energy(), long.energy()
    dt = el.duration_s - es.duration_s
    tokens = el.output_tokens - es.output_tokens
    # throughput: what the longer run adds, with the queue never empty
    assert fig["output_throughput_tok_per_s"] == pytest.approx(tokens / dt)
    # energy: the benchmark's own run of N requests, its ramp-up and drain included
    assert fig["energy_per_output_token_J"] == pytest.approx(es.energy_J / es.output_tokens)
    assert fig["energy_per_request_J"] == pytest.approx(es.energy_J / short.metrics.requests_completed)
    # power derived as the source derives it: energy per token times the steady output throughput
    assert fig["avg_power_total_W"] == pytest.approx(fig["energy_per_output_token_J"] * tokens / dt)
    # the batch stays full while the queue holds requests, and the power lies between idle and the 300 W cap
    assert 14 <= fig["avg_batch_size"] <= 16
    assert 30 < fig["avg_power_per_gpu_W"] <= 300
    # TPOT over every request of the benchmark's run
    done = [i for i, s in enumerate(short.status) if s == RequestStatus.COMPLETED and short.generated_tokens[i] >= 2]
    tpots = [(short.finish_s[i] - short.first_token_s[i]) / (short.generated_tokens[i] - 1) for i in done]
    assert fig["tpot_mean_s"] == pytest.approx(sum(tpots) / len(tpots))
