"""Latent-diffusion networks: the denoising UNet and the VAE decoder of Stable Diffusion.

Both are read from diffusers ``config.json`` files (``UNet2DConditionModel`` and
``AutoencoderKL``); the catalog copies add ``model_type`` (``unet_2d_condition``,
``autoencoder_kl``) and ``architectures`` so that they load like every other model.
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

__all__ = ["UNetConfig", "VAEDecoderConfig", "normalize_unet", "normalize_vae", "unet_params", "vae_decoder_params"]

_MAX = 2**31


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class UNetConfig(_Frozen):
    """A diffusers ``UNet2DConditionModel`` (Stable Diffusion 1.x / 2.x).

    Down path: ``conv_in``, then per level ``layers_per_block`` ResNet blocks (each followed
    by a transformer block on a cross-attention level) and a stride-2 convolution on every
    level but the last. Middle: ResNet, transformer, ResNet at the last width. Up path:
    per level (widths reversed) ``layers_per_block + 1`` ResNet blocks, each over the
    concatenation of the previous output and a skip connection of the down path, a
    transformer block after each on a cross-attention level, and a nearest-neighbour 2x
    upsample + 3x3 convolution on every level but the last. Out: GroupNorm, SiLU, 3x3
    convolution. A ResNet block is GroupNorm, SiLU, 3x3 conv, + a projection of the time
    embedding, GroupNorm, SiLU, 3x3 conv, + the input (through a 1x1 conv when the width
    changes). A transformer block is GroupNorm, 1x1 ``proj_in``, LayerNorm + self-attention,
    LayerNorm + cross-attention over the text tokens, LayerNorm + GEGLU feed-forward (4x),
    1x1 ``proj_out``, + the input.
    """

    in_channels: int = Field(gt=0, le=_MAX, description="latent channels in")
    out_channels: int = Field(gt=0, le=_MAX, description="latent channels out (the predicted noise)")
    block_out_channels: tuple[int, ...] = Field(min_length=1, description="width of each level")
    cross_attention_levels: tuple[bool, ...] = Field(min_length=1, description="down levels with transformers")
    layers_per_block: int = Field(gt=0, le=64)
    num_heads: tuple[int, ...] = Field(min_length=1, description="attention heads per level (SD 1.x: 8 everywhere)")
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
        if any(c % self.norm_num_groups for c in self.block_out_channels):
            raise ValueError(f"block_out_channels must be multiples of norm_num_groups={self.norm_num_groups}")
        return self


class VAEDecoderConfig(_Frozen):
    """The decoder of a diffusers ``AutoencoderKL`` (what turns SD latents into pixels).

    ``post_quant_conv`` (1x1), ``conv_in`` (3x3, latent -> last width), a middle of ResNet,
    single-head self-attention over every latent pixel, ResNet; then per level (widths
    reversed) ``layers_per_block + 1`` ResNet blocks (no time embedding) and a 2x upsample +
    3x3 conv on every level but the last; GroupNorm, SiLU, ``conv_out`` (3x3, to RGB).
    """

    latent_channels: int = Field(gt=0, le=_MAX)
    out_channels: int = Field(gt=0, le=_MAX, description="image channels (3)")
    block_out_channels: tuple[int, ...] = Field(min_length=1)
    layers_per_block: int = Field(gt=0, le=64)
    norm_num_groups: int = Field(default=32, gt=0)
    sample_size_px: int = Field(gt=0, le=_MAX, description="side of the square image")

    @property
    def latent_size_px(self) -> int:
        """Side of the latent the decoder starts from (each upsampling level doubles it)."""
        return self.sample_size_px // 2 ** (len(self.block_out_channels) - 1)


def _heads(raw: dict[str, Any], levels: int) -> tuple[int, ...]:
    # diffusers quirk: SD 1.x's ``attention_head_dim`` (8) is really the number of heads
    # (``num_attention_heads`` defaults to it); SD 2.x gives per-level head widths instead
    value = raw.get("num_attention_heads") or raw.get("attention_head_dim", 8)
    if isinstance(value, list):
        if raw.get("num_attention_heads") is None and len(value) == levels and any(v > 16 for v in value):
            chans = raw["block_out_channels"]
            return tuple(int(c) // int(v) for c, v in zip(chans, value, strict=True))
        return tuple(int(v) for v in value)
    return (int(value),) * levels


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
    heads = _heads(raw, n)
    layers = int(raw.get("layers_per_block", 2))
    unet = UNetConfig(
        in_channels=int(raw.get("in_channels", 4)), out_channels=int(raw.get("out_channels", 4)),
        block_out_channels=chans, cross_attention_levels=cross, layers_per_block=layers, num_heads=heads,
        cross_attention_dim=int(raw.get("cross_attention_dim", 768)),
        text_tokens=int(raw.get("text_tokens", 77)), norm_num_groups=int(raw.get("norm_num_groups", 32)),
        sample_size_px=int(raw.get("sample_size", 64)), time_embed_dim=4 * chans[0])
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


def _transformer(c: int, ctx: int) -> int:
    p = 2 * c + _conv(c, c, 1) * 2  # GroupNorm, proj_in, proj_out (1x1 convs)
    p += 3 * 2 * c  # three LayerNorms
    p += 3 * c * c + c * c + c  # self-attention q, k, v (no bias), out (bias)
    p += c * c + 2 * ctx * c + c * c + c  # cross-attention q from the image, k, v from the text, out
    p += c * 8 * c + 8 * c + 4 * c * c + c  # GEGLU proj (c -> 2 x 4c) and the output linear
    return p


def unet_params(u: UNetConfig) -> int:
    """Parameters of the UNet (time embedding, down, middle, up, out)."""
    c0, temb = u.block_out_channels[0], u.time_embed_dim
    total = c0 * temb + temb + temb * temb + temb  # time_embedding linear_1, linear_2
    total += _conv(u.in_channels, c0, 3)
    skips = [c0]
    cin = c0
    n = len(u.block_out_channels)
    for i, (c, cross) in enumerate(zip(u.block_out_channels, u.cross_attention_levels, strict=True)):
        for _ in range(u.layers_per_block):
            total += _resnet(cin, c, temb) + (_transformer(c, u.cross_attention_dim) if cross else 0)
            cin = c
            skips.append(c)
        if i < n - 1:
            total += _conv(c, c, 3)
            skips.append(c)
    total += 2 * _resnet(cin, cin, temb) + _transformer(cin, u.cross_attention_dim)
    for i, (c, cross) in enumerate(zip(reversed(u.block_out_channels), reversed(u.cross_attention_levels),
                                       strict=True)):
        for _ in range(u.layers_per_block + 1):
            total += _resnet(cin + skips.pop(), c, temb) + (_transformer(c, u.cross_attention_dim) if cross else 0)
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
