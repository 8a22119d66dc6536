"""Stable Diffusion's denoising UNet and VAE decoder as diffusers runs them (eager PyTorch, SDPA attention).

One forward pass, kernel by kernel, of diffusers' ``UNet2DConditionModel`` (one
denoising step) and of ``AutoencoderKL``'s decoder (latent -> image); the
architectures are :class:`perfcast.catalog.diffusion.UNetConfig` and
:class:`~perfcast.catalog.diffusion.VAEDecoderConfig` (Rombach et al. 2022,
arXiv:2112.10752; diffusers ``models/unets/unet_2d_condition.py``,
``models/resnet.py``, ``models/attention.py``, ``models/autoencoders/vae.py``).

- GroupNorm is one row reduction per (image, group) over its channels x pixels;
  SiLU, the residual adds and the time-embedding add are pointwise kernels, and so are
  the divisions diffusers writes after every ResNet block (``/ output_scale_factor``) and
  attention (``/ rescale_output_factor``), which launch a kernel although both factors are 1.
- Convolutions are NCHW ``conv2d`` ops (3x3 padding 1, 1x1, stride-2 downsampling
  3x3); upsampling is a nearest-neighbour 2x copy then a 3x3 convolution.
- Attention is PyTorch's fused ``scaled_dot_product_attention`` (no causal mask):
  self-attention over the ``H*W`` pixels of a level, cross-attention from them to
  the ``text_tokens`` text-encoder outputs (whose K/V projections run on those 77
  tokens). The GEGLU feed-forward is one linear to ``2 x 4C``, a GELU kernel on the gate
  half, a multiply and one linear back (eager PyTorch: ``hidden * F.gelu(gate)``).
- The image side is the config's (64 px latent, 512 px image); a workload's
  ``seq_len`` does not set it, and the builder returns it (as the ResNet builder does).

The text encoder (CLIP ViT-L/14's 123M-parameter text tower over 77 tokens, about
19 GFLOPs per prompt) is not built: once per image it is under 0.1% of 50 guided
UNet steps.
"""

from __future__ import annotations

from perfcast.catalog.diffusion import UNetConfig, VAEDecoderConfig
from perfcast.catalog.models import ModelConfig
from perfcast.dtypes import DType
from perfcast.errors import UnsupportedError
from perfcast.workload.graph import Graph

__all__ = ["build_diffusion", "build_unet", "build_vae_decoder"]

_TIME_IDS = 6  # SDXL's micro-conditioning: original height/width, crop top/left, target height/width
# diffusers' get_timestep_embedding + Timesteps: arange, x -log(max_period), / half_dim, exp, t x freqs, x scale,
# sin, cos, cat, the flip cat, the cast to the UNet's dtype: eleven tiny kernels per call
_SINUSOID_KERNELS = 11


def build_diffusion(g: Graph, cfg: ModelConfig, batch: int) -> int:
    """Emit the forward pass of a diffusion network (``cfg.unet`` or ``cfg.vae``); returns its input side."""
    if cfg.unet is not None:
        return build_unet(g, cfg.unet, batch)
    if cfg.vae is not None:
        return build_vae_decoder(g, cfg.vae, batch)
    raise UnsupportedError(f"{cfg.id} is not a diffusion UNet or VAE (model_type {cfg.model_type!r})")


def _group_norm(g: Graph, name: str, batch: int, channels: int, hw: int, groups: int, *, silu: bool) -> None:
    """``nn.GroupNorm`` (and the SiLU after it, when ``silu``)."""
    g.reduction(name, "groupnorm", batch * groups, channels // groups * hw * hw, params=2 * channels)
    if silu:
        g.pointwise(f"{name}.silu", "silu", batch * channels * hw * hw)


def _resnet(g: Graph, name: str, batch: int, cin: int, cout: int, hw: int, groups: int, temb: int) -> None:
    """diffusers ``ResnetBlock2D`` (``temb`` = 0: no time embedding, the VAE's blocks)."""
    numel = batch * cout * hw * hw
    with g.scope(name):
        _group_norm(g, "norm1", batch, cin, hw, groups, silu=True)
        g.conv2d("conv1", batch, cin, cout, 3, hw, padding=1, bias=True)
        if temb:
            g.pointwise("temb.silu", "silu", batch * temb)
            g.linear("time_emb_proj", batch, temb, cout, tp_split="none")
            g.pointwise("temb.add", "add", numel, inputs=1, extra_read_bytes=batch * cout * g.esize)
        _group_norm(g, "norm2", batch, cout, hw, groups, silu=True)
        g.conv2d("conv2", batch, cout, cout, 3, hw, padding=1, bias=True)
        if cin != cout:
            g.conv2d("conv_shortcut", batch, cin, cout, 1, hw, bias=True)
        g.pointwise("residual", "add", numel, inputs=2)
        g.pointwise("output_scale", "div", numel)  # (x + h) / output_scale_factor: a kernel even at 1.0


def _attention(g: Graph, name: str, batch: int, q_len: int, kv_len: int, width: int, heads: int,
               kv_width: int | None = None, *, bias: bool = False) -> None:
    """q, k, v projections, fused SDPA (non-causal), output projection; K/V from ``kv_len`` tokens of
    ``kv_width`` (the text tokens for cross-attention)."""
    kvw = kv_width or width
    with g.scope(name):
        g.linear("to_q", batch * q_len, width, width, bias=bias)
        g.linear("to_k", batch * kv_len, kvw, width, bias=bias)
        g.linear("to_v", batch * kv_len, kvw, width, bias=bias)
        g.attention("sdpa", batch, heads, heads, q_len, kv_len, width // heads, causal=False)
        g.linear("to_out", batch * q_len, width, width, bias=True, tp_split="row")
        g.pointwise("rescale_output", "div", batch * q_len * width)  # / rescale_output_factor (1.0): a kernel


def _transformer(g: Graph, name: str, batch: int, c: int, hw: int, u: UNetConfig, heads: int, layers: int) -> None:
    """diffusers ``Transformer2DModel`` with ``layers`` ``BasicTransformerBlock``s (``proj_in``/``proj_out``: 1x1
    convs, or linear layers on the tokens with ``use_linear_projection``)."""
    tokens = batch * hw * hw
    pixels = hw * hw
    with g.scope(name):
        _group_norm(g, "norm", batch, c, hw, u.norm_num_groups, silu=False)
        if u.linear_projection:
            g.copy("to_tokens", tokens * c)  # NCHW -> (B, HW, C)
            g.linear("proj_in", tokens, c, c, bias=True)
        else:
            g.conv2d("proj_in", batch, c, c, 1, hw, bias=True)
            g.copy("to_tokens", tokens * c)  # NCHW -> (B, HW, C)
        with g.scope("block" if layers > 1 else "", count=layers):  # identical blocks: emitted once, counted
            g.norm("norm1", "layernorm", tokens, c)
            _attention(g, "attn1", batch, pixels, pixels, c, heads)
            g.pointwise("attn1.residual", "add", tokens * c, inputs=2)
            g.norm("norm2", "layernorm", tokens, c)
            _attention(g, "attn2", batch, pixels, u.text_tokens, c, heads, u.cross_attention_dim)
            g.pointwise("attn2.residual", "add", tokens * c, inputs=2)
            g.norm("norm3", "layernorm", tokens, c)
            g.linear("ff.proj", tokens, c, 8 * c)  # GEGLU: hidden and gate, 4c each
            g.pointwise("ff.gelu", "gelu", tokens * 4 * c)  # GEGLU: gelu(gate), then hidden * it (two kernels)
            g.pointwise("ff.mul", "mul", tokens * 4 * c, inputs=2)
            g.linear("ff.out", tokens, 4 * c, c, tp_split="row")
            g.pointwise("ff.residual", "add", tokens * c, inputs=2)
        if u.linear_projection:
            g.linear("proj_out", tokens, c, c, bias=True, tp_split="row")
            g.copy("to_image", tokens * c)  # (B, HW, C) -> NCHW
        else:
            g.copy("to_image", tokens * c)  # (B, HW, C) -> NCHW
            g.conv2d("proj_out", batch, c, c, 1, hw, bias=True)
        g.pointwise("residual", "add", tokens * c, inputs=2)


def _upsample(g: Graph, name: str, batch: int, c: int, hw: int) -> int:
    """Nearest-neighbour 2x (reads the map once, writes four times its size) and a 3x3 convolution."""
    out = 2 * hw
    with g.scope(name):
        g.pointwise("interpolate", "copy", batch * c * out * out, inputs=0,
                    extra_read_bytes=batch * c * hw * hw * g.esize)
        g.conv2d("conv", batch, c, c, 3, out, padding=1, bias=True)
    return out


def build_unet(g: Graph, u: UNetConfig, batch: int) -> int:
    """One denoising step of the UNet over ``batch`` latents; returns the latent side in pixels."""
    hw = u.sample_size_px
    c0, temb, groups = u.block_out_channels[0], u.time_embed_dim, u.norm_num_groups
    with g.scope("time_proj", count=_SINUSOID_KERNELS, group="embedding"):
        g.pointwise("kernel", "exp", batch * c0)
    with g.scope("time_embedding", group="embedding"):
        g.linear("linear_1", batch, c0, temb, tp_split="none")
        g.pointwise("silu", "silu", batch * temb)
        g.linear("linear_2", batch, temb, temb, tp_split="none")
    if u.addition_embed_dim:  # SDXL: pooled text embedding + sinusoids of the 6 size/crop numbers -> MLP -> + temb
        with g.scope("add_time_proj", count=_SINUSOID_KERNELS, group="embedding"):
            g.pointwise("kernel", "exp", batch * _TIME_IDS * u.addition_time_embed_dim)
        with g.scope("add_embedding", group="embedding"):
            g.copy("cat_text_embeds", batch * u.addition_embed_dim)
            g.linear("linear_1", batch, u.addition_embed_dim, temb, tp_split="none")
            g.pointwise("silu", "silu", batch * temb)
            g.linear("linear_2", batch, temb, temb, tp_split="none")
            g.pointwise("add", "add", batch * temb, inputs=2)
    g.conv2d("conv_in", batch, u.in_channels, c0, 3, hw, padding=1, bias=True)
    skips = [c0]
    cin = c0
    levels = len(u.block_out_channels)
    depth = u.layers_per_level
    for i, (c, cross, heads) in enumerate(zip(u.block_out_channels, u.cross_attention_levels, u.num_heads,
                                              strict=True)):
        with g.scope(f"down{i}", group=f"down{i}"):
            for j in range(u.layers_per_block):
                _resnet(g, f"resnet{j}", batch, cin, c, hw, groups, temb)
                if cross:
                    _transformer(g, f"attn{j}", batch, c, hw, u, heads, depth[i])
                cin = c
                skips.append(c)
            if i < levels - 1:
                g.conv2d("downsample", batch, c, c, 3, hw, stride=2, padding=1, bias=True)
                hw //= 2
                skips.append(c)
    with g.scope("mid", group="mid"):
        _resnet(g, "resnet0", batch, cin, cin, hw, groups, temb)
        _transformer(g, "attn", batch, cin, hw, u, u.num_heads[-1], depth[-1])
        _resnet(g, "resnet1", batch, cin, cin, hw, groups, temb)
    up = zip(reversed(u.block_out_channels), reversed(u.cross_attention_levels), reversed(u.num_heads),
             reversed(depth), strict=True)
    for i, (c, cross, heads, d) in enumerate(up):
        with g.scope(f"up{i}", group=f"up{i}"):
            for j in range(u.layers_per_block + 1):
                skip = skips.pop()
                g.copy(f"cat{j}", batch * (cin + skip) * hw * hw)  # torch.cat of the output and the skip
                _resnet(g, f"resnet{j}", batch, cin + skip, c, hw, groups, temb)
                if cross:
                    _transformer(g, f"attn{j}", batch, c, hw, u, heads, d)
                cin = c
            if i < levels - 1:
                hw = _upsample(g, "upsample", batch, c, hw)
    with g.scope("out", group="out"):
        _group_norm(g, "conv_norm_out", batch, cin, hw, groups, silu=True)
        g.conv2d("conv_out", batch, cin, u.out_channels, 3, hw, padding=1, bias=True)
    return u.sample_size_px


def build_vae_decoder(g: Graph, v: VAEDecoderConfig, batch: int) -> int:
    """The VAE decoder over ``batch`` latents; returns the image side in pixels."""
    hw = v.latent_size_px
    groups = v.norm_num_groups
    top = v.block_out_channels[-1]
    g.conv2d("post_quant_conv", batch, v.latent_channels, v.latent_channels, 1, hw, bias=True)
    g.conv2d("conv_in", batch, v.latent_channels, top, 3, hw, padding=1, bias=True)
    with g.scope("mid", group="mid"):
        _resnet(g, "resnet0", batch, top, top, hw, groups, 0)
        _group_norm(g, "attn.group_norm", batch, top, hw, groups, silu=False)
        _attention(g, "attn", batch, hw * hw, hw * hw, top, 1, bias=True)
        g.pointwise("attn.residual", "add", batch * top * hw * hw, inputs=2)
        _resnet(g, "resnet1", batch, top, top, hw, groups, 0)
    cin = top
    levels = len(v.block_out_channels)
    run_dtype = g.dtype
    if v.upcast_up_blocks and g.dtype.bytes < 4:
        # diffusers' upcast_vae: FP32 weights from the up blocks on, the latents cast to them; PyTorch runs FP32
        # convolutions on TF32 tensor cores (torch.backends.cudnn.allow_tf32 defaults to True)
        g.copy("upcast", batch * top * hw * hw, out_dtype=DType.FP32)
        g.dtype = DType.TF32
    for i, c in enumerate(reversed(v.block_out_channels)):
        with g.scope(f"up{i}", group=f"up{i}"):
            for j in range(v.layers_per_block + 1):
                _resnet(g, f"resnet{j}", batch, cin, c, hw, groups, 0)
                cin = c
            if i < levels - 1:
                hw = _upsample(g, "upsample", batch, c, hw)
    with g.scope("out", group="out"):
        _group_norm(g, "conv_norm_out", batch, cin, hw, groups, silu=True)
        g.conv2d("conv_out", batch, cin, v.out_channels, 3, hw, padding=1, bias=True)
    g.dtype = run_dtype
    return v.sample_size_px
