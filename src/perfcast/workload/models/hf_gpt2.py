"""GPT-2 (``GPT2LMHeadModel``) as eager PyTorch runs it: transformers 4.38, eager attention.

Every kernel the forward pass launches, in order (see transformers
``models/gpt2/modeling_gpt2.py``): Conv1D layers are ``addmm`` with the weight
stored ``(in, out)``; ``_attn``
multiplies permuted views with ``torch.matmul``, which copies q, k and v to
contiguous buffers first; the scale, causal mask and softmax are separate
kernels over the ``(batch, heads, seq, seq)`` scores. Used for GPT-2, the GPT-3
shapes (NeuSight writes them as GPT-2 configs) and synthetic Megatron GPTs.
"""

from __future__ import annotations

from perfcast.catalog.models import ModelConfig
from perfcast.workload.graph import Graph
from perfcast.workload.models.common import activation, dropout_residual, matmul_attention

__all__ = ["build_gpt2"]


def build_gpt2(g: Graph, cfg: ModelConfig, batch: int, seq: int, *, attention: str = "eager") -> None:
    """Emit the forward pass of a GPT-2-style causal LM over ``batch x seq`` tokens."""
    h, nh, hd, ff, v = cfg.hidden_size, cfg.num_heads, cfg.head_dim, cfg.intermediate_size, cfg.vocab_size
    e = g.esize
    t = batch * seq
    th = t * h
    with g.scope("embed", group="embedding"):
        g.embedding("wte", t, h, v)
        g.embedding("wpe", seq, h, cfg.max_positions, tp_split="none")
        chain = g.new_chain("embed")
        g.pointwise("add", "add", th, inputs=1, extra_read_bytes=seq * h * e, chain=chain)
        g.dropout("drop", th, chain=chain)  # reads the sum inside the chain
    with g.scope("h", count=cfg.num_layers):
        with g.scope("attn", group="attention"):
            g.norm("ln_1", "layernorm", t, h)
            g.linear("c_attn", t, h, 3 * nh * hd, tp_split="column", weight_layout="in_out")
            with g.split("heads"):
                _eager_or_fused_attention(g, batch, seq, nh, hd, attention=attention, mask="where")
            g.linear("c_proj", t, nh * hd, h, tp_split="row", weight_layout="in_out")
            dropout_residual(g, "residual", th)
        with g.scope("mlp", group="mlp"):
            g.norm("ln_2", "layernorm", t, h)
            g.linear("c_fc", t, h, ff, tp_split="column", weight_layout="in_out")
            with g.split("column"):
                activation(g, "act", cfg.activation, t * ff)
            g.linear("c_proj", t, ff, h, tp_split="row", weight_layout="in_out")
            dropout_residual(g, "residual", th)
    with g.scope("head", group="lm_head"):
        g.norm("ln_f", "layernorm", t, h)
        g.linear("lm_head", t, h, v, bias=False, tp_split="vocab", tied=cfg.tie_word_embeddings)


def _eager_or_fused_attention(g: Graph, batch: int, seq: int, nh: int, hd: int, *, attention: str, mask: str) -> None:
    """Scores, causal mask, softmax, context for self-attention over ``seq`` tokens (no KV cache)."""
    if attention != "eager":
        g.attention("sdpa", batch, nh, nh, seq, seq, hd, causal=True)
    else:
        matmul_attention(g, batch, seq, seq, nh, hd, scale=True, mask=mask)
    g.copy("merge_heads", batch * seq * nh * hd)
