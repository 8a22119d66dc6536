"""Reference counts from ``transformers`` itself: a catalog config built on PyTorch's meta device.

No weights and no downloads: the config dict is a catalog ``config.json`` (perhaps with fewer layers), turned
into the family's config class with ``AutoConfig.for_model`` and instantiated under ``torch.device("meta")``.
Parameters are ``sum(p.numel())`` of that module; forward FLOPs are what
``torch.utils.flop_counter.FlopCounterMode`` counts on one forward of ``input_ids`` of shape (batch, seq) (a
224 px image batch for an image classifier; for an encoder-decoder the same shape again as ``decoder_input_ids``)
with eager attention: matrix products only
(``mm``/``addmm``/``bmm``/``baddbmm``/``convolution``/SDPA, 2 FLOPs per multiply-add, bias additions not
counted). perfcast's side of the comparison is :func:`perfcast_matmul_flops`.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from perfcast.catalog.models import ModelConfig, from_hf_config
from perfcast.dtypes import parse_dtype
from perfcast.workload.build import WorkloadSpec, build_workload
from perfcast.workload.types import Mode, OpKind

_LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")


def shrink(raw: dict[str, Any], layers: int | None) -> dict[str, Any]:
    """``raw`` with its (text) decoder stack cut to ``layers`` layers, per-layer lists cut alike.

    Widths, heads, vocabulary and every other ratio stay as shipped; only depth changes, so per-layer errors keep
    their size relative to a layer and the embedding / LM-head share grows (the tests state the layers they keep).
    """
    if layers is None:
        return dict(raw)
    out = dict(raw)
    for key in _LAYER_KEYS:
        if key in out:
            out[key] = layers
    if isinstance(out.get("layer_types"), list):
        out["layer_types"] = out["layer_types"][:layers]
    if isinstance(out.get("text_config"), dict):
        out["text_config"] = shrink(out["text_config"], layers)
    return out


@contextlib.contextmanager
def _meta_autocast() -> Iterator[None]:
    """Let ``torch.autocast(device_type="meta")`` (rotary embeddings force fp32 that way) act as on the CPU."""
    original = torch.autocast

    def autocast(device_type: str, *args: Any, **kwargs: Any) -> Any:
        return original("cpu" if device_type == "meta" else device_type, *args, **kwargs)

    torch.autocast = autocast  # type: ignore[misc,assignment]
    try:
        yield
    finally:
        torch.autocast = original  # type: ignore[misc]


# families whose perfcast model is not what AutoModelForCausalLM builds: the class transformers uses for it
_MODEL_CLASSES = {
    "llava": "LlavaForConditionalGeneration",  # text model + CLIP tower + projector
    "llama4": "Llama4ForConditionalGeneration",  # text model + vision tower + projector
    "switch_transformers": "SwitchTransformersForConditionalGeneration",
    "t5": "T5ForConditionalGeneration",  # encoder, decoder, LM head
    "qwen2_vl": "Qwen2VLForConditionalGeneration",  # text model + ViT + patch merger
    "qwen2_5_vl": "Qwen2_5_VLForConditionalGeneration",
    "mistral3": "Mistral3ForConditionalGeneration",  # text model + Pixtral + projector
    "llava_next": "LlavaNextForConditionalGeneration",  # text model + CLIP + projector + image_newline
    "resnet": "ResNetForImageClassification",
}


# model_types transformers has no class for, built with the class their checkpoint's remote code is
_CONFIG_TYPES = {
    "kimi_k2": "deepseek_v3",  # Kimi K2's configuration_deepseek.py / modeling_deepseek.py are DeepSeek-V3's
}


def hf_module(raw: dict[str, Any]) -> torch.nn.Module:
    """The transformers model of ``raw`` on the meta device: a causal LM, the bare encoder for BERT, or the class
    of :data:`_MODEL_CLASSES`; a model_type of :data:`_CONFIG_TYPES` as the family named there."""
    import transformers
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

    fields = {k: v for k, v in raw.items() if k != "model_type"}
    cfg = AutoConfig.for_model(_CONFIG_TYPES.get(raw["model_type"], raw["model_type"]), **fields)
    cfg.pad_token_id = None  # BERT warns about padding by reading input_ids, which a meta tensor cannot do
    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")
        if raw["model_type"] == "bert":  # perfcast counts the encoder without pooler and MLM/NSP heads
            return AutoModel.from_config(cfg, attn_implementation="eager", add_pooling_layer=False)
        if raw["model_type"] in _MODEL_CLASSES:
            return getattr(transformers, _MODEL_CLASSES[raw["model_type"]])._from_config(
                cfg, attn_implementation="eager")
        return AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")


def hf_params(module: torch.nn.Module) -> int:
    """Parameters of ``module``, each shared tensor once (what ``num_parameters()`` reports)."""
    return sum(p.numel() for p in module.parameters())


def hf_forward_flops(module: torch.nn.Module, *, batch: int = 1, seq_len: int = 512) -> int:
    """FlopCounterMode's total for one forward of ``input_ids`` (batch, seq_len) on the meta device."""
    counter = FlopCounterMode(display=False)
    if module.config.model_type == "resnet":  # a (batch, 3, 224, 224) image batch (perfcast's 224 px), no tokens
        inputs = {"pixel_values": torch.zeros((batch, 3, 224, 224), device="meta")}
    else:
        inputs = {"input_ids": torch.zeros((batch, seq_len), dtype=torch.long, device="meta")}
    if getattr(module.config, "is_encoder_decoder", False):  # as many decoder tokens as encoder tokens
        inputs["decoder_input_ids"] = torch.zeros((batch, seq_len), dtype=torch.long, device="meta")
    with _meta_autocast(), counter, torch.no_grad():
        module(**inputs)
    return int(counter.get_total_flops())


# width keys :func:`narrow` divides (top level, DBRX's attn_config / ffn_config); expert counts, top-k, head_dim,
# the RoPE widths, vocabulary and depth stay as shipped
_WIDTH_KEYS = ("hidden_size", "d_model", "intermediate_size", "moe_intermediate_size",
               "shared_expert_intermediate_size", "num_attention_heads", "n_heads", "num_key_value_heads",
               "kv_lora_rank", "q_lora_rank")
_NESTED_WIDTH_KEYS = {"attn_config": ("kv_n_heads",), "ffn_config": ("ffn_hidden_size",)}


def narrow(raw: dict[str, Any], factor: int) -> dict[str, Any]:
    """``raw`` with its widths (hidden size, MLP and expert widths, head counts, MLA ranks) divided by ``factor``
    and its ``quantization_config`` dropped, so an MoE model fits on the CPU: every expert, the routing (experts,
    top-k) and each head's width stay as shipped."""
    out = {k: v for k, v in raw.items() if k != "quantization_config"}
    for key in _WIDTH_KEYS:
        if out.get(key):
            out[key] = max(1, int(out[key]) // factor)
    for sub, keys in _NESTED_WIDTH_KEYS.items():
        if isinstance(out.get(sub), dict):
            out[sub] = {**out[sub], **{k: max(1, int(out[sub][k]) // factor) for k in keys if out[sub].get(k)}}
    return out


def hf_cpu_forward_flops(raw: dict[str, Any], *, batch: int = 1, seq_len: int = 512) -> int:
    """FlopCounterMode's total for one forward of ``raw``'s causal LM on the CPU, every weight and buffer zero.

    MoE routing picks experts by value (``nonzero`` on the router's choice), which a meta tensor cannot do; on
    the CPU it runs. With zero weights every token goes to the same top-k experts, and the expert FLOPs are the
    same as for any routing: each token runs top-k expert MLPs whatever experts they are.
    """
    module = hf_module(raw).to_empty(device="cpu").requires_grad_(False)
    with torch.no_grad():
        for tensor in (*module.parameters(), *module.buffers()):
            tensor.zero_()
    counter = FlopCounterMode(display=False)
    with counter:  # no torch.no_grad(): FlopCounterMode's module hooks want grad mode (no tensor requires grad)
        module(input_ids=torch.zeros((batch, seq_len), dtype=torch.long))
    return int(counter.get_total_flops())


@dataclass(frozen=True)
class PerfcastCounts:
    """perfcast's parameters and forward matmul FLOPs of one config."""

    params: int
    active_params: int
    matmul_flops: float


def perfcast_config(raw: dict[str, Any], model_id: str) -> ModelConfig:
    """perfcast's normalized view of ``raw``."""
    return from_hf_config(raw, model_id=model_id)


def perfcast_matmul_flops(cfg: ModelConfig, *, batch: int = 1, seq_len: int = 512) -> float:
    """Forward matmul FLOPs of perfcast's inference workload (HF eager style and attention).

    GEMM ops count ``2 * batch * m * k * n`` from their dims (a linear op's own ``flops`` adds its bias, which
    FlopCounterMode leaves out); fused attention ops and convolutions count their own FLOPs. Elementwise ops
    (norms, activations, softmax, softcapping, multipliers, pooling) are not matmuls and are left out on both
    sides. Mamba mixers: the depthwise causal conv1d counts (FlopCounterMode sees a convolution), and of
    Mamba-1's selective scan the output contraction ``y = h @ C`` (transformers' slow path runs it as one bmm per
    token); Mamba-2's SSD in transformers' ``torch_forward`` is broadcast multiplies and sums, which
    FlopCounterMode does not count, so none of the SSD scan counts here. Gated DeltaNet (Qwen3-Next): transformers'
    ``torch_chunk_gated_delta_rule`` runs the chunkwise products as matmuls (counted) and the triangular solve as
    a Python loop of broadcast multiplies (not counted), which is the op's ``matmul_flops``.
    """
    spec = WorkloadSpec(mode=Mode.INFERENCE, batch_size=batch, seq_len=seq_len, style="hf", attention="eager")
    total = 0.0
    for op in build_workload(cfg, spec).ops:
        if op.kind is OpKind.GEMM:
            b, m, k, n = op.dims[:4]
            total += 2.0 * b * m * k * n * op.count
        elif op.kind in (OpKind.ATTENTION, OpKind.CONV) or op.op == "causal_conv1d":
            total += op.flops * op.count
        elif op.kind is OpKind.SSM_SCAN and op.get("version") == 1:  # HF's slow scan: y = h @ C, a bmm per token
            total += float(op.get("output_flops", 0.0)) * op.count  # type: ignore[arg-type]
        elif op.kind is OpKind.SSM_SCAN and op.get("version") == "gated_delta":  # the chunked rule's matmuls
            total += float(op.get("matmul_flops", 0.0)) * op.count  # type: ignore[arg-type]
    return total


def perfcast_counts(raw: dict[str, Any], model_id: str, *, batch: int = 1, seq_len: int = 512) -> PerfcastCounts:
    """perfcast's counts for ``raw``."""
    cfg = perfcast_config(raw, model_id)
    return PerfcastCounts(cfg.num_params(), cfg.num_active_params(), perfcast_matmul_flops(cfg, batch=batch,
                                                                                            seq_len=seq_len))



def perfcast_vision_matmul_flops(cfg: ModelConfig, *, images: int = 1) -> float:
    """Matmul FLOPs of perfcast's vision tower, merger and projector (what serving prices per image) over
    ``images`` images of the tower's priced size: its GEMMs (the patch embedding included) and attention."""
    from perfcast.workload.graph import Graph
    from perfcast.workload.models.vision import build_vision_encoder

    assert cfg.vision is not None
    g = Graph(parse_dtype("bf16"))  # matmul FLOPs do not depend on the dtype
    build_vision_encoder(g, cfg.vision, images)
    total = 0.0
    for op in g.ops:
        if op.kind is OpKind.GEMM:
            b, m, k, n = op.dims[:4]
            total += 2.0 * b * m * k * n * op.count
        elif op.kind is OpKind.ATTENTION:
            total += op.flops * op.count
    return total


def _vision_call(module: torch.nn.Module, cfg: ModelConfig, image_px: int, device: str) -> tuple[Any, dict[str, Any]]:
    """The HF call that runs one ``image_px`` square image through the tower, merger and projector of
    ``module`` (pixels on ``device``; grids and image sizes, which the HF code reads as numbers, on the CPU)."""
    vis = cfg.vision
    assert vis is not None
    tile, patch = vis.image_size_px, vis.patch_size_px
    model: Any = module.model
    if cfg.model_type in ("qwen2_vl", "qwen2_5_vl"):  # flattened patches and the (t, h, w) grid
        grid = image_px // patch
        pixels = torch.zeros((grid * grid, vis.patch_in_features), device=device)
        return model.visual, {"hidden_states": pixels, "grid_thw": torch.tensor([[1, grid, grid]])}
    sizes = torch.tensor([[image_px, image_px]])
    if cfg.model_type == "mistral3":
        return model.get_image_features, {"pixel_values": torch.zeros((1, 3, tile, tile), device=device),
                                          "image_sizes": sizes}
    if cfg.model_type == "llava_next":  # the base image and the grid's tiles
        config: Any = module.config
        return model.get_image_features, {
            "pixel_values": torch.zeros((1, vis.tiles_per_image, 3, tile, tile), device=device),
            "image_sizes": sizes, "vision_feature_layer": config.vision_feature_layer,
            "vision_feature_select_strategy": config.vision_feature_select_strategy}
    raise ValueError(f"no vision reference for {cfg.model_type}")


def hf_vision_flops(raw: dict[str, Any], cfg: ModelConfig, image_px: int, *, on_cpu: bool = False) -> int:
    """FlopCounterMode's total for one ``image_px`` square image through the HF tower, merger and projector of
    ``raw``, on the meta device (or, ``on_cpu``, on the CPU with every weight zero, for code a meta tensor cannot
    run)."""
    module = hf_module(raw)
    if on_cpu:
        module = module.to_empty(device="cpu").requires_grad_(False)
        with torch.no_grad():
            for tensor in (*module.parameters(), *module.buffers()):
                tensor.zero_()
    call, inputs = _vision_call(module, cfg, image_px, "cpu" if on_cpu else "meta")
    counter = FlopCounterMode(display=False)
    with _meta_autocast(), counter, torch.no_grad():
        call(**inputs)
    return int(counter.get_total_flops())
