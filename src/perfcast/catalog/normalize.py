"""Read a Hugging Face config dict into the plain fields of :class:`ModelConfig`.

HF families spell the same quantity differently (``n_embd``/``hidden_size``/
``d_model``); this module maps each family's spelling and defaults (the
defaults of the ``transformers`` config class when a key is absent) onto one
vocabulary. One function per family keeps each mapping readable; unknown
``model_type`` values fall back to the common spellings.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["normalize_hf"]

_UNBOUNDED_POSITIONS = 1 << 20  # relative / no position limit


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


def _gpt2(raw: dict[str, Any]) -> dict[str, Any]:
    out = _common(raw)
    out.update(
        activation=str(raw.get("activation_function", "gelu_new")),
        norm="layernorm",
        position="learned",
    )
    return out


def _opt(raw: dict[str, Any]) -> dict[str, Any]:
    out = _common(raw)
    bias = bool(raw.get("enable_bias", True))
    out.update(
        activation=str(raw.get("activation_function", "relu")),
        qkv_bias=bias,
        out_bias=bias,
        mlp_bias=bias,
        position="learned",
    )
    return out


def _bert(raw: dict[str, Any]) -> dict[str, Any]:
    out = _common(raw)
    out.update(
        kind="encoder",
        activation=str(raw.get("hidden_act", "gelu")),
        type_vocab_size=int(raw.get("type_vocab_size", 2)),
        position="learned",
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
        },
    }


def _llama(raw: dict[str, Any]) -> dict[str, Any]:
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
        tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
        sliding_window=raw.get("sliding_window"),
    )
    return out


def _mixtral(raw: dict[str, Any]) -> dict[str, Any]:
    out = _llama(raw)
    out["moe"] = {
        "num_experts": int(raw["num_local_experts"]),
        "experts_per_token": int(raw.get("num_experts_per_tok", 2)),
        "expert_intermediate_size": int(raw["intermediate_size"]),
    }
    return out


_FAMILIES: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "gpt2": _gpt2,
    "opt": _opt,
    "bert": _bert,
    "switch_transformers": _switch,
    "llama": _llama,
    "mistral": _llama,
    "mixtral": _mixtral,
}


def normalize_hf(raw: dict[str, Any]) -> dict[str, Any]:
    """Map a HF config onto ModelConfig field names (raises KeyError/TypeError/ValueError)."""
    family = _FAMILIES.get(str(raw.get("model_type", "")), _common)
    return family(raw)
