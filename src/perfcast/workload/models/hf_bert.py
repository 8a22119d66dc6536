"""BERT as eager PyTorch runs it: transformers 4.38, eager attention.

``BertForSequenceClassification`` for inference (encoder, pooler, 2-way
classifier) and ``BertForPreTraining`` for training (adds the MLM head over the
vocabulary and the NSP head), as NeuSight measured them. Per layer (see
``models/bert/modeling_bert.py``): three projections, ``torch.matmul`` on
permuted views (copies q, k^T, v), scale, additive mask, softmax, context
copy, output dense, residual add + LayerNorm, intermediate dense + GELU,
output dense, residual add + LayerNorm.
"""

from __future__ import annotations

from perfcast.catalog.models import ModelConfig
from perfcast.workload.graph import Graph
from perfcast.workload.models.common import activation, matmul_attention

__all__ = ["build_bert"]


def build_bert(g: Graph, cfg: ModelConfig, batch: int, seq: int, *, attention: str = "eager",
               pretraining_heads: bool = False) -> None:
    """Emit a BERT forward over ``batch x seq`` tokens (``pretraining_heads``: MLM + NSP heads)."""
    h, nh, hd, ff, v = cfg.hidden_size, cfg.num_heads, cfg.head_dim, cfg.intermediate_size, cfg.vocab_size
    e = g.esize
    t = batch * seq
    th = t * h
    with g.scope("embeddings", group="embedding"):
        g.embedding("word", t, h, v)
        g.embedding("token_type", t, h, max(cfg.type_vocab_size, 1), tp_split="none")
        g.embedding("position", seq, h, cfg.max_positions, tp_split="none")
        chain = g.new_chain("embed")
        g.pointwise("add_type", "add", th, inputs=2, chain=chain, fused_bytes=2 * th * e)
        g.pointwise("add_pos", "add", th, inputs=1, extra_read_bytes=seq * h * e, chain=chain,
                    fused_bytes=seq * h * e)
        g.norm("LayerNorm", "layernorm", t, h)
        g.dropout("dropout", th)
        # extended attention mask (batch, 1, 1, seq): (1 - mask) * min
        g.pointwise("ext_mask", "mulu", t)
    with g.scope("layer", count=cfg.num_layers):
        with g.scope("attention", group="attention"):
            g.linear("query", t, h, nh * hd)
            g.linear("key", t, h, nh * hd)
            g.linear("value", t, h, nh * hd)
            with g.split("heads"):
                _bert_attention(g, batch, seq, nh, hd, attention)
            with g.split("heads"):
                g.copy("merge_heads", t * nh * hd)
            g.linear("output_dense", t, nh * hd, h, tp_split="row")
            _add_norm(g, "output", t, h)
        with g.scope("ffn", group="mlp"):
            g.linear("intermediate", t, h, ff)
            with g.split("column"):
                activation(g, "act", cfg.activation, t * ff)
            g.linear("output_dense", t, ff, h, tp_split="row")
            _add_norm(g, "output", t, h)
    with g.scope("heads", group="lm_head"):
        # pooler: first token -> dense -> tanh
        g.linear("pooler", batch, h, h, tp_split="none")
        g.pointwise("pooler_tanh", "tanh", batch * h)
        if pretraining_heads:
            g.linear("mlm_transform", t, h, h, tp_split="none")
            activation(g, "mlm_act", cfg.activation, th)
            g.norm("mlm_norm", "layernorm", t, h)
            g.linear("mlm_decoder", t, h, v, bias=True, tp_split="vocab", tied=cfg.tie_word_embeddings)
            g.linear("nsp", batch, h, 2, tp_split="none")
        else:
            g.dropout("dropout", batch * h)
            g.linear("classifier", batch, h, 2, tp_split="none")


def _add_norm(g: Graph, name: str, tokens: int, hidden: int) -> None:
    """BertSelfOutput / BertOutput tail: dropout, residual add, LayerNorm (one fused chain under a compiler)."""
    e = g.esize
    numel = tokens * hidden
    chain = g.new_chain(f"{name}.add_norm")
    dropped = g.dropout(f"{name}.dropout", numel, chain=chain, first_in_chain=True)
    g.pointwise(f"{name}.residual", "add", numel, inputs=2, chain=chain,
                fused_bytes=numel * e * (1 if dropped is not None else 2))
    g.reduction(f"{name}.LayerNorm", "layernorm", tokens, hidden, params=2 * hidden, chain=chain,
                fused_bytes=numel * e)


def _bert_attention(g: Graph, batch: int, seq: int, nh: int, hd: int, attention: str) -> None:
    """matmul on permuted views (q, k^T, v copied), scale, additive mask, softmax, dropout."""
    if attention != "eager":
        g.attention("sdpa", batch, nh, nh, seq, seq, hd, causal=False)
        return
    matmul_attention(g, batch, seq, seq, nh, hd, scale=True, mask="add")
