"""Unit tests of ``perfcast.workload.transforms``: FP8, LoRA/QLoRA, context parallelism and expert routing."""

from __future__ import annotations

import pytest

from perfcast.catalog.models import load_model
from perfcast.dtypes import DType
from perfcast.workload.backward import backward_ops
from perfcast.workload.build import WorkloadSpec, build_workload
from perfcast.workload.transforms import apply_lora, lora_target_names, route_experts, shard_context, to_fp8
from perfcast.workload.types import Mode, Op, OpKind, Phase

BATCH, SEQ = 2, 512
LLAMA_LAYERS = 32


def _forward(model: str, batch: int = BATCH, seq: int = SEQ) -> list[Op]:
    spec = WorkloadSpec(Mode.TRAINING, batch, seq, dtype="bf16", style="engine", attention="flash",
                        optimizer="none")
    return [o for o in build_workload(model, spec).ops if o.phase is Phase.FORWARD]


def _by_name(ops: list[Op]) -> dict[str, Op]:
    names = [o.name for o in ops]
    assert len(names) == len(set(names))
    return {o.name: o for o in ops}


def _is_block_linear(op: Op) -> bool:
    return op.kind is OpKind.GEMM and op.op == "linear" and op.name.startswith(("layers.", "moe_layers."))


# --- to_fp8 ---------------------------------------------------------------------------------------------------


def test_to_fp8_converts_exactly_the_block_linears() -> None:
    fwd = _forward("llama-2-7b")
    out = to_fp8(fwd)
    before, after = _by_name(fwd), _by_name(out)
    block = [o.name for o in fwd if _is_block_linear(o)]
    assert block == ["layers.attn.qkv_proj", "layers.attn.o_proj", "layers.mlp.gate_up_proj", "layers.mlp.down_proj"]
    for name in block:
        new, old = after[name], before[name]
        assert new.dtype is DType.FP8
        assert new.get("weight_dtype") == "fp8"
        assert new.dims == old.dims and new.flops == old.flops and new.count == old.count
        assert new.bytes_read == pytest.approx(old.bytes_read / 2)  # bf16 -> 1-byte operands
        assert new.weight_bytes == pytest.approx(old.weight_bytes / 2)
        assert new.params == old.params
    # embedding and LM head stay in bf16
    assert after["embed.embed_tokens"] == before["embed.embed_tokens"]
    assert after["head.lm_head"].dtype is DType.BF16
    assert after["head.lm_head"] == before["head.lm_head"]
    # everything that is not a block linear is untouched
    for name, op in before.items():
        if name not in block:
            assert after[name] == op


def test_to_fp8_adds_one_input_cast_right_before_each_converted_gemm() -> None:
    fwd = _forward("llama-2-7b")
    out = to_fp8(fwd)
    casts = [o for o in out if o.op == "cast"]
    converted = [o for o in out if o.kind is OpKind.GEMM and o.dtype is DType.FP8]
    assert len(casts) == len(converted) == 4
    assert len(out) == len(fwd) + 4
    for cast in casts:
        i = out.index(cast)
        gemm = out[i + 1]
        assert cast.name == f"{gemm.name}.cast_fp8"
        _, m, k, _ = gemm.dims
        assert cast.kind is OpKind.VECTOR and cast.dims == (1, m * k)  # the GEMM's input activation
        assert cast.bytes_read == m * k * 2 and cast.bytes_written == m * k
        assert cast.count == gemm.count == LLAMA_LAYERS
        assert cast.phase is Phase.FORWARD


def test_to_fp8_is_idempotent() -> None:
    once = to_fp8(_forward("llama-2-7b"))
    assert to_fp8(once) == once


def test_fp8_gemms_have_fp8_gradient_gemms() -> None:
    out = to_fp8(_forward("llama-2-7b"))
    bwd = _by_name(backward_ops(out))
    for name in ("layers.attn.qkv_proj", "layers.attn.o_proj", "layers.mlp.gate_up_proj", "layers.mlp.down_proj"):
        assert bwd[f"{name}.grad_input"].dtype is DType.FP8
        assert bwd[f"{name}.grad_weight"].dtype is DType.FP8
        assert f"{name}.cast_fp8.grad0" in bwd  # the output gradient's cast
    assert bwd["head.lm_head.grad_input"].dtype is DType.BF16
    assert bwd["head.lm_head.grad_weight"].dtype is DType.BF16
    fp8 = [o.name for o in bwd.values() if o.dtype is DType.FP8]
    assert len(fp8) == 8


# --- apply_lora -----------------------------------------------------------------------------------------------


def test_lora_target_names_map_peft_names_onto_fused_projections() -> None:
    assert lora_target_names(("q", "k", "v", "o")) >= {"qkv_proj", "o_proj", "q_proj", "k_proj", "v_proj"}
    assert "gate_up_proj" in lora_target_names(("gate_proj",))
    assert lora_target_names(("down",)) == {"down_proj", "fc2"}
    assert lora_target_names(("my_custom_linear",)) == {"my_custom_linear"}


def test_lora_trains_only_the_adapters_with_hand_counted_params() -> None:
    r = 16
    out = apply_lora(_forward("llama-2-7b"), r, ("q", "k", "v", "o"))
    # A is in x r, B is r x out: r * (in + out) per targeted projection, per layer
    per_layer = r * (4096 + 12288) + r * (4096 + 4096)  # fused qkv_proj 4096 -> 12288, o_proj 4096 -> 4096
    assert per_layer == 393_216
    assert sum(o.params * o.count for o in out) == per_layer * LLAMA_LAYERS == 12_582_912
    trainable = {o.name for o in out if o.params}
    assert trainable == {"layers.attn.qkv_proj.lora_a", "layers.attn.qkv_proj.lora_b",
                         "layers.attn.o_proj.lora_a", "layers.attn.o_proj.lora_b"}
    ops = _by_name(out)
    assert ops["layers.attn.qkv_proj.lora_a"].dims == (1, BATCH * SEQ, 4096, r)
    assert ops["layers.attn.qkv_proj.lora_b"].dims == (1, BATCH * SEQ, r, 12288)
    assert ops["layers.attn.qkv_proj.lora_a"].params == 4096 * r
    assert ops["layers.attn.qkv_proj.lora_b"].params == r * 12288
    assert ops["layers.attn.qkv_proj.lora_a"].flops == 2.0 * BATCH * SEQ * 4096 * r
    assert all(ops[n].count == LLAMA_LAYERS for n in trainable)


def test_lora_freezes_every_base_parameter() -> None:
    fwd = _forward("llama-2-7b")
    out = _by_name(apply_lora(fwd, 16, ("q", "k", "v", "o")))
    had_params = [o.name for o in fwd if o.params]
    assert "embed.embed_tokens" in had_params and "head.lm_head" in had_params
    assert "layers.attn.input_layernorm" in had_params
    for name in had_params:
        assert out[name].params == 0
        assert out[name].get("frozen") is True
    # the adapters follow the layer they adapt
    names = [o.name for o in apply_lora(fwd, 16, ("o",))]
    i = names.index("layers.attn.o_proj")
    assert names[i + 1:i + 3] == ["layers.attn.o_proj.lora_a", "layers.attn.o_proj.lora_b"]


@pytest.mark.parametrize(("targets", "adapted"), [
    (("q", "v"), {"layers.attn.qkv_proj"}),
    (("o",), {"layers.attn.o_proj"}),
    (("gate", "up", "down"), {"layers.mlp.gate_up_proj", "layers.mlp.down_proj"}),
    (("q_proj", "o_proj"), {"layers.attn.qkv_proj", "layers.attn.o_proj"}),
])
def test_lora_targets_choose_the_adapted_projections(targets: tuple[str, ...], adapted: set[str]) -> None:
    out = apply_lora(_forward("llama-2-7b"), 8, targets)
    got = {o.name.removesuffix(".lora_a") for o in out if o.name.endswith(".lora_a")}
    assert got == adapted
    assert {o.name.removesuffix(".lora_b") for o in out if o.name.endswith(".lora_b")} == adapted


def test_lora_backward_has_weight_gradients_only_for_the_adapters() -> None:
    out = apply_lora(_forward("llama-2-7b"), 16, ("q", "k", "v", "o"))
    bwd = _by_name(backward_ops(out))
    grad_w = {n.removesuffix(".grad_weight") for n in bwd if n.endswith(".grad_weight")}
    assert grad_w == {"layers.attn.qkv_proj.lora_a", "layers.attn.qkv_proj.lora_b",
                      "layers.attn.o_proj.lora_a", "layers.attn.o_proj.lora_b"}
    # base linears still pass the gradient through to their input
    for base in ("layers.attn.qkv_proj", "layers.attn.o_proj", "layers.mlp.gate_up_proj", "layers.mlp.down_proj",
                 "head.lm_head"):
        assert f"{base}.grad_input" in bwd
        assert f"{base}.grad_weight" not in bwd
    # frozen norms and embedding: no parameter gradients
    assert not any(n.endswith(".grad_params") for n in bwd)
    assert not any(n.startswith("embed.embed_tokens") for n in bwd)


def test_qlora_dequantizes_each_block_linear_once_before_its_gemm() -> None:
    fwd = _forward("llama-2-7b")
    out = apply_lora(fwd, 16, ("q", "k", "v", "o"), qlora=True)
    deq = [o for o in out if o.op == "dequantize"]
    block = [o for o in fwd if _is_block_linear(o)]
    assert [o.name for o in deq] == [f"{o.name}.dequant_nf4" for o in block]
    for d, base in zip(deq, block, strict=True):
        _, _, k, n = base.dims
        assert out[out.index(d) + 1].name == base.name
        assert d.count == base.count == LLAMA_LAYERS
        assert d.dims == (1, k * n)
        assert d.bytes_read == pytest.approx(k * n * (0.5 + 4.0 / 64))  # NF4 codes + fp32 absmax per 64
        assert d.bytes_written == k * n * 2  # to bf16
        assert d.params == 0
    assert not any(o.name.startswith("head.") and o.op == "dequantize" for o in out)
    # QLoRA changes no trainable parameters
    plain = apply_lora(fwd, 16, ("q", "k", "v", "o"))
    assert sum(o.params * o.count for o in out) == sum(o.params * o.count for o in plain)
    assert not any(o.op == "dequantize" for o in plain)


def test_qlora_dequantizes_each_frozen_weight_again_in_the_backward() -> None:
    out = apply_lora(_forward("llama-2-7b"), 16, ("q", "k", "v", "o"), qlora=True)
    fwd = {o.name: o for o in out if o.op == "dequantize"}
    bwd = [o for o in backward_ops(out) if o.op == "dequantize"]
    # bitsandbytes keeps the packed weight and dequantizes it again for the input gradient: the same kernel
    assert [o.name for o in bwd] == [f"{n}.redequant" for n in reversed(fwd)]
    for o in bwd:
        f = fwd[o.name.removesuffix(".redequant")]
        assert (o.dims, o.bytes_read, o.bytes_written, o.count) == (f.dims, f.bytes_read, f.bytes_written, f.count)
        assert o.phase is Phase.BACKWARD


# --- shard_context --------------------------------------------------------------------------------------------


def _attention_flops(ops: list[Op]) -> float:
    return sum(o.flops * o.count for o in ops if o.kind is OpKind.ATTENTION)


@pytest.mark.parametrize(("model", "seq", "cp"), [("llama-2-7b", 512, 2), ("llama-2-7b", 1024, 4),
                                                  ("llama-2-7b", 2048, 8), ("llama-2-7b", 4096, 2),
                                                  ("llama-3.1-8b", 8192, 4)])
def test_context_shards_add_up_to_the_unsharded_causal_attention(model: str, seq: int, cp: int) -> None:
    whole = _attention_flops(_forward(model, 1, seq))
    local = shard_context(_forward(model, 1, seq // cp), cp)
    assert _attention_flops(local) * cp == pytest.approx(whole, rel=0.01)


def test_context_sharding_keeps_local_queries_against_all_keys() -> None:
    seq, cp = 4096, 4
    fwd = _forward("llama-2-7b", 1, seq // cp)
    out = shard_context(fwd, cp)
    assert len(out) == len(fwd)
    for old, new in zip(fwd, out, strict=True):
        if old.kind is not OpKind.ATTENTION:
            assert new == old  # every other op already has seq/cp tokens
            continue
        b, h, kvh, q, kv, d, causal = new.dims
        assert (b, h, kvh, q, kv, d, causal) == (1, 32, 32, seq // cp, seq, 128, 1)
        # reads: local queries, all keys and values
        assert new.bytes_read == (h * q * d + kvh * seq * 2 * d) * 2
        assert new.flops == pytest.approx(2.0 * h * (seq * (seq + 1) / 2) / cp * 2 * d)


def test_context_parallel_degree_one_is_the_identity() -> None:
    fwd = _forward("llama-2-7b")
    assert shard_context(fwd, 1) == fwd


@pytest.mark.parametrize("cp", [2, 4])
def test_context_shards_add_up_for_sliding_window_attention(cp: int) -> None:
    seq = 16384
    whole = _attention_flops(_forward("mistral-7b", 1, seq))
    local = shard_context(_forward("mistral-7b", 1, seq // cp), cp)
    assert _attention_flops(local) * cp == pytest.approx(whole, rel=0.01)


def test_context_sharding_respects_the_sliding_window_bound() -> None:
    cfg = load_model("mistral-7b")
    seq, cp = 16384, 4
    w = cfg.sliding_window
    assert w == 4096 and seq // cp == w
    local = shard_context(_forward("mistral-7b", 1, seq // cp), cp)
    per_pair = 2.0 * cfg.num_heads * 2 * cfg.head_dim * cfg.num_layers  # both GEMMs of every layer
    assert _attention_flops(local) * cp <= seq * w * per_pair


# --- route_experts --------------------------------------------------------------------------------------------


MIX_TOKENS = BATCH * SEQ  # 1024 tokens per micro-batch
MIX_E, MIX_K, MIX_LAYERS = 8, 2, 32


def _experts(ops: list[Op]) -> dict[str, Op]:
    return {o.name.rsplit(".", 1)[1]: o for o in ops if ".experts." in o.name}


def test_mixtral_graph_has_one_expert_mlp_per_active_expert() -> None:
    ex = _experts(_forward("mixtral-8x7b"))
    assert set(ex) == {"gate_up_proj", "act_and_mul", "down_proj"}
    assert ex["gate_up_proj"].count == MIX_LAYERS * MIX_E
    assert ex["gate_up_proj"].dims[1] == MIX_TOKENS * MIX_K // MIX_E


@pytest.mark.parametrize("ep", [1, 2, 4, 8])
def test_route_experts_holds_e_over_ep_experts_with_ep_times_the_tokens(ep: int) -> None:
    fwd = _forward("mixtral-8x7b")
    out = route_experts(fwd, MIX_E, MIX_K, ep=ep, grouped=False)
    old, new = _experts(fwd), _experts(out)
    tokens = MIX_TOKENS * MIX_K * ep // MIX_E
    for op in new.values():
        assert op.count == MIX_LAYERS * MIX_E // ep
    for name in ("gate_up_proj", "down_proj"):
        b, m, k, n = new[name].dims
        assert (b, m, k, n) == (1, tokens, *old[name].dims[2:])
        assert new[name].flops == pytest.approx(2.0 * tokens * k * n)
        assert new[name].weight_bytes == old[name].weight_bytes
        assert new[name].bytes_read == pytest.approx(tokens * k * 2 + old[name].weight_bytes)
    assert new["act_and_mul"].dims[1] == tokens * 14336
    assert new["act_and_mul"].flops == pytest.approx(old["act_and_mul"].flops * tokens / old["down_proj"].dims[1])
    # each GPU processes tokens * k expert-token pairs whatever ep is: per-GPU expert FLOPs do not change
    assert sum(o.flops * o.count for o in new.values()) == pytest.approx(sum(o.flops * o.count for o in old.values()))
    # non-expert ops are untouched but for the router's aux loss and the permutation kernels
    moved = (".aux_loss", ".permute", ".sort_chunks", ".unsort_chunks")
    assert [o for o in out if ".experts." not in o.name and not o.name.endswith(moved)] == \
        [o for o in fwd if ".experts." not in o.name and not o.name.endswith(".permute")]


@pytest.mark.parametrize("ep", [1, 2, 4, 8])
def test_grouped_experts_are_one_kernel_per_projection_and_layer(ep: int) -> None:
    fwd = _forward("mixtral-8x7b")
    loop, grouped = (_experts(route_experts(fwd, MIX_E, MIX_K, ep=ep, grouped=g)) for g in (False, True))
    local = MIX_E // ep
    tokens = MIX_TOKENS * MIX_K * ep // MIX_E
    # launches per step: (gate_up, act, down) x layers, not x layers x local experts
    assert sum(o.count for o in grouped.values()) == 3 * MIX_LAYERS
    assert sum(o.count for o in loop.values()) == 3 * MIX_LAYERS * local
    for name in ("gate_up_proj", "down_proj"):
        g, one = grouped[name], loop[name]
        assert g.dims == (local, tokens, *one.dims[2:])  # each group keeps its expert's tokens (its own M)
        for field in ("flops", "bytes_read", "bytes_written", "weight_bytes", "params"):
            assert getattr(g, field) == pytest.approx(getattr(one, field) * local)
    assert grouped["act_and_mul"].dims == (1, tokens * 14336 * local)
    assert sum(o.flops * o.count for o in grouped.values()) == pytest.approx(
        sum(o.flops * o.count for o in loop.values()))


def test_grouped_expert_backward_has_a_weight_gradient_per_expert() -> None:
    up = _experts(route_experts(_forward("mixtral-8x7b"), MIX_E, MIX_K, ep=2))["gate_up_proj"]
    b, m, k, n = up.dims
    grads = {o.name.rsplit(".", 1)[1]: o for o in backward_ops([up])}
    assert grads["grad_input"].dims == (b, m, n, k)
    assert grads["grad_weight"].dims == (b, n, m, k)
    assert grads["grad_weight"].bytes_written == b * n * k * 2  # bf16 weight gradients of every local expert
    assert grads["grad_weight"].flops == pytest.approx(2.0 * b * m * k * n)


def test_route_experts_adds_the_aux_loss_and_a_permute_with_a_backward() -> None:
    fwd = _forward("mixtral-8x7b")
    out = {o.name: o for o in route_experts(fwd, MIX_E, MIX_K, ep=1)}
    aux = out["moe_layers.mlp.router.aux_loss"]
    assert aux.dims == (MIX_TOKENS, MIX_E) and aux.count == MIX_LAYERS
    assert aux.bytes_read == MIX_TOKENS * MIX_E * 4 + MIX_TOKENS * 8  # FP32 probabilities and the expert ids
    permute = out["moe_layers.mlp.permute"]
    assert permute.op == "permute"
    (grad,) = backward_ops([permute])
    assert grad.op == "unpermute" and grad.bytes == permute.bytes_written * 2  # reads and writes tokens*k*h


@pytest.mark.parametrize("ep", [1, 2, 4, 8])
@pytest.mark.parametrize(("skew", "capacity", "factor"), [
    (0.5, None, 1.5), (0.5, 1.25, 1.25), (0.5, 2.0, 1.5), (1.0, 1.0, 1.0), (0.0, 0.5, 0.5),
])
def test_route_experts_prices_the_busiest_gpu(ep: int, skew: float, capacity: float | None, factor: float) -> None:
    out = _experts(route_experts(_forward("mixtral-8x7b"), MIX_E, MIX_K, ep=ep, skew=skew,
                                 capacity_factor=capacity))
    mean = MIX_TOKENS * MIX_K * ep / MIX_E
    local = MIX_E // ep
    assert factor == min(1 + skew, capacity or float("inf"))
    others = mean * min(1.0, capacity or float("inf"))
    # the busiest GPU: its busiest expert at factor x the mean, the others at the mean (both capped); with
    # ep = 1 the GPU holds every expert and sees exactly the routed tokens (fewer when they drop)
    on_gpu = others * local if ep == 1 else mean * factor + (local - 1) * others
    assert out["gate_up_proj"].dims[:2] == (local, round(on_gpu / local))
    assert out["down_proj"].dims[:2] == (local, round(on_gpu / local))
    assert out["gate_up_proj"].count == MIX_LAYERS
    if ep == MIX_E:  # one expert per GPU: the busiest expert's load
        assert out["gate_up_proj"].dims[1] == round(mean * factor)


def test_route_experts_leaves_dense_models_alone() -> None:
    fwd = _forward("llama-2-7b")
    assert route_experts(fwd, 8, 2, ep=2, skew=0.5) == fwd


@pytest.mark.parametrize("ep", [1, 2, 4, 8])
def test_route_experts_regroups_received_tokens_with_several_local_experts(ep: int) -> None:
    out = {o.name: o for o in route_experts(_forward("mixtral-8x7b"), MIX_E, MIX_K, ep=ep)}
    names = ("moe_layers.mlp.sort_chunks", "moe_layers.mlp.unsort_chunks")
    if ep in (1, MIX_E):  # nothing to regroup: no all-to-all, or one expert per GPU
        assert not set(names) & set(out)
        return
    received = MIX_TOKENS * MIX_K  # (E/ep) local experts x tokens*k*ep/E tokens each, no skew
    for name in names:
        op = out[name]
        assert op.op == "permute" and op.dims == (1, received * 4096) and op.count == MIX_LAYERS
        assert op.bytes_written == received * 4096 * 2
