"""Parameter counts of a model (a :class:`~perfcast.catalog.architecture.ModelArchitecture`), from the
architecture alone.

What is counted (every weight and bias tensor of the inference model as
``transformers`` builds it, in elements):

* embeddings: the token table (``vocab_size x token_embedding_size``), the
  learned position table (``max_positions x hidden_size``, only when
  ``position == "learned"``; OPT's two offset rows are left out), BERT's
  token-type table and a norm right after the embeddings (``embedding_norm``).
  These make up ``ParamCount.embedding``. OPT's project_in/project_out (when
  ``embedding_size`` differs from ``hidden_size``) count in the total, not here.
* per layer, attention: q/k/v/o projections and their biases, QK norms (per head, or over the whole q/k
  projection for OLMo 2),
  per-head attention sinks; for MLA the low-rank matrices (q_a, q_b, kv_a with
  the RoPE key, kv_b, o) and the two latent RMSNorms.
* per layer, the MLP (gated = 3 matrices, otherwise 2, plus biases) or, on MoE
  layers, every routed expert, the shared experts and the router (weight and
  optional bias) and Qwen2-MoE's shared-expert gate. Dense layers of MoE models use ``intermediate_size``.
* per layer, ``num_norms_per_layer`` norms (LayerNorm = weight + bias unless
  ``norm_bias`` is false; RMSNorm = weight).
* state-space layers (``ssm``; :class:`~perfcast.catalog.architecture.SSMConfig`): a Mamba-1 mixer's in/x/dt/out
  projections, depthwise conv1d, ``A_log`` and ``D`` (and Jamba's dt/B/C RMSNorms); a Mamba-2 mixer's in/out
  projections, conv1d, ``A_log``, ``D``, ``dt_bias`` and gated-norm weight. A hybrid layer is its mixer (Mamba,
  attention or, for Nemotron-H, an MLP or an MoE block) and, when ``ffn_per_layer`` (Jamba), a dense or MoE FFN.
* linear-attention layers (``linear_attention``; Qwen3-Next's Gated DeltaNet): ``in_proj_qkvz``, ``in_proj_ba``,
  the bias-free conv1d, ``dt_bias``, ``A_log``, the gated-norm weight (one value head wide) and ``out_proj``; the
  full-attention layers' q_proj is twice as wide when it also emits the output gate (``attention_output_gate``).
* encoder-decoders: the decoder's cross-attention (same shape as its
  self-attention) and its norm, and a final norm per stack.
* the final norm (``final_norm``), and the LM head when it is not tied
  (``vocab_size x token_embedding_size``) plus its bias (``lm_head_bias``).
  Encoder-only models (BERT) count no head: the pooler and the MLM/NSP heads
  are left out.
* multimodal models: the vision tower and its projector, reported in
  ``ParamCount.vision`` and included in ``total`` (not in ``active``).
* ResNets (``kind == "cnn"``): every convolution weight (bias-free), the
  weight and bias of every BatchNorm (running mean and variance are buffers,
  not parameters) and the classifier's weight and bias, as torchvision's
  ``resnet50`` counts them (25,557,032). ``embedding`` is the stem (7x7
  convolution and its BatchNorm).

Not counted: T5/Switch relative-position bias tables (buckets x heads, a few
thousand), the multi-token-prediction module of DeepSeek-V3 and GLM-4.5
(``num_nextn_predict_layers``: transformers builds no module for it; DeepSeek-V3 counts 671B, its report's figure,
not the 685B of its Hugging Face card, which adds the 14B MTP layer with its own copy of embedding and head),
rotary frequency buffers, and anything that is not a trained parameter.

``active`` is what one text token touches: ``total`` minus the vision tower,
with each MoE layer's routed experts counted ``experts_per_token`` times
(shared experts, the router and everything else in full). Model cards differ on
whether the input embedding is included; ``active`` includes it, and
``active - embedding`` is the figure without it.
"""

from __future__ import annotations

from dataclasses import dataclass

from perfcast.catalog.architecture import ModelArchitecture, MoEConfig, ResNetConfig, SSMConfig, VisionConfig
from perfcast.catalog.linear_attention import GatedDeltaNetConfig

__all__ = ["ParamCount", "count_params"]


@dataclass(frozen=True)
class ParamCount:
    """Parameter counts (elements) of one model; see the module docstring for what is included."""

    total: int
    active: int
    embedding: int
    vision: int = 0


def _linear(fan_in: int, fan_out: int, bias: bool) -> int:
    """A dense layer: weight fan_in x fan_out, plus fan_out bias elements."""
    return fan_in * fan_out + (fan_out if bias else 0)


def _norm(cfg: ModelArchitecture, width: int) -> int:
    """One norm over ``width`` elements: weight, plus bias for a biased LayerNorm."""
    return width * (2 if cfg.norm == "layernorm" and cfg.norm_bias else 1)


def _attention(cfg: ModelArchitecture) -> int:
    """One (self- or cross-) attention block."""
    h, heads = cfg.hidden_size, cfg.num_heads
    if cfg.mla is not None:
        mla = cfg.mla
        qk_head = mla.qk_nope_head_dim + mla.qk_rope_head_dim
        if mla.q_lora_rank:
            q = _linear(h, mla.q_lora_rank, cfg.qkv_bias)  # q_a_proj
            q += mla.q_lora_rank  # q_a_layernorm (RMSNorm)
            q += _linear(mla.q_lora_rank, heads * qk_head, False)  # q_b_proj
        else:
            q = _linear(h, heads * qk_head, False)  # q_proj
        kv = _linear(h, mla.kv_lora_rank + mla.qk_rope_head_dim, cfg.qkv_bias)  # kv_a_proj_with_mqa
        kv += mla.kv_lora_rank  # kv_a_layernorm (RMSNorm)
        kv += _linear(mla.kv_lora_rank, heads * (mla.qk_nope_head_dim + mla.v_head_dim), False)  # kv_b_proj
        o = _linear(heads * mla.v_head_dim, h, cfg.out_bias)  # o_proj
        return q + kv + o
    params = _linear(h, cfg.q_dim * (2 if cfg.attention_output_gate else 1), cfg.qkv_bias)  # q (and its gate)
    params += 2 * _linear(h, cfg.kv_dim, cfg.qkv_bias)  # k, v
    params += _linear(cfg.q_dim, h, cfg.out_bias)  # o
    weights_per_element = {"none": 0, "l2": 0, "rmsnorm": 1, "layernorm": 2}[cfg.qk_norm]
    if cfg.qk_norm_span == "projection":  # q_norm over q_dim, k_norm over kv_dim (OLMo 2)
        params += weights_per_element * (cfg.q_dim + cfg.kv_dim)
    else:
        params += 2 * weights_per_element * cfg.head_dim  # q_norm, k_norm (shared by heads)
    if cfg.attention_sinks:
        params += heads  # one sink logit per head
    return params


def _mlp(cfg: ModelArchitecture, width: int, *, gated: bool, bias: bool) -> int:
    """One feed-forward block of inner ``width``: (gate,) up, down."""
    h = cfg.hidden_size
    up = _linear(h, width, bias) * (2 if gated else 1)
    return up + _linear(width, h, bias)


def _expert(cfg: ModelArchitecture, moe: MoEConfig, width: int) -> int:
    return _mlp(cfg, width, gated=moe.gated, bias=moe.expert_bias)


def _ffn(cfg: ModelArchitecture, index: int) -> tuple[int, int]:
    """(total, active) parameters of layer ``index``'s MLP or MoE block."""
    moe = cfg.moe
    if moe is None or not moe.is_moe_layer(index):
        dense = _mlp(cfg, cfg.intermediate_size, gated=cfg.gated_mlp, bias=cfg.mlp_bias)
        return dense, dense
    return _moe_block(cfg, moe)


def _moe_block(cfg: ModelArchitecture, moe: MoEConfig) -> tuple[int, int]:
    """(total, active) parameters of one MoE block: routed and shared experts, router, shared-expert gate."""
    routed = _expert(cfg, moe, moe.expert_intermediate_size)
    shared = moe.num_shared_experts * _expert(cfg, moe, moe.shared_intermediate_size)
    router = _linear(cfg.hidden_size, moe.num_experts, moe.router_bias)
    if moe.shared_expert_gate:
        router += _linear(cfg.hidden_size, 1, False)  # shared_expert_gate (Qwen2-MoE)
    common = shared + router
    return common + moe.num_experts * routed, common + moe.experts_per_token * routed


def _stack(cfg: ModelArchitecture, num_layers: int, *, cross_attention: bool) -> tuple[int, int]:
    """(total, active) parameters of ``num_layers`` blocks."""
    per_layer = _attention(cfg) + cfg.num_norms_per_layer * _norm(cfg, cfg.hidden_size)
    if cross_attention:
        per_layer += _attention(cfg) + _norm(cfg, cfg.hidden_size)  # cross-attention and its norm
    total = active = num_layers * per_layer
    for i in range(num_layers):
        ffn_total, ffn_active = _ffn(cfg, i)
        total += ffn_total
        active += ffn_active
    return total, active


def _ssm_mixer(cfg: ModelArchitecture, ssm: SSMConfig) -> int:
    """One Mamba-1 or Mamba-2 mixer, as transformers' ``MambaMixer`` / ``Mamba2Mixer`` / ``JambaMambaMixer``."""
    h, inner, n, k = cfg.hidden_size, ssm.intermediate_size, ssm.state_size, ssm.conv_kernel
    conv = ssm.conv_dim * k + (ssm.conv_dim if ssm.conv_bias else 0)  # depthwise: one k-tap filter per channel
    out = _linear(inner, h, ssm.proj_bias)  # out_proj
    if ssm.version == 1:
        r = ssm.time_step_rank
        params = _linear(h, 2 * inner, ssm.proj_bias)  # in_proj: x and z
        params += _linear(inner, r + 2 * n, False)  # x_proj: dt, B, C
        params += _linear(r, inner, True)  # dt_proj
        params += inner * n + inner  # A_log, D
        params += (r + 2 * n) if ssm.dt_norms else 0  # Jamba's dt / B / C RMSNorms
        return params + conv + out
    heads = ssm.num_heads
    params = _linear(h, 2 * inner + 2 * ssm.n_groups * n + heads, ssm.proj_bias)  # in_proj: z, x, B, C, dt
    params += 3 * heads  # dt_bias, A_log, D
    params += inner  # gated RMSNorm weight
    return params + conv + out


def _hybrid_stack(cfg: ModelArchitecture, ssm: SSMConfig) -> tuple[int, int]:
    """(total, active) parameters of a stack of Mamba / attention / MLP layers (see SSMConfig)."""
    norms = cfg.num_norms_per_layer * _norm(cfg, cfg.hidden_size)
    dense = _mlp(cfg, cfg.intermediate_size, gated=cfg.gated_mlp, bias=cfg.mlp_bias)
    mixers = {"ssm": (_ssm_mixer(cfg, ssm),) * 2, "attention": (_attention(cfg),) * 2, "mlp": (dense, dense)}
    if cfg.moe is not None:
        mixers["moe"] = _moe_block(cfg, cfg.moe)  # Nemotron 3: an MoE block as a layer's only mixer
    total = active = 0
    for i, mixer in enumerate(ssm.layer_mixers):
        ffn_total, ffn_active = _ffn(cfg, i) if ssm.ffn_per_layer else (0, 0)
        mixer_total, mixer_active = mixers[mixer]
        total += norms + mixer_total + ffn_total
        active += norms + mixer_active + ffn_active
    return total, active


def _delta_net_mixer(cfg: ModelArchitecture, lin: GatedDeltaNetConfig) -> int:
    """One Gated DeltaNet mixer, as transformers' ``Qwen3NextGatedDeltaNet``."""
    h = cfg.hidden_size
    params = _linear(h, 2 * lin.key_dim + 2 * lin.value_dim, False)  # in_proj_qkvz
    params += _linear(h, 2 * lin.num_value_heads, False)  # in_proj_ba
    params += lin.conv_dim * lin.conv_kernel  # depthwise conv1d over q, k, v, no bias
    params += 2 * lin.num_value_heads  # dt_bias, A_log
    params += lin.value_head_dim  # gated RMSNorm weight, shared by the value heads
    return params + _linear(lin.value_dim, h, False)  # out_proj


def _linear_attention_stack(cfg: ModelArchitecture, lin: GatedDeltaNetConfig) -> tuple[int, int]:
    """(total, active) parameters of a stack of Gated DeltaNet / full-attention layers, each with its FFN."""
    norms = cfg.num_norms_per_layer * _norm(cfg, cfg.hidden_size)
    mixers = {"linear_attention": _delta_net_mixer(cfg, lin), "full_attention": _attention(cfg)}
    total = active = 0
    for i, kind in enumerate(lin.layer_types):
        ffn_total, ffn_active = _ffn(cfg, i)
        total += norms + mixers[kind] + ffn_total
        active += norms + mixers[kind] + ffn_active
    return total, active


def _vision(vis: VisionConfig) -> int:
    """Vision tower (a ViT: CLIP's with class token and position table, or a rotary one) plus merger and
    projector; see VisionConfig."""
    h, inner = vis.hidden_size, vis.intermediate_size
    norm = h * (2 if vis.norm == "layernorm" else 1)  # LayerNorm weight and bias, RMSNorm weight
    params = vis.patch_in_features * h  # bias-free patch embedding (Conv2d / Conv3d)
    if vis.class_token:
        params += h  # class embedding
    if vis.position == "learned":
        params += (vis.num_patches + (1 if vis.class_token else 0)) * h  # positions of patches and class token
    params += vis.stack_norms * norm  # CLIP's pre and post LayerNorm, Pixtral's ln_pre
    layer = 4 * _linear(h, h, vis.attention_bias)  # q, k, v, o
    if vis.gated_mlp:
        layer += 2 * _linear(h, inner, vis.mlp_bias) + _linear(inner, h, vis.mlp_bias)  # gate, up, down
    else:
        layer += _linear(h, inner, vis.mlp_bias) + _linear(inner, h, vis.mlp_bias)  # fc1, fc2
    layer += 2 * norm  # two norms
    params += vis.num_layers * layer
    if vis.merge_norm:
        params += norm  # Qwen's ln_q, Mistral 3's projector RMSNorm
    if vis.merge_linear:
        params += _linear(h * vis.spatial_merge_size**2, h, False)  # Pixtral's merging_layer
    dims = vis.projector_dims
    params += sum(_linear(a, b, vis.projector_bias) for a, b in zip(dims, dims[1:], strict=False))
    if vis.image_newline:
        params += dims[-1]  # LLaVA-NeXT's image_newline (text width)
    return params


def _conv_bn(in_ch: int, out_ch: int, kernel: int) -> int:
    """A bias-free convolution and its BatchNorm (weight and bias per output channel)."""
    return in_ch * out_ch * kernel * kernel + 2 * out_ch


def _resnet(net: ResNetConfig) -> ParamCount:
    """A ResNet; see :class:`perfcast.catalog.architecture.ResNetConfig` for the blocks."""
    stem = _conv_bn(net.num_channels, net.embedding_size, 7)
    total = stem
    in_ch = net.embedding_size
    strides = net.stage_strides()
    for out_ch, inner, depth, stride in zip(net.hidden_sizes, net.inner_sizes, net.depths, strides, strict=True):
        if net.layer_type == "bottleneck":
            first = _conv_bn(in_ch, inner, 1) + _conv_bn(inner, inner, 3) + _conv_bn(inner, out_ch, 1)
            rest = _conv_bn(out_ch, inner, 1) + _conv_bn(inner, inner, 3) + _conv_bn(inner, out_ch, 1)
        else:
            first = _conv_bn(in_ch, out_ch, 3) + _conv_bn(out_ch, out_ch, 3)
            rest = 2 * _conv_bn(out_ch, out_ch, 3)
        if in_ch != out_ch or stride != 1:
            first += _conv_bn(in_ch, out_ch, 1)  # projection shortcut
        total += first + (depth - 1) * rest
        in_ch = out_ch
    total += _linear(in_ch, net.num_labels, True)  # classifier
    return ParamCount(total=total, active=total, embedding=stem)


def count_params(cfg: ModelArchitecture) -> ParamCount:
    """Count the parameters of ``cfg``: total, active per text token, embeddings, vision tower."""
    if cfg.resnet is not None:
        return _resnet(cfg.resnet)
    if cfg.unet is not None or cfg.vae is not None:
        from perfcast.catalog.diffusion import unet_params, vae_decoder_params

        n = unet_params(cfg.unet) if cfg.unet is not None else vae_decoder_params(cfg.vae)  # type: ignore[arg-type]
        return ParamCount(total=n, active=n, embedding=0)
    h, emb_width = cfg.hidden_size, cfg.token_embedding_size
    embedding = cfg.vocab_size * emb_width  # token table
    if cfg.position == "learned":
        embedding += cfg.max_positions * h  # learned position table
    embedding += cfg.type_vocab_size * h  # BERT token types
    if cfg.embedding_norm:
        embedding += _norm(cfg, h)

    other = 0
    if cfg.embedding_size and cfg.embedding_size != h:
        other += 2 * emb_width * h  # OPT project_in / project_out, no bias
    if cfg.kind == "encoder-decoder":
        enc_total, enc_active = _stack(cfg, cfg.num_layers, cross_attention=False)
        dec_total, dec_active = _stack(cfg, cfg.num_decoder_layers or cfg.num_layers, cross_attention=True)
        layers_total, layers_active = enc_total + dec_total, enc_active + dec_active
        num_final_norms = 2
    elif cfg.ssm is not None:
        layers_total, layers_active = _hybrid_stack(cfg, cfg.ssm)
        num_final_norms = 1
    elif cfg.linear_attention is not None:
        layers_total, layers_active = _linear_attention_stack(cfg, cfg.linear_attention)
        num_final_norms = 1
    else:
        layers_total, layers_active = _stack(cfg, cfg.num_layers, cross_attention=False)
        num_final_norms = 1
    if cfg.final_norm:
        other += num_final_norms * _norm(cfg, h)
    if cfg.kind != "encoder":
        if not cfg.tie_word_embeddings:
            other += cfg.vocab_size * emb_width  # LM head
        if cfg.lm_head_bias:
            other += cfg.vocab_size

    vision = _vision(cfg.vision) if cfg.vision is not None else 0
    text_total = embedding + other + layers_total
    return ParamCount(
        total=text_total + vision,
        active=embedding + other + layers_active,
        embedding=embedding,
        vision=vision,
    )
