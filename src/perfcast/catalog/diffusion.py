"""Latent-diffusion networks: the denoising UNet and the VAE decoder of Stable Diffusion (1.x, 2.x, XL).

Both are read from diffusers ``config.json`` files (``UNet2DConditionModel`` and
``AutoencoderKL``); the catalog copies add ``model_type`` (``unet_2d_condition``,
``autoencoder_kl``) and ``architectures`` so that they load like every other model.
The UNet may have several transformer blocks per level (``transformer_layers_per_block``,
SDXL), linear ``proj_in``/``proj_out`` (``use_linear_projection``, SD 2.x and XL) and
SDXL's added text-and-time embedding (``addition_embed_type: text_time``); any other
variant (Kandinsky's image embeddings, per-block layer lists, other block types) is
refused naming the field.
:func:`normalize_unet` and :func:`normalize_vae` map them onto
:class:`~perfcast.catalog.models.ModelConfig` fields: the architecture goes to
``unet`` / ``vae`` and the transformer fields hold stand-ins (see each function).
:func:`unet_params` and :func:`vae_decoder_params` count parameters the way
``sum(p.numel() for p in model.parameters())`` does in diffusers (the VAE: its
decoder and ``post_quant_conv`` only, the part text-to-image runs).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from perfcast.errors import UnsupportedError

__all__ = ["UNetConfig", "VAEDecoderConfig", "normalize_unet", "normalize_vae", "unet_params", "vae_decoder_params"]

_MAX = 2**31


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class UNetConfig(_Frozen):
    """A diffusers ``UNet2DConditionModel`` (Stable Diffusion 1.x / 2.x / XL).

    Down path: ``conv_in``, then per level ``layers_per_block`` ResNet blocks (each followed
    by a transformer block on a cross-attention level) and a stride-2 convolution on every
    level but the last. Middle: ResNet, transformer, ResNet at the last width. Up path:
    per level (widths reversed) ``layers_per_block + 1`` ResNet blocks, each over the
    concatenation of the previous output and a skip connection of the down path, a
    transformer block after each on a cross-attention level, and a nearest-neighbour 2x
    upsample + 3x3 convolution on every level but the last. Out: GroupNorm, SiLU, 3x3
    convolution. A ResNet block is GroupNorm, SiLU, 3x3 conv, + a projection of the time
    embedding, GroupNorm, SiLU, 3x3 conv, + the input (through a 1x1 conv when the width
    changes). A transformer block (diffusers ``Transformer2DModel``) is GroupNorm, ``proj_in``
    (a 1x1 conv, or a linear layer with ``linear_projection``), ``transformer_layers[level]``
    times [LayerNorm + self-attention, LayerNorm + cross-attention over the text tokens,
    LayerNorm + GEGLU feed-forward (4x)], ``proj_out``, + the input; the middle one has the last
    level's count (diffusers' ``transformer_layers_per_block[-1]``), and the up path reads the
    counts reversed. SDXL adds ``addition_embed_dim`` inputs (the pooled text embedding and the
    sinusoids of six size/crop numbers, ``addition_time_embed_dim`` each) through a two-layer MLP
    onto the time embedding.
    """

    in_channels: int = Field(gt=0, le=_MAX, description="latent channels in")
    out_channels: int = Field(gt=0, le=_MAX, description="latent channels out (the predicted noise)")
    block_out_channels: tuple[int, ...] = Field(min_length=1, description="width of each level")
    cross_attention_levels: tuple[bool, ...] = Field(min_length=1, description="down levels with transformers")
    layers_per_block: int = Field(gt=0, le=64)
    num_heads: tuple[int, ...] = Field(min_length=1, description="attention heads per level (SD 1.x: 8 everywhere)")
    transformer_layers: tuple[int, ...] = Field(default=(), description="transformer blocks per attention "
                                                "(per level; empty: one everywhere)")
    linear_projection: bool = Field(default=False, description="proj_in/proj_out are linear layers, not 1x1 convs")
    addition_embed_dim: int = Field(default=0, ge=0, le=_MAX, description="inputs of SDXL's added embedding MLP "
                                    "(0: none)")
    addition_time_embed_dim: int = Field(default=0, ge=0, le=_MAX, description="sinusoid width per size/crop "
                                         "number of the added embedding")
    cross_attention_dim: int = Field(gt=0, le=_MAX, description="width of the text-encoder tokens")
    text_tokens: int = Field(default=77, gt=0, le=_MAX, description="text tokens attended to (CLIP: 77)")
    norm_num_groups: int = Field(default=32, gt=0)
    sample_size_px: int = Field(gt=0, le=_MAX, description="side of the square latent (64 for 512 px images)")
    time_embed_dim: int = Field(gt=0, le=_MAX, description="time-embedding width (4x the first level)")

    @model_validator(mode="after")
    def _check(self) -> UNetConfig:
        n = len(self.block_out_channels)
        if len(self.cross_attention_levels) != n or len(self.num_heads) != n:
            raise ValueError(f"down_block_types and attention heads must give one entry per level ({n})")
        if self.transformer_layers and len(self.transformer_layers) != n:
            raise ValueError(f"transformer_layers_per_block must give one entry per level ({n})")
        if any(t <= 0 or t > 64 for t in self.transformer_layers):
            raise ValueError("transformer_layers_per_block must be between 1 and 64")
        if any(c % self.norm_num_groups for c in self.block_out_channels):
            raise ValueError(f"block_out_channels must be multiples of norm_num_groups={self.norm_num_groups}")
        return self

    @property
    def layers_per_level(self) -> tuple[int, ...]:
        """Transformer blocks per attention on each level (the middle block has the last level's)."""
        return self.transformer_layers or (1,) * len(self.block_out_channels)


class VAEDecoderConfig(_Frozen):
    """The decoder of a diffusers ``AutoencoderKL`` (what turns SD latents into pixels).

    ``post_quant_conv`` (1x1), ``conv_in`` (3x3, latent -> last width), a middle of ResNet,
    single-head self-attention over every latent pixel, ResNet; then per level (widths
    reversed) ``layers_per_block + 1`` ResNet blocks (no time embedding) and a 2x upsample +
    3x3 conv on every level but the last; GroupNorm, SiLU, ``conv_out`` (3x3, to RGB).
    ``upcast_up_blocks``: diffusers' SDXL pipelines decode a ``force_upcast`` VAE given in FP16 with
    ``upcast_vae()``, which keeps ``post_quant_conv``, ``conv_in`` and the middle block in FP16 and
    runs the rest in FP32.
    """

    latent_channels: int = Field(gt=0, le=_MAX)
    out_channels: int = Field(gt=0, le=_MAX, description="image channels (3)")
    block_out_channels: tuple[int, ...] = Field(min_length=1)
    layers_per_block: int = Field(gt=0, le=64)
    norm_num_groups: int = Field(default=32, gt=0)
    sample_size_px: int = Field(gt=0, le=_MAX, description="side of the square image")
    upcast_up_blocks: bool = Field(default=False, description="the up blocks and the output run in FP32 whatever "
                                   "the run's dtype (set by a pipeline that upcasts, not by the config.json)")

    @property
    def latent_size_px(self) -> int:
        """Side of the latent the decoder starts from (each upsampling level doubles it)."""
        return self.sample_size_px // 2 ** (len(self.block_out_channels) - 1)


def _per_level(key: str, value: Any, levels: int) -> tuple[int, ...]:
    if isinstance(value, list):
        if any(isinstance(v, list) for v in value):
            raise UnsupportedError(f"unet_2d_condition with per-block {key} lists is not supported; supported: one "
                                   "count per level")
        return tuple(int(v) for v in value)
    return (int(value),) * levels


def _heads(raw: dict[str, Any], levels: int) -> tuple[int, ...]:
    # diffusers' naming quirk: UNet2DConditionModel reads ``attention_head_dim`` as the number of heads
    # (``num_attention_heads = num_attention_heads or attention_head_dim``): SD 1.x's 8 is 8 heads of 40, 80, 160
    # channels, SD 2.x's [5, 10, 20, 20] and SDXL's [5, 10, 20] are that many heads of 64 channels each
    key = "num_attention_heads" if raw.get("num_attention_heads") else "attention_head_dim"
    return _per_level(key, raw.get(key, 8), levels)


# config fields that change the network, and the values perfcast builds (diffusers' defaults, SD 1.x/2.x/XL)
_PLAIN_UNET = {
    "class_embed_type": None, "encoder_hid_dim_type": None, "encoder_hid_dim": None, "time_cond_proj_dim": None,
    "num_class_embeds": None, "dual_cross_attention": False, "only_cross_attention": False,
    "resnet_time_scale_shift": "default", "conv_in_kernel": 3, "conv_out_kernel": 3,
    "mid_block_type": "UNetMidBlock2DCrossAttn", "time_embedding_type": "positional", "time_embedding_dim": None,
    "reverse_transformer_layers_per_block": None, "attention_type": "default", "class_embeddings_concat": False,
    "mid_block_only_cross_attention": None, "cross_attention_norm": None, "timestep_post_act": None,
    "time_embedding_act_fn": None, "resnet_skip_time_act": False, "resnet_out_scale_factor": 1.0,
}
_BLOCKS = {"CrossAttnDownBlock2D", "DownBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"}


def _check_plain(raw: dict[str, Any]) -> None:
    """Refuse a UNet variant perfcast does not build, naming the field."""
    for key, plain in _PLAIN_UNET.items():
        value = raw.get(key, plain)
        if value != plain and not (plain is False and value is None):
            raise UnsupportedError(f"unet_2d_condition with {key}={value!r} is not supported; supported: {plain!r}")
    for t in (*raw["down_block_types"], *raw["up_block_types"]):
        if t not in _BLOCKS:
            raise UnsupportedError(f"unet_2d_condition with block type {t!r} is not supported; supported: "
                                   f"{', '.join(sorted(_BLOCKS))}")
    added = raw.get("addition_embed_type")
    if added not in (None, "text_time"):
        raise UnsupportedError(f"unet_2d_condition with addition_embed_type={added!r} is not supported; supported: "
                               "none, text_time (SDXL)")


def normalize_unet(raw: dict[str, Any]) -> dict[str, Any]:
    """ModelConfig fields of a ``UNet2DConditionModel`` config.

    Stand-ins: ``num_layers`` = ResNet blocks, ``hidden_size`` = the widest level, its heads and head width,
    ``intermediate_size`` = 4x that (the GEGLU width), ``vocab_size`` = the output channels, ``max_positions``
    = the latent side in pixels, no position encoding.
    """
    chans = tuple(int(c) for c in raw["block_out_channels"])
    n = len(chans)
    cross = tuple("CrossAttn" in str(t) for t in raw["down_block_types"])
    up_cross = tuple("CrossAttn" in str(t) for t in raw["up_block_types"])
    if up_cross != tuple(reversed(cross)):
        raise ValueError("up_block_types must mirror down_block_types (cross-attention on the same levels)")
    _check_plain(raw)
    heads = _heads(raw, n)
    layers = int(raw.get("layers_per_block", 2))
    added = raw.get("addition_embed_type") == "text_time"
    unet = UNetConfig(
        in_channels=int(raw.get("in_channels", 4)), out_channels=int(raw.get("out_channels", 4)),
        block_out_channels=chans, cross_attention_levels=cross, layers_per_block=layers, num_heads=heads,
        cross_attention_dim=int(raw.get("cross_attention_dim", 768)),
        text_tokens=int(raw.get("text_tokens", 77)), norm_num_groups=int(raw.get("norm_num_groups", 32)),
        sample_size_px=int(raw.get("sample_size", 64)), time_embed_dim=4 * chans[0],
        transformer_layers=_per_level("transformer_layers_per_block", raw.get("transformer_layers_per_block", 1), n),
        linear_projection=bool(raw.get("use_linear_projection", False)),
        addition_embed_dim=int(raw.get("projection_class_embeddings_input_dim") or 0) if added else 0,
        addition_time_embed_dim=int(raw.get("addition_time_embed_dim") or 0) if added else 0)
    widest = max(chans)
    h = heads[chans.index(widest)]
    return {
        "model_type": "unet_2d_condition", "kind": "diffusion",
        "num_layers": n * layers + 1 + n * (layers + 1) + 1,  # down, mid (2), up ResNet blocks
        "hidden_size": widest, "num_heads": h, "num_kv_heads": h, "head_dim": widest // h,
        "intermediate_size": 4 * widest, "vocab_size": unet.out_channels, "max_positions": unet.sample_size_px,
        "norm": "groupnorm", "activation": str(raw.get("act_fn", "silu")), "position": "none",
        "tie_word_embeddings": False, "final_norm": True, "unet": unet.model_dump(),
    }


def normalize_vae(raw: dict[str, Any]) -> dict[str, Any]:
    """ModelConfig fields of an ``AutoencoderKL`` config (its decoder); stand-ins as in :func:`normalize_unet`
    (``max_positions`` = the image side)."""
    chans = tuple(int(c) for c in raw["block_out_channels"])
    vae = VAEDecoderConfig(latent_channels=int(raw.get("latent_channels", 4)),
                           out_channels=int(raw.get("out_channels", 3)), block_out_channels=chans,
                           layers_per_block=int(raw.get("layers_per_block", 2)),
                           norm_num_groups=int(raw.get("norm_num_groups", 32)),
                           sample_size_px=int(raw.get("sample_size", 512)))
    widest = max(chans)
    return {
        "model_type": "autoencoder_kl", "kind": "diffusion",
        "num_layers": 2 + len(chans) * (vae.layers_per_block + 1), "hidden_size": widest, "num_heads": 1,
        "num_kv_heads": 1, "head_dim": widest, "intermediate_size": widest, "vocab_size": vae.out_channels,
        "max_positions": vae.sample_size_px, "norm": "groupnorm", "activation": str(raw.get("act_fn", "silu")),
        "position": "none", "tie_word_embeddings": False, "final_norm": True, "vae": vae.model_dump(),
    }


# -- parameter counts --------------------------------------------------------------------------------------------


def _conv(cin: int, cout: int, k: int) -> int:
    return cin * cout * k * k + cout  # every diffusers convolution has a bias


def _resnet(cin: int, cout: int, temb: int) -> int:
    p = 2 * cin + _conv(cin, cout, 3) + 2 * cout + _conv(cout, cout, 3)  # two GroupNorms, two convs
    p += temb * cout + cout if temb else 0  # time_emb_proj
    return p + (_conv(cin, cout, 1) if cin != cout else 0)


def _transformer(c: int, ctx: int, layers: int) -> int:
    # GroupNorm, proj_in, proj_out (1x1 convs or linear layers: the same count), then each block
    return 2 * c + _conv(c, c, 1) * 2 + layers * _block(c, ctx)


def _block(c: int, ctx: int) -> int:
    p = 3 * 2 * c  # three LayerNorms
    p += 3 * c * c + c * c + c  # self-attention q, k, v (no bias), out (bias)
    p += c * c + 2 * ctx * c + c * c + c  # cross-attention q from the image, k, v from the text, out
    p += c * 8 * c + 8 * c + 4 * c * c + c  # GEGLU proj (c -> 2 x 4c) and the output linear
    return p


def unet_params(u: UNetConfig) -> int:
    """Parameters of the UNet (time embedding, down, middle, up, out)."""
    c0, temb = u.block_out_channels[0], u.time_embed_dim
    total = c0 * temb + temb + temb * temb + temb  # time_embedding linear_1, linear_2
    if u.addition_embed_dim:
        total += u.addition_embed_dim * temb + temb + temb * temb + temb  # add_embedding linear_1, linear_2
    total += _conv(u.in_channels, c0, 3)
    depth = u.layers_per_level
    skips = [c0]
    cin = c0
    n = len(u.block_out_channels)
    for i, (c, cross) in enumerate(zip(u.block_out_channels, u.cross_attention_levels, strict=True)):
        for _ in range(u.layers_per_block):
            total += _resnet(cin, c, temb) + (_transformer(c, u.cross_attention_dim, depth[i]) if cross else 0)
            cin = c
            skips.append(c)
        if i < n - 1:
            total += _conv(c, c, 3)
            skips.append(c)
    total += 2 * _resnet(cin, cin, temb) + _transformer(cin, u.cross_attention_dim, depth[-1])
    for i, (c, cross, d) in enumerate(zip(reversed(u.block_out_channels), reversed(u.cross_attention_levels),
                                          reversed(depth), strict=True)):
        for _ in range(u.layers_per_block + 1):
            total += _resnet(cin + skips.pop(), c, temb) + (_transformer(c, u.cross_attention_dim, d) if cross else 0)
            cin = c
        if i < n - 1:
            total += _conv(c, c, 3)
    return total + 2 * cin + _conv(cin, u.out_channels, 3)  # conv_norm_out, conv_out


def vae_decoder_params(v: VAEDecoderConfig) -> int:
    """Parameters of ``post_quant_conv`` and the decoder."""
    top = v.block_out_channels[-1]
    total = _conv(v.latent_channels, v.latent_channels, 1) + _conv(v.latent_channels, top, 3)
    total += 2 * _resnet(top, top, 0) + 2 * top + 4 * (top * top + top)  # mid: GroupNorm + q, k, v, out
    cin = top
    n = len(v.block_out_channels)
    for i, c in enumerate(reversed(v.block_out_channels)):
        for _ in range(v.layers_per_block + 1):
            total += _resnet(cin, c, 0)
            cin = c
        if i < n - 1:
            total += _conv(c, c, 3)
    return total + 2 * cin + _conv(cin, v.out_channels, 3)
