"""Decoder-only LLMs (Llama, Mistral, Qwen, Mixtral, Qwen2-MoE, Phi-3.5-MoE, DBRX, GLM-4.5, DeepSeek-V2/V3, Kimi K2,
gpt-oss, GPT-J, Falcon, MPT, phi, Phi-3, Gemma 2/3, OLMo 2, Cohere, StarCoder2, Granite...).

One builder covers the modern decoder family from the normalized config:
pre-norm, post-norm (OLMo 2) or sandwich-norm (Gemma) blocks, or parallel
attention+MLP blocks, RMSNorm or LayerNorm, rotary / learned / ALiBi
positions, MHA/GQA/MQA or multi-head latent attention, dense (gated or not)
or mixture-of-experts MLPs; the scalar multipliers and softcaps some families
put on embeddings, residual branches, attention scores and logits are
elementwise ops of their own.

Two launch styles:

- ``hf``: eager PyTorch as Hugging Face ``transformers`` writes these models:
  separate q/k/v projections, rotary embedding and RMSNorm as Python
  expressions (several kernels each), ``repeat_kv`` copies for GQA, SiLU and
  the gate product as separate kernels.
- ``engine``: a serving/training engine (vLLM, Sarathi, Megatron): fused QKV and
  gate-up GEMMs, one kernel per norm, rotary and activation, FlashAttention
  with a paged KV cache, logits only where they are sampled.

``q_len`` new tokens per sequence attend to ``kv_len`` tokens (cached +
new): prefill is ``q_len == kv_len``, decode is ``q_len == 1``.
"""

from __future__ import annotations

from dataclasses import dataclass

from perfcast.catalog.models import ModelConfig
from perfcast.workload.graph import Graph
from perfcast.workload.models.common import activation, python_rmsnorm

__all__ = ["DecoderShape", "build_decoder", "num_mtp_layers"]


@dataclass(frozen=True, slots=True)
class DecoderShape:
    """Token geometry of one decoder forward.

    ``batch`` sequences each bring ``q_len`` new tokens and attend to ``kv_len``
    tokens in all (cached + new). ``logits_tokens`` is how many positions get
    LM-head logits (all tokens in training, the last per sequence in serving).
    """

    batch: int
    q_len: int
    kv_len: int
    logits_tokens: int

    @property
    def tokens(self) -> int:
        """New tokens in the batch."""
        return self.batch * self.q_len


def build_decoder(g: Graph, cfg: ModelConfig, shape: DecoderShape, *, style: str = "engine",
                  attention: str = "flash", kv_cache: bool = False, mtp_layers: int = 0) -> None:
    """Emit one decoder forward. ``kv_cache``: new K/V are written to a (paged) cache. ``mtp_layers``:
    multi-token-prediction modules trained after the LM head (:func:`_mtp`; training only)."""
    t = shape.tokens
    h = cfg.hidden_size
    with g.scope("embed", group="embedding"):
        g.embedding("embed_tokens", t, h, cfg.vocab_size)
        if cfg.position == "learned":
            g.embedding("embed_positions", t, h, cfg.max_positions, tp_split="none")
            g.pointwise("add_positions", "add", t * h, inputs=2)
        if cfg.embedding_multiplier is not None:  # Gemma: * sqrt(hidden); Granite: * embedding_multiplier
            g.pointwise("embed_scale", "mulu", t * h)
        if cfg.embedding_norm:  # BLOOM's word_embeddings_layernorm
            _norm(g, cfg, "norm", t, h, style)
        g.dropout("dropout", t * h)
    for (sparse, window, chunk), n in _layer_groups(cfg).items():
        label = ("moe_layers" if sparse else "layers") + (f"_window{window}" if window else "") + (
            f"_chunk{chunk}" if chunk else "")
        with g.scope(label, count=n):
            _block(g, cfg, shape, sparse=sparse, style=style, attention=attention, kv_cache=kv_cache,
                   window=window, chunk=chunk)
    with g.scope("head", group="lm_head"):
        _lm_head(g, cfg, shape, "norm", style)
        _logits_epilogue(g, cfg, shape.logits_tokens * cfg.vocab_size)
        if mtp_layers:
            _mtp(g, cfg, shape, mtp_layers, style=style, attention=attention)


def num_mtp_layers(cfg: ModelConfig) -> int:
    """The multi-token-prediction modules a config declares (``num_nextn_predict_layers``: DeepSeek-V3, GLM-4.5;
    0 when it declares none). Transformers builds none of them: they exist in training (and as a speculative
    draft in serving)."""
    return int(cfg.hf_config.get("num_nextn_predict_layers") or 0)


def _mtp(g: Graph, cfg: ModelConfig, shape: DecoderShape, depth: int, *, style: str, attention: str) -> None:
    """``depth`` sequential multi-token-prediction modules (DeepSeek-V3 technical report, arXiv:2412.19437,
    Sec. 2.2; Megatron-Core ``transformer/multi_token_prediction.py``), under the ``head`` scope: they run on
    the last pipeline stage, after the main model's output.

    Module k predicts token i+k+1: the embedding of the shifted tokens (the main model's table, shared: a
    gather, no parameters of its own) and the previous depth's hidden state are normalized (``enorm``,
    ``hnorm``), concatenated and projected back to the hidden size (``eh_proj``, 2h -> h), pass through one
    transformer block like the main model's next layer (an MoE layer for DeepSeek-V3), then the output norm,
    the shared LM head (tied: the main head's weight, its gradient accumulated there) and a cross-entropy
    loss. The gather's gradient (an index-add into the shared table) is left out.
    """
    t, h = shape.tokens, cfg.hidden_size
    sparse = cfg.moe is not None and cfg.moe.is_moe_layer(cfg.num_layers)
    with g.scope("mtp", count=depth, group="mtp"):
        g.pointwise("embed_tokens", "copy", t * h, extra_read_bytes=t * 8, tp_split="none")
        _norm(g, cfg, "enorm", t, h, style)
        _norm(g, cfg, "hnorm", t, h, style)
        g.pointwise("concat", "cat", 2 * t * h, tp_split="none")
        g.linear("eh_proj", t, 2 * h, h, bias=False)
        _block(g, cfg, shape, sparse=sparse, style=style, attention=attention, kv_cache=False, window=None)
        _norm(g, cfg, "norm", t, h, style)
        g.linear("lm_head", shape.logits_tokens, h, cfg.vocab_size, bias=False, tp_split="vocab", tied=True)
        _logits_epilogue(g, cfg, shape.logits_tokens * cfg.vocab_size)
        with g.scope("loss", group="loss"):
            g.reduction("log_softmax", "softmax", shape.logits_tokens, cfg.vocab_size, tp_split="column")
            g.pointwise("nll", "cross_entropy", shape.logits_tokens, inputs=1)


def _layer_groups(cfg: ModelConfig) -> dict[tuple[bool, int | None, int | None], int]:
    """Layers per (MoE layer?, sliding window or None, attention chunk or None), dense before MoE and full
    before sliding before chunked.

    Sliding-window layers attend to at most ``window`` keys; chunked layers (Llama-4's local attention) to the
    keys of their own ``attention_chunk_size`` block.
    """
    moe = cfg.moe
    counts: dict[tuple[bool, int | None, int | None], int] = {}
    for i in range(cfg.num_layers):
        sparse = moe is not None and moe.is_moe_layer(i)
        kind = cfg.attention_type(i)
        window = cfg.sliding_window if kind == "sliding" else None
        chunk = cfg.attention_chunk_size if kind == "chunked" else None
        counts[(sparse, window, chunk)] = counts.get((sparse, window, chunk), 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (kv[0][0], kv[0][1] is not None, kv[0][2] is not None)))


def _logits_epilogue(g: Graph, cfg: ModelConfig, numel: int) -> None:
    """Elementwise work on the logits: Cohere's / Granite's scale, Gemma 2's final softcap."""
    if cfg.logits_multiplier is not None:
        g.pointwise("logits_scale", "mulu", numel, tp_split="column")
    if cfg.final_logit_softcap is not None:
        _softcap(g, "final_softcap", numel, tp_split="column")


def _softcap(g: Graph, name: str, numel: int, *, chain: str | None = None, tp_split: str = "heads") -> None:
    """``cap * tanh(x / cap)`` as eager PyTorch runs it (Gemma 2): divide, tanh, multiply; one fused kernel."""
    e = g.esize
    own = chain is None
    chain = chain or g.new_chain(name)
    g.pointwise(f"{name}.div", "divu", numel, chain=chain, fused_bytes=numel * e if own else 0.0, tp_split=tp_split)
    g.pointwise(f"{name}.tanh", "tanh", numel, chain=chain, fused_bytes=0.0, tp_split=tp_split)
    g.pointwise(f"{name}.mul", "mulu", numel, chain=chain, fused_bytes=numel * e if own else 0.0, tp_split=tp_split)


def _norm(g: Graph, cfg: ModelConfig, name: str, rows: int, cols: int, style: str) -> None:
    if cfg.norm == "rmsnorm" and style == "hf":
        python_rmsnorm(g, name, rows, cols)
    else:
        g.norm(name, cfg.norm, rows, cols, bias=cfg.norm == "layernorm" and cfg.norm_bias)


def _block(g: Graph, cfg: ModelConfig, shape: DecoderShape, *, sparse: bool, style: str, attention: str,
           kv_cache: bool, window: int | None, chunk: int | None = None) -> None:
    """One layer. Norm names follow transformers: ``input_layernorm`` and ``post_attention_layernorm`` before
    attention and MLP (pre-norm); OLMo 2's ``post_attention_layernorm`` / ``post_feedforward_layernorm`` on the
    outputs (post); Gemma's four (sandwich: input, post_attention, pre_feedforward, post_feedforward)."""
    t, h = shape.tokens, cfg.hidden_size
    placement = "pre" if cfg.parallel_block else cfg.norm_placement
    with g.scope("attn", group="attention"):
        if placement != "post":
            _norm(g, cfg, "input_layernorm", t, h, style)
        if cfg.mla is not None:
            _mla(g, cfg, shape, style=style, kv_cache=kv_cache, window=window)
        else:
            _attention(g, cfg, shape, style=style, attention=attention, kv_cache=kv_cache, window=window,
                       chunk=chunk)
        if not cfg.parallel_block:
            if placement != "pre":
                _norm(g, cfg, "post_attention_layernorm", t, h, style)
            _residual(g, cfg, t * h, inputs=2)
    with g.scope("mlp", group="moe" if sparse else "mlp"):
        if placement == "sandwich":
            _norm(g, cfg, "pre_feedforward_layernorm", t, h, style)
        elif placement == "pre" and (not cfg.parallel_block or "new_decoder_architecture" in cfg.hf_config):
            _norm(g, cfg, "post_attention_layernorm", t, h, style)
        if sparse:
            _moe(g, cfg, t, style=style)
        else:
            _mlp(g, cfg, t, cfg.intermediate_size, style=style)
        if placement != "pre":
            _norm(g, cfg, "post_feedforward_layernorm", t, h, style)
        _residual(g, cfg, t * h, inputs=3 if cfg.parallel_block else 2)


def _lm_head(g: Graph, cfg: ModelConfig, shape: DecoderShape, norm: str, style: str) -> None:
    """The final norm (named ``norm``) and the LM head over the tokens whose logits are needed."""
    _norm(g, cfg, norm, shape.tokens, cfg.hidden_size, style)
    g.linear("lm_head", shape.logits_tokens, cfg.hidden_size, cfg.vocab_size, bias=False, tp_split="vocab",
             tied=cfg.tie_word_embeddings)


def _ffn(g: Graph, cfg: ModelConfig, t: int, norm: str, *, sparse: bool, style: str) -> None:
    """A pre-norm feed-forward branch of ``t`` tokens: the norm (named ``norm``), the MoE block or the dense MLP,
    and the residual add."""
    _norm(g, cfg, norm, t, cfg.hidden_size, style)
    if sparse:
        _moe(g, cfg, t, style=style)
    else:
        _mlp(g, cfg, t, cfg.intermediate_size, style=style)
    _residual(g, cfg, t * cfg.hidden_size, inputs=2)


def _residual(g: Graph, cfg: ModelConfig, numel: int, *, inputs: int) -> None:
    """The residual add of a block's branch (or branches), scaled first by Granite's ``residual_multiplier``."""
    chain = g.new_chain("residual")
    if cfg.residual_multiplier is None:
        g.pointwise("residual", "add", numel, inputs=inputs, chain=chain)
        return
    e = g.esize
    g.pointwise("residual_scale", "mulu", numel, chain=chain, fused_bytes=numel * e)
    g.pointwise("residual", "add", numel, inputs=inputs, chain=chain, fused_bytes=inputs * numel * e)


def _attention(g: Graph, cfg: ModelConfig, shape: DecoderShape, *, style: str, attention: str, kv_cache: bool,
               window: int | None, chunk: int | None = None) -> None:
    b, s, kv = shape.batch, shape.q_len, shape.kv_len
    t, h = shape.tokens, cfg.hidden_size
    nh, nkv, hd = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    q_dim, kv_dim = nh * hd, nkv * hd
    q_out = 2 * q_dim if cfg.attention_output_gate else q_dim  # Qwen3-Next: q_proj also emits the output gate
    if style == "engine" or cfg.fused_qkv:  # an engine's fused QKV GEMM, or the model's own (Phi-3)
        g.linear("qkv_proj", t, h, q_out + 2 * kv_dim, bias=cfg.qkv_bias)
    else:
        g.linear("q_proj", t, h, q_out, bias=cfg.qkv_bias)
        g.linear("k_proj", t, h, kv_dim, bias=cfg.qkv_bias)
        g.linear("v_proj", t, h, kv_dim, bias=cfg.qkv_bias)
    if cfg.qkv_clip is not None:  # DBRX: qkv.clamp(-clip, clip), a compare-select per element
        g.pointwise("clip_qkv", "where", t * (q_dim + 2 * kv_dim), tp_split="heads")
    _qk_norm(g, cfg, t, style)
    if cfg.position == "rotary":
        _rotary(g, cfg, t, style)
    if kv_cache:
        g.pointwise("kv_cache_write", "copy", t * 2 * kv_dim, tp_split="heads")
    keys = min(kv, window) if window else kv
    if attention == "eager":
        with g.split("heads"):
            _eager_attention(g, cfg, b, s, keys)
    else:
        g.attention("attention", b, nh, nkv, s, kv, hd, causal=True, window=window, chunk=chunk)
    if cfg.attention_output_gate:  # attn_output * sigmoid(gate)
        chain = g.new_chain("output_gate")
        g.pointwise("output_gate.sigmoid", "sigmoid", t * q_dim, chain=chain, tp_split="heads")
        g.pointwise("output_gate.mul", "mul", t * q_dim, inputs=2, chain=chain, tp_split="heads")
    g.linear("o_proj", t, q_dim, h, bias=cfg.out_bias, tp_split="row")


def _qk_norm(g: Graph, cfg: ModelConfig, tokens: int, style: str) -> None:
    """The norms on queries and keys before RoPE: per head over head_dim (Qwen3, Gemma 3, phi's qk_layernorm) or
    over the whole projection (OLMo 2). Llama-4's weightless L2 norm (RoPE layers only) is not emitted here."""
    if cfg.qk_norm not in ("rmsnorm", "layernorm"):
        return
    for name, heads in (("q_norm", cfg.num_heads), ("k_norm", cfg.num_kv_heads)):
        if cfg.qk_norm_span == "projection":
            _qk_norm_op(g, cfg, name, tokens, heads * cfg.head_dim, style)
        else:
            with g.split("heads"):
                _qk_norm_op(g, cfg, name, tokens * heads, cfg.head_dim, style)


def _qk_norm_op(g: Graph, cfg: ModelConfig, name: str, rows: int, cols: int, style: str) -> None:
    if cfg.qk_norm == "rmsnorm" and style == "hf":
        python_rmsnorm(g, name, rows, cols)
    else:
        g.norm(name, cfg.qk_norm, rows, cols, bias=cfg.qk_norm == "layernorm")


def _rotary(g: Graph, cfg: ModelConfig, tokens: int, style: str) -> None:
    q_el = tokens * cfg.num_heads * cfg.head_dim
    k_el = tokens * cfg.num_kv_heads * cfg.head_dim
    if style == "engine":
        g.pointwise("rotary", "rope", q_el + k_el, inputs=1, tp_split="heads")
        return
    # apply_rotary_pos_emb: x*cos + rotate_half(x)*sin, rotate_half = cat(-x2, x1)
    for name, numel in (("q", q_el), ("k", k_el)):
        chain = g.new_chain(f"rope_{name}")
        e = g.esize
        g.pointwise(f"rope_{name}.mul_cos", "mul", numel, chain=chain, fused_bytes=numel * e, tp_split="heads")
        g.pointwise(f"rope_{name}.neg", "mulu", numel // 2, chain=chain, fused_bytes=0.0, tp_split="heads")
        g.pointwise(f"rope_{name}.cat", "cat", numel, chain=chain, fused_bytes=0.0, tp_split="heads")
        g.pointwise(f"rope_{name}.mul_sin", "mul", numel, chain=chain, fused_bytes=0.0, tp_split="heads")
        g.pointwise(f"rope_{name}.add", "add", numel, inputs=2, chain=chain, fused_bytes=numel * e,
                    tp_split="heads")


def _eager_attention(g: Graph, cfg: ModelConfig, b: int, s: int, kv: int) -> None:
    """HF eager attention: repeat_kv copies for GQA, q@k^T, scale, mask, fp32 softmax, @v."""
    nh, nkv, hd = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    e = g.esize
    if nkv != nh:
        g.copy("repeat_kv_k", b * kv * nh * hd)
        g.copy("repeat_kv_v", b * kv * nh * hd)
    scores = b * nh * s * kv
    g.bmm("qk", b * nh, s, hd, kv)
    chain = g.new_chain("softmax")
    g.pointwise("scale", "divu", scores, chain=chain, fused_bytes=scores * e, tp_split="heads")
    if cfg.attn_logit_softcap is not None:  # Gemma 2: cap * tanh(scores / cap) before the mask
        _softcap(g, "softcap", scores, chain=chain)
    g.pointwise("mask_add", "add", scores, extra_read_bytes=b * s * kv * e, chain=chain, fused_bytes=0.0,
                tp_split="heads")
    g.reduction("softmax", "softmax", b * nh * s, kv, chain=chain, fused_bytes=scores * e, tp_split="heads")
    g.bmm("pv", b * nh, s, kv, hd)
    g.copy("transpose_out", b * s * nh * hd)


def _mla(g: Graph, cfg: ModelConfig, shape: DecoderShape, *, style: str, kv_cache: bool,
         window: int | None) -> None:
    """Multi-head latent attention (DeepSeek-V2/V3).

    Prefill/training expand the latent K/V per head (naive form); decode keeps
    attention in the latent space with the up-projections absorbed into q and
    the output (as serving engines do), so the cache holds
    ``kv_lora_rank + qk_rope_head_dim`` elements per token.
    """
    assert cfg.mla is not None
    m = cfg.mla
    b, s, kv = shape.batch, shape.q_len, shape.kv_len
    t, h, nh = shape.tokens, cfg.hidden_size, cfg.num_heads
    qk_dim = m.qk_nope_head_dim + m.qk_rope_head_dim
    if m.q_lora_rank:
        g.linear("q_a_proj", t, h, m.q_lora_rank, bias=False, tp_split="none")
        _norm(g, cfg, "q_a_layernorm", t, m.q_lora_rank, style)
        g.linear("q_b_proj", t, m.q_lora_rank, nh * qk_dim, bias=False)
    else:
        g.linear("q_proj", t, h, nh * qk_dim, bias=False)
    g.linear("kv_a_proj_with_mqa", t, h, m.kv_lora_rank + m.qk_rope_head_dim, bias=False, tp_split="none")
    _norm(g, cfg, "kv_a_layernorm", t, m.kv_lora_rank, style)
    g.pointwise("rotary", "rope", t * (nh + 1) * m.qk_rope_head_dim, tp_split="heads")
    if kv_cache:
        g.pointwise("kv_cache_write", "copy", t * (m.kv_lora_rank + m.qk_rope_head_dim), tp_split="none")
    keys = min(kv, window) if window else kv
    if s == 1:
        # absorbed decode: q_nope @ W_uk per head, attention over the shared latent, then W_uv
        g.bmm("q_absorb", nh, b, m.qk_nope_head_dim, m.kv_lora_rank)
        g.attention("attention_latent", b, nh, 1, 1, keys, m.kv_lora_rank + m.qk_rope_head_dim, causal=True,
                    v_head_dim=m.kv_lora_rank)
        g.bmm("v_absorb", nh, b, m.kv_lora_rank, m.v_head_dim)
    else:
        g.linear("kv_b_proj", b * keys, m.kv_lora_rank, nh * (m.qk_nope_head_dim + m.v_head_dim), bias=False)
        g.attention("attention", b, nh, nh, s, keys, qk_dim, causal=True, v_head_dim=m.v_head_dim)
    g.linear("o_proj", t, nh * m.v_head_dim, h, bias=False, tp_split="row")


def _mlp(g: Graph, cfg: ModelConfig, tokens: int, ff: int, *, style: str, gated: bool | None = None,
         name: str = "") -> None:
    h = cfg.hidden_size
    gated = cfg.gated_mlp if gated is None else gated
    p = f"{name}." if name else ""
    if gated:
        act = "gelu" if "gelu" in cfg.activation else "silu"  # GeGLU (Gemma) or SwiGLU
        if style == "engine":
            g.linear(f"{p}gate_up_proj", tokens, h, 2 * ff, bias=cfg.mlp_bias)
            g.pointwise(f"{p}act_and_mul", f"{act}_mul", tokens * ff, inputs=2, tp_split="column",
                        chain=g.new_chain("act"))
        else:
            if cfg.fused_gate_up and not name:  # the model's own fused GEMM, then two views (Phi-3)
                g.linear(f"{p}gate_up_proj", tokens, h, 2 * ff, bias=cfg.mlp_bias)
            else:
                g.linear(f"{p}gate_proj", tokens, h, ff, bias=cfg.mlp_bias)
                g.linear(f"{p}up_proj", tokens, h, ff, bias=cfg.mlp_bias)
            chain = g.new_chain("act")
            e = g.esize
            g.pointwise(f"{p}act", act, tokens * ff, chain=chain, fused_bytes=tokens * ff * e, tp_split="column")
            g.pointwise(f"{p}mul", "mul", tokens * ff, inputs=2, chain=chain, fused_bytes=2 * tokens * ff * e,
                        tp_split="column")
        g.linear(f"{p}down_proj", tokens, ff, h, bias=cfg.mlp_bias, tp_split="row")
        return
    g.linear(f"{p}fc1", tokens, h, ff, bias=cfg.mlp_bias)
    if style == "engine":
        g.pointwise(f"{p}act", _engine_act(cfg.activation), tokens * ff, tp_split="column", chain=g.new_chain("act"))
    else:
        activation(g, f"{p}act", cfg.activation, tokens * ff)
    g.linear(f"{p}fc2", tokens, ff, h, bias=cfg.mlp_bias, tp_split="row")


def _engine_act(kind: str) -> str:
    if "relu2" in kind or "squared" in kind:
        return "relu2"
    if "relu" in kind:
        return "relu"
    if "silu" in kind or "swish" in kind:
        return "silu"
    return "gelu"


def _moe(g: Graph, cfg: ModelConfig, tokens: int, *, style: str) -> None:
    """Router, token permutation, expert GEMMs on the tokens each active expert receives, un-permute."""
    assert cfg.moe is not None
    moe = cfg.moe
    h = cfg.hidden_size
    e_num, k = moe.num_experts, moe.experts_per_token
    with g.scope("router"):
        g.linear("gate", tokens, h, e_num, bias=False, tp_split="none")
        g.reduction("topk_softmax", "softmax", tokens, e_num)
    # uniform routing: expected number of experts that receive at least one token
    active = e_num * (1.0 - (1.0 - k / e_num) ** tokens)
    num_active = max(1, min(e_num, round(active)))
    per_expert = max(1, round(tokens * k / num_active))
    g.pointwise("permute", "copy", tokens * k * h, extra_read_bytes=tokens * k * 8, tp_split="none")
    with g.scope("experts", count=num_active):
        _mlp(g, cfg, per_expert, moe.expert_intermediate_size, style=style, gated=moe.gated)
    if moe.num_shared_experts:
        _mlp(g, cfg, tokens, moe.shared_intermediate_size * moe.num_shared_experts, style=style, gated=moe.gated,
             name="shared_expert")
        if moe.shared_expert_gate:  # Qwen2-MoE: shared output * sigmoid(x @ w_gate), w_gate hidden -> 1
            g.linear("shared_expert_gate", tokens, h, 1, bias=False, tp_split="none")
            chain = g.new_chain("shared_gate")
            g.pointwise("shared_expert_gate.sigmoid", "sigmoid", tokens, chain=chain, tp_split="none")
            g.pointwise("shared_expert_gate.mul", "mul", tokens * h, inputs=2, chain=chain, tp_split="none")
    g.pointwise("unpermute_weighted_sum", "mul", tokens * k * h, inputs=1, extra_read_bytes=tokens * k * 4,
                tp_split="none")
