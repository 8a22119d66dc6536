"""Synthetic Megatron GPT names ("GPT-18B (hidden 6144, 40 layers, vocab 51200)") become GPT-2-style models."""

from __future__ import annotations

import pytest

from perfcast.catalog import load_model
from perfcast.catalog.params import count_params
from perfcast.catalog.synthetic import parse_synthetic_gpt, sc21_heads

# Nominal sizes in the names are rounded to two or three significant digits.
NOMINAL_TOLERANCE = 0.05

# Narayanan et al. SC'21 (arXiv:2104.04473) Table 1: name, heads, hidden, layers (vocab 51200, seq 2048).
SC21_TABLE_1 = [
    ("1.7B", 24, 2304, 24),
    ("3.6B", 32, 3072, 30),
    ("7.5B", 32, 4096, 36),
    ("18B", 48, 6144, 40),
    ("39B", 64, 8192, 48),
    ("76B", 80, 10240, 60),
    ("145B", 96, 12288, 80),
    ("310B", 128, 16384, 96),
    ("530B", 128, 20480, 105),
    ("1T", 160, 25600, 128),
]


@pytest.mark.parametrize(("size", "heads", "hidden", "layers"), SC21_TABLE_1, ids=[r[0] for r in SC21_TABLE_1])
def test_sc21_names_take_heads_from_table_1(size: str, heads: int, hidden: int, layers: int) -> None:
    cfg = parse_synthetic_gpt(f"GPT-{size} (hidden {hidden}, {layers} layers, vocab 51200)")
    assert cfg is not None
    assert (cfg.num_heads, cfg.hidden_size, cfg.num_layers, cfg.vocab_size) == (heads, hidden, layers, 51200)
    assert cfg.max_positions == 2048  # SC'21 trains with sequence length 2048
    assert cfg.tie_word_embeddings


@pytest.mark.parametrize(("size", "heads", "hidden", "layers"), SC21_TABLE_1, ids=[r[0] for r in SC21_TABLE_1])
def test_sc21_sizes_match_the_name(size: str, heads: int, hidden: int, layers: int) -> None:
    cfg = load_model(f"GPT-{size} (hidden {hidden}, {layers} layers, vocab 51200)")
    scale = 1e12 if size.endswith("T") else 1e9
    nominal = float(size[:-1]) * scale  # the size in the paper's table
    assert count_params(cfg).total == pytest.approx(nominal, rel=NOMINAL_TOLERANCE)


def test_gpt2_style_layout() -> None:
    cfg = parse_synthetic_gpt("GPT-18B (hidden 6144, 40 layers, vocab 51200)")
    assert cfg is not None
    assert cfg.model_type == "gpt2" and cfg.kind == "decoder"
    assert cfg.position == "learned" and cfg.norm == "layernorm" and cfg.activation == "gelu"
    assert cfg.intermediate_size == 4 * 6144 and not cfg.gated_mlp
    assert cfg.qkv_bias and cfg.out_bias and cfg.mlp_bias
    assert cfg.num_kv_heads == cfg.num_heads == 48
    assert cfg.moe is None


def test_h100_table_names_give_heads_and_use_seq_4096() -> None:
    # Megatron-LM README H100 table (Megatron-Core r0.8.0): seq_len 4096, vocab 131072, heads in the name
    cfg = parse_synthetic_gpt("GPT-70B (heads 64, hidden 8192, 84 layers, vocab 131072)")
    assert cfg is not None
    assert (cfg.num_heads, cfg.hidden_size, cfg.num_layers, cfg.vocab_size) == (64, 8192, 84, 131072)
    assert cfg.max_positions == 4096
    assert cfg.head_dim == 128


@pytest.mark.parametrize(
    ("name", "nominal"),
    [
        ("GPT-1.7B (heads 16, hidden 2048, 24 layers, vocab 131072)", 1.7e9),
        ("GPT-7.1B (heads 32, hidden 4096, 30 layers, vocab 131072)", 7.1e9),
        ("GPT-16B (heads 48, hidden 6144, 32 layers, vocab 131072)", 16e9),
        ("GPT-70B (heads 64, hidden 8192, 84 layers, vocab 131072)", 70e9),
        ("GPT-462B (heads 144, hidden 18432, 112 layers, vocab 131072)", 462e9),
    ],
)
def test_h100_table_sizes_match_the_name(name: str, nominal: float) -> None:
    # The nominal sizes of the H100 table only add up with untied input/output embeddings.
    cfg = load_model(name)
    assert not cfg.tie_word_embeddings
    assert count_params(cfg).total == pytest.approx(nominal, rel=NOMINAL_TOLERANCE)


def test_heads_in_the_name_win_over_the_table() -> None:
    assert sc21_heads().heads_by_hidden[6144] == 48
    cfg = parse_synthetic_gpt("GPT-18B (heads 64, hidden 6144, 40 layers, vocab 51200)")
    assert cfg is not None and cfg.num_heads == 64 and cfg.head_dim == 96


def test_unknown_hidden_falls_back_to_head_dim_128() -> None:
    assert 5120 not in sc21_heads().heads_by_hidden
    cfg = parse_synthetic_gpt("GPT-13B (hidden 5120, 40 layers, vocab 51200)")
    assert cfg is not None and cfg.num_heads == 40 and cfg.head_dim == 128


def test_vocab_defaults_and_items_in_any_order() -> None:
    cfg = parse_synthetic_gpt("GPT-18B (40 layers, hidden 6144)")
    assert cfg is not None and cfg.vocab_size == 51200 and cfg.num_layers == 40


def test_explicit_sequence_length() -> None:
    cfg = parse_synthetic_gpt("GPT-18B (hidden 6144, 40 layers, vocab 51200, seq 8192)")
    assert cfg is not None and cfg.max_positions == 8192


def test_id_is_the_normalized_text_and_source_is_the_paper() -> None:
    cfg = parse_synthetic_gpt("GPT-18B (hidden 6144, 40 layers, vocab 51200)")
    assert cfg is not None
    assert cfg.id == "gpt-18b-(hidden-6144,-40-layers,-vocab-51200)"
    assert cfg.hf_id is None
    assert any("2104.04473" in s for s in cfg.source)


@pytest.mark.parametrize(
    "text",
    [
        "GPT-1T",  # no shape: that is the catalog model gpt-1t
        "GPT3-5B",
        "Llama 2 7B",
        "meta-llama/Llama-2-7b-hf",
        "GPT-18B (hidden 6144)",  # no layer count
        "GPT-18B (40 layers)",  # no hidden size
        "GPT-18B (hidden 6144, 40 layers, colour 3)",  # unknown item
        "GPT-18B (hidden 6144, 40 layers, hidden 4096)",  # repeated item
        "GPT-18B (heads 7, hidden 6144, 40 layers)",  # heads do not divide hidden
        "BERT-18B (hidden 6144, 40 layers)",
        "",
    ],
)
def test_other_text_is_not_synthetic(text: str) -> None:
    assert parse_synthetic_gpt(text) is None


def test_load_model_prefers_the_catalog() -> None:
    assert load_model("GPT-1T").id == "gpt-1t"
    assert load_model("GPT-1T (hidden 25600, 128 layers, vocab 51200)").id.startswith("gpt-1t-(")
