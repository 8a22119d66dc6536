"""The vision tower of a multimodal model (LLaVA's CLIP ViT-L/14-336, Llama-4's ViT) and its projector.

A pre-LN ViT as HF ``CLIPVisionModel`` runs it for ``images`` images (tiles): a bias-free patch embedding
(a GEMM over the image's ``patches x (channels * patch^2)`` pixels), a class token and learned positions
(one add), a LayerNorm, ``num_layers`` blocks of biased multi-head attention (not causal: every patch sees
every patch) and a biased MLP, then the projector's chain of linear layers over the image tokens the text
model receives. Serving engines run it with fused attention, which is what ``attention`` builds.
"""

from __future__ import annotations

from perfcast.catalog.models import VisionConfig
from perfcast.workload.graph import Graph

__all__ = ["build_vision_encoder"]


def build_vision_encoder(g: Graph, vis: VisionConfig, images: int) -> None:
    """Append the vision tower's ops for ``images`` images (tiles) to ``g``."""
    seq = vis.num_patches + 1  # the class token
    tokens = images * seq
    h, nh = vis.hidden_size, vis.num_heads
    with g.scope("vision"):
        g.linear("patch_embed", images * vis.num_patches, vis.num_channels * vis.patch_size_px**2, h, bias=False,
                 tp_split="none")
        g.pointwise("add_positions", "add", tokens * h, inputs=2, tp_split="none")
        g.norm("pre_layernorm", "layernorm", tokens, h)
        with g.scope("layers", count=vis.num_layers):
            g.norm("layer_norm1", "layernorm", tokens, h)
            g.linear("qkv_proj", tokens, h, 3 * h)
            g.attention("attention", images, nh, nh, seq, seq, h // nh, causal=False)
            g.linear("out_proj", tokens, h, h, tp_split="row")
            g.pointwise("residual1", "add", tokens * h, inputs=2, tp_split="none")
            g.norm("layer_norm2", "layernorm", tokens, h)
            g.linear("fc1", tokens, h, vis.intermediate_size)
            g.pointwise("act", "gelu", tokens * vis.intermediate_size, tp_split="column")
            g.linear("fc2", tokens, vis.intermediate_size, h, tp_split="row")
            g.pointwise("residual2", "add", tokens * h, inputs=2, tp_split="none")
        dims = vis.projector_dims or (h,)
        out_tokens = images * vis.num_image_tokens
        for i, (a, b) in enumerate(zip(dims, dims[1:], strict=False)):
            g.linear(f"projector{i}", out_tokens, a, b, bias=vis.projector_bias, tp_split="none")
            if i + 2 < len(dims):
                g.pointwise(f"projector_act{i}", "gelu", out_tokens * b, tp_split="none")
