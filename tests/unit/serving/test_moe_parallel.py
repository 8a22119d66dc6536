"""Expert parallelism, attention data parallelism, MoE all-reduce sizes and the pipeline's last stage."""

from __future__ import annotations

import numpy as np
import pytest

from perfcast.dtypes import DType
from perfcast.errors import ConfigError
from perfcast.serving.config import ServingConfig, WorkloadConfig
from perfcast.serving.engine import simulate_serving
from perfcast.serving.iteration import IterationModel, PrefillChunk, weight_bytes_per_gpu
from perfcast.system.collectives import collective_times

QWEN = "Qwen/Qwen3-30B-A3B"  # 128 experts, top-8, 4 KV heads
RTX = "rtx-pro-6000-blackwell"  # PCIe, no NVLink


def _model(tp: int, *, dp: bool = False, pp: int = 1, model: str = QWEN, hw: str = RTX) -> IterationModel:
    return IterationModel(model, hw, tp=tp, pp=pp, dtype=DType.FP16, quantization="fp4", max_tokens=2048,
                          max_seqs=512, engine="trtllm", attention_dp=dp, ep=tp if dp else 1)


def _throughput(tp: int, dp: bool) -> float:
    cfg = ServingConfig(model=QWEN, hardware=RTX, tensor_parallel_size=tp, expert_parallel_size=tp if dp else 1,
                        attention_data_parallel=dp, scheduler="orca", engine="trtllm", quantization="fp4",
                        max_num_seqs=1024 * (tp if dp else 1), max_num_batched_tokens=4096,
                        workload=WorkloadConfig(num_requests=3000, prompt_tokens=128, output_tokens=1024))
    res = simulate_serving(cfg)
    assert res.metrics.requests_completed == 3000
    return float(res.metrics.throughput_tokens_per_s)


def test_moe_all_reduce_carries_the_layer_output_not_the_expert_outputs() -> None:
    m = _model(2)
    tokens = 512
    hidden = tokens * m.cfg.hidden_size * DType.FP16.bytes  # the weighted sum of the top-8 experts, once
    one = collective_times("all_reduce", np.array([float(hidden)]), 2, m.cl, coeffs=m.cal.collectives,
                           shared_nics=False)[0]
    assert m.breakdown((), tokens, tokens * 100).tp_comm_s == pytest.approx(2 * m.cfg.num_layers * one, rel=0.02)


def test_kv_per_gpu_stops_shrinking_past_the_kv_heads_and_attention_dp_holds_whole_tokens() -> None:
    full = _model(1).kv_bytes_per_token
    assert _model(4).kv_bytes_per_token == pytest.approx(full / 4)
    assert _model(8).kv_bytes_per_token == pytest.approx(full / 4)  # 4 KV heads: replicated at tp=8
    assert _model(8, dp=True).kv_bytes_per_token == pytest.approx(full / 8)  # 8 GPUs, each its own tokens


def test_attention_dp_replicates_everything_but_the_routed_experts() -> None:
    tp8 = weight_bytes_per_gpu(QWEN, tp=8, dtype=DType.FP16, quantization="fp4")
    dp8 = weight_bytes_per_gpu(QWEN, tp=8, dtype=DType.FP16, quantization="fp4", attention_dp=True)
    one = weight_bytes_per_gpu(QWEN, tp=1, dtype=DType.FP16, quantization="fp4")
    assert tp8 == pytest.approx(one / 8)
    assert tp8 < dp8 < one / 2  # the experts (most of the model) are still split 8 ways


def test_attention_dp_decode_is_cheaper_than_tp_on_pcie() -> None:
    """Each rank attends over 1/8 of the sequences with whole heads (no KV head replicated) and the MoE layers
    move each token once (all-gather + reduce-scatter) instead of two all-reduces per layer."""
    tp, dp = _model(8), _model(8, dp=True)
    seqs, ctx = 512, 512 * 1000
    a, b = tp.breakdown((), seqs, ctx), dp.breakdown((), seqs, ctx)
    assert b.attention_decode_s < a.attention_decode_s
    assert b.tp_comm_s < a.tp_comm_s
    assert b.time_s < a.time_s
    # the closed form the engine's decode stretches use agrees with the breakdown
    assert float(dp.decode_times(seqs, np.array([ctx]))[0]) == pytest.approx(b.time_s, rel=1e-6)


def test_attention_dp_throughput_grows_with_gpus_when_kv_bound() -> None:
    t2, t8 = _throughput(2, True), _throughput(8, True)
    assert t8 > 1.5 * t2  # KV capacity and attention grow with the GPUs (measured 1.8x)
    assert t8 > _throughput(8, False)


def test_pipeline_last_stage_carries_the_whole_lm_head() -> None:
    one, four = _model(1, model="meta-llama/Llama-2-7b-hf", hw=RTX), _model(
        1, pp=4, model="meta-llama/Llama-2-7b-hf", hw=RTX)
    a, b = one.breakdown((), 64, 64000), four.breakdown((), 64, 64000)
    assert b.lm_head_s == pytest.approx(a.lm_head_s)
    assert b.linear_s < a.linear_s / 3


def test_bad_parallel_options() -> None:
    with pytest.raises(ConfigError, match="mixture-of-experts"):
        _model(2, dp=True, model="meta-llama/Llama-2-7b-hf", hw=RTX)
    with pytest.raises(ConfigError, match="must divide"):
        IterationModel(QWEN, RTX, tp=4, ep=3)


def test_attention_dp_rank_runs_its_whole_prefill_chunk() -> None:
    """A prefill chunk belongs to one attention rank: that rank runs the layers outside the routed experts on
    all of its tokens while the experts see the union's; one 1600-token chunk costs more than four chunks of
    400 (the same tokens, one per rank), and the difference is the rank's own layers, not the experts'."""
    m = _model(4, dp=True)
    one = m.breakdown((PrefillChunk(1600, 1600),), 64, 64 * 500)
    four = m.breakdown(tuple(PrefillChunk(400, 400) for _ in range(4)), 64, 64 * 500)
    assert one.linear_s > four.linear_s
    assert one.tp_comm_s == pytest.approx(four.tp_comm_s)  # the MoE collectives carry the union either way
    rank, union = m._rank_l, m._linear_l
    assert one.linear_s - four.linear_s == pytest.approx(rank[1600 + 16] - rank[400 + 16], rel=1e-9)
    assert union[1664] > 0 and rank[1664] > 0


def test_trtllm_moe_expands_rows_in_a_kernel_of_its_own_with_the_quantize_fused() -> None:
    """TensorRT-LLM's CUTLASS MoE copies every token's top-k rows into expert order (quantized for the FP4
    GEMM) before the first grouped GEMM; vLLM's fused_moe gathers them inside the GEMM."""
    trt = {o.name: o for o in _model(1)._ops(512)[0]}
    vllm_model = IterationModel(QWEN, RTX, tp=1, dtype=DType.FP16, quantization="fp4", max_tokens=2048,
                                max_seqs=512, engine="vllm")
    vllm = {o.name: o for o in vllm_model._ops(512)[0]}
    permute = trt["moe_layers.mlp.permute"]
    k, h = 8, 2048  # Qwen3-30B-A3B: top-8 experts, hidden 2048
    assert permute.bytes_written == pytest.approx(512 * k * h * (0.5 + 1 / 16))  # NVFP4 rows and their scales
    assert "moe_layers.mlp.permute" not in vllm
    assert not [n for n in trt if ".experts." in n and "quantize" in n]
    # vLLM quantizes the hidden states once per token, then every routed row's intermediate (all the experts')
    first, second = vllm["moe_layers.mlp.experts.gate_up_proj.quantize_fp4"], vllm[
        "moe_layers.mlp.experts.down_proj.quantize_fp4"]
    g, m, width, _ = vllm["moe_layers.mlp.experts.down_proj"].dims
    assert first.dims == (1, 512 * h)
    assert second.dims == (1, g * m * width)
    assert second.bytes_written == pytest.approx(g * m * width * (0.5 + 1 / 16))
    act_trt, act_vllm = trt["moe_layers.mlp.experts.act_and_mul"], vllm["moe_layers.mlp.experts.act_and_mul"]
    assert act_trt.bytes_written == pytest.approx(act_vllm.bytes_written / 2 * (0.5 + 1 / 16))
