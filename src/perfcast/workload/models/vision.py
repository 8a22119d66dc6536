"""The vision tower of a multimodal model and its projector: LLaVA's CLIP ViT-L/14-336 (LLaVA-NeXT's anyres tiles
too), Llama-4's ViT, the Qwen2-VL / Qwen2.5-VL ViT with its patch merger, Pixtral (Mistral 3).

A pre-LN ViT as HF ``CLIPVisionModel`` runs it for ``images`` images (tiles): a bias-free patch embedding
(a GEMM over the image's ``patches x (channels * patch^2)`` pixels), a class token and learned positions
(one add), a LayerNorm, ``num_layers`` blocks of biased multi-head attention (not causal: every patch sees
every patch) and a biased MLP, then the projector's chain of linear layers over the image tokens the text
model receives. Serving engines run it with fused attention, which is what ``attention`` builds.

The rotary towers (:class:`~perfcast.catalog.architecture.VisionConfig` says which parts a tower has): the patch
embedding reads ``temporal_patch_size`` frames (Qwen2-VL's Conv3d), 2D RoPE rotates q and k in every block
(elementwise), the MLP may be gated, Qwen2.5-VL attends within windows of ``window_patches x window_patches``
patches except in its full-attention blocks (a window at the image's right or bottom edge holds fewer patches
when the grid is not a multiple of the window), and the patch merger (a norm, ``merge_size**2`` patches
concatenated per token, Pixtral's merge linear) comes before the projector.
"""

from __future__ import annotations

from collections import Counter

from perfcast.catalog.models import VisionConfig
from perfcast.workload.graph import Graph

__all__ = ["build_vision_encoder", "window_sizes"]


def window_sizes(grid: int, window: int) -> Counter[int]:
    """Patches per attention window (window size -> number of windows) of a ``grid x grid`` patch image cut into
    ``window x window`` windows from the top left (edge windows smaller): Qwen2.5-VL's ``get_window_index``."""
    full, rest = divmod(grid, window)
    sides = [window] * full + ([rest] if rest else [])
    return Counter(a * b for a in sides for b in sides)


def build_vision_encoder(g: Graph, vis: VisionConfig, images: int) -> None:
    """Append the vision tower's ops for ``images`` images to ``g`` (each of ``vis.tiles_per_image`` tiles)."""
    tiles = images * vis.tiles_per_image
    patches = tiles * vis.num_patches
    seq = vis.num_patches + (1 if vis.class_token else 0)
    tokens = tiles * seq
    h = vis.hidden_size
    with g.scope("vision"):
        g.linear("patch_embed", patches, vis.patch_in_features, h, bias=False, tp_split="none")
        if vis.position == "learned":
            g.pointwise("add_positions", "add", tokens * h, inputs=2, tp_split="none")
        if vis.stack_norms:
            g.norm("pre_layernorm", vis.norm, tokens, h)
        windowed = vis.window_patches is not None
        full_blocks = len(vis.full_attention_blocks) if windowed else vis.num_layers
        if full_blocks:
            with g.scope("layers", count=full_blocks):
                _block(g, vis, tokens, {seq: tiles})
        if windowed and vis.num_layers > full_blocks:
            assert vis.window_patches is not None
            grid = vis.image_size_px // vis.patch_size_px
            windows = {size: count * tiles for size, count in window_sizes(grid, vis.window_patches).items()}
            with g.scope("window_layers", count=vis.num_layers - full_blocks):
                _block(g, vis, tokens, windows)
        _projector(g, vis, images, patches)


def _block(g: Graph, vis: VisionConfig, tokens: int, spans: dict[int, int]) -> None:
    """One ViT block; attention over ``spans`` (tokens per attention span -> spans of that size)."""
    h, nh, inner = vis.hidden_size, vis.num_heads, vis.intermediate_size
    rotary = vis.position == "rotary"
    g.norm("layer_norm1", vis.norm, tokens, h)
    g.linear("qkv_proj", tokens, h, 3 * h, bias=vis.attention_bias)
    if rotary:
        g.pointwise("rotary", "rope", 2 * tokens * h, tp_split="heads")  # q and k
    for i, (span, count) in enumerate(sorted(spans.items(), reverse=True)):
        g.attention("attention" if i == 0 else f"attention_{span}", count, nh, nh, span, span, h // nh,
                    causal=False)
    g.linear("out_proj", tokens, h, h, bias=vis.attention_bias, tp_split="row")
    g.pointwise("residual1", "add", tokens * h, inputs=2, tp_split="none")
    g.norm("layer_norm2", vis.norm, tokens, h)
    if vis.gated_mlp:
        g.linear("gate_proj", tokens, h, inner, bias=vis.mlp_bias)
        g.linear("up_proj", tokens, h, inner, bias=vis.mlp_bias)
        g.pointwise("act", "silu" if vis.activation in ("silu", "swish") else "gelu", tokens * inner,
                    tp_split="column")
        g.pointwise("gate_mul", "mul", tokens * inner, inputs=2, tp_split="column")
        g.linear("down_proj", tokens, inner, h, bias=vis.mlp_bias, tp_split="row")
    else:
        g.linear("fc1", tokens, h, inner, bias=vis.mlp_bias)
        g.pointwise("act", "gelu", tokens * inner, tp_split="column")
        g.linear("fc2", tokens, inner, h, bias=vis.mlp_bias, tp_split="row")
    g.pointwise("residual2", "add", tokens * h, inputs=2, tp_split="none")


def _projector(g: Graph, vis: VisionConfig, images: int, patches: int) -> None:
    """The patch merger (a norm, merged tokens, Pixtral's merge linear) and the projector's linear chain."""
    h, m2 = vis.hidden_size, vis.spatial_merge_size**2
    if vis.merge_norm:
        g.norm("merge_norm", vis.norm, patches, h)
    if vis.merge_linear:
        g.linear("merging_layer", patches // m2, h * m2, h, bias=False, tp_split="none")
    dims = vis.projector_dims or (h,)
    out_tokens = images * (vis.projector_tokens_per_image or vis.num_image_tokens)
    for i, (a, b) in enumerate(zip(dims, dims[1:], strict=False)):
        g.linear(f"projector{i}", out_tokens, a, b, bias=vis.projector_bias, tp_split="none")
        if i + 2 < len(dims):
            g.pointwise(f"projector_act{i}", "gelu", out_tokens * b, tp_split="none")
