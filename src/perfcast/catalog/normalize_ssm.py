"""Read the config of a state-space or hybrid family (``mamba``, ``mamba2``, ``jamba``) into ModelConfig fields.

The Mamba mixers live in ``ssm`` (:class:`~perfcast.catalog.architecture.SSMConfig`); the transformer fields hold
what the family's attention and FFN layers use (Jamba) or, for a pure Mamba stack with no attention, stand-ins:
one head of ``hidden_size`` (never built) and ``intermediate_size`` = the mixer's d_inner. Defaults are those of
transformers 4.57's ``MambaConfig``, ``Mamba2Config`` and ``JambaConfig`` for keys a config leaves out.
"""

from __future__ import annotations

import math
from typing import Any

from perfcast.errors import UnsupportedError

__all__ = ["normalize_jamba", "normalize_mamba", "normalize_mamba2"]

Raw = dict[str, Any]

_UNBOUNDED_POSITIONS = 1 << 20  # a recurrent model has no position limit in its config; perfcast's own bound

# transformers 4.57 configuration_mamba.py / configuration_mamba2.py / configuration_jamba.py defaults
_MAMBA = {"state_size": 16, "expand": 2, "conv_kernel": 4, "use_bias": False, "use_conv_bias": True,
          "time_step_rank": "auto", "tie_word_embeddings": True, "vocab_size": 50280}
_MAMBA2 = {"num_heads": 128, "head_dim": 64, "state_size": 128, "expand": 2, "conv_kernel": 4, "n_groups": 8,
           "use_bias": False, "use_conv_bias": True, "chunk_size": 256, "tie_word_embeddings": False,
           "vocab_size": 32768}
_JAMBA = {"mamba_d_state": 16, "mamba_d_conv": 4, "mamba_expand": 2, "mamba_dt_rank": "auto",
          "mamba_conv_bias": True, "mamba_proj_bias": False, "attn_layer_period": 8, "attn_layer_offset": 4,
          "expert_layer_period": 2, "expert_layer_offset": 1, "num_experts": 16, "num_experts_per_tok": 2,
          "num_key_value_heads": 8, "tie_word_embeddings": False, "max_position_embeddings": 262144}


def _layers(raw: Raw) -> int:
    for key in ("num_hidden_layers", "n_layer"):
        if raw.get(key) is not None:
            return int(raw[key])
    raise KeyError("none of num_hidden_layers, n_layer")


def _dt_rank(value: Any, hidden: int) -> int:
    """``time_step_rank`` / ``mamba_dt_rank``: ``auto`` is ceil(hidden_size / 16), as transformers sets it."""
    return math.ceil(hidden / 16) if value == "auto" else int(value)


def _recurrent(raw: Raw, ssm: Raw, *, inner: int) -> Raw:
    """Fields of a pure Mamba stack: one RMSNorm and one mixer per layer, no attention, no position scheme."""
    hidden = int(raw["hidden_size"])
    layers = _layers(raw)
    return {
        "model_type": str(raw["model_type"]),
        "kind": "decoder",
        "num_layers": layers,
        "hidden_size": hidden,
        "num_heads": 1,  # stand-in: no attention layer
        "num_kv_heads": 1,
        "head_dim": hidden,
        "intermediate_size": inner,
        "vocab_size": int(raw["vocab_size"]),
        "max_positions": _UNBOUNDED_POSITIONS,
        "norm": "rmsnorm",
        "activation": str(raw.get("hidden_act", "silu")),
        "qkv_bias": False,
        "out_bias": False,
        "mlp_bias": False,
        "position": "none",
        "tie_word_embeddings": bool(raw["tie_word_embeddings"]),
        "num_norms_per_layer": 1,
        "ssm": {**ssm, "layer_mixers": ("ssm",) * layers},
    }


def normalize_mamba(raw: Raw) -> Raw:
    """Mamba-1 (``MambaForCausalLM``): per layer an RMSNorm and a selective-scan mixer, d_inner = expand x hidden."""
    raw = {**_MAMBA, **raw}
    hidden = int(raw["hidden_size"])
    inner = int(float(raw["expand"]) * hidden)
    ssm = {"version": 1, "state_size": int(raw["state_size"]), "conv_kernel": int(raw["conv_kernel"]),
           "intermediate_size": inner, "time_step_rank": _dt_rank(raw["time_step_rank"], hidden),
           "proj_bias": bool(raw["use_bias"]), "conv_bias": bool(raw["use_conv_bias"])}
    return _recurrent(raw, ssm, inner=inner)


def normalize_mamba2(raw: Raw) -> Raw:
    """Mamba-2 (``Mamba2ForCausalLM``): per layer an RMSNorm and an SSD mixer, d_inner = expand x hidden =
    num_heads x head_dim."""
    raw = {**_MAMBA2, **raw}
    hidden = int(raw["hidden_size"])
    inner = int(float(raw["expand"]) * hidden)
    ssm = {"version": 2, "state_size": int(raw["state_size"]), "conv_kernel": int(raw["conv_kernel"]),
           "intermediate_size": inner, "num_heads": int(raw["num_heads"]), "head_dim": int(raw["head_dim"]),
           "n_groups": int(raw["n_groups"]), "chunk_size": int(raw["chunk_size"]),
           "proj_bias": bool(raw["use_bias"]), "conv_bias": bool(raw["use_conv_bias"])}
    return _recurrent(raw, ssm, inner=inner)


def normalize_jamba(raw: Raw) -> Raw:
    """Jamba (``JambaForCausalLM``): every layer is an RMSNorm, a mixer (attention on layers ``i`` with
    ``i % attn_layer_period == attn_layer_offset``, a Mamba-1 mixer with dt/B/C RMSNorms elsewhere), an RMSNorm
    and an FFN (MoE on layers with ``i % expert_layer_period == expert_layer_offset``, a SwiGLU MLP elsewhere).
    Attention is GQA without biases and without any position encoding; the LM head is untied."""
    raw = {**_JAMBA, **raw}
    hidden, layers = int(raw["hidden_size"]), _layers(raw)
    period, offset = int(raw["expert_layer_period"]), int(raw["expert_layer_offset"])
    if offset != period - 1:  # MoEConfig's pattern: every period-th layer, the last of each period
        raise UnsupportedError(f"jamba with expert_layer_offset={offset} for expert_layer_period={period} is not "
                               f"supported; supported: offset = period - 1 (Jamba-v0.1: period 2, offset 1)")
    attn_period, attn_offset = int(raw["attn_layer_period"]), int(raw["attn_layer_offset"])
    mixers = tuple("attention" if i % attn_period == attn_offset else "ssm" for i in range(layers))
    heads = int(raw["num_attention_heads"])
    inner = int(float(raw["mamba_expand"]) * hidden)
    return {
        "model_type": "jamba",
        "kind": "decoder",
        "num_layers": layers,
        "hidden_size": hidden,
        "num_heads": heads,
        "num_kv_heads": int(raw["num_key_value_heads"]),
        "head_dim": hidden // heads,
        "intermediate_size": int(raw["intermediate_size"]),
        "vocab_size": int(raw["vocab_size"]),
        "max_positions": int(raw["max_position_embeddings"]),
        "norm": "rmsnorm",
        "activation": str(raw.get("hidden_act", "silu")),
        "gated_mlp": True,
        "qkv_bias": False,
        "out_bias": False,
        "mlp_bias": False,
        "position": "none",
        "tie_word_embeddings": bool(raw["tie_word_embeddings"]),
        "num_norms_per_layer": 2,
        "moe": {"num_experts": int(raw["num_experts"]), "experts_per_token": int(raw["num_experts_per_tok"]),
                "expert_intermediate_size": int(raw["intermediate_size"]), "layer_step": period},
        "ssm": {"version": 1, "state_size": int(raw["mamba_d_state"]), "conv_kernel": int(raw["mamba_d_conv"]),
                "intermediate_size": inner, "time_step_rank": _dt_rank(raw["mamba_dt_rank"], hidden),
                "proj_bias": bool(raw["mamba_proj_bias"]), "conv_bias": bool(raw["mamba_conv_bias"]),
                "dt_norms": True, "layer_mixers": mixers, "ffn_per_layer": True},
    }
