"""OPT (``OPTForCausalLM``) as eager PyTorch runs it: transformers 4.38, eager attention.

From transformers ``models/opt/modeling_opt.py``: positions come from a cumsum
over the attention mask; a ``(batch, 1, seq, seq)`` float causal mask is built
once per forward; each layer scales q after its projection, copies q, k and v
into ``(batch*heads, seq, head_dim)`` with ``contiguous``, adds the mask to the
scores, clamps them with ``torch.max`` and takes the softmax. Attention dropout
is 0.0 in the shipped configs, which launches nothing.
"""

from __future__ import annotations

from perfcast.catalog.models import ModelConfig
from perfcast.workload.graph import Graph
from perfcast.workload.models.common import activation, dropout_residual

__all__ = ["build_opt"]


def build_opt(g: Graph, cfg: ModelConfig, batch: int, seq: int, *, attention: str = "eager") -> None:
    """Emit the forward pass of an OPT causal LM over ``batch x seq`` tokens."""
    h, nh, hd, ff, v = cfg.hidden_size, cfg.num_heads, cfg.head_dim, cfg.intermediate_size, cfg.vocab_size
    t = batch * seq
    th = t * h
    proj_dim = int(cfg.hf_config.get("word_embed_proj_dim") or h)
    with g.scope("embed", group="embedding"):
        g.embedding("embed_tokens", t, proj_dim, v)
        if proj_dim != h:
            g.linear("project_in", t, proj_dim, h, bias=False, tp_split="none")
        # positions: cumsum over the (all-ones) mask, then an offset lookup
        g.pointwise("mask_cumsum", "cumsum", t, dtype=None)
        g.embedding("embed_positions", t, h, cfg.max_positions + 2, tp_split="none")
        if attention == "eager":
            # _prepare_4d_causal_attention_mask: causal (seq, seq) fill + expand to (batch, 1, seq, seq)
            g.pointwise("causal_fill", "masked_fill", seq * seq)
            g.pointwise("mask_expand", "masked_fill", batch * seq * seq, inputs=1)
            g.pointwise("mask_combine", "masked_fill", batch * seq * seq, inputs=2)
        chain = g.new_chain("embed")
        g.pointwise("add", "add", th, inputs=2, chain=chain)
        g.dropout("dropout", th, chain=chain)
    with g.scope("layers", count=cfg.num_layers):
        with g.scope("self_attn", group="attention"):
            g.norm("self_attn_layer_norm", "layernorm", t, h)
            g.linear("q_proj", t, h, nh * hd, bias=cfg.qkv_bias)
            g.pointwise("q_scale", "mulu", t * nh * hd, chain=g.new_chain("q_scale"), tp_split="column")
            g.linear("k_proj", t, h, nh * hd, bias=cfg.qkv_bias)
            with g.split("heads"):
                g.copy("k_contiguous", t * nh * hd)
            g.linear("v_proj", t, h, nh * hd, bias=cfg.qkv_bias)
            with g.split("heads"):
                g.copy("v_contiguous", t * nh * hd)
            with g.split("heads"):
                g.copy("q_contiguous", t * nh * hd)
            with g.split("heads"):
                _opt_attention(g, batch, seq, nh, hd, attention)
            with g.split("heads"):
                g.copy("merge_heads", t * nh * hd)
            g.linear("out_proj", t, nh * hd, h, bias=cfg.out_bias, tp_split="row")
            dropout_residual(g, "residual", th)
        with g.scope("mlp", group="mlp"):
            g.norm("final_layer_norm", "layernorm", t, h)
            g.linear("fc1", t, h, ff, bias=cfg.mlp_bias)
            with g.split("column"):
                activation(g, "act", cfg.activation, t * ff)
            g.linear("fc2", t, ff, h, bias=cfg.mlp_bias, tp_split="row")
            dropout_residual(g, "residual", th)
    with g.scope("head", group="lm_head"):
        g.norm("final_layer_norm", "layernorm", t, h)
        if proj_dim != h:
            g.linear("project_out", t, h, proj_dim, bias=False, tp_split="none")
        g.linear("lm_head", t, proj_dim, v, bias=False, tp_split="vocab", tied=cfg.tie_word_embeddings)


def _opt_attention(g: Graph, batch: int, seq: int, nh: int, hd: int, attention: str) -> None:
    """bmm scores, additive causal mask, clamp to the dtype minimum, softmax, bmm with v."""
    e = g.esize
    if attention != "eager":
        g.attention("sdpa", batch, nh, nh, seq, seq, hd, causal=True)
        return
    scores = batch * nh * seq * seq
    g.bmm("qk", batch * nh, seq, hd, seq)
    chain = g.new_chain("softmax")
    g.pointwise("mask_add", "add", scores, inputs=1, extra_read_bytes=batch * seq * seq * e,
                chain=chain, fused_bytes=scores * e + batch * seq * seq * e)
    g.pointwise("clamp_min", "max", scores, chain=chain, fused_bytes=0.0)
    g.reduction("softmax", "softmax", batch * nh * seq, seq, chain=chain, fused_bytes=scores * e)
    g.bmm("pv", batch * nh, seq, seq, hd)
