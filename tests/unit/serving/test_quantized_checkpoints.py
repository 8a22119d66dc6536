"""Serving honours a checkpoint's quantization by default: gpt-oss-120b's MXFP4 experts fit one 80 GB GPU, as
published (OpenAI gpt-oss model card: "runs on a single 80GB GPU")."""

from __future__ import annotations

import pytest

from perfcast.catalog import load_hardware, load_model
from perfcast.catalog.params import count_params
from perfcast.dtypes import DType
from perfcast.errors import ConfigError
from perfcast.serving.config import ServingConfig
from perfcast.serving.iteration import IterationModel, weight_bytes_per_gpu


def _expert_weights(model: str) -> float:
    """Elements of every routed expert's weight matrices (gate, up, down) of every MoE layer."""
    cfg = load_model(model)
    moe = cfg.moe
    assert moe is not None
    return 3.0 * cfg.hidden_size * moe.expert_intermediate_size * moe.num_experts * cfg.num_layers


def test_serving_defaults_to_the_checkpoints_quantization() -> None:
    assert ServingConfig(model="gpt-oss-120b", hardware="h100-sxm-80gb").quantization == "auto"


def test_gpt_oss_120b_weight_bytes_are_mxfp4_experts_and_16_bit_elsewhere() -> None:
    experts = _expert_weights("gpt-oss-120b")
    total = count_params(load_model("gpt-oss-120b")).total
    expected = experts * (0.5 + 1 / 32) + (total - experts) * 2  # 4 bits + an 8-bit scale per 32 values
    assert weight_bytes_per_gpu("gpt-oss-120b", dtype=DType.BF16) == pytest.approx(expected, rel=1e-12)
    assert weight_bytes_per_gpu("gpt-oss-120b", dtype=DType.BF16, quantization="none") == pytest.approx(total * 2)
    assert 60e9 < expected < 70e9


def test_gpt_oss_120b_fits_one_h100() -> None:
    model = IterationModel("gpt-oss-120b", "h100-sxm-80gb", max_tokens=256, max_seqs=8)
    assert model.quant.scheme == "mxfp4" and model.quant.weight_only
    model.check_fits(0.9)  # raises when the weights alone do not fit
    assert model.weight_bytes < 0.9 * load_hardware("h100-sxm-80gb").memory_bytes
    assert model.kv is DType.BF16  # the checkpoint's quantization leaves the KV cache in the activation dtype


def test_a_16_bit_copy_of_gpt_oss_120b_does_not_fit_one_h100() -> None:
    with pytest.raises(ConfigError, match="GiB of weights per GPU"):
        IterationModel("gpt-oss-120b", "h100-sxm-80gb", quantization="none", max_tokens=256, max_seqs=8).check_fits(0.9)


def test_deepseek_v3_weights_are_block_scaled_fp8() -> None:
    cfg = load_model("deepseek-v3")
    count = count_params(cfg)
    outer = 2 * count.embedding  # untied embedding and LM head stay 16-bit
    block = count.total - outer
    expected = block * (1 + 4 / 128**2) + outer * 2
    assert weight_bytes_per_gpu(cfg, tp=8, dtype=DType.BF16) == pytest.approx(expected / 8, rel=1e-12)


def test_the_iteration_model_says_how_the_gpu_runs_fp8_weights() -> None:
    h100 = IterationModel("deepseek-v3", "h100-sxm-80gb", tp=8, max_tokens=64, max_seqs=4)
    a100 = IterationModel("deepseek-v3", "a100-sxm-80gb", tp=8, max_tokens=64, max_seqs=4)
    assert not h100.quant.weight_only
    assert "weight-only w8a16 on a100-sxm-80gb" in a100.quantization_label
    assert h100.weight_bytes == a100.weight_bytes  # the same checkpoint on both
