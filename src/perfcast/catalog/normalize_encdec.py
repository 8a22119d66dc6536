"""Read the config of a dense encoder-decoder family (``t5``) into ModelConfig fields.

T5 (Raffel et al. 2020, arXiv:1910.10683; ``T5ForConditionalGeneration``) v1.0 and v1.1 / FLAN-T5: an encoder and
a decoder stack of ``d_model`` width, attention heads of ``d_kv`` (which need not be ``d_model / num_heads``),
bias-free linears, the T5 LayerNorm (a scale only: RMSNorm), a relative position bias computed in the first
layer's self-attention of each stack and shared by the later layers (perfcast does not count its tiny
``buckets x heads`` table, as for Switch), a cross-attention block in every decoder layer, and an MLP that is
ReLU (v1.0, ``feed_forward_proj: relu``) or gated GELU (v1.1, ``gated-gelu``: ``gelu_new(wi_0 x) * wi_1 x``).
The LM head is tied to the shared embedding (v1.0) or not (v1.1: ``tie_word_embeddings: false``).

Defaults are transformers 4.57's ``T5Config`` for keys a config leaves out. T5 has no position limit in its config
(``n_positions`` is a training length, not a table): perfcast's own bound of 2**20 tokens, as for Switch.
"""

from __future__ import annotations

from typing import Any

from perfcast.errors import UnsupportedError

__all__ = ["normalize_t5"]

Raw = dict[str, Any]

_UNBOUNDED_POSITIONS = 1 << 20  # relative positions: no limit in the config; perfcast's own bound

# transformers 4.57 configuration_t5.py defaults
_T5 = {"vocab_size": 32128, "d_model": 512, "d_kv": 64, "d_ff": 2048, "num_layers": 6, "num_heads": 8,
       "feed_forward_proj": "relu", "tie_word_embeddings": True}


def _feed_forward(proj: str) -> tuple[str, bool]:
    """(activation, gated) of T5's ``feed_forward_proj``, parsed as ``T5Config`` does: ``[gated-]ACT``, and
    ``gated-gelu`` means ``gelu_new`` (the tanh approximation)."""
    parts = proj.split("-")
    gated = parts[0] == "gated"
    if len(parts) > 2 or (len(parts) == 2 and not gated):
        raise ValueError(f"feed_forward_proj={proj!r} is not a valid activation; use ACT or gated-ACT (relu, "
                         "gated-gelu)")
    act = parts[-1]
    if proj == "gated-gelu":
        act = "gelu_new"
    if act not in ("relu", "gelu", "gelu_new", "silu"):
        raise UnsupportedError(f"t5 feed_forward_proj={proj!r} is not supported; supported: relu, gated-gelu, "
                               "gelu, gated-silu")
    return act, gated


def normalize_t5(raw: Raw) -> Raw:
    """T5 v1.0 / v1.1 / FLAN-T5 (see the module docstring)."""
    raw = {**_T5, **{k: v for k, v in raw.items() if v is not None}}
    act, gated = _feed_forward(str(raw["feed_forward_proj"]))
    d_model, heads = int(raw["d_model"]), int(raw["num_heads"])
    encoder_layers = int(raw["num_layers"])
    return {
        "model_type": "t5",
        "kind": "encoder-decoder",
        "num_layers": encoder_layers,
        "num_decoder_layers": int(raw.get("num_decoder_layers") or encoder_layers),
        "hidden_size": d_model,
        "num_heads": heads,
        "num_kv_heads": heads,
        "head_dim": int(raw["d_kv"]),
        "intermediate_size": int(raw["d_ff"]),
        "vocab_size": int(raw["vocab_size"]),
        "max_positions": _UNBOUNDED_POSITIONS,
        "norm": "rmsnorm",  # T5LayerNorm: scale only, no mean subtraction
        "activation": act,
        "gated_mlp": gated,
        "qkv_bias": False,
        "out_bias": False,
        "mlp_bias": False,
        "position": "relative",
        "tie_word_embeddings": bool(raw["tie_word_embeddings"]),
    }
