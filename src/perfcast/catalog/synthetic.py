"""Synthetic Megatron-style GPT models named by their shape.

The Megatron-LM papers benchmark GPT models that exist only as a shape, and the
published tables name them by it: ``GPT-18B (hidden 6144, 40 layers, vocab 51200)``
(Narayanan et al., SC'21, Table 1) or ``GPT-70B (heads 64, hidden 8192, 84 layers,
vocab 131072)`` (Megatron-LM README, Megatron-Core r0.8.0 H100 table).
:func:`parse_synthetic_gpt` builds such a model: a GPT-2-style decoder (learned
positions, LayerNorm, GELU, 4h MLP, biases), the layout of
Megatron-LM's GPT model.

The attention heads come from the text when it has them; otherwise from SC'21
Table 1 (``data/defaults/sc21_heads.yaml``) when the hidden size is one of its rows; otherwise hidden / 128.

Embeddings: SC'21's parameter formula, 12lh^2 (1 + 13/12h + (V + s)/12lh),
counts the vocabulary once (tied input and output embeddings), and its sizes
follow it. The H100 table's nominal sizes only add up with untied input and
output embeddings (GPT-1.7B: 24 x 12 x 2048^2 + 2 x 131072 x 2048 = 1.74B;
tied would be 1.48B), so names with its 131072-token vocabulary are built untied.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from perfcast.catalog.model_config import ModelConfig, from_hf_config
from perfcast.catalog.paths import normalize_name
from perfcast.datafiles import data_path
from perfcast.errors import CatalogError
from perfcast.yamlio import load_model_file

__all__ = ["HeadsTable", "parse_synthetic_gpt", "sc21_heads"]

H100_SOURCE = "github.com/NVIDIA/Megatron-LM README.md + images/model_table.png (Megatron-Core r0.8.0, H100)"


class HeadsTable(BaseModel):
    """A published table of attention heads by hidden size (``data/defaults/sc21_heads.yaml``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str = Field(min_length=1, description="the paper and table the numbers are from")
    heads_by_hidden: dict[int, int] = Field(min_length=1, description="hidden size -> attention heads")


@cache
def sc21_heads() -> HeadsTable:
    """SC'21 Table 1's attention heads by hidden size (1.7B ... 1T), read once from the data tree."""
    table: HeadsTable = load_model_file(data_path("defaults", "sc21_heads.yaml"), HeadsTable,
                                        what="heads table", error=CatalogError)
    return table


_DEFAULT_HEAD_DIM = 128
_SC21_SEQ_LEN = 2048  # SC'21 benchmarks use sequence length 2048
_H100_SEQ_LEN = 4096  # the Megatron-Core H100 table (vocab 131072) uses 4096
_H100_VOCAB = 131072

_NAME = re.compile(r"^\s*gpt-?\s*(?P<size>\d+(?:\.\d+)?\s*[mbt])\s*\((?P<body>[^()]*)\)\s*$", re.IGNORECASE)
_ITEM_VALUE_FIRST = re.compile(r"^(?P<value>\d+)\s+(?P<key>[a-z_]+)$")
_ITEM_KEY_FIRST = re.compile(r"^(?P<key>[a-z_]+)\s*[:=]?\s*(?P<value>\d+)$")
_KEYS = {
    "hidden": "hidden",
    "hidden_size": "hidden",
    "layers": "layers",
    "layer": "layers",
    "num_layers": "layers",
    "heads": "heads",
    "head": "heads",
    "attention_heads": "heads",
    "vocab": "vocab",
    "vocab_size": "vocab",
    "seq": "seq",
    "seq_len": "seq",
    "ctx": "seq",
}


def _parse_items(body: str) -> dict[str, int] | None:
    items: dict[str, int] = {}
    for part in body.split(","):
        text = part.strip().lower()
        if not text:
            continue
        match = _ITEM_VALUE_FIRST.match(text) or _ITEM_KEY_FIRST.match(text)
        if match is None or match["key"] not in _KEYS:
            return None
        key = _KEYS[match["key"]]
        if key in items:
            return None
        items[key] = int(match["value"])
    return items


def parse_synthetic_gpt(text: str) -> ModelConfig | None:
    """Build the GPT named by ``text`` ("GPT-18B (hidden 6144, 40 layers, vocab 51200)"), or None.

    The parentheses must give ``hidden`` and ``layers`` (as "N layers" or
    "layers N"); ``heads``, ``vocab`` (default 51200) and ``seq`` are optional.
    ``max_positions`` is ``seq`` if given, else 4096 for the 131072-vocabulary
    H100 table and 2048 (the SC'21 sequence length) otherwise. Text of any
    other form returns None.
    """
    match = _NAME.match(text)
    if match is None:
        return None
    items = _parse_items(match["body"])
    if items is None or "hidden" not in items or "layers" not in items:
        return None
    hidden, layers = items["hidden"], items["layers"]
    vocab = items.get("vocab", 51200)
    sc21 = sc21_heads()
    heads = items.get("heads") or sc21.heads_by_hidden.get(hidden) or max(1, hidden // _DEFAULT_HEAD_DIM)
    if hidden <= 0 or layers <= 0 or vocab <= 0 or hidden % heads:
        return None
    h100 = vocab == _H100_VOCAB
    seq = items.get("seq") or (_H100_SEQ_LEN if h100 else _SC21_SEQ_LEN)
    raw: dict[str, Any] = {
        "activation_function": "gelu",
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "n_embd": hidden,
        "n_head": heads,
        "n_layer": layers,
        "n_positions": seq,
        "tie_word_embeddings": not h100,
        "vocab_size": vocab,
    }
    if "heads" in items:
        heads_from = "heads from the name"
    elif hidden in sc21.heads_by_hidden:
        heads_from = "heads from SC'21 Table 1 by hidden size"
    else:
        heads_from = f"heads = hidden / {_DEFAULT_HEAD_DIM} (not in the name nor in SC'21 Table 1)"
    source = H100_SOURCE if h100 else sc21.source
    meta = {
        "aliases": (),
        "source": (source,),
        "notes": (
            f"Synthetic Megatron GPT built from its name: {heads_from}; max_positions {seq} tokens; "
            "GPT-2 layout (learned positions, LayerNorm, GELU, 4h MLP, biases); "
            + ("untied input/output embeddings (H100 table sizes)." if h100 else "tied embeddings (SC'21).")
        ),
    }
    return from_hf_config(raw, model_id=normalize_name(text), meta=meta)
