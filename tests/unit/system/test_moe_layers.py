"""MoE training as Megatron-Core runs it (``perfcast.system.layers``): grouped-GEMM experts, the router's
kernels, and DeepSeek-V3's multi-token-prediction (MTP) layer on the last pipeline stage."""

from __future__ import annotations

import pytest

from perfcast.catalog.hardware import load_hardware
from perfcast.catalog.models import ModelConfig, load_model
from perfcast.coefficients.compose import load_compose_coefficients
from perfcast.coefficients.kernel import load_coefficients
from perfcast.errors import ConfigError, UnsupportedError
from perfcast.system.layers import MicroBatchCosts, micro_batch_costs, mtp_layers
from perfcast.system.plan import ParallelPlan
from perfcast.system.training import simulate_training

SEQ = 4096


def _costs(model: str, **plan: object) -> tuple[ModelConfig, MicroBatchCosts]:
    cfg = load_model(model)
    p = ParallelPlan(seq_len=SEQ, **plan)  # type: ignore[arg-type]
    return cfg, micro_batch_costs(cfg, p, load_hardware("h100-sxm-80gb"), load_coefficients(),
                                  load_compose_coefficients())


@pytest.mark.parametrize("ep", [1, 8])
def test_grouped_experts_launch_one_kernel_per_projection_not_per_expert(ep: int) -> None:
    # Qwen3-30B-A3B: 128 experts of width 768, top-8, every layer MoE; engine style: gate_up, act, down
    cfg, grouped = _costs("qwen3-30b-a3b", dp=8, ep=ep)
    _, loop = _costs("qwen3-30b-a3b", dp=8, ep=ep, moe_grouped_gemm=False)
    assert cfg.moe is not None
    local = cfg.moe.num_experts // ep
    (g_layer,), (l_layer,) = grouped.layers, loop.layers
    assert g_layer.count == l_layer.count == cfg.num_layers
    kinds = 3  # gate_up_proj, act_and_mul, down_proj: one kernel each per layer when grouped
    # forward: each expert kernel runs once per layer instead of once per local expert
    assert l_layer.fwd_kernels - g_layer.fwd_kernels == kinds * (local - 1)
    # backward: act_and_mul's backward, and per GEMM the input and the weight gradient
    assert l_layer.bwd_kernels - g_layer.bwd_kernels == (1 + 2 * 2) * (local - 1)
    # the same work: FLOPs, parameters and kept activations do not depend on how the kernels are launched
    assert g_layer.fwd_flops == pytest.approx(l_layer.fwd_flops, rel=1e-12)
    assert g_layer.bwd_flops == pytest.approx(l_layer.bwd_flops, rel=1e-12)
    assert g_layer.params == l_layer.params
    assert g_layer.expert_params == l_layer.expert_params
    assert g_layer.activation_bytes == pytest.approx(l_layer.activation_bytes, rel=1e-12)


def test_grouped_gemm_step_is_faster_with_many_small_experts() -> None:
    # 128 experts of width 768 over 16 GPUs: 8 local experts of ~2k tokens each per micro-batch; one grouped
    # kernel per projection fills the GPU with all eight experts' tiles and launches once
    kw = dict(dp=16, ep=16, micro_batch=1, global_batch=256, seq_len=SEQ, precision="bf16")
    grouped = simulate_training("qwen3-30b-a3b", "dgx-h100", ParallelPlan(**kw), nodes=2)  # type: ignore[arg-type]
    loop = simulate_training("qwen3-30b-a3b", "dgx-h100", ParallelPlan(moe_grouped_gemm=False, **kw),  # type: ignore[arg-type]
                             nodes=2)
    assert grouped.step_time_s < loop.step_time_s
    assert grouped.model_flops_per_token == loop.model_flops_per_token


def test_moe_layer_prices_the_router_kernels() -> None:
    cfg, costs = _costs("qwen3-30b-a3b")
    assert cfg.moe is not None
    from perfcast.system.layers import _forward_ops

    forward, _, tokens = _forward_ops(cfg, ParallelPlan(seq_len=SEQ))
    by_name = {o.name: o for o in forward}
    e, k, h = cfg.moe.num_experts, cfg.moe.experts_per_token, cfg.hidden_size
    assert by_name["moe_layers.mlp.router.gate"].dims == (1, tokens, h, e)
    assert by_name["moe_layers.mlp.router.topk_softmax"].dims == (tokens, e)
    assert by_name["moe_layers.mlp.router.aux_loss"].dims == (tokens, e)
    permute = by_name["moe_layers.mlp.permute"]
    assert permute.dims == (1, tokens * k * h) and permute.bytes_written == tokens * k * h * 2  # bf16


def _mtp_flops_per_token(cfg: ModelConfig, seq: int) -> float:
    """Megatron's convention (3 x forward matmul FLOPs, non-causal attention) for one DeepSeek-V3 MTP module,
    from the config: eh_proj (2h -> h), one MoE layer with MLA attention, the shared LM head."""
    assert cfg.mla is not None and cfg.moe is not None
    h, v, nh = cfg.hidden_size, cfg.vocab_size, cfg.num_heads
    m, moe = cfg.mla, cfg.moe
    assert m.q_lora_rank is not None
    qk = m.qk_nope_head_dim + m.qk_rope_head_dim
    attn_proj = (h * m.q_lora_rank + m.q_lora_rank * nh * qk + h * (m.kv_lora_rank + m.qk_rope_head_dim)
                 + m.kv_lora_rank * nh * (m.qk_nope_head_dim + m.v_head_dim) + nh * m.v_head_dim * h)
    core = nh * seq * (qk + m.v_head_dim)  # q @ k^T and p @ v over all seq keys (non-causal), per token
    mlp = (h * moe.num_experts  # router
           + moe.experts_per_token * 3 * h * moe.expert_intermediate_size  # routed experts (gated)
           + 3 * h * moe.shared_intermediate_size * moe.num_shared_experts)  # shared expert
    return 3.0 * 2.0 * (2 * h * h + attn_proj + core + mlp + h * v)


def test_mtp_adds_one_moe_layer_projection_and_head_to_deepseek_v3_model_flops() -> None:
    cfg = load_model("deepseek-v3")
    assert mtp_layers(cfg, ParallelPlan()) == 1  # num_nextn_predict_layers
    _, without = _costs("deepseek-v3", mtp_layers=0)
    _, with_mtp = _costs("deepseek-v3")
    added = with_mtp.model_flops_per_token - without.model_flops_per_token
    assert added == pytest.approx(_mtp_flops_per_token(cfg, SEQ), rel=1e-9)
    # the MTP module runs in the head part (the last pipeline stage), not as a 62nd layer
    assert [p.count for p in with_mtp.layers] == [p.count for p in without.layers]
    head, head0 = with_mtp.part("head"), without.part("head")
    assert head is not None and head0 is not None
    assert head.moe_blocks == 1 and head0.moe_blocks == 0
    assert head.fwd_flops > head0.fwd_flops and head.activation_bytes > head0.activation_bytes
    # its parameters: the projection, one layer's weights and norms; embedding and LM head are shared
    (moe_layer,) = [p for p in with_mtp.layers if p.moe_blocks]
    extra = head.params - head0.params
    norms = 3 * cfg.hidden_size  # enorm, hnorm and the MTP's output norm
    assert extra == moe_layer.params + 2 * cfg.hidden_size ** 2 + norms


def test_mtp_runs_on_the_last_pipeline_stage() -> None:
    kw = dict(tp=8, pp=4, dp=8, ep=64, etp=1, sp=True, micro_batch=1, global_batch=64, seq_len=SEQ, precision="bf16",
              recompute="full", uneven_stages=True)
    base = simulate_training("deepseek-v3", "dgx-h100", ParallelPlan(mtp_layers=0, **kw), nodes=32)  # type: ignore[arg-type]
    mtp = simulate_training("deepseek-v3", "dgx-h100", ParallelPlan(**kw), nodes=32)  # type: ignore[arg-type]
    assert mtp.stage_layers == base.stage_layers
    assert mtp.stage_fwd_s[:-1] == base.stage_fwd_s[:-1]
    assert mtp.stage_fwd_s[-1] > base.stage_fwd_s[-1]
    assert mtp.model_flops_per_token > base.model_flops_per_token


def test_mtp_and_grouped_gemm_settings_are_refused_where_they_do_not_apply() -> None:
    with pytest.raises(ConfigError, match="dense"):
        simulate_training("llama-2-7b", "dgx-h100", ParallelPlan(dp=8, moe_grouped_gemm=False), nodes=1)
    with pytest.raises(UnsupportedError, match="multi-token-prediction"):
        simulate_training("nemotron-h-8b", "dgx-h100", ParallelPlan(dp=8, mtp_layers=1), nodes=1)
    # a config without MTP modules trains one when asked (Megatron's mtp_num_layers on any GPT model)
    cfg = load_model("qwen3-30b-a3b")
    assert mtp_layers(cfg, ParallelPlan()) == 0
    assert mtp_layers(cfg, ParallelPlan(mtp_layers=2)) == 2


def test_mtp_modules_are_built_for_training_only() -> None:
    from perfcast.workload.build import WorkloadSpec, build_workload
    from perfcast.workload.types import Mode

    train = build_workload("deepseek-v3", WorkloadSpec(Mode.TRAINING, 1, 512, dtype="bf16", style="engine",
                                                       mtp_layers=1))
    mtp = [o for o in train.ops if o.name.startswith("head.mtp.")]
    assert {o.name for o in mtp} >= {"head.mtp.eh_proj", "head.mtp.mlp.router.gate", "head.mtp.lm_head",
                                     "head.mtp.loss.log_softmax"}
    with pytest.raises(UnsupportedError, match="multi-token-prediction"):
        build_workload("deepseek-v3", WorkloadSpec(Mode.PREFILL, 1, 512, dtype="bf16", mtp_layers=1))


def test_sequence_parallelism_splits_the_mtp_block_like_a_layer() -> None:
    _, plain = _costs("deepseek-v3", tp=8, mtp_layers=0)
    _, sp = _costs("deepseek-v3", tp=8, sp=True, mtp_layers=0)
    _, plain_mtp = _costs("deepseek-v3", tp=8)
    _, sp_mtp = _costs("deepseek-v3", tp=8, sp=True)
    heads = [c.part("head") for c in (plain, sp, plain_mtp, sp_mtp)]
    assert all(h is not None for h in heads)
    h0, h1, h2, h3 = heads
    mtp_flops = h2.fwd_flops - h0.fwd_flops  # type: ignore[union-attr]
    mtp_flops_sp = h3.fwd_flops - h1.fwd_flops  # type: ignore[union-attr]
    # the MTP block's replicated norms and residuals run on 1/tp of the tokens: fewer FLOPs with SP
    assert mtp_flops_sp < mtp_flops
