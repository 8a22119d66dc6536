"""Read the config of a hybrid family with Mamba-2 or linear-attention layers beside attention (``nemotron_h``,
``qwen3_next``) into ModelConfig fields.

``nemotron_h`` (NVIDIA Nemotron-H, Nemotron Nano 2, Nemotron 3; ``NemotronHForCausalLM``, remote code
``modeling_nemotron_h.py`` shipped with the checkpoints): the Mamba-2 mixers live in ``ssm``
(:class:`~perfcast.catalog.architecture.SSMConfig`, one ``layer_mixers`` entry per character of
``hybrid_override_pattern``), the attention, MLP and MoE layers in the transformer fields and ``moe``.
``qwen3_next`` (Qwen3-Next, transformers 4.57 ``Qwen3NextForCausalLM``): the Gated DeltaNet layers live in
``linear_attention`` (:class:`~perfcast.catalog.linear_attention.GatedDeltaNetConfig`), the gated full attention
and the MoE in the transformer fields and ``moe``.

Keys that set a shape are required (a config missing one is refused with a KeyError rather than filled with a
guess); defaults are taken only where the config class's own default is plain (biases off, untied head).
"""

from __future__ import annotations

from typing import Any

from perfcast.errors import UnsupportedError

__all__ = ["normalize_nemotron_h", "normalize_qwen3_next"]

Raw = dict[str, Any]

# hybrid_override_pattern characters (NemotronHConfig._pattern): the mixer each layer is
_NEMOTRON_H_MIXERS = {"M": "ssm", "*": "attention", "-": "mlp", "E": "moe"}
_NEMOTRON_H_CHUNK = 128  # NemotronHConfig's chunk_size default (mamba_chunk_size)


def _key(raw: Raw, *keys: str) -> Any:
    """The first of ``keys`` the config sets (not null), or KeyError naming them all."""
    for key in keys:
        if raw.get(key) is not None:
            return raw[key]
    raise KeyError(f"none of {', '.join(keys)}")


def _pattern_mixers(raw: Raw, layers: int) -> tuple[str, ...]:
    pattern = str(_key(raw, "hybrid_override_pattern"))
    if len(pattern) != layers:
        raise ValueError(f"hybrid_override_pattern has {len(pattern)} characters for num_hidden_layers={layers} "
                         "(one character per layer)")
    unknown = sorted(set(pattern) - set(_NEMOTRON_H_MIXERS))
    if unknown:
        raise UnsupportedError(f"nemotron_h layer type(s) {', '.join(map(repr, unknown))} in hybrid_override_pattern "
                               f"are not modelled; supported: M (Mamba-2), * (attention), - (MLP), E (MoE)")
    return tuple(_NEMOTRON_H_MIXERS[c] for c in pattern)


def normalize_nemotron_h(raw: Raw) -> Raw:
    """Nemotron-H (``NemotronHForCausalLM``): every layer is an RMSNorm, one mixer and a residual add; the mixer is
    the ``hybrid_override_pattern`` character's: ``M`` a Mamba-2 mixer (``mamba_num_heads`` x ``mamba_head_dim``,
    ``n_groups`` groups of ``ssm_state_size``, ``conv_kernel`` taps, ``chunk_size``; in/out projections biased with
    ``use_bias``, conv1d with ``use_conv_bias``), ``*`` GQA attention with no position encoding (Nemotron-H uses no
    RoPE; biases with ``attention_bias``), ``-`` a non-gated MLP (up, ``mlp_hidden_act`` (relu2), down; biases with
    ``mlp_bias``), ``E`` an MoE layer (Nemotron 3): ``n_routed_experts`` non-gated relu2 experts of
    ``moe_intermediate_size``, top ``num_experts_per_tok`` by a sigmoid router with a score-correction bias
    (group-limited by ``n_group`` / ``topk_group``, renormalized with ``norm_topk_prob``, scaled by
    ``routed_scaling_factor``: a few elementwise ops), beside ``n_shared_experts`` shared experts of
    ``moe_shared_expert_intermediate_size``. A final RMSNorm; the LM head is untied unless the config ties it."""
    hidden, layers = int(raw["hidden_size"]), int(raw["num_hidden_layers"])
    mixers = _pattern_mixers(raw, layers)
    heads = int(raw["num_attention_heads"])
    m_heads, m_head_dim = int(_key(raw, "mamba_num_heads")), int(_key(raw, "mamba_head_dim"))
    groups = int(_key(raw, "n_groups", "mamba_n_groups"))
    moe = None
    if "moe" in mixers:
        shared = int(raw.get("n_shared_experts") or 0)
        moe = {"num_experts": int(raw["n_routed_experts"]), "experts_per_token": int(raw["num_experts_per_tok"]),
               "expert_intermediate_size": int(raw["moe_intermediate_size"]),
               "num_shared_experts": shared,
               "shared_intermediate_size": int(raw["moe_shared_expert_intermediate_size"]) if shared else 0,
               "gated": False, "expert_bias": bool(raw.get("mlp_bias", False)),
               "router_bias": True}  # e_score_correction_bias
    dense = raw.get("intermediate_size") or (raw.get("moe_intermediate_size") if moe else None)
    if dense is None:
        raise KeyError("intermediate_size")
    return {
        "model_type": "nemotron_h",
        "kind": "decoder",
        "num_layers": layers,
        "hidden_size": hidden,
        "num_heads": heads,
        "num_kv_heads": int(_key(raw, "num_key_value_heads")),
        "head_dim": int(raw.get("head_dim") or raw.get("attention_head_dim") or hidden // heads),
        "intermediate_size": int(dense),
        "vocab_size": int(raw["vocab_size"]),
        "max_positions": int(raw["max_position_embeddings"]),
        "norm": "rmsnorm",
        "activation": str(raw.get("mlp_hidden_act", "relu2")),
        "gated_mlp": False,
        "qkv_bias": bool(raw.get("attention_bias", False)),
        "out_bias": bool(raw.get("attention_bias", False)),
        "mlp_bias": bool(raw.get("mlp_bias", False)),
        "position": "none",
        "tie_word_embeddings": bool(raw.get("tie_word_embeddings", False)),
        "num_norms_per_layer": 1,
        "moe": moe,
        "ssm": {"version": 2, "state_size": int(_key(raw, "ssm_state_size")),
                "conv_kernel": int(_key(raw, "conv_kernel", "mamba_d_conv")),
                "intermediate_size": m_heads * m_head_dim,  # NemotronHMamba2Mixer: heads x head_dim, not expand
                "num_heads": m_heads, "head_dim": m_head_dim, "n_groups": groups,
                "chunk_size": int(raw.get("chunk_size") or raw.get("mamba_chunk_size") or _NEMOTRON_H_CHUNK),
                "proj_bias": bool(raw.get("use_bias", raw.get("mamba_proj_bias", False))),
                "conv_bias": bool(raw.get("use_conv_bias", True)), "layer_mixers": mixers},
    }


def _qwen3_next_layer_types(raw: Raw, layers: int) -> tuple[str, ...]:
    """``layer_types``, or as ``Qwen3NextConfig`` derives it: every ``full_attention_interval``-th layer (1-based,
    default 4) full attention, the others linear attention."""
    types = raw.get("layer_types")
    if types:
        if len(types) != layers:
            raise ValueError(f"layer_types has {len(types)} entries for num_hidden_layers={layers}")
        unknown = sorted({str(t) for t in types} - {"linear_attention", "full_attention"})
        if unknown:
            raise UnsupportedError(f"qwen3_next layer type(s) {unknown} are not modelled; supported: "
                                   "linear_attention, full_attention")
        return tuple(str(t) for t in types)
    interval = int(raw.get("full_attention_interval") or 4)
    return tuple("full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(layers))


def normalize_qwen3_next(raw: Raw) -> Raw:
    """Qwen3-Next (``Qwen3NextForCausalLM``): per layer an RMSNorm, a mixer, an RMSNorm and an FFN, with residual
    adds. The mixer is a Gated DeltaNet (``linear_attention`` layers) or gated full attention (q_proj emits the
    query and a per-element output gate, sigmoid(gate) scales the attention output before o_proj; per-head QK
    RMSNorm; RoPE on ``partial_rotary_factor`` of each head; GQA). The FFN is an MoE block on every
    ``decoder_sparse_step``-th layer (``num_experts`` SwiGLU experts, softmax top-k, renormalized with
    ``norm_topk_prob``, and one shared expert scaled by a sigmoid gate), a SwiGLU MLP elsewhere. RMSNorms are
    zero-centred (weight + 1: one add, the same weights). ``mlp_only_layers`` (dense layers at chosen indices) is
    refused."""
    if raw.get("mlp_only_layers"):
        raise UnsupportedError("qwen3_next with mlp_only_layers (dense layers at arbitrary indices) is not supported")
    hidden, layers = int(raw["hidden_size"]), int(raw["num_hidden_layers"])
    heads = int(raw["num_attention_heads"])
    bias = bool(raw.get("attention_bias", False))
    shared = int(raw.get("shared_expert_intermediate_size") or 0)
    experts = int(raw["num_experts"])
    return {
        "model_type": "qwen3_next",
        "kind": "decoder",
        "num_layers": layers,
        "hidden_size": hidden,
        "num_heads": heads,
        "num_kv_heads": int(raw["num_key_value_heads"]),
        "head_dim": int(raw.get("head_dim") or hidden // heads),
        "intermediate_size": int(raw["intermediate_size"]),
        "vocab_size": int(raw["vocab_size"]),
        "max_positions": int(raw["max_position_embeddings"]),
        "norm": "rmsnorm",
        "activation": str(raw.get("hidden_act", "silu")),
        "gated_mlp": True,
        "qkv_bias": bias,
        "out_bias": bias,
        "mlp_bias": False,
        "position": "rotary",
        "rotary_frac": float(raw.get("partial_rotary_factor") or 0.25),
        "tie_word_embeddings": bool(raw.get("tie_word_embeddings", False)),
        "num_norms_per_layer": 2,
        "qk_norm": "rmsnorm",
        "attention_output_gate": True,
        "moe": {"num_experts": experts, "experts_per_token": int(raw["num_experts_per_tok"]),
                "expert_intermediate_size": int(raw["moe_intermediate_size"]),
                "num_shared_experts": 1 if shared else 0, "shared_intermediate_size": shared,
                "shared_expert_gate": bool(shared), "layer_step": int(raw.get("decoder_sparse_step") or 1)}
        if experts else None,
        "linear_attention": {
            "num_key_heads": int(raw["linear_num_key_heads"]), "num_value_heads": int(raw["linear_num_value_heads"]),
            "key_head_dim": int(raw["linear_key_head_dim"]), "value_head_dim": int(raw["linear_value_head_dim"]),
            "conv_kernel": int(raw["linear_conv_kernel_dim"]),
            "layer_types": _qwen3_next_layer_types(raw, layers)},
    }
