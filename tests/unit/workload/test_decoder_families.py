"""The decoder builder follows each family's transformers code: norms where the model puts them, its multipliers
and softcaps as elementwise ops, its fused projections, its attention pattern.

Hand-derived from the HF modeling code of each family (transformers 4.57): Gemma2DecoderLayer's four norms and
``softcap`` in ``eager_attention_forward``, Olmo2DecoderLayer's post-norms and whole-projection ``q_norm``,
Phi3's ``qkv_proj``/``gate_up_proj``, GraniteDecoderLayer's ``residual_multiplier``, Cohere's ``logit_scale``.
"""

from __future__ import annotations

import pytest

from perfcast.catalog.models import from_hf_config, load_model
from perfcast.errors import UnsupportedError
from perfcast.workload.build import WorkloadSpec, build_workload
from perfcast.workload.types import Mode, Op, Workload


def _forward(model: str, *, style: str = "hf", seq_len: int = 512) -> Workload:
    return build_workload(model, WorkloadSpec(mode=Mode.INFERENCE, batch_size=1, seq_len=seq_len, style=style))


def _ops(w: Workload, suffix: str) -> list[Op]:
    return [o for o in w.ops if o.name.endswith(suffix)]


def _layers(w: Workload, suffix: str) -> int:
    """Layers that run an op ending in ``suffix`` (its count summed over the layer groups)."""
    return sum(o.count for o in _ops(w, suffix))


def test_gemma2_has_four_norms_softcaps_and_scaled_embeddings() -> None:
    w, layers = _forward("gemma-2-9b"), 42
    for norm in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                 "post_feedforward_layernorm"):
        assert _layers(w, f"{norm}.mul_weight") == layers, norm
    assert _layers(w, "attn.softcap.tanh") == layers  # attn_logit_softcapping 50 on every layer's scores
    assert [o.dims for o in _ops(w, "head.final_softcap.tanh")] == [(1, 512 * 256000)]  # 30 on the logits
    assert len(_ops(w, "embed.embed_scale")) == 1  # * sqrt(3584)
    assert {o.op for o in _ops(w, "mlp.act")} == {"gelu"}  # GeGLU, gelu_pytorch_tanh
    # alternating sliding (4096) and full layers, 21 each
    assert _layers(w, "layers.attn.qk") == 21 and _layers(w, "layers_window4096.attn.qk") == 21


def test_gemma2_geglu_in_an_engine_is_one_gelu_and_mul_kernel() -> None:
    w = _forward("gemma-2-9b", style="engine")
    assert {o.op for o in _ops(w, "mlp.act_and_mul")} == {"gelu_mul"}


def test_gemma3_has_five_sliding_layers_per_full_one_and_no_softcap() -> None:
    cfg = load_model("gemma-3-12b")
    assert cfg.attention_layer_types.count("sliding") == 40 and cfg.attention_layer_types.count("full") == 8
    assert cfg.max_positions == 131072  # the stated window, not 8 x 131072
    w = _forward("gemma-3-12b")
    assert _layers(w, "layers.attn.qk") == 8 and _layers(w, "layers_window1024.attn.qk") == 40
    assert not _ops(w, "softcap.tanh")


def test_olmo2_norms_the_outputs_and_the_whole_qk_projections() -> None:
    cfg = load_model("olmo-2-7b")
    assert (cfg.norm_placement, cfg.qk_norm, cfg.qk_norm_span) == ("post", "rmsnorm", "projection")
    w, layers = _forward("olmo-2-7b"), 32
    assert not _ops(w, "input_layernorm.mul_weight")
    assert _layers(w, "attn.post_attention_layernorm.mul_weight") == layers
    assert _layers(w, "mlp.post_feedforward_layernorm.mul_weight") == layers
    # attention output norm sits before the residual add
    names = [o.name for o in w.ops if o.name.startswith("layers.attn.")]
    assert names.index("layers.attn.post_attention_layernorm.mul_weight") < names.index("layers.attn.residual")


def test_phi3_runs_its_own_fused_qkv_and_gate_up_gemms() -> None:
    w = _forward("phi-4")
    gemms = {o.name.rsplit(".", 1)[-1] for o in w.ops if o.op == "linear"}
    assert {"qkv_proj", "gate_up_proj", "o_proj", "down_proj"} <= gemms
    assert not gemms & {"q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"}
    (qkv,) = _ops(w, "attn.qkv_proj")
    assert qkv.dims == (1, 512, 5120, 40 * 128 + 2 * 10 * 128)


def test_granite_multiplies_embeddings_residual_branches_and_logits() -> None:
    w, layers = _forward("granite-3-8b"), 40
    assert len(_ops(w, "embed.embed_scale")) == 1
    assert _layers(w, "attn.residual_scale") == layers and _layers(w, "mlp.residual_scale") == layers
    assert len(_ops(w, "head.logits_scale")) == 1


def test_cohere_is_a_parallel_block_with_a_bias_free_layernorm_and_scaled_logits() -> None:
    cfg = load_model("command-r")
    assert cfg.parallel_block and cfg.num_norms_per_layer == 1 and not cfg.norm_bias
    w = _forward("command-r")
    (norm,) = _ops(w, "attn.input_layernorm")
    assert norm.params == 8192  # weight only
    assert not _ops(w, "post_attention_layernorm")
    assert len(_ops(w, "head.logits_scale")) == 1


def test_cohere_with_per_head_qk_norm_is_refused() -> None:
    raw = {**load_model("command-r").hf_config, "use_qk_norm": True}
    with pytest.raises(UnsupportedError, match="use_qk_norm"):
        from_hf_config(raw, model_id="command-r-plus")


def test_starcoder2_is_a_biased_non_gated_gelu_mlp_with_a_window_on_every_layer() -> None:
    w, layers = _forward("starcoder2-15b"), 40
    assert _layers(w, "layers_window4096.attn.qk") == layers
    (fc1,) = _ops(w, "mlp.fc1")
    assert fc1.get("bias") is True and fc1.dims == (1, 512, 6144, 24576)
    assert not _ops(w, "mlp.gate_proj")


def test_a_bias_free_layernorm_has_no_bias_in_the_graph() -> None:
    """MPT (no_bias) and Cohere: each LayerNorm of the graph carries its weight only, as counted in params."""
    for model, width in (("mpt-7b", 4096), ("command-r", 8192)):
        norms = [o for o in _forward(model).ops if o.op == "layernorm"]
        assert norms and {o.params for o in norms} == {width}, model


def test_qk_norms_sit_between_the_projections_and_rope() -> None:
    """Qwen3 / Gemma 3: an RMSNorm per head over head_dim; OLMo 2: over the whole q and k projections."""
    q = _ops(_forward("qwen3-8b", style="engine"), "attn.q_norm")
    assert [o.dims for o in q] == [(512 * 32, 128)]
    olmo = _forward("olmo-2-7b", style="engine")
    assert [o.dims for o in _ops(olmo, "attn.k_norm")] == [(512, 32 * 128)]
    names = [o.name for o in _forward("gemma-3-12b").ops if o.name.startswith("layers.attn.")]
    assert names.index("layers.attn.k_proj") < names.index("layers.attn.q_norm.mul_weight") < \
        names.index("layers.attn.rope_q.mul_cos")


@pytest.mark.parametrize("model", ["gemma-2-9b", "gemma-3-12b", "phi-3-mini-4k", "phi-4", "olmo-2-7b", "command-r",
                                   "starcoder2-15b", "granite-3-8b", "qwen3-8b", "qwen3-32b", "mpt-7b"])
@pytest.mark.parametrize("style", ["hf", "engine"])
def test_the_graph_holds_every_parameter_the_catalog_counts(model: str, style: str) -> None:
    """Weights and biases the forward graph carries (each op's ``params`` times its count) = perfcast's count."""
    w = _forward(model, style=style, seq_len=128)
    assert sum(o.params * o.count for o in w.ops) == load_model(model).num_params()


def test_llama4_chunked_layers_attend_within_their_chunk() -> None:
    """Llama-4's local layers see only the keys of their own attention_chunk_size block (8192): a 16384-token
    prefill pays two causal 8192-token squares there and a full causal square on its global (NoPE) layers;
    a decode at context 10000 reads the 1808 keys of the current chunk there and all 10000 elsewhere."""
    from perfcast.workload.graph import causal_pairs

    cfg = load_model("llama-4-scout")
    c = cfg.attention_chunk_size
    assert c == 8192
    pre = build_workload(cfg, WorkloadSpec(Mode.PREFILL, 1, 16384, attention="flash", style="engine"))
    att = {o.name.split(".")[0]: o for o in pre.ops if o.kind.value == "attention"}
    chunked = next(o for k, o in att.items() if "_chunk8192" in k)
    full = next(o for k, o in att.items() if "_chunk" not in k)
    per_pair = 2.0 * cfg.num_heads * 2 * cfg.head_dim
    assert chunked.flops == pytest.approx(per_pair * 2 * c * (c + 1) / 2)
    assert full.flops == pytest.approx(per_pair * 16384 * 16385 / 2)
    assert causal_pairs(1, 10000, chunk=c) == 10000 - c
    dec = build_workload(cfg, WorkloadSpec(Mode.DECODE, 1, 10000, attention="flash", style="engine"))
    reads = {o.name.split(".")[0]: o.bytes_read for o in dec.ops if o.kind.value == "attention"}
    kv_per_token = cfg.num_kv_heads * 2 * cfg.head_dim * dec.dtype.bytes
    r_chunk = next(v for k, v in reads.items() if "_chunk" in k)
    r_full = next(v for k, v in reads.items() if "_chunk" not in k)
    assert r_full - r_chunk == pytest.approx(kv_per_token * (10000 - 1808))
