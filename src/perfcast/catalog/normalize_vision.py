"""Read the config of a vision-language family (``qwen2_vl``, ``qwen2_5_vl``, ``mistral3``, ``llava_next``) into
ModelConfig fields: the text model in the top-level fields (read by its own family's normalizer, passed in by
:mod:`perfcast.catalog.normalize`), the vision tower, merger and projector in ``vision``
(:class:`~perfcast.catalog.architecture.VisionConfig`).

Towers are dynamic-resolution: the tokens an image becomes follow its size. perfcast prices one square image of a
stated default size per family (the ``*_IMAGE_PX`` constants below); a config.json may set a top-level
``image_size`` (pixels, a perfcast key, as for ResNets) to price another square size:

* Qwen2-VL / Qwen2.5-VL (Wang et al. 2024, arXiv:2409.12191; Bai et al. 2025, arXiv:2502.13923): 448 x 448 px,
  inside the processor's min_pixels (56 x 56) and max_pixels (28 x 28 x 16384) and a multiple of 28, so it is
  not resized: 32 x 32 patches of 14 px, merged 2 x 2 into 256 image tokens (the chat template's
  <|vision_start|> / <|vision_end|> are text tokens of the prompt). Positions are M-RoPE in the text model
  (``rope_scaling`` type ``mrope``: the rotary FLOPs of RoPE, no length scaling) and 2D RoPE in the tower.
* Mistral 3 (Pixtral tower): 448 x 448 px (below the processor's longest edge of 1540, so not resized): 32 x 32
  patches of 14 px, merged 2 x 2 into 16 rows of 16 tokens, each row ended by an [IMG_BREAK] (the last by
  [IMG_END]): 272 image tokens, 256 of them through the projector.
* LLaVA-NeXT (anyres; Liu et al. 2024, "LLaVA-NeXT: Improved reasoning, OCR, and world knowledge"): 672 x 672 px:
  the best-fitting ``image_grid_pinpoints`` entry is 672 x 672, a 2 x 2 grid of 336 px tiles, plus the image
  resized to 336 px: 5 tiles through CLIP, 5 x 576 features through the projector, then the grid's 48 x 48
  features with one image_newline per row (48 x 49) after the base image's 576: 2928 image tokens
  (:func:`llava_next_image_tokens`, transformers' ``select_best_resolution`` / ``unpad_image``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from perfcast.errors import UnsupportedError

__all__ = ["llava_next_image_tokens", "normalize_llava_next", "normalize_mistral3", "normalize_qwen2_5_vl",
           "normalize_qwen2_vl", "VISION_FAMILIES"]

Raw = dict[str, Any]
Normalizer = Callable[[Raw], Raw]

QWEN_VL_IMAGE_PX = 448  # default priced image side (see the module docstring)
PIXTRAL_IMAGE_PX = 448
LLAVA_NEXT_IMAGE_PX = 672

# the families of this module: their text model's context limit is read by their text normalizer
VISION_FAMILIES = ("qwen2_vl", "qwen2_5_vl", "mistral3", "llava_next")

# transformers 4.57 configuration defaults of the vision configs, for keys a config leaves out
_QWEN2_VL_VISION = {"depth": 32, "embed_dim": 1280, "hidden_size": 3584, "hidden_act": "quick_gelu", "mlp_ratio": 4,
                    "num_heads": 16, "in_channels": 3, "patch_size": 14, "spatial_merge_size": 2,
                    "temporal_patch_size": 2}
_QWEN2_5_VL_VISION = {"depth": 32, "hidden_size": 3584, "hidden_act": "silu", "intermediate_size": 3420,
                      "num_heads": 16, "in_channels": 3, "patch_size": 14, "spatial_merge_size": 2,
                      "temporal_patch_size": 2, "window_size": 112, "out_hidden_size": 3584,
                      "fullatt_block_indexes": [7, 15, 23, 31]}
_PIXTRAL = {"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24, "num_attention_heads": 16,
            "num_channels": 3, "patch_size": 16, "hidden_act": "gelu"}
_MISTRAL3 = {"spatial_merge_size": 2, "multimodal_projector_bias": False, "projector_hidden_act": "gelu",
             "vision_feature_layer": -1}
_CLIP = {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12, "num_attention_heads": 12,
         "num_channels": 3, "image_size": 224, "patch_size": 32, "hidden_act": "quick_gelu"}
_LLAVA_NEXT = {"projector_hidden_act": "gelu", "vision_feature_select_strategy": "default",
               "image_grid_pinpoints": [[336, 672], [672, 336], [672, 672], [1008, 336], [336, 1008]],
               "multimodal_projector_bias": True}


def _filled(raw: Raw | None, defaults: Raw) -> Raw:
    return {**defaults, **{k: v for k, v in (raw or {}).items() if v is not None}}


def _tower(raw: Raw, family: str, tower: str) -> Raw:
    """The vision_config of ``raw``, refused when it is not the ``tower`` ``family`` is modelled with."""
    vis = raw.get("vision_config")
    vis = dict(vis) if isinstance(vis, dict) else {}
    kind = vis.get("model_type", tower)
    if kind != tower:
        raise UnsupportedError(f"{family} with a {kind} vision tower is not supported; supported: {tower}")
    return vis


def _image_px(raw: Raw, default: int, multiple: int) -> int:
    """The priced image side: the config's perfcast ``image_size`` key or the family default, a multiple of
    ``multiple`` pixels (a whole number of merged patches)."""
    side = int(raw.get("image_size") or default)
    if side <= 0 or side % multiple:
        raise ValueError(f"image_size={side} px is not a positive multiple of {multiple} px (whole merged patches)")
    return side


def _text_view(raw: Raw, text_type: str) -> Raw:
    """A flat Qwen-VL config's text keys as a ``text_type`` config (the vision keys and M-RoPE's section left
    out: M-RoPE rotates the same widths as RoPE)."""
    text = raw.get("text_config")
    base = dict(text) if isinstance(text, dict) else {k: v for k, v in raw.items() if k != "vision_config"}
    scaling = base.get("rope_scaling")
    if isinstance(scaling, dict) and (scaling.get("type") or scaling.get("rope_type")) in ("mrope", "default"):
        base.pop("rope_scaling")
    base.pop("image_size", None)
    return {**base, "model_type": text_type}


def _qwen_vl(raw: Raw, text: Normalizer, family: str, vis: Raw) -> tuple[Raw, Raw]:
    out = text(_text_view(raw, "qwen2"))
    out["model_type"] = family
    merge = int(vis["spatial_merge_size"])
    side = _image_px(raw, QWEN_VL_IMAGE_PX, int(vis["patch_size"]) * merge)
    tokens = (side // int(vis["patch_size"]) // merge) ** 2
    common = {
        "num_heads": int(vis["num_heads"]),
        "image_size_px": side,
        "patch_size_px": int(vis["patch_size"]),
        "num_channels": int(vis.get("in_chans") or vis["in_channels"]),
        "activation": str(vis["hidden_act"]),
        "num_image_tokens": tokens,
        "position": "rotary",
        "class_token": False,
        "stack_norms": 0,
        "temporal_patch_size": int(vis["temporal_patch_size"]),
        "spatial_merge_size": merge,
        "merge_norm": True,  # PatchMerger.ln_q
        "projector_bias": True,
    }
    return out, common


def normalize_qwen2_vl(raw: Raw, text: Normalizer) -> Raw:
    """Qwen2-VL: the Qwen2 text model (M-RoPE) and its ViT: Conv3d patch embedding, LayerNorm blocks with a
    quick-GELU MLP, the patch merger (LayerNorm, 2 x 2 patches -> one 4 x 1280 token, MLP to the text width)."""
    vis = _filled(_tower(raw, "qwen2_vl", "qwen2_vl"), _QWEN2_VL_VISION)
    out, common = _qwen_vl(raw, text, "qwen2_vl", vis)
    h = int(vis["embed_dim"])
    merged = h * common["spatial_merge_size"] ** 2
    out["vision"] = {
        **common,
        "model_type": "qwen2_vl",
        "num_layers": int(vis["depth"]),
        "hidden_size": h,
        "intermediate_size": int(h * float(vis["mlp_ratio"])),
        "norm": "layernorm",
        "projector_dims": (merged, merged, int(vis["hidden_size"])),
    }
    return out


def normalize_qwen2_5_vl(raw: Raw, text: Normalizer) -> Raw:
    """Qwen2.5-VL: Qwen2-VL's layout with RMSNorm, a biased gated SiLU MLP and window attention (windows of
    ``window_size`` px) in every block but ``fullatt_block_indexes``."""
    vis = _filled(_tower(raw, "qwen2_5_vl", "qwen2_5_vl"), _QWEN2_5_VL_VISION)
    out, common = _qwen_vl(raw, text, "qwen2_5_vl", vis)
    h = int(vis["hidden_size"])
    merged = h * common["spatial_merge_size"] ** 2
    layers = int(vis["depth"])
    full = tuple(int(i) for i in vis["fullatt_block_indexes"])
    if any(not 0 <= i < layers for i in full):
        raise ValueError(f"fullatt_block_indexes {list(full)} are not block indices in [0, {layers})")
    window_px, patch = int(vis["window_size"]), int(vis["patch_size"])
    if window_px % (patch * common["spatial_merge_size"]):
        raise ValueError(f"window_size={window_px} px is not a whole number of merged patches")
    out["vision"] = {
        **common,
        "model_type": "qwen2_5_vl",
        "num_layers": layers,
        "hidden_size": h,
        "intermediate_size": int(vis["intermediate_size"]),
        "norm": "rmsnorm",
        "gated_mlp": True,
        "window_patches": window_px // patch,
        "full_attention_blocks": tuple(sorted(set(full))),
        "projector_dims": (merged, merged, int(vis["out_hidden_size"])),
    }
    return out


def normalize_mistral3(raw: Raw, text: Normalizer) -> Raw:
    """Mistral 3 (Mistral-Small-3.1): the Mistral text model of ``text_config`` and the Pixtral tower (Conv2d
    patches, 2D RoPE, RMSNorm, bias-free gated SiLU MLP, ln_pre), then the projector: RMSNorm, the patch merger
    (2 x 2 patches -> 4 x 1024 -> 1024, bias-free) and linear_1 / GELU / linear_2 to the text width."""
    raw = _filled(raw, _MISTRAL3)
    text_raw = raw.get("text_config")
    if not isinstance(text_raw, dict) or text_raw.get("model_type", "mistral") != "mistral":
        raise UnsupportedError("mistral3 whose text_config is not a mistral model is not supported")
    if not isinstance(raw["vision_feature_layer"], int):
        raise UnsupportedError("mistral3 with several vision_feature_layer is not supported (one layer's features)")
    out = text({**text_raw, "model_type": "mistral"})
    out["model_type"] = "mistral3"
    vis = _filled(_tower(raw, "mistral3", "pixtral"), _PIXTRAL)
    h, heads = int(vis["hidden_size"]), int(vis["num_attention_heads"])
    if vis.get("head_dim") and int(vis["head_dim"]) * heads != h:
        raise UnsupportedError(f"pixtral with head_dim {vis['head_dim']} x {heads} heads != hidden {h} is not "
                               "supported")
    merge, patch = int(raw["spatial_merge_size"]), int(vis["patch_size"])
    side = _image_px(raw, PIXTRAL_IMAGE_PX, patch * merge)
    rows = side // (patch * merge)
    out["vision"] = {
        "model_type": "pixtral",
        "num_layers": int(vis["num_hidden_layers"]),
        "hidden_size": h,
        "num_heads": heads,
        "intermediate_size": int(vis["intermediate_size"]),
        "image_size_px": side,
        "patch_size_px": patch,
        "num_channels": int(vis["num_channels"]),
        "activation": str(vis["hidden_act"]),
        "num_image_tokens": rows * (rows + 1),  # each row of merged tokens ends in [IMG_BREAK] / [IMG_END]
        "projector_tokens_per_image": rows * rows,
        "norm": "rmsnorm",
        "position": "rotary",
        "class_token": False,
        "stack_norms": 1,  # ln_pre
        "gated_mlp": True,
        "attention_bias": False,
        "mlp_bias": False,
        "spatial_merge_size": merge,
        "merge_norm": True,
        "merge_linear": True,
        "projector_dims": (h, out["hidden_size"], out["hidden_size"]),
        "projector_bias": bool(raw["multimodal_projector_bias"]),
    }
    return out


def _best_resolution(height: int, width: int, pinpoints: list[tuple[int, int]]) -> tuple[int, int]:
    """transformers' ``select_best_resolution``: the (height, width) pinpoint keeping most of the image's
    pixels when it is scaled to fit, then wasting the fewest."""
    best, best_key = pinpoints[0], (-1, 0)
    for ph, pw in pinpoints:
        scale = min(pw / width, ph / height)
        effective = min(int(width * scale) * int(height * scale), width * height)
        key = (effective, -(ph * pw - effective))
        if key > best_key:
            best, best_key = (ph, pw), key
    return best


def llava_next_image_tokens(side_px: int, tile_px: int, patch_px: int,
                            pinpoints: list[tuple[int, int]]) -> tuple[int, int]:
    """(tiles through the tower, image tokens) of a ``side_px`` square image under LLaVA-NeXT's anyres with
    ``spatial_unpad``: the base image plus the best pinpoint's grid of tiles; the grid's features unpadded to the
    image's aspect and one newline per row, after the base image's features."""
    ph, pw = _best_resolution(side_px, side_px, pinpoints)
    grid_h, grid_w = ph // tile_px, pw // tile_px
    per_side = tile_px // patch_px
    rows, cols = grid_h * per_side, grid_w * per_side
    if 1.0 > cols / rows:  # unpad_image: the image is wider (relative to the grid) than tall: trim padded rows
        rows -= 2 * ((rows - int(round(side_px * (cols / side_px), 7))) // 2)
    else:  # trim padded columns (none for a square image on a square grid)
        cols -= 2 * ((cols - int(round(side_px * (rows / side_px), 7))) // 2)
    return grid_h * grid_w + 1, per_side * per_side + rows * (cols + 1)


def normalize_llava_next(raw: Raw, text: Normalizer) -> Raw:
    """LLaVA-NeXT: the text model of ``text_config`` (a Llama by default) and CLIP on anyres tiles (see the
    module docstring), the 2-layer GELU projector and the image_newline vector."""
    raw = _filled(raw, _LLAVA_NEXT)
    text_raw = raw.get("text_config")
    text_raw = dict(text_raw) if isinstance(text_raw, dict) else {}
    if text_raw.get("model_type", "llama") != "llama":
        raise UnsupportedError(f"llava_next with a {text_raw['model_type']} text model is not supported; "
                               "supported: llama")
    if raw["vision_feature_select_strategy"] != "default":
        raise UnsupportedError("llava_next with vision_feature_select_strategy "
                               f"{raw['vision_feature_select_strategy']!r} is not supported; supported: default")
    if "vocab_size" not in text_raw and "vocab_size" in raw:  # as LLaVA: the top-level vocabulary is the text's
        text_raw["vocab_size"] = raw["vocab_size"]
    out = text({**text_raw, "model_type": "llama"})
    out["model_type"] = "llava_next"
    vis = _filled(_tower(raw, "llava_next", "clip_vision_model"), _CLIP)
    tile, patch = int(vis["image_size"]), int(vis["patch_size"])
    side = _image_px(raw, LLAVA_NEXT_IMAGE_PX, patch)
    pinpoints = [(int(h), int(w)) for h, w in raw["image_grid_pinpoints"]]
    if any(h % tile or w % tile for h, w in pinpoints):
        raise ValueError(f"image_grid_pinpoints {pinpoints} are not whole tiles of {tile} px")
    tiles, tokens = llava_next_image_tokens(side, tile, patch, pinpoints)
    h = int(vis["hidden_size"])
    out["vision"] = {
        "model_type": "clip_vision_model",
        "num_layers": int(vis["num_hidden_layers"]),
        "hidden_size": h,
        "num_heads": int(vis["num_attention_heads"]),
        "intermediate_size": int(vis["intermediate_size"]),
        "image_size_px": tile,
        "patch_size_px": patch,
        "num_channels": int(vis["num_channels"]),
        "activation": str(vis["hidden_act"]),
        "num_image_tokens": tokens,
        "tiles_per_image": tiles,
        "projector_tokens_per_image": tiles * (tile // patch) ** 2,  # the CLS token dropped ("default")
        "image_newline": True,
        "projector_dims": (h, out["hidden_size"], out["hidden_size"]),
        "projector_bias": bool(raw["multimodal_projector_bias"]),
    }
    return out
