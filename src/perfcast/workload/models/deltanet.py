"""Hybrid linear / full attention decoders: Qwen3-Next (Gated DeltaNet beside gated attention), as transformers
writes them.

A layer is an RMSNorm, a mixer and a residual add, then an RMSNorm, an FFN (MoE with a gated shared expert, or a
SwiGLU MLP) and a residual add. The mixer is the decoder's attention (:mod:`.decoder`: QK RMSNorm, partial RoPE,
the output gate of ``attention_output_gate``) on ``full_attention`` layers, or a Gated DeltaNet on
``linear_attention`` layers (:class:`~perfcast.catalog.linear_attention.GatedDeltaNetConfig`): ``in_proj_qkvz``
and ``in_proj_ba``, the causal conv1d over q, k, v and SiLU, beta = sigmoid(b) and the decay g = -exp(A_log) *
softplus(a + dt_bias), the gated delta rule (one ``ssm_scan`` op of variant ``gated_delta``), the gated RMSNorm
over each value head times silu(z), ``out_proj``. HF style adds the ``repeat_interleave`` copies of q and k from
the key heads to the value heads; the engine style prices fla's fused kernels, which read q and k per key head.

Delta-rule FLOPs (2 per multiply-add; :func:`delta_rule_cost`), per value head with key width K and value width V
over T tokens in chunks of C (Yang, Kautz & Hatamizadeh 2024, the chunkwise form transformers'
``torch_chunk_gated_delta_rule`` and fla's kernels run): the intra-chunk products (beta k) k^T, A (beta v),
A (beta k e^g), q k^T and A v_new (2 T C (3K + 2V)) and the inter-chunk ones W S, (q e^g) S and the state update
k^T v_new (6 T K V) are matrix products (``matmul_flops``); the triangular solve of A (2 T C^2 / 3), the decay
mask (3 T C), the L2 norms and scales of q and k (6 T K), the beta products (2 T (K + V)) and the state decay per
chunk (2 T K V / C) are vector work. A decode step (one token) is the recurrence: decay, S^T k, the rank-one
update and S^T q, 7 K V per head, plus the norms (6 K + 2 V). The state (one sequence: value heads x K x V, in the
model dtype) is written to the cache when ``kv_cache`` and read back when earlier tokens exist; the conv state
(the last conv_kernel - 1 inputs per channel) likewise.
"""

from __future__ import annotations

from perfcast.catalog.linear_attention import GatedDeltaNetConfig
from perfcast.catalog.models import ModelConfig
from perfcast.workload.graph import Graph
from perfcast.workload.models.common import layer_groups
from perfcast.workload.models.decoder import DecoderShape, _attention, _ffn, _lm_head, _norm, _residual
from perfcast.workload.types import OpKind

__all__ = ["build_delta_net_decoder", "delta_rule_cost"]

_FP32_BYTES = 4.0  # g and beta enter the kernel in fp32 (transformers casts them; fla keeps g in fp32)


def delta_rule_cost(lin: GatedDeltaNetConfig, batch: int, q_len: int,
                    esize: float) -> tuple[float, float, float, float]:
    """(FLOPs, matmul FLOPs, bytes read, bytes written) of one gated delta rule over ``batch`` sequences of
    ``q_len`` new tokens, without the recurrent state's traffic (see the module docstring for the terms)."""
    heads, k, v = lin.num_value_heads, lin.key_head_dim, lin.value_head_dim
    t = float(batch * q_len)
    if q_len == 1:
        matmul, vector = 0.0, t * heads * (7.0 * k * v + 6.0 * k + 2.0 * v)
    else:
        c = min(lin.chunk_size, q_len)
        matmul = t * heads * (2.0 * c * (3 * k + 2 * v) + 6.0 * k * v)
        vector = t * heads * (2.0 * c * c / 3.0 + 3.0 * c + 6.0 * k + 2.0 * (k + v) + 2.0 * k * v / c)
    read = t * (2 * lin.key_dim + lin.value_dim) * esize + t * 2 * heads * _FP32_BYTES  # q, k, v; g, beta
    written = t * lin.value_dim * esize  # o
    return matmul + vector, matmul, read, written


def _delta_rule(g: Graph, lin: GatedDeltaNetConfig, shape: DecoderShape, *, kv_cache: bool) -> None:
    b, s = shape.batch, shape.q_len
    flops, matmul, read, written = delta_rule_cost(lin, b, s, g.esize)
    state = lin.recurrent_state_elements * g.esize  # one sequence's state, in the model dtype
    if shape.kv_len > s:
        read += b * state  # the state left by earlier tokens
    if kv_cache:
        written += b * state
    chunk = 0 if s == 1 else min(lin.chunk_size, s)
    g.add_op("gated_delta_rule", "ssm_scan", OpKind.SSM_SCAN,
             (b, s, lin.num_value_heads, lin.value_head_dim, lin.key_head_dim, lin.num_key_heads, chunk),
             flops=flops, read=read, written=written, tp_split="heads", params=2 * lin.num_value_heads,
             meta=(("state_bytes", state), ("matmul_flops", matmul), ("version", "gated_delta")))


def _conv(g: Graph, lin: GatedDeltaNetConfig, shape: DecoderShape, *, kv_cache: bool) -> None:
    """The bias-free depthwise causal conv1d over q, k, v and its SiLU (``causal_conv1d_fn``)."""
    t, c, k, e = shape.tokens, lin.conv_dim, lin.conv_kernel, g.esize
    state = lin.conv_state_elements * e
    read = t * c * e + c * k * e + (shape.batch * state if shape.kv_len > shape.q_len else 0.0)
    written = t * c * e + (shape.batch * state if kv_cache else 0.0)
    g.add_op("conv1d", "causal_conv1d", OpKind.VECTOR, (t, c), flops=2.0 * t * c * k, read=read, written=written,
             tp_split="column", params=c * k, weight_bytes=c * k * e,
             meta=(("inputs", 1), ("outputs", 1), ("state_bytes", state)))
    g.pointwise("conv_act", "silu", t * c, tp_split="column")


def _gated_delta_net(g: Graph, cfg: ModelConfig, lin: GatedDeltaNetConfig, shape: DecoderShape, *, style: str,
                     kv_cache: bool) -> None:
    t, h, heads = shape.tokens, cfg.hidden_size, lin.num_value_heads
    g.linear("in_proj_qkvz", t, h, 2 * lin.key_dim + 2 * lin.value_dim, bias=False)
    g.linear("in_proj_ba", t, h, 2 * heads, bias=False)
    _conv(g, lin, shape, kv_cache=kv_cache)
    g.pointwise("beta_sigmoid", "sigmoid", t * heads, tp_split="heads")
    g.pointwise("decay_softplus", "softplus", t * heads, tp_split="heads")
    if style == "hf" and heads != lin.num_key_heads:  # q.repeat_interleave, k.repeat_interleave
        g.copy("repeat_q", t * heads * lin.key_head_dim)
        g.copy("repeat_k", t * heads * lin.key_head_dim)
    _delta_rule(g, lin, shape, kv_cache=kv_cache)
    with g.split("heads"):
        g.norm("norm", "rmsnorm", t * heads, lin.value_head_dim, bias=False)  # one weight shared by the heads
    g.pointwise("gate", "silu_mul", t * lin.value_dim, inputs=2, tp_split="column")
    g.linear("out_proj", t, lin.value_dim, h, bias=False, tp_split="row")


def build_delta_net_decoder(g: Graph, cfg: ModelConfig, shape: DecoderShape, *, style: str = "engine",
                            attention: str = "flash", kv_cache: bool = False) -> None:
    """Emit one forward of a Qwen3-Next decoder (``cfg.linear_attention`` set)."""
    lin = cfg.linear_attention
    if lin is None:
        raise ValueError(f"{cfg.id} has no linear-attention layers")
    t, h = shape.tokens, cfg.hidden_size
    with g.scope("embed", group="embedding"):
        g.embedding("embed_tokens", t, h, cfg.vocab_size)
    moe = cfg.moe
    for (kind, sparse), n in layer_groups(lin.layer_types, lambda i: moe is not None and moe.is_moe_layer(i)).items():
        label = ("linear_layers" if kind == "linear_attention" else "attention_layers") + ("_moe" if sparse else "")
        with g.scope(label, count=n):
            with g.scope("attn", group="attention" if kind == "full_attention" else "linear_attention"):
                _norm(g, cfg, "input_layernorm", t, h, style)
                if kind == "linear_attention":
                    _gated_delta_net(g, cfg, lin, shape, style=style, kv_cache=kv_cache)
                else:
                    _attention(g, cfg, shape, style=style, attention=attention, kv_cache=kv_cache, window=None)
                _residual(g, cfg, t * h, inputs=2)
            with g.scope("mlp", group="moe" if sparse else "mlp"):
                _ffn(g, cfg, t, "post_attention_layernorm", sparse=sparse, style=style)
    with g.scope("head", group="lm_head"):
        _lm_head(g, cfg, shape, "norm", style)
