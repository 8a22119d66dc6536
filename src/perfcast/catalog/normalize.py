"""Read a Hugging Face config dict into the plain fields of :class:`ModelConfig`.

HF families spell the same quantity differently (``n_embd``/``hidden_size``/
``d_model``); this module maps each family's spelling and defaults (the
defaults of the ``transformers`` config class when a key is absent) onto one
vocabulary. One function per family keeps each mapping readable.

Nothing is guessed: a ``model_type`` with no function here (``gemma3``,
``rwkv``, ``deepseek_v32``, a missing one) is refused with the supported
list rather than priced as some other decoder; a multimodal config whose vision
tower is not a modelled one is refused naming the tower; a config of a supported
family that carries keys of another architecture (experts in a ``llama``
config, latent attention, a vision tower, cross-attention, Mamba layers...) is
refused naming the key rather than silently dropped. A ``quantization_config``
is read by :mod:`perfcast.catalog.quantization` (honoured or refused).

Context limit (``max_positions``): the position table's rows for learned
positions; for rotary models ``max_position_embeddings`` extended by
``rope_scaling`` (:func:`_context_limit`); ALiBi models their configured length;
relative-position models (T5/Switch) have no limit in their config and get
perfcast's own bound of 2**20 tokens.

Remote-code families (``qwen``, ``internlm``, ``internlm2``, ``deepseek_v3``
before transformers shipped it) follow the ``configuration_*.py`` published
next to their checkpoints. Multimodal configs (``llava``, ``llama4``) are
normalized to their text model, with the vision tower in ``vision``. ResNet
image classifiers (``resnet``) keep their stages in ``resnet`` (see
:func:`_resnet` for what the transformer fields hold).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from perfcast.catalog.config_defaults import load_config_defaults
from perfcast.catalog.diffusion import normalize_unet, normalize_vae
from perfcast.catalog.normalize_encdec import normalize_t5
from perfcast.catalog.normalize_hybrid import normalize_nemotron_h, normalize_qwen3_next
from perfcast.catalog.normalize_ssm import normalize_jamba, normalize_mamba, normalize_mamba2
from perfcast.catalog.normalize_vision import (
    VISION_FAMILIES,
    normalize_llava_next,
    normalize_mistral3,
    normalize_qwen2_5_vl,
    normalize_qwen2_vl,
)
from perfcast.catalog.quantization import parse_quantization_config
from perfcast.catalog.unmodelled import unmodelled_reason
from perfcast.errors import UnsupportedError

__all__ = ["normalize_hf", "supported_model_types"]

_UNBOUNDED_POSITIONS = 1 << 20  # relative / no position limit

Raw = dict[str, Any]


@functools.cache
def _defaults() -> dict[str, Raw]:
    """Hugging Face config-class defaults per model_type, for the keys the normalizers read, applied when a key
    is absent (an explicit null keeps its meaning): ``data/defaults/hf_config_defaults.yaml``, each family with
    its source (transformers 5.x ``configuration_<family>.py``; remote-code families the configuration file
    shipped with the checkpoint)."""
    return {family: dict(entry.defaults) for family, entry in load_config_defaults().items()}


# ResNet checkpoints are evaluated on 224 px center crops (the image processor of microsoft/resnet-*: resize
# the short side to 224 / crop_pct 0.875 = 256, crop 224); ResNetConfig itself has no image size
_RESNET_IMAGE_SIZE_PX = 224


def _with_defaults(raw: Raw, family: str) -> Raw:
    """``raw`` with the family's transformers defaults filled in for absent keys."""
    return {**_defaults().get(family, {}), **raw}


def _first(raw: dict[str, Any], *keys: str, default: Any = None) -> Any:
    for key in keys:
        if raw.get(key) is not None:
            return raw[key]
    if default is None:
        raise KeyError(f"none of {', '.join(keys)}")
    return default


def _common(raw: dict[str, Any]) -> dict[str, Any]:
    hidden = int(_first(raw, "hidden_size", "n_embd", "d_model"))
    heads = int(_first(raw, "num_attention_heads", "n_head", "num_heads"))
    kv_heads = int(_first(raw, "num_key_value_heads", "num_kv_heads", default=heads))
    head_dim = int(_first(raw, "head_dim", default=hidden // heads))
    inter = _first(raw, "intermediate_size", "n_inner", "ffn_dim", "d_ff", "ffn_hidden_size", default=4 * hidden)
    return {
        "model_type": str(raw.get("model_type", "unknown")),
        "kind": "decoder",
        "num_layers": int(_first(raw, "num_hidden_layers", "n_layer", "num_layers")),
        "hidden_size": hidden,
        "num_heads": heads,
        "num_kv_heads": kv_heads,
        "head_dim": head_dim,
        "intermediate_size": int(inter),
        "vocab_size": int(_first(raw, "vocab_size")),
        "max_positions": int(
            _first(raw, "max_position_embeddings", "n_positions", "max_sequence_length", "seq_length",
                   default=_UNBOUNDED_POSITIONS)
        ),
        "tie_word_embeddings": bool(raw.get("tie_word_embeddings", True)),
    }


def _rotary_frac(raw: Raw, default: float = 1.0) -> float:
    """Fraction of each head that gets RoPE: top-level keys, or transformers 5's ``rope_parameters``."""
    params = raw.get("rope_parameters")
    rope: dict[str, Any] = params if isinstance(params, dict) else {}
    for value in (raw.get("partial_rotary_factor"), raw.get("rotary_pct"), rope.get("partial_rotary_factor")):
        if value is not None:
            return float(value)
    return default


def _sliding(raw: Raw) -> int | None:
    """The sliding window in tokens, or None (0 and null mean no window)."""
    window = raw.get("sliding_window")
    return int(window) if window else None


def _gpt2(raw: dict[str, Any]) -> dict[str, Any]:
    raw = _with_defaults(raw, "gpt2")
    out = _common(raw)
    out.update(
        activation=str(raw.get("activation_function", "gelu_new")),
        norm="layernorm",
        position="learned",
    )
    return out


def _opt(raw: dict[str, Any]) -> dict[str, Any]:
    raw = _with_defaults(raw, "opt")
    out = _common(raw)
    bias = bool(raw.get("enable_bias", True))
    proj = raw.get("word_embed_proj_dim")
    out.update(
        activation=str(raw.get("activation_function", "relu")),
        qkv_bias=bias,
        out_bias=bias,
        mlp_bias=bias,
        position="learned",  # OPTLearnedPositionalEmbedding; its 2 offset rows are ignored
        final_norm=bool(raw["do_layer_norm_before"]) and not bool(raw["_remove_final_layer_norm"]),
        embedding_size=int(proj) if proj and int(proj) != out["hidden_size"] else None,
    )
    return out


def _bert(raw: dict[str, Any]) -> dict[str, Any]:
    raw = _with_defaults(raw, "bert")
    kind = raw.get("position_embedding_type") or "absolute"
    if kind != "absolute":  # relative_key(_query) adds distance embeddings and score terms perfcast does not price
        raise UnsupportedError(f"bert with position_embedding_type={kind!r} is not supported; supported: absolute")
    out = _common(raw)
    out.update(
        kind="encoder",
        activation=str(raw.get("hidden_act", "gelu")),
        type_vocab_size=int(raw.get("type_vocab_size", 2)),
        position="learned",
        embedding_norm=True,  # BertEmbeddings.LayerNorm
        final_norm=False,  # post-LN: each block ends in its own norm
    )
    return out


def _switch(raw: dict[str, Any]) -> dict[str, Any]:
    d_model = int(raw["d_model"])
    heads = int(raw["num_heads"])
    encoder_layers = int(raw["num_layers"])
    step = int(raw.get("encoder_sparse_step", 2))
    return {
        "model_type": str(raw.get("model_type", "switch_transformers")),
        "kind": "encoder-decoder",
        "num_layers": encoder_layers,
        "num_decoder_layers": int(raw.get("num_decoder_layers") or encoder_layers),
        "hidden_size": d_model,
        "num_heads": heads,
        "num_kv_heads": heads,
        "head_dim": int(raw.get("d_kv", d_model // heads)),
        "intermediate_size": int(raw["d_ff"]),
        "vocab_size": int(raw["vocab_size"]),
        "max_positions": _UNBOUNDED_POSITIONS,
        "norm": "rmsnorm",  # T5LayerNorm: scale only, no mean subtraction
        "activation": str(raw.get("dense_act_fn", "relu")),
        "gated_mlp": bool(raw.get("is_gated_act", False)),
        "qkv_bias": False,
        "out_bias": False,
        "mlp_bias": False,
        "position": "relative",
        "tie_word_embeddings": bool(raw.get("tie_word_embeddings", True)),
        "moe": {
            "num_experts": int(raw["num_experts"]),
            "experts_per_token": 1,
            "expert_intermediate_size": int(raw["d_ff"]),
            "layer_step": step,
            "expert_capacity_tokens": raw.get("expert_capacity"),
            "gated": bool(raw.get("is_gated_act", False)),
            "router_bias": bool(raw.get("router_bias", False)),
        },
    }


def _llama(raw: dict[str, Any], family: str = "llama") -> dict[str, Any]:
    raw = _with_defaults(raw, family)
    out = _common(raw)
    bias = bool(raw.get("attention_bias", False))
    out.update(
        activation=str(raw.get("hidden_act", "silu")),
        gated_mlp=True,
        norm="rmsnorm",
        qkv_bias=bias,
        out_bias=bias,
        mlp_bias=bool(raw.get("mlp_bias", False)),
        position="rotary",
        rotary_frac=_rotary_frac(raw),
        tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
        sliding_window=_sliding(raw),
    )
    return out


def _mistral(raw: Raw) -> Raw:
    return _llama(raw, "mistral")


def _mixtral(raw: dict[str, Any]) -> dict[str, Any]:
    out = _llama(raw, "mixtral")
    raw = _with_defaults(raw, "mixtral")
    out["moe"] = {
        "num_experts": int(raw["num_local_experts"]),
        "experts_per_token": int(raw.get("num_experts_per_tok", 2)),
        "expert_intermediate_size": int(raw["intermediate_size"]),
    }
    return out


def _qwen(raw: Raw) -> Raw:
    """Qwen (v1) remote code: ``intermediate_size`` is w1 + w2 together, so each branch is half of it."""
    raw = _with_defaults(raw, "qwen")
    out = _llama({**raw, "intermediate_size": int(raw["intermediate_size"]) // 2, "head_dim": raw["kv_channels"]},
                 "qwen")
    no_bias = bool(raw["no_bias"])
    out.update(
        qkv_bias=True,  # c_attn always has a bias; no_bias covers c_proj and the MLP
        out_bias=not no_bias,
        mlp_bias=not no_bias,
        rotary_frac=_rotary_frac(raw),
        sliding_window=None,
    )
    return out


def _qwen_sliding(raw: Raw, out: Raw) -> None:
    """Qwen2/3 sliding window: only with use_sliding_window, and only for layers >= max_window_layers."""
    window = _sliding(raw) if raw.get("use_sliding_window") else None
    layer_types = raw.get("layer_types")
    if layer_types:
        out["attention_layer_types"] = tuple(_attention_kind(t) for t in layer_types)
        out["sliding_window"] = window
        return
    out["sliding_window"] = window
    if window is not None:
        first = int(raw["max_window_layers"])
        out["attention_layer_types"] = tuple(
            "sliding" if i >= first else "full" for i in range(out["num_layers"])
        )


def _qwen2(raw: Raw) -> Raw:
    raw = _with_defaults(raw, "qwen2")
    out = _llama(raw, "qwen2")
    out.update(qkv_bias=True, out_bias=False)  # Qwen2Attention: q/k/v biased, o_proj not
    _qwen_sliding(raw, out)
    return out


def _qwen3(raw: Raw, family: str = "qwen3") -> Raw:
    raw = _with_defaults(raw, family)
    out = _llama(raw, family)
    out["qk_norm"] = "rmsnorm"  # q_norm / k_norm over head_dim
    _qwen_sliding(raw, out)
    return out


def _qwen3_moe(raw: Raw) -> Raw:
    raw = _with_defaults(raw, "qwen3_moe")
    out = _qwen3(raw, "qwen3_moe")
    if raw.get("mlp_only_layers"):
        raise ValueError("qwen3_moe with mlp_only_layers (dense layers at arbitrary indices) is not supported")
    out["moe"] = {
        "num_experts": int(raw["num_experts"]),
        "experts_per_token": int(raw["num_experts_per_tok"]),
        "expert_intermediate_size": int(raw["moe_intermediate_size"]),
        "layer_step": int(raw["decoder_sparse_step"]),
    }
    return out


def _gemma_layer_types(raw: Raw, layers: int, pattern: int) -> tuple[str, ...]:
    """Gemma's per-layer attention: ``layer_types`` when given, else every ``pattern``-th layer full (1-based)
    and the others sliding, as ``Gemma2Config`` (pattern 2) and ``Gemma3TextConfig`` (``sliding_window_pattern``,
    default 6) derive it."""
    if raw.get("layer_types"):
        return tuple(_attention_kind(t) for t in raw["layer_types"])
    return tuple("sliding" if (i + 1) % pattern else "full" for i in range(layers))


def _gemma2(raw: Raw, family: str = "gemma2") -> Raw:
    """Gemma 2 (``Gemma2ForCausalLM``): GQA with head_dim 256, GeGLU MLP (``hidden_activation``
    gelu_pytorch_tanh), four RMSNorms per layer (before and after attention and MLP; Gemma's RMSNorm scales by
    1 + weight, one weight per element), embeddings scaled by sqrt(hidden_size), alternating sliding / full
    layers, attention and final-logit softcapping, tied LM head. ``query_pre_attn_scalar`` only sets the score
    scale (1/sqrt of it instead of 1/sqrt(head_dim)): the same one multiply."""
    raw = _with_defaults(raw, family)
    out = _llama(raw, family)
    window = _sliding(raw)
    pattern = 2 if family == "gemma2" else int(raw.get("sliding_window_pattern") or 6)
    kinds = _gemma_layer_types(raw, out["num_layers"], pattern)
    attn_cap, final_cap = raw.get("attn_logit_softcapping"), raw.get("final_logit_softcapping")
    out.update(
        activation=str(_first(raw, "hidden_activation", "hidden_act")),
        num_norms_per_layer=4,
        norm_placement="sandwich",
        sliding_window=window,
        attention_layer_types=kinds if window else (),
        embedding_multiplier=float(out["hidden_size"]) ** 0.5,  # Gemma*ScaledWordEmbedding / normalizer
        attn_logit_softcap=float(attn_cap) if attn_cap else None,
        final_logit_softcap=float(final_cap) if final_cap else None,
        tie_word_embeddings=bool(raw["tie_word_embeddings"]),
    )
    return out


def _gemma3_text(raw: Raw) -> Raw:
    """Gemma 3 text model (``Gemma3ForCausalLM``): Gemma 2's layer with a QK RMSNorm per head, five sliding
    layers to one full (``sliding_window_pattern``), local and global RoPE bases (same FLOPs), softcapping only
    when the config sets it (the shipped configs do not). The multimodal ``gemma3`` (SigLIP tower) is not
    modelled."""
    out = _gemma2(raw, "gemma3_text")
    out["qk_norm"] = "rmsnorm"
    return out


def _gemma(raw: Raw) -> Raw:
    """Gemma 1 (``GemmaForCausalLM``; CodeGemma): the Gemma 2 layer without what Gemma 2 added -- two
    RMSNorms per layer (before attention and before the MLP; Gemma's RMSNorm scales by 1 + weight), no sliding
    window, no softcapping, the 1/sqrt(head_dim) score scale. GeGLU MLP (transformers 4.57 runs
    ``hidden_act``), head_dim 256 (may differ from hidden / heads), embeddings scaled by sqrt(hidden_size), tied
    LM head. A config carrying a sliding window is refused (Gemma 1 has none)."""
    raw = _with_defaults(raw, "gemma")
    if raw.get("sliding_window"):
        raise UnsupportedError(f"gemma with sliding_window={raw['sliding_window']} is not Gemma 1 (which attends "
                               "to every position); supported: no sliding window (Gemma 2 is model_type gemma2)")
    out = _llama(raw, "gemma")
    out.update(
        activation=str(raw["hidden_act"]),
        sliding_window=None,
        embedding_multiplier=float(out["hidden_size"]) ** 0.5,  # GemmaModel: hidden_states * normalizer
        tie_word_embeddings=bool(raw["tie_word_embeddings"]),
    )
    return out


def _phi3(raw: Raw) -> Raw:
    """Phi-3 / Phi-4 (``Phi3ForCausalLM``): a Llama layer whose code runs one fused ``qkv_proj`` and one fused
    ``gate_up_proj`` GEMM, bias-free; partial RoPE when ``partial_rotary_factor`` says so; a sliding window on
    every layer when ``sliding_window`` is set (Phi-3-mini: 2047)."""
    raw = _with_defaults(raw, "phi3")
    out = _llama(raw, "phi3")
    out.update(fused_qkv=True, fused_gate_up=True)
    return out


def _olmo2(raw: Raw) -> Raw:
    """OLMo 2 (``Olmo2ForCausalLM``): a Llama layer with its two RMSNorms on the attention and MLP outputs
    (before the residual adds, none before), and RMSNorms over the whole q and k projections (q_norm of
    num_heads x head_dim, k_norm of num_kv_heads x head_dim) before RoPE."""
    raw = _with_defaults(raw, "olmo2")
    out = _llama(raw, "olmo2")
    out.update(norm_placement="post", qk_norm="rmsnorm", qk_norm_span="projection")
    return out


def _cohere(raw: Raw) -> Raw:
    """Cohere Command-R (``CohereForCausalLM``): a parallel block (one LayerNorm without bias feeds attention
    and the SwiGLU MLP, both added to the residual), logits multiplied by ``logit_scale``, tied embeddings.
    ``use_qk_norm`` (Command R+: a LayerNorm per head with its own weight per head) is refused."""
    raw = _with_defaults(raw, "cohere")
    if raw.get("use_qk_norm"):
        raise UnsupportedError("cohere with use_qk_norm (a per-head LayerNorm weight per head) is not supported; "
                               "supported: use_qk_norm false (Command R)")
    out = _llama(raw, "cohere")
    scale = raw.get("logit_scale")
    out.update(
        norm="layernorm",
        norm_bias=False,  # CohereLayerNorm: mean-centred, weight only
        parallel_block=True,
        num_norms_per_layer=1,
        logits_multiplier=float(scale) if scale else None,
        tie_word_embeddings=bool(raw["tie_word_embeddings"]),
    )
    return out


def _starcoder2(raw: Raw) -> Raw:
    """StarCoder2 (``Starcoder2ForCausalLM``): GQA with biases everywhere (``use_bias``), LayerNorm with bias,
    a non-gated MLP (c_fc, gelu_pytorch_tanh, c_proj), RoPE, a sliding window on every layer, tied embeddings."""
    raw = _with_defaults(raw, "starcoder2")
    out = _llama(raw, "starcoder2")
    bias = bool(raw["use_bias"])
    out.update(
        activation=str(raw["hidden_act"]),
        gated_mlp=False,
        norm="layernorm",
        qkv_bias=bias,
        out_bias=bias,
        mlp_bias=bias,
        tie_word_embeddings=bool(raw["tie_word_embeddings"]),
    )
    return out


def _granite(raw: Raw) -> Raw:
    """Granite 3 (``GraniteForCausalLM``): a Llama layer with four scalar multipliers: the embeddings
    (``embedding_multiplier``), each attention / MLP output before its residual add (``residual_multiplier``),
    the attention scores (``attention_multiplier``, replacing 1/sqrt(head_dim): the same one multiply) and the
    logits (divided by ``logits_scaling``)."""
    raw = _with_defaults(raw, "granite")
    out = _llama(raw, "granite")
    emb, res, logits = (float(raw[k]) for k in ("embedding_multiplier", "residual_multiplier", "logits_scaling"))
    out.update(
        embedding_multiplier=emb if emb != 1.0 else None,
        residual_multiplier=res if res != 1.0 else None,
        logits_multiplier=1.0 / logits if logits != 1.0 else None,
    )
    return out


def _attention_kind(layer_type: str) -> str:
    kinds = {"full_attention": "full", "sliding_attention": "sliding", "chunked_attention": "chunked"}
    if layer_type not in kinds:
        raise ValueError(f"unknown layer type {layer_type!r} (known: {', '.join(kinds)})")
    return kinds[layer_type]


def _vit(vis: Raw, family: str, *, projector_dims: tuple[int, ...], projector_bias: bool,
         num_image_tokens: int) -> Raw:
    vis = _with_defaults(vis, family)
    return {
        "model_type": str(vis.get("model_type", family)),
        "num_layers": int(vis["num_hidden_layers"]),
        "hidden_size": int(vis["hidden_size"]),
        "num_heads": int(vis["num_attention_heads"]),
        "intermediate_size": int(vis["intermediate_size"]),
        "image_size_px": int(vis["image_size"]),
        "patch_size_px": int(vis["patch_size"]),
        "num_channels": int(vis.get("num_channels", 3)),
        "activation": str(vis.get("hidden_act", "gelu")),
        "projector_dims": projector_dims,
        "projector_bias": projector_bias,
        "num_image_tokens": num_image_tokens,
    }


def _llama4(raw: Raw) -> Raw:
    """Llama 4: the text model of ``text_config`` (or a bare ``llama4_text`` config), vision in ``vision``.

    Mirrors ``Llama4TextConfig.__post_init__``: ``moe_layers`` defaults to every
    ``interleave_moe_layer_step``-th layer; ``no_rope_layers`` holds a 1 for each
    layer that uses RoPE (default: all but every 4th); RoPE layers use chunked
    attention, NoPE layers full attention. Dense layers use
    ``intermediate_size_mlp``, experts and the shared expert ``intermediate_size``.
    """
    top = raw
    text = _with_defaults(raw.get("text_config", raw), "llama4_text")
    out = _llama(text, "llama4_text")
    layers = out["num_layers"]
    step = int(text["interleave_moe_layer_step"])
    moe_layers = text.get("moe_layers")
    if moe_layers is None:
        moe_layers = list(range(step - 1, layers, step))
    if sorted(moe_layers) != [i for i in range(layers) if (i + 1) % step == 0]:
        raise ValueError(f"llama4 moe_layers {moe_layers} are not every {step}th layer")
    interval = int(text["no_rope_layer_interval"])
    rope_flags = text.get("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(layers)]
    chunk = text.get("attention_chunk_size")
    if text.get("layer_types"):
        kinds = tuple(_attention_kind(t) for t in text["layer_types"])
    else:
        kinds = tuple("chunked" if flag and chunk else "full" for flag in rope_flags)
    if not chunk:
        kinds = tuple("full" for _ in kinds)
    inter = int(text["intermediate_size"])
    out.update(
        model_type=str(top.get("model_type", "llama4")),
        intermediate_size=int(text["intermediate_size_mlp"]),
        tie_word_embeddings=bool(text.get("tie_word_embeddings", top.get("tie_word_embeddings", False))),
        attention_layer_types=kinds,
        attention_chunk_size=int(chunk) if chunk else None,
        nope_layers=tuple(i for i, flag in enumerate(rope_flags) if not flag),
        qk_norm="l2" if text.get("use_qk_norm") else "none",  # weightless L2 norm, RoPE layers only
        sliding_window=None,
        moe={
            "num_experts": int(text["num_local_experts"]),
            "experts_per_token": int(text["num_experts_per_tok"]),
            "expert_intermediate_size": inter,
            "num_shared_experts": 1,
            "shared_intermediate_size": inter,
            "layer_step": step,
        },
    )
    if isinstance(top.get("vision_config"), dict):
        _check_vision(top["vision_config"], "llama4", "llama4_vision_model")
        vis = _with_defaults(top["vision_config"], "llama4_vision_model")
        ratio = float(vis["pixel_shuffle_ratio"])
        patches = (int(vis["image_size"]) // int(vis["patch_size"])) ** 2
        out["vision"] = _vit(
            vis,
            "llama4_vision_model",
            # pixel-shuffle MLP (intermediate -> projector_input -> projector_output), then the projector
            projector_dims=(int(vis["intermediate_size"]), int(vis["projector_input_dim"]),
                            int(vis["projector_output_dim"]), out["hidden_size"]),
            projector_bias=bool(vis["multi_modal_projector_bias"]),
            num_image_tokens=int(patches * ratio * ratio),
        )
    return out


def _deepseek(raw: Raw, family: str) -> Raw:
    """DeepSeek-V2 / V3 (and Kimi K2, a DeepSeek-V3 architecture): MLA attention, ``first_k_dense_replace`` dense
    layers, then MoE layers of ``n_shared_experts`` shared experts (one MLP of ``n_shared_experts x
    moe_intermediate_size`` in transformers: the same weights) and ``n_routed_experts`` routed ones.

    MLA: q through a low-rank ``q_lora_rank`` bottleneck with its RMSNorm, or one ``q_proj`` when ``q_lora_rank``
    is null (DeepSeek-V2-Lite); the kv latent of ``kv_lora_rank`` plus a RoPE key shared by the heads.
    Routing: softmax top-k (V2 ``greedy``), group-limited top-k (V2 ``group_limited_greedy``: best ``topk_group``
    of ``n_group`` expert groups first) or sigmoid scores with a correction bias (V3 ``noaux_tc``, counted as a
    router bias); the group choice is a few comparisons per token and expert, not priced. The
    multi-token-prediction module (``num_nextn_predict_layers``) is not part of transformers' model and is not
    counted (see :mod:`perfcast.catalog.params`).
    """
    raw = _with_defaults(raw, family)
    out = _llama(raw, family)
    nope, rope = int(raw["qk_nope_head_dim"]), int(raw["qk_rope_head_dim"])
    moe_inter = int(raw["moe_intermediate_size"])
    q_rank = raw.get("q_lora_rank")
    out.update(
        head_dim=nope + rope,
        rotary_frac=rope / (nope + rope),
        sliding_window=None,
        mla={
            "q_lora_rank": int(q_rank) if q_rank else None,
            "kv_lora_rank": int(raw["kv_lora_rank"]),
            "qk_nope_head_dim": nope,
            "qk_rope_head_dim": rope,
            "v_head_dim": int(raw["v_head_dim"]),
        },
        moe={
            "num_experts": int(raw["n_routed_experts"]),
            "experts_per_token": int(raw["num_experts_per_tok"]),
            "expert_intermediate_size": moe_inter,
            "num_shared_experts": int(raw.get("n_shared_experts") or 0),
            "shared_intermediate_size": moe_inter if raw.get("n_shared_experts") else 0,
            "layer_step": int(raw["moe_layer_freq"]),
            "first_dense_layers": int(raw["first_k_dense_replace"]),
            "router_bias": raw.get("topk_method") == "noaux_tc",  # e_score_correction_bias
        },
    )
    return out


def _deepseek_v3(raw: Raw) -> Raw:
    """DeepSeek-V3 / R1 / V3.1 (see :func:`_deepseek`)."""
    return _deepseek(raw, "deepseek_v3")


def _deepseek_v2(raw: Raw) -> Raw:
    """DeepSeek-V2 and V2-Lite (see :func:`_deepseek`): softmax routing, no correction bias."""
    return _deepseek(raw, "deepseek_v2")


def _kimi_k2(raw: Raw) -> Raw:
    """Kimi K2 (``kimi_k2``): the DeepSeek-V3 architecture (its checkpoint's remote code is DeepSeek-V3's
    ``DeepseekV3ForCausalLM``; transformers has no kimi_k2 class), with DeepSeek-V3's config defaults."""
    return _deepseek(raw, "deepseek_v3")


def _qwen2_moe(raw: Raw) -> Raw:
    """Qwen1.5-MoE / Qwen2-MoE (``Qwen2MoeForCausalLM``): Qwen2's attention (q/k/v biased when ``qkv_bias``, the
    default; o_proj not), MoE layers every ``decoder_sparse_step`` layers of ``num_experts`` routed experts (top-k
    softmax; renormalized only with ``norm_topk_prob``, off by default: a few elementwise ops either way) beside one
    shared expert of ``shared_expert_intermediate_size`` whose output is scaled by a sigmoid gate
    (``shared_expert_gate``, hidden -> 1). ``mlp_only_layers`` (dense layers at chosen indices) is refused."""
    raw = _with_defaults(raw, "qwen2_moe")
    if raw.get("mlp_only_layers"):
        raise UnsupportedError("qwen2_moe with mlp_only_layers (dense layers at arbitrary indices) is not supported")
    out = _llama(raw, "qwen2_moe")
    out.update(qkv_bias=bool(raw["qkv_bias"]), out_bias=False)
    _qwen_sliding(raw, out)
    shared = int(raw.get("shared_expert_intermediate_size") or 0)
    out["moe"] = {
        "num_experts": int(raw["num_experts"]),
        "experts_per_token": int(raw["num_experts_per_tok"]),
        "expert_intermediate_size": int(raw["moe_intermediate_size"]),
        "num_shared_experts": 1 if shared else 0,
        "shared_intermediate_size": shared,
        "shared_expert_gate": bool(shared),
        "layer_step": int(raw["decoder_sparse_step"]),
    }
    return out


def _phimoe(raw: Raw) -> Raw:
    """Phi-3.5-MoE (``PhimoeForCausalLM``): GQA with biases on q/k/v/o (``attention_bias``), LayerNorms with bias,
    every layer MoE with ``num_local_experts`` SwiGLU experts (w1, w3, w2; sparsemixer top-2 routing, a few
    elementwise ops), an LM head with a bias (``lm_head_bias``), a sliding window on every layer when set."""
    raw = _with_defaults(raw, "phimoe")
    out = _llama(raw, "phimoe")
    bias = bool(raw["attention_bias"])
    out.update(
        norm="layernorm",
        qkv_bias=bias,
        out_bias=bias,
        lm_head_bias=bool(raw["lm_head_bias"]),
        moe={
            "num_experts": int(raw["num_local_experts"]),
            "experts_per_token": int(raw["num_experts_per_tok"]),
            "expert_intermediate_size": int(raw["intermediate_size"]),
        },
    )
    return out


def _dbrx(raw: Raw) -> Raw:
    """DBRX (``DbrxForCausalLM``): top-level ``d_model`` / ``n_heads`` / ``n_layers`` / ``max_seq_len``, the
    attention in ``attn_config`` (GQA with ``kv_n_heads``, one fused bias-free ``Wqkv`` GEMM whose output is
    clamped to +-``clip_qkv``, RoPE) and the MoE in ``ffn_config`` (``moe_num_experts`` GLU experts of
    ``ffn_hidden_size``, top ``moe_top_k``, a bias-free router). LayerNorms without bias; every layer MoE, so
    ``intermediate_size`` (the dense width) is the expert width as a stand-in."""
    raw = _with_defaults(raw, "dbrx")
    base = _defaults()["dbrx"]
    attn = {**base["attn_config"], **(raw.get("attn_config") or {})}
    ffn = {**base["ffn_config"], **(raw.get("ffn_config") or {})}
    hidden, heads = int(raw["d_model"]), int(raw["n_heads"])
    act = ffn.get("ffn_act_fn") or {}
    clip = attn.get("clip_qkv")
    return {
        "model_type": "dbrx",
        "kind": "decoder",
        "num_layers": int(raw["n_layers"]),
        "hidden_size": hidden,
        "num_heads": heads,
        "num_kv_heads": int(attn["kv_n_heads"]),
        "head_dim": hidden // heads,
        "intermediate_size": int(ffn["ffn_hidden_size"]),
        "vocab_size": int(raw["vocab_size"]),
        "max_positions": int(raw["max_seq_len"]),
        "norm": "layernorm",
        "norm_bias": False,
        "activation": str(act.get("name", "silu")) if isinstance(act, dict) else "silu",
        "gated_mlp": True,
        "qkv_bias": False,
        "out_bias": False,
        "mlp_bias": False,
        "position": "rotary",
        "tie_word_embeddings": bool(raw["tie_word_embeddings"]),
        "fused_qkv": True,
        "qkv_clip": float(clip) if clip else None,
        "moe": {
            "num_experts": int(ffn["moe_num_experts"]),
            "experts_per_token": int(ffn["moe_top_k"]),
            "expert_intermediate_size": int(ffn["ffn_hidden_size"]),
        },
    }


def _glm4_moe(raw: Raw) -> Raw:
    """GLM-4.5 / GLM-4.5-Air (``Glm4MoeForCausalLM``): GQA with biased q/k/v (``attention_bias``; o_proj never),
    an optional QK RMSNorm per head (``use_qk_norm``), RoPE on ``partial_rotary_factor`` of each head (0.5),
    ``first_k_dense_replace`` dense layers, then MoE layers of ``n_shared_experts`` shared and
    ``n_routed_experts`` routed SwiGLU experts with sigmoid scores and a correction bias (counted as a router
    bias, as for DeepSeek-V3). The multi-token-prediction layer (``num_nextn_predict_layers``) is not part of
    transformers' model and is not counted."""
    raw = _with_defaults(raw, "glm4_moe")
    out = _llama(raw, "glm4_moe")
    moe_inter = int(raw["moe_intermediate_size"])
    shared = int(raw.get("n_shared_experts") or 0)
    out.update(
        out_bias=False,
        qk_norm="rmsnorm" if raw.get("use_qk_norm") else "none",
        moe={
            "num_experts": int(raw["n_routed_experts"]),
            "experts_per_token": int(raw["num_experts_per_tok"]),
            "expert_intermediate_size": moe_inter,
            "num_shared_experts": shared,
            "shared_intermediate_size": moe_inter if shared else 0,
            "first_dense_layers": int(raw["first_k_dense_replace"]),
            "router_bias": True,  # e_score_correction_bias
        },
    )
    return out


def _minimax_m2(raw: Raw) -> Raw:
    """MiniMax-M2 (``MiniMaxM2ForCausalLM``, remote code; vLLM's ``minimax_m2.py``): full GQA attention in every
    layer (``attn_type_list`` all 1) with bias-free q/k/v/o, RoPE on ``rotary_dim`` of each head, RMSNorms over
    the whole q and k projections (``qk_norm_type`` per_layer: q_norm of num_heads x head_dim, k_norm of
    num_kv_heads x head_dim, as OLMo 2), and every layer MoE: ``num_local_experts`` SwiGLU experts of
    ``intermediate_size``, top ``num_experts_per_tok``, sigmoid scores with a per-expert correction bias
    (``use_routing_bias``: counted as a router bias, as for DeepSeek-V3), no shared expert. The
    multi-token-prediction modules (``use_mtp``, ``num_mtp_modules``) are not part of the main model and are
    not counted. Lightning-attention layers (``attn_type_list`` 0, MiniMax-Text-01), shared experts and per-head
    QK norms are refused."""
    kinds = raw.get("attn_type_list") or []
    if any(int(k) != 1 for k in kinds):
        raise UnsupportedError("minimax_m2 with lightning-attention layers (attn_type_list 0) is not supported; "
                               "supported: full softmax attention in every layer (attn_type_list all 1)")
    if int(raw.get("shared_intermediate_size") or 0):
        raise UnsupportedError(f"minimax_m2 with shared_intermediate_size={raw['shared_intermediate_size']} (a "
                               "shared expert) is not supported; supported: routed experts only (0)")
    qk_norm = bool(raw.get("use_qk_norm", False))
    if qk_norm and raw.get("qk_norm_type", "per_layer") != "per_layer":
        raise UnsupportedError(f"minimax_m2 with qk_norm_type={raw['qk_norm_type']!r} is not supported; supported: "
                               "per_layer (one RMSNorm over the whole q and k projections)")
    head_dim = int(raw["head_dim"])
    rotary_dim = int(raw.get("rotary_dim") or head_dim)
    out = _llama({**raw, "partial_rotary_factor": rotary_dim / head_dim}, "minimax_m2")
    out.update(
        qk_norm="rmsnorm" if qk_norm else "none",
        qk_norm_span="projection",
        moe={
            "num_experts": int(raw["num_local_experts"]),
            "experts_per_token": int(raw["num_experts_per_tok"]),
            "expert_intermediate_size": int(raw["intermediate_size"]),
            "router_bias": bool(raw.get("use_routing_bias", False)),  # e_score_correction_bias
        },
    )
    return out


def _gpt_oss(raw: Raw) -> Raw:
    """gpt-oss: biased GQA with per-head sinks, alternating sliding/full layers, biased MoE experts.

    The experts use a clamped SwiGLU (``swiglu_limit``); ``activation`` keeps the
    config's ``hidden_act``.
    """
    raw = _with_defaults(raw, "gpt_oss")
    out = _llama(raw, "gpt_oss")
    layers = out["num_layers"]
    types = raw.get("layer_types") or [
        "sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(layers)
    ]
    out.update(
        attention_layer_types=tuple(_attention_kind(t) for t in types),
        attention_sinks=True,
        moe={
            "num_experts": int(raw["num_local_experts"]),
            "experts_per_token": int(_first(raw, "num_experts_per_tok", "experts_per_token")),
            "expert_intermediate_size": int(raw["intermediate_size"]),
            "expert_bias": True,
            "router_bias": True,
        },
    )
    return out


def _phi(raw: Raw) -> Raw:
    raw = _with_defaults(raw, "phi")
    out = _common(raw)
    out.update(
        activation=str(raw["hidden_act"]),
        norm="layernorm",
        position="rotary",
        rotary_frac=_rotary_frac(raw, 0.5),
        parallel_block=True,
        num_norms_per_layer=1,  # input_layernorm feeds both attention and MLP
        qk_norm="layernorm" if raw.get("qk_layernorm") else "none",
        tie_word_embeddings=bool(raw["tie_word_embeddings"]),
        lm_head_bias=True,
    )
    return out


def _gptj(raw: Raw) -> Raw:
    raw = _with_defaults(raw, "gptj")
    out = _common(raw)
    rotary_dim = raw.get("rotary_dim")
    out.update(
        activation=str(raw["activation_function"]),
        norm="layernorm",
        position="rotary",
        rotary_frac=min(1.0, int(rotary_dim) / out["head_dim"]) if rotary_dim else 1.0,
        qkv_bias=False,
        out_bias=False,
        parallel_block=True,
        num_norms_per_layer=1,  # ln_1 feeds both attention and MLP
        tie_word_embeddings=bool(raw["tie_word_embeddings"]),
        lm_head_bias=True,
    )
    return out


def _gpt_neox(raw: Raw) -> Raw:
    raw = _with_defaults(raw, "gpt_neox")
    out = _common(raw)
    bias = bool(raw["attention_bias"])
    out.update(
        activation=str(raw["hidden_act"]),
        norm="layernorm",
        position="rotary",
        rotary_frac=_rotary_frac(raw, 0.25),
        qkv_bias=bias,
        out_bias=bias,
        parallel_block=bool(raw["use_parallel_residual"]),  # two norms even when parallel
        tie_word_embeddings=bool(raw["tie_word_embeddings"]),
    )
    return out


_BLOOM_TRAINED_TOKENS = 2048  # BLOOM's training sequence length (arXiv:2211.05100)


def _bloom(raw: Raw) -> Raw:
    """BLOOM (``BloomForCausalLM``; BLOOMZ and its fine-tunes): a LayerNorm right after the token embeddings
    (``word_embeddings_layernorm``), pre-LN blocks of fused, biased ``query_key_value`` (hidden -> 3 hidden, one
    GEMM) and ``dense`` projections, a biased 4x GELU (tanh) MLP, ALiBi positions (a per-head bias added to the
    scores: no position table, no rotary), a final LayerNorm and a tied LM head. The released configs give no
    context length: the limit is then the 2048-token sequences BLOOM was trained on (the BLOOM paper, arXiv:2211.05100),
    which is also what vLLM assumes for a config without one. ``apply_residual_connection_post_layernorm`` (the
    residual taken after the norm) is refused."""
    if raw.get("apply_residual_connection_post_layernorm"):
        raise UnsupportedError("bloom with apply_residual_connection_post_layernorm is not supported; supported: "
                               "the residual taken before each LayerNorm (every released BLOOM)")
    hidden = int(_first(raw, "hidden_size", "n_embed"))
    positions = _first(raw, "max_position_embeddings", "n_positions", "max_sequence_length", "seq_length",
                       default=_BLOOM_TRAINED_TOKENS)
    out = _common({**raw, "hidden_size": hidden, "intermediate_size": 4 * hidden, "seq_length": positions})
    out.update(
        activation="gelu_pytorch_tanh",  # BloomGelu: the tanh approximation
        norm="layernorm",
        gated_mlp=False,
        qkv_bias=True,
        out_bias=True,
        mlp_bias=True,
        fused_qkv=True,
        position="alibi",
        embedding_norm=True,  # word_embeddings_layernorm
        tie_word_embeddings=bool(raw.get("tie_word_embeddings", True)),
    )
    return out


def _falcon(raw: Raw) -> Raw:
    """Falcon: fused QKV; new_decoder_architecture = GQA with num_kv_heads, else multi_query = 1 KV head."""
    raw = _with_defaults(raw, "falcon")
    hidden = int(_first(raw, "n_embed", "hidden_size"))
    heads = int(_first(raw, "n_head", "num_attention_heads"))
    if raw["new_decoder_architecture"]:
        kv_heads = int(_first(raw, "num_kv_heads", default=heads))
    elif raw["multi_query"]:
        kv_heads = 1
    else:
        kv_heads = heads
    parallel = bool(raw["parallel_attn"]) or bool(raw["new_decoder_architecture"])
    if not parallel:
        norms = 2
    else:
        norms = int(raw.get("num_ln_in_parallel_attn") or (2 if raw["new_decoder_architecture"] else 1))
    bias = bool(raw["bias"])
    return {
        "model_type": "falcon",
        "kind": "decoder",
        "num_layers": int(_first(raw, "n_layer", "num_hidden_layers")),
        "hidden_size": hidden,
        "num_heads": heads,
        "num_kv_heads": kv_heads,
        "head_dim": hidden // heads,
        "intermediate_size": int(_first(raw, "ffn_hidden_size", default=4 * hidden)),
        "vocab_size": int(raw["vocab_size"]),
        "max_positions": int(raw["max_position_embeddings"]),
        "norm": "layernorm",
        "activation": str(raw["activation"]),
        "qkv_bias": bias,
        "out_bias": bias,
        "mlp_bias": bias,
        "parallel_block": parallel,
        "num_norms_per_layer": norms,
        "position": "alibi" if raw["alibi"] else "rotary",
        "tie_word_embeddings": bool(raw["tie_word_embeddings"]),
    }


def _mpt(raw: Raw) -> Raw:
    """MPT (HF MptConfig / llm-foundry): no biases anywhere with no_bias, ALiBi or learned positions."""
    raw = _with_defaults(raw, "mpt")
    ffn = (raw.get("ffn_config") or {}).get("ffn_type") or "mptmlp"
    if ffn not in ("mptmlp", "te_ln_mlp"):  # mptglu is gated, mb_moe / mb_dmoe are MegaBlocks experts
        raise UnsupportedError(f"mpt with ffn_config.ffn_type={ffn!r} is not supported; supported: mptmlp, te_ln_mlp "
                               "(a plain 2-layer MLP)")
    attn = {"alibi": True, "attn_type": "multihead_attention", **(raw.get("attn_config") or {})}
    d_model, heads = int(raw["d_model"]), int(raw["n_heads"])
    if attn["attn_type"] == "multiquery_attention":
        kv_heads = 1
    elif attn["attn_type"] == "grouped_query_attention":
        kv_heads = int(attn.get("kv_n_heads") or heads)
    else:
        kv_heads = heads
    bias = not bool(raw["no_bias"])
    if attn["alibi"]:
        position = "alibi"  # transformers' MptModel has no position table with ALiBi
    elif raw["learned_pos_emb"]:
        position = "learned"
    else:
        position = "none"
    return {
        "model_type": "mpt",
        "kind": "decoder",
        "num_layers": int(raw["n_layers"]),
        "hidden_size": d_model,
        "num_heads": heads,
        "num_kv_heads": kv_heads,
        "head_dim": d_model // heads,
        "intermediate_size": int(raw["expansion_ratio"]) * d_model,
        "vocab_size": int(raw["vocab_size"]),
        "max_positions": int(raw["max_seq_len"]),
        "norm": "layernorm",
        "norm_bias": bias,
        "activation": "gelu",
        "qkv_bias": bias,
        "out_bias": bias,
        "mlp_bias": bias,
        "position": position,
        "tie_word_embeddings": bool(raw["tie_word_embeddings"]),
    }


def _internlm(raw: Raw) -> Raw:
    """InternLM (remote code): Llama layout; ``bias`` puts biases on q/k/v/o."""
    raw = _with_defaults(raw, "internlm")
    out = _llama(raw, "internlm")
    out.update(qkv_bias=bool(raw["bias"]), out_bias=bool(raw["bias"]))
    return out


def _internlm2(raw: Raw) -> Raw:
    """InternLM2 (remote code): Llama layout with a fused wqkv; ``bias`` covers wqkv and wo."""
    raw = _with_defaults(raw, "internlm2")
    out = _llama(raw, "internlm2")
    out.update(qkv_bias=bool(raw["bias"]), out_bias=bool(raw["bias"]))
    return out


def _nemotron(raw: Raw) -> Raw:
    """Nemotron(-4): GQA, non-gated squared-ReLU MLP, LayerNorm1P (with bias), partial RoPE, untied."""
    raw = _with_defaults(raw, "nemotron")
    out = _llama(raw, "nemotron")
    out.update(
        activation=str(raw["hidden_act"]),
        gated_mlp=False,
        norm="layernorm",
        rotary_frac=_rotary_frac(raw, 0.5),
    )
    return out


def _llava(raw: Raw) -> Raw:
    """LLaVA: the text model of ``text_config`` (a Llama by default), the CLIP tower in ``vision``."""
    raw = _with_defaults(raw, "llava")
    text = dict(raw.get("text_config") or {})
    text.setdefault("model_type", "llama")
    if "vocab_size" not in text and "vocab_size" in raw:
        text["vocab_size"] = raw["vocab_size"]
    out = normalize_hf(text)
    vis_raw = dict(raw.get("vision_config") or {})
    _check_vision(vis_raw, "llava", "clip_vision_model")
    vis = _with_defaults(vis_raw, "clip_vision_model")
    patches = (int(vis["image_size"]) // int(vis["patch_size"])) ** 2
    full = raw["vision_feature_select_strategy"] == "full"  # "default" drops the CLS token
    out.update(
        model_type=str(raw.get("model_type", "llava")),
        vision=_vit(
            vis,
            "clip_vision_model",
            projector_dims=(int(vis["hidden_size"]), out["hidden_size"], out["hidden_size"]),
            projector_bias=bool(raw["multimodal_projector_bias"]),
            num_image_tokens=patches + (1 if full else 0),
        ),
    )
    return out


def _num_labels(raw: Raw) -> int:
    """Classes of a classification head: ``id2label`` entries, else ``num_labels``, else transformers' 2."""
    if isinstance(raw.get("id2label"), dict) and raw["id2label"]:
        return len(raw["id2label"])
    return int(raw.get("num_labels", 2))


def _resnet(raw: Raw) -> Raw:
    """ResNet (HF ``ResNetConfig``): the stages go to ``resnet``; the transformer fields hold stand-ins.

    Stand-ins, so that code written for transformers reads something sensible:
    ``num_layers`` = residual blocks (16 for ResNet-50), ``hidden_size`` = the
    last stage's width (the features entering the classifier), one "head" as
    wide as that, ``intermediate_size`` = the last stage's inner width,
    ``vocab_size`` = ``num_labels`` (the classifier's rows, which the loss runs
    over), ``max_positions`` = the image side in pixels, no position encoding.
    ``image_size`` is not a ResNetConfig key; a config.json may set it to price
    another resolution (default 224 px).
    """
    raw = _with_defaults(raw, "resnet")
    hidden_sizes = tuple(int(n) for n in raw["hidden_sizes"])
    depths = tuple(int(n) for n in raw["depths"])
    image = _RESNET_IMAGE_SIZE_PX if raw.get("image_size") is None else int(raw["image_size"])
    layer_type = str(raw["layer_type"])
    if layer_type not in ("basic", "bottleneck"):
        raise ValueError(f"unknown ResNet layer_type {layer_type!r} (known: basic, bottleneck)")
    if not hidden_sizes or len(hidden_sizes) != len(depths):
        raise ValueError(f"{len(hidden_sizes)} hidden_sizes for {len(depths)} depths (one per stage)")
    width = hidden_sizes[-1]
    labels = _num_labels(raw)
    return {
        "model_type": "resnet",
        "kind": "cnn",
        "num_layers": sum(depths),
        "hidden_size": width,
        "num_heads": 1,
        "num_kv_heads": 1,
        "head_dim": width,
        "intermediate_size": width // 4 if layer_type == "bottleneck" else width,
        "vocab_size": labels,
        "max_positions": image,
        "norm": "batchnorm",
        "activation": str(raw["hidden_act"]),
        "qkv_bias": False,
        "out_bias": False,
        "mlp_bias": False,
        "position": "none",
        "tie_word_embeddings": False,
        "num_norms_per_layer": 3 if layer_type == "bottleneck" else 2,  # projection shortcuts add one more
        "final_norm": False,
        "resnet": {
            "layer_type": layer_type,
            "num_channels": int(raw["num_channels"]),
            "embedding_size": int(raw["embedding_size"]),
            "hidden_sizes": hidden_sizes,
            "depths": depths,
            "downsample_in_first_stage": bool(raw["downsample_in_first_stage"]),
            "downsample_in_bottleneck": bool(raw["downsample_in_bottleneck"]),
            "num_labels": labels,
            "image_size_px": image,
        },
    }


_FAMILIES: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "gpt2": _gpt2,
    "opt": _opt,
    "bert": _bert,
    "switch_transformers": _switch,
    "t5": normalize_t5,
    "llama": _llama,
    "mistral": _mistral,
    "mixtral": _mixtral,
    "qwen": _qwen,
    "qwen2": _qwen2,
    "qwen3": _qwen3,
    "qwen3_moe": _qwen3_moe,
    "llama4": _llama4,
    "llama4_text": _llama4,
    "deepseek_v3": _deepseek_v3,
    "deepseek_v2": _deepseek_v2,
    "kimi_k2": _kimi_k2,
    "qwen2_moe": _qwen2_moe,
    "phimoe": _phimoe,
    "dbrx": _dbrx,
    "glm4_moe": _glm4_moe,
    "minimax_m2": _minimax_m2,
    "gpt_oss": _gpt_oss,
    "phi": _phi,
    "gptj": _gptj,
    "gpt_neox": _gpt_neox,
    "falcon": _falcon,
    "bloom": _bloom,
    "mpt": _mpt,
    "internlm": _internlm,
    "internlm2": _internlm2,
    "nemotron": _nemotron,
    "llava": _llava,
    # vision-language families: the text config is read by normalize_hf (its own family), the tower there
    "qwen2_vl": lambda raw: normalize_qwen2_vl(raw, normalize_hf),
    "qwen2_5_vl": lambda raw: normalize_qwen2_5_vl(raw, normalize_hf),
    "mistral3": lambda raw: normalize_mistral3(raw, normalize_hf),
    "llava_next": lambda raw: normalize_llava_next(raw, normalize_hf),
    "gemma": _gemma,
    "gemma2": _gemma2,
    "gemma3_text": _gemma3_text,
    "phi3": _phi3,
    "olmo2": _olmo2,
    "cohere": _cohere,
    "starcoder2": _starcoder2,
    "granite": _granite,
    "resnet": _resnet,
    "mamba": normalize_mamba,
    "mamba2": normalize_mamba2,
    "jamba": normalize_jamba,
    "nemotron_h": normalize_nemotron_h,
    "qwen3_next": normalize_qwen3_next,
    "unet_2d_condition": normalize_unet,
    "autoencoder_kl": normalize_vae,
}


_MAX_LAYERS = 100_000  # far beyond any real model; per-layer lists and counts stay cheap below it
_LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers", "num_decoder_layers")


def _check_layer_counts(raw: Raw) -> None:
    """Refuse absurd layer counts before any per-layer list is built (a typo must not hang the tool)."""
    for cfg in (raw, raw.get("text_config")):
        if not isinstance(cfg, dict):
            continue
        for key in _LAYER_KEYS:
            value = cfg.get(key)
            if isinstance(value, (int, float)) and not value <= _MAX_LAYERS:
                raise ValueError(f"{key}={value} is not a layer count perfcast models (at most {_MAX_LAYERS})")


# the shape keys every family reads as counts: a bool, a fraction or a string there is a malformed config
# (transformers builds no layer from it), never a count to truncate (true is not 1 layer, 32.5 is not 32)
_COUNT_KEYS = (
    "num_hidden_layers", "n_layer", "num_layers", "n_layers", "num_decoder_layers", "hidden_size", "n_embd",
    "d_model", "n_embed", "num_attention_heads", "n_head", "num_heads", "n_heads", "num_key_value_heads",
    "num_kv_heads", "head_dim", "d_kv", "kv_channels", "intermediate_size", "n_inner", "ffn_dim", "d_ff",
    "ffn_hidden_size", "intermediate_size_mlp", "vocab_size", "max_position_embeddings", "n_positions",
    "max_seq_len", "num_local_experts", "num_experts", "n_routed_experts", "n_shared_experts", "num_experts_per_tok",
    "experts_per_token", "moe_intermediate_size", "shared_expert_intermediate_size", "kv_lora_rank", "q_lora_rank",
    "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "first_k_dense_replace", "moe_layer_freq",
    "decoder_sparse_step", "interleave_moe_layer_step", "sliding_window", "max_window_layers", "rotary_dim",
    "expansion_ratio", "image_size", "patch_size", "num_channels",
)


def _check_counts(raw: Raw) -> None:
    """Refuse a count key whose value is not a whole number (null stays the key's default or its "none")."""
    for cfg in (raw, raw.get("text_config"), raw.get("vision_config")):
        if not isinstance(cfg, dict):
            continue
        for key in _COUNT_KEYS:
            value = cfg.get(key)
            if value is None or (isinstance(value, int) and not isinstance(value, bool)):
                continue
            if isinstance(value, float) and value.is_integer():
                continue
            raise ValueError(f"{key}={_short(value)} is not a whole number ({type(value).__name__}); a count is "
                             "an integer such as 4096")


_TORCH_DTYPES = {"float32": "fp32", "float": "fp32", "float16": "fp16", "half": "fp16", "bfloat16": "bf16"}


def _torch_dtype(raw: Raw) -> str | None:
    """The checkpoint's dtype: ``torch_dtype`` (transformers 4) or ``dtype`` (5), top level or the text config's."""
    for cfg in (raw, raw.get("text_config")):
        if not isinstance(cfg, dict):
            continue
        for key in ("torch_dtype", "dtype"):
            value = cfg.get(key)
            if isinstance(value, str) and value.strip():
                name = value.strip().lower().removeprefix("torch.")
                if name not in _TORCH_DTYPES:
                    raise ValueError(f"{key}={value!r} is not a dtype perfcast models "
                                     f"(known: {', '.join(sorted(_TORCH_DTYPES))})")
                return _TORCH_DTYPES[name]
    return None


# vision towers perfcast models, and the multimodal family each belongs to
_VISION_TOWERS = {"clip_vision_model": "llava", "llama4_vision_model": "llama4", "qwen2_vl": "qwen2_vl",
                  "qwen2_5_vl": "qwen2_5_vl", "pixtral": "mistral3"}
_SUPPORTED_TOWERS = ", ".join(f"{tower} ({family})" for tower, family in _VISION_TOWERS.items())
# multimodal model_types whose config may carry no vision_config key of its own
_MULTIMODAL_TYPES = frozenset({
    "qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "mllama", "paligemma", "idefics", "idefics2",
    "idefics3", "llava_next", "llava_next_video", "llava_onevision", "mistral3", "pixtral", "internvl",
    "chameleon", "blip-2", "instructblip", "kosmos-2", "phi3_v", "phi4_multimodal", "smolvlm", "aya_vision",
    "glm4v", "gemma3", "gemma3n", "janus", "emu3", "florence2", "molmo", "minicpmv", "deepseek_vl_v2",
})


def _check_vision(vision: Raw, family: str, tower: str) -> None:
    """Refuse a vision_config that is not the ViT ``family`` is modelled with (a SigLIP tower in a LLaVA...)."""
    kind = vision.get("model_type", tower)
    if kind != tower:
        raise UnsupportedError(f"{family} with a {kind} vision tower is not supported; supported: "
                               f"{_SUPPORTED_TOWERS}")


# keys that mean an architecture feature, by feature: a family that does not model the feature refuses them
_FOREIGN_KEYS: dict[str, tuple[str, tuple[str, ...]]] = {
    "moe": ("mixture-of-experts layers", ("num_local_experts", "num_experts", "n_routed_experts",
                                          "moe_intermediate_size", "num_experts_per_tok", "n_shared_experts",
                                          "shared_expert_intermediate_size", "decoder_sparse_step",
                                          "moe_layer_freq")),
    "mla": ("multi-head latent attention", ("kv_lora_rank", "q_lora_rank")),
    "vision": ("a vision tower", ("vision_config",)),
    "cross": ("cross-attention to an encoder", ("add_cross_attention", "is_encoder_decoder",
                                                "cross_attention_hidden_size")),
    "parallel": ("a parallel attention + MLP block", ("parallel_attn", "use_parallel_residual")),
    "alibi": ("ALiBi positions", ("alibi",)),
    "ssm": ("state-space (Mamba) layers", ("ssm_state_size", "mamba_d_state", "ssm_cfg",
                                          "hybrid_override_pattern")),
    "linear": ("linear-attention (Gated DeltaNet) layers", ("linear_num_value_heads", "linear_num_key_heads",
                                                            "linear_conv_kernel_dim")),
}
# the features each family models (every other family refuses their keys)
_FEATURES: dict[str, frozenset[str]] = {
    "switch_transformers": frozenset({"moe", "cross"}),
    "t5": frozenset({"cross"}),
    "mixtral": frozenset({"moe"}),
    "qwen3_moe": frozenset({"moe"}),
    "llama4": frozenset({"moe", "vision"}),
    "llama4_text": frozenset({"moe"}),
    "deepseek_v3": frozenset({"moe", "mla"}),
    "deepseek_v2": frozenset({"moe", "mla"}),
    "kimi_k2": frozenset({"moe", "mla"}),
    "qwen2_moe": frozenset({"moe"}),
    "phimoe": frozenset({"moe"}),
    "dbrx": frozenset({"moe"}),
    "glm4_moe": frozenset({"moe"}),
    "minimax_m2": frozenset({"moe"}),
    "gpt_oss": frozenset({"moe"}),
    "gpt_neox": frozenset({"parallel"}),
    "falcon": frozenset({"parallel", "alibi"}),
    "llava": frozenset({"vision"}),
    **{family: frozenset({"vision"}) for family in VISION_FAMILIES},
    "mamba": frozenset({"ssm"}),
    "mamba2": frozenset({"ssm"}),
    "jamba": frozenset({"ssm", "moe"}),
    "nemotron_h": frozenset({"ssm", "moe"}),
    "qwen3_next": frozenset({"moe", "linear"}),
}
# families that read per-layer attention types (``layer_types``); the others have every layer alike
_READS_LAYER_TYPES = frozenset({"qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gpt_oss", "llama4", "llama4_text",
                                "gemma2", "gemma3_text", "qwen3_next"})


def _check_foreign_keys(raw: Raw, family: str) -> None:
    """Refuse keys of an architecture feature ``family`` does not model (they would be dropped silently)."""
    reads = _FEATURES.get(family, frozenset())
    for feature, (what, keys) in _FOREIGN_KEYS.items():
        if feature in reads:
            continue
        for key in keys:
            value = raw.get(key)
            if value:
                have = sorted(f for f, feats in _FEATURES.items() if feature in feats)
                also = f" (families with {what}: {', '.join(have)})" if have else ""
                raise UnsupportedError(f"a {family} config with {key}={_short(value)} has {what}, which perfcast's "
                                       f"{family} does not model; refused rather than dropped{also}")
    types = raw.get("layer_types")
    if family not in _READS_LAYER_TYPES and isinstance(types, list) and any(t != "full_attention" for t in types):
        other = sorted({str(t) for t in types} - {"full_attention"})
        raise UnsupportedError(f"a {family} config with layer_types {other} has per-layer attention types, which "
                               f"perfcast's {family} does not model (every layer full attention); families with "
                               f"them: {', '.join(sorted(_READS_LAYER_TYPES))}")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


_ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "longrope", "su", "llama3")


def _rope_scaling(raw: Raw) -> Raw | None:
    """A config's RoPE scaling (``rope_scaling``, or transformers 5's ``rope_parameters``), None if unscaled."""
    for key in ("rope_scaling", "rope_parameters"):
        value = raw.get(key)
        if isinstance(value, dict) and (value.get("rope_type") or value.get("type") or "default") != "default":
            return value
    return None


def _context_limit(raw: Raw, positions: int) -> int:
    """A rotary model's context limit: ``positions`` (its ``max_position_embeddings``) extended by ``rope_scaling``.

    - ``linear`` / ``dynamic`` / ``yarn``: ``factor x original_max_position_embeddings`` (the original being
      ``max_position_embeddings`` when the scaling does not name one, as transformers reads dynamic and YaRN
      scaling), or ``max_position_embeddings`` when that is larger (vLLM's derived max_model_len);
    - ``llama3`` / ``longrope``: their configs state the extended window in ``max_position_embeddings``
      (Llama 3.1/3.2: 131072, Phi-3 longrope: 131072) and their ``factor`` shapes the frequencies rather than
      multiplying a length (Llama-3.2-1B's factor 32 x 8192 would claim 262144 tokens), so that is the limit,
      as vLLM takes it.
    An unknown scaling type is refused.
    """
    scaling = _rope_scaling(raw)
    if scaling is None:
        return positions
    kind = str(scaling.get("rope_type") or scaling.get("type"))
    if kind not in _ROPE_TYPES:
        raise UnsupportedError(f"rope_scaling type {kind!r} is not supported; supported: "
                               f"{', '.join(t for t in _ROPE_TYPES if t != 'su')}")
    if kind in ("llama3", "longrope", "su"):
        return positions
    factor = float(scaling.get("factor", 1.0))
    if not 1.0 <= factor < 2.0**20:
        raise ValueError(f"rope_scaling factor {factor} is not a scaling factor (1 or more)")
    original = scaling.get("original_max_position_embeddings") or positions
    return max(positions, int(factor * int(original)))


# diffusers configs name their class instead of a model_type (the catalog copies add the model_type)
_DIFFUSERS_CLASSES = {"UNet2DConditionModel": "unet_2d_condition", "AutoencoderKL": "autoencoder_kl"}


def supported_model_types() -> list[str]:
    """The ``model_type`` values perfcast models, sorted."""
    return sorted(_FAMILIES)


def _family_of(raw: Raw) -> str:
    """The config's family (its model_type), or UnsupportedError naming what perfcast models instead."""
    model_type = raw.get("model_type")
    if model_type is None and raw.get("_class_name") in _DIFFUSERS_CLASSES:
        model_type = _DIFFUSERS_CLASSES[raw["_class_name"]]
    supported = ", ".join(supported_model_types())
    if model_type is None or model_type == "":
        raise UnsupportedError(f"the config has no model_type, so its architecture is unknown; supported: "
                               f"{supported}")
    if not isinstance(model_type, str):
        raise UnsupportedError(f"model_type {model_type!r} is not a name; supported: {supported}")
    if model_type not in _FAMILIES:
        if model_type in _MULTIMODAL_TYPES or isinstance(raw.get("vision_config"), dict):
            raise UnsupportedError(f"{model_type}'s vision tower is not supported; supported: {_SUPPORTED_TOWERS}")
        reason = unmodelled_reason(model_type)
        why = f": {reason.rstrip('.')}" if reason else ""
        raise UnsupportedError(f"model_type {model_type!r} is not modelled by perfcast (refused rather than "
                               f"priced as another architecture){why}; supported: {supported}")
    return model_type


def normalize_hf(raw: dict[str, Any]) -> dict[str, Any]:
    """Map a HF config onto ModelConfig field names.

    Raises UnsupportedError for an architecture, feature or quantization perfcast does not model, and
    KeyError/TypeError/ValueError/ArithmeticError for a malformed config.
    """
    _check_layer_counts(raw)
    _check_counts(raw)
    family = _family_of(raw)
    _check_foreign_keys(raw, family)
    text = raw.get("text_config")
    if family in ("llama4",) and isinstance(text, dict):
        _check_foreign_keys(text, "llama4_text")
    out = _FAMILIES[family](raw)
    # llava's text model was scaled by its own family; Gemma 3 states its extended window in max_position_embeddings
    # (131072; the linear factor 8 rescales the global layers' RoPE to reach it), as llama3 scaling does
    if out.get("position") == "rotary" and family not in ("llava", "gemma3_text", *VISION_FAMILIES):
        out["max_positions"] = _context_limit(text if family == "llama4" and isinstance(text, dict) else raw,
                                              out["max_positions"])
    out["torch_dtype"] = _torch_dtype(raw)
    out["quantization"] = parse_quantization_config(raw)
    if out["quantization"] is not None and out["quantization"]["method"] == "mxfp4":
        _check_mxfp4_experts(out)
    return out


def _check_mxfp4_experts(out: Raw) -> None:
    """MXFP4 is modelled on MoE experts only: every MLP of the model must be routed experts (gpt-oss)."""
    moe = out.get("moe")
    if not moe or moe.get("first_dense_layers") or moe.get("num_shared_experts") or moe.get("layer_step", 1) != 1:
        raise UnsupportedError("quantization_config mxfp4 on a model whose MLPs are not all routed experts is not "
                               "supported; perfcast models MXFP4 on the MoE experts of an all-MoE model (gpt-oss)")
