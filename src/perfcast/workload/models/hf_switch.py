"""T5 (``T5ForConditionalGeneration``) and Switch Transformers (``SwitchTransformersForConditionalGeneration``),
eager PyTorch, transformers 4.38.

An encoder-decoder in T5's layout: dense T5 (v1.0: ReLU MLP ``wi``, ``wo``; v1.1 / FLAN-T5: gated GELU ``wi_0``,
``wi_1``, ``wo``), or Switch, where every ``layer_step``-th feed-forward is a
top-1 mixture of experts with a fixed expert capacity. As launched by the HF
code (``models/t5/modeling_t5.py``, ``models/switch_transformers/modeling_switch_transformers.py``):

- T5 LayerNorm is Python RMSNorm (6 kernels); attention is not scaled; a
  relative position bias plus the mask forms a ``(batch, heads, q, k)`` tensor
  once per stack (layer 0) that every layer adds to its scores.
- The sparse MLP routes with a softmax router, an argmax, a one-hot and a
  cumsum-based capacity mask; then, per expert, a boolean index (``nonzero``:
  a host synchronization), the expert MLP on at most ``capacity`` tokens per
  sequence, and an index-put back; finally the outputs are scaled by the
  router probability.
- With tied embeddings the decoder output is scaled by ``d_model**-0.5`` before
  the LM head.
"""

from __future__ import annotations

from perfcast.catalog.models import ModelConfig
from perfcast.workload.graph import Graph
from perfcast.workload.models.common import activation, dropout_residual, matmul_attention, python_rmsnorm

__all__ = ["build_switch"]


def build_switch(g: Graph, cfg: ModelConfig, batch: int, seq: int, *, attention: str = "eager",
                 decoder_seq: int | None = None) -> None:
    """Emit the encoder-decoder forward (T5, or Switch when ``cfg.moe`` is set): ``seq`` encoder tokens,
    ``decoder_seq`` (default ``seq``) decoder tokens."""
    dseq = decoder_seq or seq
    d, v = cfg.hidden_size, cfg.vocab_size
    with g.scope("encoder"):
        with g.scope("embed", group="embedding"):
            g.embedding("embed_tokens", batch * seq, d, v)
            g.dropout("dropout", batch * seq * d)
        _position_bias(g, cfg, batch, seq, seq, relative=True, causal=False)
        _stack(g, cfg, cfg.num_layers, batch, seq, None, attention)
    with g.scope("decoder"):
        with g.scope("embed", group="embedding"):
            g.embedding("embed_tokens", batch * dseq, d, v)
            g.dropout("dropout", batch * dseq * d)
        _position_bias(g, cfg, batch, dseq, dseq, relative=True, causal=True)
        _position_bias(g, cfg, batch, dseq, seq, relative=False, causal=False)
        _stack(g, cfg, cfg.num_decoder_layers or cfg.num_layers, batch, dseq, seq, attention)
    with g.scope("head", group="lm_head"):
        t = batch * dseq
        if cfg.tie_word_embeddings:
            g.pointwise("rescale", "mulu", t * d)
        g.linear("lm_head", t, d, v, bias=False, tp_split="vocab", tied=cfg.tie_word_embeddings)


def _position_bias(g: Graph, cfg: ModelConfig, batch: int, q_len: int, k_len: int, *, relative: bool,
                   causal: bool) -> None:
    """Layer 0's position bias (relative buckets or zeros) plus the mask, broadcast to (b, h, q, k)."""
    nh = cfg.num_heads
    with g.scope("position_bias", group="attention"):
        if relative:
            # relative_position_bucket: a dozen int ops over (q, k), then a (q*k) x heads lookup
            for i in range(12):
                g.pointwise(f"bucket_{i}", "bucket", q_len * k_len)
            g.embedding("relative_attention_bias", q_len * k_len, nh, 32, tp_split="heads")
            g.copy("permute", q_len * k_len * nh)
        else:
            g.pointwise("zeros", "fill", nh * q_len * k_len, inputs=0)
        if causal:
            g.pointwise("causal_mask", "masked_fill", batch * q_len * k_len, inputs=2)
        g.pointwise("add_mask", "add", batch * nh * q_len * k_len, inputs=1,
                    extra_read_bytes=batch * q_len * k_len * g.esize)


def _stack(g: Graph, cfg: ModelConfig, num_layers: int, batch: int, seq: int, enc_seq: int | None,
           attention: str) -> None:
    """The blocks of one stack, dense and sparse layers counted separately, plus its final norm."""
    moe = cfg.moe
    num_sparse = moe.num_moe_layers(num_layers) if moe else 0
    for sparse, count in ((False, num_layers - num_sparse), (True, num_sparse)):
        if count == 0:
            continue
        with g.scope("sparse_block" if sparse else "block", count=count):
            _attention(g, cfg, "self_attn", batch, seq, seq, attention)
            if enc_seq is not None:
                _attention(g, cfg, "cross_attn", batch, seq, enc_seq, attention)
            with g.scope("ff", group="moe" if sparse else "mlp"):
                t = batch * seq
                python_rmsnorm(g, "layer_norm", t, cfg.hidden_size)
                if sparse:
                    _sparse_mlp(g, cfg, batch, seq)
                else:
                    _dense_mlp(g, cfg, t)
                dropout_residual(g, "residual", t * cfg.hidden_size)
    with g.scope("final", group="norm"):
        python_rmsnorm(g, "final_layer_norm", batch * seq, cfg.hidden_size)
        g.dropout("dropout", batch * seq * cfg.hidden_size)


def _attention(g: Graph, cfg: ModelConfig, name: str, batch: int, q_len: int, k_len: int, attention: str) -> None:
    d, nh, hd = cfg.hidden_size, cfg.num_heads, cfg.head_dim
    inner = nh * hd
    tq, tk = batch * q_len, batch * k_len
    with g.scope(name, group="attention"):
        python_rmsnorm(g, "layer_norm", tq, d)
        g.linear("q", tq, d, inner, bias=False)
        g.linear("k", tk, d, inner, bias=False)
        g.linear("v", tk, d, inner, bias=False)
        with g.split("heads"):
            _scores(g, batch, nh, hd, q_len, k_len, attention)
            g.copy("unshape", tq * inner)
        g.linear("o", tq, inner, d, bias=False, tp_split="row")
        dropout_residual(g, "residual", tq * d)


def _dense_mlp(g: Graph, cfg: ModelConfig, tokens: int, ff: int | None = None) -> None:
    ff = ff or cfg.intermediate_size
    if cfg.gated_mlp and cfg.moe is None:  # T5 v1.1 T5DenseGatedActDense: act(wi_0 x) * wi_1 x, dropout, wo
        g.linear("wi_0", tokens, cfg.hidden_size, ff, bias=False)
        g.linear("wi_1", tokens, cfg.hidden_size, ff, bias=False)
        with g.split("column"):
            activation(g, "act", cfg.activation, tokens * ff)
            g.pointwise("gate_mul", "mul", tokens * ff, inputs=2)
            g.dropout("dropout", tokens * ff)
        g.linear("wo", tokens, ff, cfg.hidden_size, bias=False, tp_split="row")
        return
    g.linear("wi", tokens, cfg.hidden_size, ff, bias=False)
    with g.split("column"):
        activation(g, "act", cfg.activation, tokens * ff)
        g.dropout("dropout", tokens * ff)
    g.linear("wo", tokens, ff, cfg.hidden_size, bias=False, tp_split="row")


def _sparse_mlp(g: Graph, cfg: ModelConfig, batch: int, seq: int) -> None:
    """Top-1 routing with capacity, then each expert on its (capped) tokens."""
    assert cfg.moe is not None
    moe = cfg.moe
    d, num_e = cfg.hidden_size, moe.num_experts
    t = batch * seq
    e = g.esize
    with g.scope("router", group="moe"):
        if g.training:
            g.pointwise("jitter_uniform", "fill", t * d, inputs=0)
            g.pointwise("jitter_mul", "mul", t * d, inputs=2)
        g.linear("classifier", t, d, num_e, bias=False, tp_split="none")
        g.reduction("softmax", "softmax", t, num_e)
        g.reduction("argmax", "max", t, num_e, out_cols=1)
        for op in ("one_hot", "cumsum", "le", "mul", "max"):
            g.pointwise(op, op, t * num_e)
        g.copy("clone", t * d)
    # per sequence, an expert takes at most `capacity` of the seq/num_e tokens routed to it
    capacity = moe.expert_capacity_tokens or seq
    expert_tokens = batch * min(capacity, max(1, seq // num_e))
    with g.scope("expert", count=num_e, group="moe"):
        g.pointwise("mask_bool", "copy", t, dtype=None)
        g.host("nonzero", "nonzero")
        g.pointwise("gather", "copy", expert_tokens * d, extra_read_bytes=expert_tokens * 8)
        _dense_mlp(g, cfg, expert_tokens, moe.expert_intermediate_size)
        g.pointwise("index_put", "copy", expert_tokens * d, extra_read_bytes=expert_tokens * 8)
    g.pointwise("scale_by_prob", "mul", t * d, inputs=1, extra_read_bytes=t * e)


def _scores(g: Graph, batch: int, nh: int, hd: int, q_len: int, k_len: int, attention: str) -> None:
    """Unscaled scores plus the shared position bias, softmax, dropout, context."""
    if attention != "eager":
        g.attention("sdpa", batch, nh, nh, q_len, k_len, hd, causal=False)
        return
    matmul_attention(g, batch, q_len, k_len, nh, hd, scale=False, mask="bias")
