"""State-space and hybrid decoders: Mamba, Mamba-2, Jamba and Nemotron-H, as transformers (or, for Nemotron-H, the
checkpoint's remote code) writes them.

A layer is an RMSNorm and a mixer with a residual add (Mamba, Mamba-2, Nemotron-H), and for Jamba also an RMSNorm
and an FFN (dense SwiGLU or MoE). The mixer is a Mamba mixer, the decoder's attention (:mod:`.decoder`, no
positions), or for Nemotron-H an MLP or an MoE block (:mod:`.decoder`'s, non-gated squared ReLU).

Mamba-1 mixer (``MambaMixer``): ``in_proj`` (x, z), a depthwise causal conv1d over x and SiLU, ``x_proj`` (dt, B,
C), ``dt_proj`` and softplus, the selective scan (one ``ssm_scan`` op, D skip included), gating y * silu(z),
``out_proj``. Mamba-2 mixer (``Mamba2Mixer``): ``in_proj`` (z, x, B, C, dt), the causal conv1d over x, B, C and
SiLU, softplus(dt + dt_bias), the SSD chunked scan (one ``ssm_scan`` op), the gated RMSNorm (y * silu(z), then
RMSNorm), ``out_proj``. Both launch styles price the fused kernels (``selective_scan_fn`` / the SSD Triton
kernels, ``causal_conv1d_fn``): transformers' slow path, which materializes the discretized A and B*x per state
(Mamba-1: a Python loop over tokens; Mamba-2: chunk-by-chunk broadcasts), is not modelled.

Scan FLOPs (2 per multiply-add; :func:`scan_cost`): Mamba-1 per (token, channel, state) 8 (dt*A and its exp,
dt*B*x, h = dA*h + dBx, y += C*h) and 2 per (token, channel) for the D skip. Mamba-2 SSD (Dao & Gu 2024, section
6) with chunk Q, heads H of P, groups G, state N over T tokens: C B^T per group (2 T Q N G), its masked product
with X (2 T Q P H), the chunk states B^T X (2 T N P H) and their output C h (2 T N P H) as matrix products, plus
the decay mask (T Q H), the state passing between chunks (2 T/Q H P N) and the D skip (2 T H P); a decode step
(one token) is the recurrence, 6 per (head, head dim, state). The state (one sequence: d_inner x d_state, or
heads x head_dim x d_state, in the model dtype) is written to the cache when ``kv_cache`` and read back when
earlier tokens exist; the conv state (the last conv_kernel - 1 inputs per channel) likewise.
"""

from __future__ import annotations

from perfcast.catalog.architecture import SSMConfig
from perfcast.catalog.models import ModelConfig
from perfcast.workload.graph import Graph
from perfcast.workload.models.common import layer_groups
from perfcast.workload.models.decoder import (
    DecoderShape,
    _attention,
    _ffn,
    _lm_head,
    _mlp,
    _moe,
    _norm,
    _residual,
)
from perfcast.workload.types import OpKind

__all__ = ["build_ssm_decoder", "scan_cost"]


def scan_cost(ssm: SSMConfig, batch: int, q_len: int, esize: float) -> tuple[float, float, float, float]:
    """(FLOPs, matmul FLOPs, bytes read, bytes written) of one scan over ``batch`` sequences of ``q_len`` new
    tokens, without the recurrent state's traffic (see the module docstring for the terms)."""
    heads, p, groups = ssm.scan_heads
    n, t = ssm.state_size, float(batch * q_len)
    if ssm.version == 1:
        matmul, vector = 0.0, t * heads * (8.0 * n + 2.0)
    elif q_len == 1:
        matmul, vector = 0.0, t * heads * p * (6.0 * n + 2.0)
    else:
        q = min(ssm.chunk_size, q_len)
        matmul = 2.0 * t * (q * n * groups + q * p * heads + 2.0 * n * p * heads)
        vector = t * q * heads + 2.0 * t / q * heads * p * n + 2.0 * t * heads * p
    read = t * (heads * p + (heads if ssm.version == 2 else heads * p) + 2 * groups * n) * esize  # x, dt, B, C
    read += (heads * n + heads if ssm.version == 1 else 2 * heads) * 4.0  # A (fp32) and D
    written = t * heads * p * esize  # y
    return matmul + vector, matmul, read, written


def _scan(g: Graph, ssm: SSMConfig, shape: DecoderShape, *, kv_cache: bool) -> None:
    heads, p, groups = ssm.scan_heads
    b, s = shape.batch, shape.q_len
    flops, matmul, read, written = scan_cost(ssm, b, s, g.esize)
    state = ssm.ssm_state_elements * g.esize  # one sequence's state, in the model dtype
    if shape.kv_len > s:
        read += b * state  # the state left by earlier tokens
    if kv_cache:
        written += b * state
    chunk = 0 if ssm.version == 1 or s == 1 else min(ssm.chunk_size, s)
    params = ssm.intermediate_size * ssm.state_size + ssm.intermediate_size if ssm.version == 1 else 3 * heads
    g.add_op("selective_scan" if ssm.version == 1 else "ssd_scan", "ssm_scan", OpKind.SSM_SCAN,
             (b, s, heads, p, ssm.state_size, groups, chunk), flops=flops, read=read, written=written,
             tp_split="heads", params=params,
             meta=(("state_bytes", state), ("matmul_flops", matmul), ("output_flops", 2.0 * b * s * heads * p
                                                                       * ssm.state_size), ("version", ssm.version)))


def _conv(g: Graph, ssm: SSMConfig, shape: DecoderShape, *, kv_cache: bool) -> None:
    """The depthwise causal conv1d and its SiLU (``causal_conv1d_fn``: one memory-bound kernel)."""
    t, c, k, e = shape.tokens, ssm.conv_dim, ssm.conv_kernel, g.esize
    weights = c * k + (c if ssm.conv_bias else 0)
    state = c * (k - 1) * e
    read = t * c * e + weights * e + (shape.batch * state if shape.kv_len > shape.q_len else 0.0)
    written = t * c * e + (shape.batch * state if kv_cache else 0.0)
    g.add_op("conv1d", "causal_conv1d", OpKind.VECTOR, (t, c), flops=2.0 * t * c * k, read=read, written=written,
             tp_split="column", params=weights, weight_bytes=weights * e,
             meta=(("inputs", 1), ("outputs", 1), ("state_bytes", state)))
    g.pointwise("conv_act", "silu", t * c, tp_split="column")


def _mamba_mixer(g: Graph, cfg: ModelConfig, ssm: SSMConfig, shape: DecoderShape, *, style: str,
                 kv_cache: bool) -> None:
    t, h, inner, n = shape.tokens, cfg.hidden_size, ssm.intermediate_size, ssm.state_size
    heads = ssm.scan_heads[0]
    if ssm.version == 1:
        g.linear("in_proj", t, h, 2 * inner, bias=ssm.proj_bias)
        _conv(g, ssm, shape, kv_cache=kv_cache)
        r = ssm.time_step_rank
        g.linear("x_proj", t, inner, r + 2 * n, bias=False, tp_split="none")
        if ssm.dt_norms:  # Jamba: RMSNorms on dt, B and C
            for name, width in (("dt_layernorm", r), ("b_layernorm", n), ("c_layernorm", n)):
                _norm(g, cfg, name, t, width, style)
        g.linear("dt_proj", t, r, inner, bias=True)
        g.pointwise("dt_softplus", "softplus", t * inner, tp_split="column")
        _scan(g, ssm, shape, kv_cache=kv_cache)
        g.pointwise("gate", "silu_mul", t * inner, inputs=2, tp_split="column")
    else:
        g.linear("in_proj", t, h, 2 * inner + 2 * ssm.n_groups * n + heads, bias=ssm.proj_bias)
        _conv(g, ssm, shape, kv_cache=kv_cache)
        g.pointwise("dt_softplus", "softplus", t * heads, tp_split="column")
        _scan(g, ssm, shape, kv_cache=kv_cache)
        g.pointwise("gate", "silu_mul", t * inner, inputs=2, tp_split="column")
        g.norm("norm", "rmsnorm", t, inner, bias=False)
    g.linear("out_proj", t, inner, h, bias=ssm.proj_bias, tp_split="row")


def build_ssm_decoder(g: Graph, cfg: ModelConfig, shape: DecoderShape, *, style: str = "engine",
                      attention: str = "flash", kv_cache: bool = False) -> None:
    """Emit one forward of a Mamba / Mamba-2 / Jamba / Nemotron-H decoder (``cfg.ssm`` set)."""
    ssm = cfg.ssm
    if ssm is None:
        raise ValueError(f"{cfg.id} has no state-space layers")
    t, h = shape.tokens, cfg.hidden_size
    with g.scope("embed", group="embedding"):
        g.embedding("embed_tokens", t, h, cfg.vocab_size)
    moe = cfg.moe if ssm.ffn_per_layer else None  # Nemotron-H's MoE layers are mixers of their own
    for (mixer, sparse), n in layer_groups(ssm.layer_mixers, lambda i: moe is not None and moe.is_moe_layer(i)).items():
        label = f"{mixer}_layers" + ("_moe" if sparse else "")
        with g.scope(label, count=n):
            with g.scope(mixer, group="attention" if mixer == "attention" else mixer):
                _norm(g, cfg, "input_layernorm", t, h, style)
                if mixer == "ssm":
                    _mamba_mixer(g, cfg, ssm, shape, style=style, kv_cache=kv_cache)
                elif mixer == "attention":
                    _attention(g, cfg, shape, style=style, attention=attention, kv_cache=kv_cache, window=None)
                elif mixer == "moe":  # Nemotron 3: an MoE block is the layer's only mixer
                    _moe(g, cfg, t, style=style)
                else:
                    _mlp(g, cfg, t, cfg.intermediate_size, style=style)
                _residual(g, cfg, t * h, inputs=2)
            if ssm.ffn_per_layer:
                with g.scope("ffn", group="moe" if sparse else "mlp"):
                    _ffn(g, cfg, t, "pre_ff_layernorm", sparse=sparse, style=style)
    with g.scope("head", group="lm_head"):
        _lm_head(g, cfg, shape, "norm_f", style)
