"""Engine profiles (data/engines): what each sets, the sglang policy, the engines' all-reduce, stack efficiency,
benchmark lengths and the front end's time per request."""

from __future__ import annotations

import math

import numpy as np
import pytest

from perfcast.catalog.hardware import load_hardware
from perfcast.coefficients.bundle import Calibration
from perfcast.coefficients.serving import CustomAllReduce, EngineOverhead, StackEfficiency
from perfcast.errors import ConfigError, UnknownNameError
from perfcast.serving import IterationModel, ServingConfig, WorkloadConfig, simulate_serving
from perfcast.serving.engines import engine_names, engine_settings, load_engine
from perfcast.serving.sources.arrivals import generate_requests
from perfcast.serving.stack import custom_allreduce_times, stack_hardware
from perfcast.system.cluster import cluster_for_gpu, load_cluster
from perfcast.system.collectives import collective_times


def test_every_engine_loads_by_id_and_alias_and_an_unknown_one_lists_them() -> None:
    assert set(engine_names()) >= {"vllm", "sglang", "trtllm"}
    assert load_engine("TensorRT-LLM").id == "trtllm" and load_engine("SGLang").id == "sglang"
    with pytest.raises(UnknownNameError, match="sglang, trtllm, vllm"):
        load_engine("tgi")


def test_vllm_budgets_follow_gpu_memory() -> None:
    vllm = load_engine("vllm")
    big = engine_settings(vllm, float(load_hardware("h100-sxm-80gb").memory_bytes))
    small = engine_settings(vllm, float(load_hardware("l4").memory_bytes))
    assert big["scheduler"] == small["scheduler"] == "sarathi"  # V1: chunked prefill mixed with decodes
    assert (big["chunk_size"], big["max_num_seqs"]) == (vllm.large_gpu_max_num_batched_tokens,
                                                        vllm.large_gpu_max_num_seqs)
    assert (small["chunk_size"], small["max_num_seqs"]) == (vllm.max_num_batched_tokens, vllm.max_num_seqs)


def test_trtllm_memory_share_is_of_the_memory_the_weights_leave() -> None:
    trt = load_engine("trtllm")
    memory = 80e9
    share = engine_settings(trt, memory, weight_bytes_per_gpu=40e9)["gpu_memory_utilization"]
    assert share == pytest.approx((40e9 + trt.gpu_memory_utilization * 40e9) / memory)
    assert engine_settings(load_engine("vllm"), memory, 40e9)["gpu_memory_utilization"] == 0.9


def _cfg(scheduler: str, **kw: object) -> ServingConfig:
    work = WorkloadConfig(num_requests=40, prompt_tokens=3000, output_tokens=64, concurrency=8,
                          length_range_ratio=0.8)
    return ServingConfig(model="llama-2-7b", hardware="a100-sxm-80gb", scheduler=scheduler, workload=work,
                         **kw)  # type: ignore[arg-type]


def test_sglang_prefill_batches_run_alone_and_chunk_long_prompts() -> None:
    res = simulate_serving(_cfg("sglang", chunk_size=1024), keep_events=True)
    assert res.metrics.requests_completed == 40
    assert all(not (e.prefill_tokens and e.decode_seqs) for e in res.events)  # never mixed
    assert all(e.prefill_tokens <= 1024 for e in res.events)
    assert sum(e.prefill_tokens for e in res.events) == int(res.prompt_tokens.sum())  # every prompt, chunked
    mixed = simulate_serving(_cfg("sarathi", chunk_size=1024), keep_events=True)
    assert any(e.prefill_tokens and e.decode_seqs for e in mixed.events)
    # the decodes wait for every prompt's chunks: a longer TPOT tail than the mixed policy's
    assert res.metrics.tpot_s.p99 > mixed.metrics.tpot_s.p99


def test_benchmark_lengths_are_uniform_in_the_range() -> None:
    s = generate_requests(num_requests=4000, seed=1, arrival="fixed", qps=1.0, prompt_tokens=1024,
                          output_tokens=8192, range_ratio=0.8)
    assert s.prompt_tokens.min() >= math.floor(0.8 * 1024) and s.prompt_tokens.max() <= 1024
    assert s.output_tokens.min() >= math.floor(0.8 * 8192) and s.output_tokens.max() <= 8192
    assert s.prompt_tokens.mean() == pytest.approx(0.9 * 1024, rel=0.01)
    again = generate_requests(num_requests=10, seed=1, arrival="fixed", qps=1.0, prompt_tokens=1024,
                              output_tokens=8192, range_ratio=0.8)
    np.testing.assert_array_equal(again.prompt_tokens, s.prompt_tokens[:10])  # the first k are the same
    with pytest.raises(ConfigError, match="--random-range-ratio"):
        WorkloadConfig(trace="arxiv_summarization", length_range_ratio=0.8)


def test_custom_allreduce_beats_nccl_on_small_messages_and_only_where_engines_take_it() -> None:
    node = cluster_for_gpu("h100-sxm-80gb")
    co = CustomAllReduce()
    sizes = np.array([16e3, 256e3, 4e6, 64e6])
    custom = custom_allreduce_times(sizes, 8, node, co, max_bytes=8 * 2**20)
    nccl = collective_times("all_reduce", sizes, 8, node, coeffs=Calibration.shipped().collectives, shared_nics=False)
    assert custom[0] < nccl[0] and custom[0] >= co.latency_s
    assert np.all(np.diff(custom[:3]) > 0) and math.isinf(custom[3])  # above the engine's limit: NCCL
    assert math.isinf(float(custom_allreduce_times(sizes[:1], 3, node, co, 8e6)[0]))  # world size 3
    pcie = load_cluster("a100-pcie-pair")
    assert math.isinf(float(custom_allreduce_times(sizes[:1], 2, pcie, co, 8e6)[0]))
    # xGMI mesh: 2 GPUs share one of the 7 links, 8 GPUs read over all of them
    mesh = load_cluster("mi300x")
    two = custom_allreduce_times(np.array([4e6]), 2, mesh, co, 8e6)[0] - co.latency_s
    eight = custom_allreduce_times(np.array([4e6]), 8, mesh, co, 8e6)[0] - co.latency_s
    assert two > eight


def test_a_stack_scales_peaks_and_bandwidth_and_slows_its_gpus_iterations() -> None:
    hw = load_hardware("mi300x")
    eff = StackEfficiency(matrix_flops_frac=0.5, memory_bandwidth_frac=0.8)
    scaled = stack_hardware(hw, eff)
    assert scaled.peak_flops_per_s.fp8 == pytest.approx(0.5 * hw.peak_flops_per_s.fp8)
    assert scaled.memory_bandwidth_Bps == pytest.approx(0.8 * hw.memory_bandwidth_Bps)
    assert stack_hardware(hw, StackEfficiency()) is hw
    cal = Calibration.shipped()
    slow = cal.with_serving(cal.serving.model_copy(update={"stacks": {"rocm": eff}}))
    base_t = IterationModel("llama-2-7b", "mi300x", calibration=cal.with_serving(
        cal.serving.model_copy(update={"stacks": {}}))).breakdown(num_decode=32, decode_context_tokens=32000)
    slow_t = IterationModel("llama-2-7b", "mi300x", calibration=slow).breakdown(num_decode=32,
                                                                                 decode_context_tokens=32000)
    assert slow_t.linear_s > 1.2 * base_t.linear_s
    nvidia = IterationModel("llama-2-7b", "h100-sxm-80gb", calibration=slow).breakdown(num_decode=32)
    assert nvidia == IterationModel("llama-2-7b", "h100-sxm-80gb", calibration=cal.with_serving(
        cal.serving.model_copy(update={"stacks": {}}))).breakdown(num_decode=32)  # CUDA: untouched


def test_the_front_end_adds_its_time_to_every_ttft() -> None:
    cal = Calibration.shipped()
    eng = dict(cal.serving.engines)
    eng["vllm"] = EngineOverhead(**(eng["vllm"].model_dump() | {"request_overhead_s": 0.0}))
    zero = cal.with_serving(cal.serving.model_copy(update={"engines": eng}))
    eng2 = dict(eng)
    eng2["vllm"] = EngineOverhead(**(eng["vllm"].model_dump() | {"request_overhead_s": 0.05}))
    slow = cal.with_serving(cal.serving.model_copy(update={"engines": eng2}))
    cfg = ServingConfig(model="llama-2-7b", hardware="a100-sxm-80gb", workload=WorkloadConfig(
        num_requests=5, prompt_tokens=500, output_tokens=20, qps=0.5, arrival="fixed"))
    from perfcast.serving.engine import simulate_serving as simulate

    a, b = simulate(cfg, calibration=zero), simulate(cfg, calibration=slow)
    np.testing.assert_allclose(b.first_token_s - b.arrival_s, a.first_token_s - a.arrival_s + 0.05, rtol=1e-9)


def test_kv_moves_over_nvlink_inside_one_domain_and_over_nics_beyond_it() -> None:
    from perfcast.serving.handover import kv_transfer_bandwidth

    nvl72 = cluster_for_gpu("gb200")
    inside = ServingConfig(model="llama-3.1-70b", hardware="gb200", tensor_parallel_size=4, num_replicas=16,
                           num_prefill_replicas=6)  # 64 GPUs of one 72-GPU NVLink domain
    assert kv_transfer_bandwidth(inside, nvl72) == nvl72.intra_node.bandwidth_Bps
    beyond = inside.model_copy(update={"num_replicas": 20})  # 80 GPUs: two racks
    assert kv_transfer_bandwidth(beyond, nvl72) == nvl72.inter_bandwidth_per_gpu_Bps
    assert kv_transfer_bandwidth(inside.model_copy(update={"kv_transfer_bandwidth_Bps": 1e9}), nvl72) == 1e9
    res = simulate_serving(ServingConfig(model="llama-2-7b", hardware="h100-sxm-80gb", num_replicas=4,
                                         num_prefill_replicas=1, workload=WorkloadConfig(
                                             num_requests=20, prompt_tokens=2000, output_tokens=8, qps=5.0)))
    dgx = cluster_for_gpu("h100-sxm-80gb")
    assert res.kv_transfer_bandwidth_Bps == dgx.intra_node.bandwidth_Bps  # 4 GPUs of one DGX node
    assert res.kv_transfer_mean_s == pytest.approx(
        res.config.kv_transfer_latency_s + res.prompt_tokens.mean() * res.kv_bytes_per_token
        / dgx.intra_node.bandwidth_Bps)


def test_mtp_drafts_with_the_targets_own_module_and_only_where_it_has_one() -> None:
    work = WorkloadConfig(num_requests=32, prompt_tokens=1000, output_tokens=200, concurrency=8)
    base = ServingConfig(model="deepseek-v3", hardware="h200-sxm-141gb", tensor_parallel_size=8, workload=work)
    plain = simulate_serving(base)
    mtp = simulate_serving(base.model_copy(update={"speculative_model": "mtp", "num_speculative_tokens": 2,
                                                   "spec_acceptance_rate": 0.8}))
    assert 1.0 < mtp.spec_tokens_per_step <= 3.0
    assert mtp.metrics.tpot_s.p50 < plain.metrics.tpot_s.p50  # one MoE block per draft token is cheap
    with pytest.raises(ConfigError, match="declares none"):
        simulate_serving(ServingConfig(model="llama-2-7b", hardware="a100-sxm-80gb", speculative_model="mtp",
                                       num_speculative_tokens=2, workload=work))



def test_vllm_v0_samples_over_the_full_vocabulary_on_the_driver_rank() -> None:
    """vLLM 0.5's sampler (FP32 PyTorch kernels over every sampling sequence's logits) lengthens the LM head step by
    memory-bound time that grows with the sequences; the full vocabulary on one rank whatever the tensor
    parallelism, whose energy is that rank's alone."""
    from perfcast.serving.iteration import TORCH_SAMPLER

    assert load_engine("vllm-0.5").sampler == "torch-fp32" and load_engine("vllm").sampler == "none"
    v0 = IterationModel("llama-2-7b", "a100-sxm-80gb", engine="vllm-0.5", max_seqs=256)
    v1 = IterationModel("llama-2-7b", "a100-sxm-80gb", engine="vllm", max_seqs=256)
    seqs = np.array([1, 64, 256])
    t, j = v0._sampler_table(seqs)
    moved = sum(r + w for _, _, r, w in TORCH_SAMPLER) * v0.cfg.vocab_size * seqs
    assert np.all(np.diff(t) > 0) and np.all(t > moved / v0.hw.memory_bandwidth_Bps)  # memory-bound, below peak
    assert np.all(j > 0)
    for i, n in enumerate(seqs):  # the head step holds the sampler's time beside the LM head's
        assert v0._head_l[n] == pytest.approx(v1._head_l[n] + t[i], rel=1e-9)
        assert v0._head_J_l[n] == pytest.approx(v1._head_J_l[n] + j[i], rel=1e-9)
    tp2 = IterationModel("llama-2-7b", "a100-sxm-80gb", engine="vllm-0.5", max_seqs=256, tp=2)
    t2, j2 = tp2._sampler_table(seqs)
    assert t2 == pytest.approx(t) and j2 == pytest.approx(j)
    head2 = IterationModel("llama-2-7b", "a100-sxm-80gb", engine="vllm", max_seqs=256, tp=2)
    assert tp2._head_J_l[256] == pytest.approx(head2._head_J_l[256] + j2[-1] / 2, rel=1e-9)  # one rank of two
