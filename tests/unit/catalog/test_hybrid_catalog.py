"""Nemotron-H / Nemotron 3 (``nemotron_h``) and Qwen3-Next (``qwen3_next``) in the catalog: the layer pattern, the
recurrent state per sequence, and parameter counts against the published figures.

transformers 4.57 has no ``nemotron_h`` class (the checkpoints ship it as remote code), so the Nemotron counts are
checked against the totals NVIDIA publishes (cited per case), within a tolerance that covers the rounding of the
published figure. Qwen3-Next is checked against transformers itself in tests/unit/workload/
test_reference_transformers.py; here against its card's rounded total.
"""

from __future__ import annotations

import pytest

from perfcast.catalog.models import from_hf_config, load_model
from perfcast.errors import CatalogError, UnsupportedError

# (catalog id, published total parameters, tolerance, source)
PUBLISHED_TOTALS = [
    # Nemotron-H (arXiv:2504.03624) and the model card name it an 8B model: rounding to a whole billion
    ("nemotron-h-8b", 8.0e9, 0.02, "Nemotron-H-8B-Base-8K model card, 8B"),
    # NVIDIA-Nemotron-Nano-9B-v2 model card: 8.89B parameters (to 0.01B)
    ("nemotron-nano-9b-v2", 8.89e9, 0.001, "NVIDIA-Nemotron-Nano-9B-v2 model card, 8.89B"),
    # Nemotron 3 Nano model card / technical report: 31.6B total (to 0.1B)
    ("nemotron-3-nano-30b-a3b", 31.6e9, 0.002, "NVIDIA-Nemotron-3-Nano-30B-A3B model card, 31.6B total"),
    # Qwen3-Next-80B-A3B model card: 80B total (to a whole billion)
    ("qwen3-next-80b-a3b", 80e9, 0.01, "Qwen3-Next-80B-A3B-Instruct model card, 80B total"),
]


@pytest.mark.parametrize(("model", "published", "tolerance", "source"), PUBLISHED_TOTALS)
def test_total_params_match_the_published_figure(model: str, published: float, tolerance: float,
                                                 source: str) -> None:
    ours = load_model(model).num_params()
    assert ours == pytest.approx(published, rel=tolerance), f"{model}: perfcast {ours:,} vs {source}"


def test_nemotron_3_nano_active_params_match_the_card() -> None:
    """The card: about 3.2B active parameters per token without the (input) embedding, 3.6B with it (to 0.1B,
    so within 0.05B)."""
    cfg = load_model("Nemotron_3_Nano")
    active, embedding = cfg.num_active_params(), cfg.vocab_size * cfg.hidden_size
    assert active == pytest.approx(3.6e9, abs=0.05e9)
    assert active - embedding == pytest.approx(3.2e9, abs=0.05e9)


@pytest.mark.parametrize(("model", "ssm", "attention", "mlp", "moe"), [
    ("nemotron-h-8b", 24, 4, 24, 0),  # Nemotron-H paper, Table 1
    ("nemotron-nano-9b-v2", 27, 4, 25, 0),
    ("Nemotron 3 Nano", 23, 6, 0, 23),  # Nemotron 3 Nano report: 23 Mamba-2, 6 attention, 23 MoE
])
def test_nemotron_layer_pattern(model: str, ssm: int, attention: int, mlp: int, moe: int) -> None:
    cfg = load_model(model)
    assert cfg.ssm is not None and cfg.position == "none" and not cfg.gated_mlp and cfg.activation == "relu2"
    mixers = cfg.ssm.layer_mixers
    assert [mixers.count(m) for m in ("ssm", "attention", "mlp", "moe")] == [ssm, attention, mlp, moe]
    assert mixers[0] == "ssm"


def test_nemotron_3_nano_moe_is_non_gated_with_a_shared_expert() -> None:
    moe = load_model("nemotron-3-nano-30b-a3b").moe
    assert moe is not None
    assert (moe.num_experts, moe.experts_per_token, moe.expert_intermediate_size) == (128, 6, 1856)
    assert (moe.num_shared_experts, moe.shared_intermediate_size, moe.gated, moe.router_bias) == (1, 3712, False, True)


def test_qwen3_next_pattern_and_gated_attention() -> None:
    cfg = load_model("Qwen3-Next-80B-A3B")
    lin = cfg.linear_attention
    assert lin is not None and cfg.ssm is None
    assert lin.layer_types[:4] == ("linear_attention",) * 3 + ("full_attention",)
    assert lin.num_linear_layers() == 36
    assert cfg.attention_output_gate and cfg.qk_norm == "rmsnorm" and cfg.rotary_frac == 0.25
    assert cfg.moe is not None and cfg.moe.shared_expert_gate and cfg.moe.num_experts == 512


def test_delta_net_state_per_sequence() -> None:
    """Conv state: (conv_kernel - 1) x (q, k, v channels); recurrent state: value heads x key dim x value dim."""
    lin = load_model("qwen3-next-80b-a3b").linear_attention
    assert lin is not None
    assert lin.conv_state_elements == 3 * (2 * 16 * 128 + 32 * 128)
    assert lin.recurrent_state_elements == 32 * 128 * 128
    assert lin.state_elements() == (lin.conv_state_elements, lin.recurrent_state_elements)


def _nemotron_h(**overrides: object) -> dict[str, object]:
    raw = dict(load_model("nemotron-h-8b").hf_config)
    raw.update(overrides)
    return raw


def test_nemotron_h_unknown_layer_character_is_refused() -> None:
    pattern = "M-M*" + "X" + "-" * 47
    with pytest.raises(UnsupportedError, match="'X'"):
        from_hf_config(_nemotron_h(hybrid_override_pattern=pattern), model_id="x")


def test_nemotron_h_pattern_length_must_match_the_layers() -> None:
    with pytest.raises(CatalogError, match="52 characters for num_hidden_layers=50"):
        from_hf_config(_nemotron_h(num_hidden_layers=50), model_id="x")


def test_nemotron_h_shape_keys_are_required() -> None:
    raw = _nemotron_h()
    del raw["mamba_num_heads"]
    with pytest.raises(CatalogError, match="mamba_num_heads"):
        from_hf_config(raw, model_id="x")


def test_qwen3_next_layer_types_and_refusals() -> None:
    raw = dict(load_model("qwen3-next-80b-a3b").hf_config)
    types = ["linear_attention", "full_attention"] * 24
    assert from_hf_config({**raw, "layer_types": types}, model_id="x").linear_attention.layer_types == tuple(types)
    with pytest.raises(UnsupportedError, match="sliding_attention"):
        from_hf_config({**raw, "layer_types": ["sliding_attention"] * 48}, model_id="x")
    with pytest.raises(UnsupportedError, match="mlp_only_layers"):
        from_hf_config({**raw, "mlp_only_layers": [0]}, model_id="x")


def test_linear_attention_keys_in_another_family_are_refused() -> None:
    raw = {**dict(load_model("qwen3-30b-a3b").hf_config), "linear_num_value_heads": 32}
    with pytest.raises(UnsupportedError, match="Gated DeltaNet"):
        from_hf_config(raw, model_id="x")
