"""CLI: ``perfcast predict`` as issue 14 asks for it: ``--tp``, the checkpoint's dtype by default, and a memory
verdict (exit 1 with the breakdown) for a configuration that does not fit."""

from __future__ import annotations

import json

import pytest
from cli_helpers import does_not_fit, invoke, parse_json, user_error

GPT2 = ["predict", "-m", "gpt2", "-H", "a100-sxm-80gb", "-b", "4", "-s", "128", "--json"]


def test_predict_tp_is_a_spelling_of_parallelism_tp() -> None:
    by_tp = parse_json(invoke([*GPT2, "--tp", "2"]))
    by_parallelism = parse_json(invoke([*GPT2, "--parallelism", "tp2"]))
    assert by_tp["parallelism"] == "tp2" and by_tp["step_time_s"] == by_parallelism["step_time_s"]
    assert parse_json(invoke([*GPT2, "--tp", "2", "--parallelism", "tp2"]))["parallelism"] == "tp2"
    assert parse_json(invoke([*GPT2, "--tp", "1"]))["parallelism"] == "none"


@pytest.mark.parametrize(("args", "fragment"), [
    (["--tp", "2", "--parallelism", "dp2"], "--tp 2 and --parallelism dp2"),
    (["--tp", "0"], "--tp 0"),
    (["--tp", "5"], "tp=5"),  # gpt2 has 12 heads
])
def test_predict_tp_conflicts_and_bad_degrees_are_one_line(args: list[str], fragment: str) -> None:
    assert fragment in user_error(invoke([*GPT2, *args]))


def test_predict_dtype_defaults_to_the_checkpoints() -> None:
    decode = ["predict", "-m", "llama-2-7b", "-H", "a100-sxm-80gb", "--mode", "decode", "-b", "1", "-s", "512",
              "--json"]
    default = parse_json(invoke(decode))
    assert default["dtype"] == "fp16" and default["chosen_by_default"] == ["dtype"]  # torch_dtype float16
    fp32 = parse_json(invoke([*decode, "--dtype", "fp32"]))
    assert fp32["dtype"] == "fp32" and fp32["chosen_by_default"] == []
    # decode streams the weights: FP32 moves twice the bytes of the checkpoint's FP16
    assert fp32["step_time_s"] > 1.8 * default["step_time_s"]
    text = " ".join(invoke(decode[:-1]).stdout.split())  # the title may wrap
    assert "fp16 (the checkpoint's)" in text


@pytest.mark.parametrize(("model", "hardware", "mode", "dtype"), [
    ("gpt2", "a100-sxm-80gb", "inference", "fp32"),     # no torch_dtype: transformers loads fp32
    ("gpt2", "a100-sxm-80gb", "decode", "fp16"),        # a serving engine runs fp32 checkpoints in fp16
    ("llama-3-8b", "a100-sxm-80gb", "inference", "bf16"),
    ("llama-3.2-1b", "t4", "inference", "fp16"),        # no bf16 math on a T4
])
def test_predict_default_dtype_is_the_shared_rule(model: str, hardware: str, mode: str, dtype: str) -> None:
    from perfcast.catalog.defaults import default_dtype
    from perfcast.catalog.hardware import load_hardware
    from perfcast.catalog.models import load_model

    data = parse_json(invoke(["predict", "-m", model, "-H", hardware, "--mode", mode, "-s", "64", "--json"]))
    rule = default_dtype(load_model(model), load_hardware(hardware), engine=mode == "decode")
    assert data["dtype"] == dtype == rule.value


def test_predict_out_of_memory_is_a_verdict_with_its_breakdown() -> None:
    res = invoke(["predict", "-m", "llama-2-70b", "-H", "t4", "--json"])
    line = does_not_fit(res)
    assert "out of memory" in line and "t4" in line
    data = json.loads(res.stdout)
    assert data["fits"] is False and data["verdict"] == "out_of_memory" and data["step_time_s"] > 0
    assert data["memory_per_gpu_bytes"] > data["memory_capacity_bytes"] == 16 * 2**30
    parts = {k: v for k, v in data.items() if k.startswith("memory_") and k not in
             ("memory_per_gpu_bytes", "memory_capacity_bytes")}
    assert set(parts) == {"memory_weights_bytes", "memory_kv_cache_bytes", "memory_activations_bytes",
                          "memory_gradients_bytes", "memory_optimizer_bytes", "memory_comm_buffers_bytes",
                          "memory_context_bytes", "memory_fragmentation_bytes"}
    assert sum(parts.values()) == pytest.approx(data["memory_per_gpu_bytes"], rel=1e-12)
    # 69B parameters in the checkpoint's fp16
    assert data["memory_weights_bytes"] == pytest.approx(2 * 68.98e9, rel=0.01)
    text = invoke(["predict", "-m", "llama-2-70b", "-H", "t4"])
    assert "out of memory" in does_not_fit(text)
    assert "OUT OF MEMORY" in text.stdout and "weights" in text.stdout


def test_predict_that_fits_says_so_per_gpu() -> None:
    res = invoke(["predict", "-m", "llama-2-70b", "-H", "h100-sxm-80gb", "--json"])
    does_not_fit(res)
    one = json.loads(res.stdout)
    assert one["fits"] is False
    tp8 = parse_json(invoke(["predict", "-m", "llama-2-70b", "-H", "h100-sxm-80gb", "--tp", "8", "--json"]))
    assert tp8["fits"] is True and tp8["verdict"] == "fits"
    assert tp8["memory_weights_bytes"] == pytest.approx(one["memory_weights_bytes"] / 8, rel=0.02)
    assert tp8["memory_comm_buffers_bytes"] > 0 == one["memory_comm_buffers_bytes"]
    assert "fits in memory" in invoke(["predict", "-m", "gpt2", "-H", "t4"]).stdout


@pytest.mark.parametrize(("args", "fragment"), [
    # one node of H100s has 8 GPUs; tp16 and pp32 were priced over the device's NVLink as if it had 32
    (["-H", "h100", "--parallelism", "tp16"], "more than the 8 GPUs of one dgx-h100 node"),
    (["-H", "h100", "--parallelism", "pp32"], "more than the 8 GPUs"),
    # settings that changed nothing in the combination given
    (["--microbatches", "4"], "need parallelism ppN"),
    (["--optimizer", "sgd"], "--mode inference has none"),
    (["--mode", "training", "-q", "w4a16"], "applies to inference modes"),
])
def test_predict_limits_and_settings_without_effect_are_one_line(args: list[str], fragment: str) -> None:
    assert fragment in user_error(invoke([*GPT2, *args]))
