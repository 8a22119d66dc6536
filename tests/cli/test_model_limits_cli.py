"""What a user hits with a hand-written config.json: an architecture, vision tower or quantization perfcast does
not model is refused in one line (exit 2); a sequence beyond the model's context is refused naming the limit;
a quantized checkpoint is priced as it is stored, by default."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import does_not_fit, invoke, parse_json, user_error
from typer.testing import Result

TINY: dict[str, Any] = {"architectures": ["X"], "hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4,
                        "vocab_size": 100, "intermediate_size": 128, "max_position_embeddings": 512}
SUPPORTED = ("supported: autoencoder_kl, bert, bloom, cohere, dbrx, deepseek_v2, deepseek_v3, falcon, gemma, "
             "gemma2, gemma3_text")


def _config(tmp_path: Path, **fields: Any) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({k: v for k, v in {**TINY, **fields}.items() if v is not None}), encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("model_type", ["banana", None, "olmoe", "rwkv", "phi3small", "deepseek_v32"])
@pytest.mark.parametrize("command", [["models", "show"], ["predict", "-H", "h100-sxm-80gb", "-m"]])
def test_an_unmodelled_architecture_is_one_error_line(tmp_path: Path, model_type: str | None,
                                                      command: list[str]) -> None:
    line = user_error(invoke([*command, _config(tmp_path, model_type=model_type)]))
    assert SUPPORTED in line
    assert (f"model_type {model_type!r} is not modelled" if model_type else "no model_type") in line


@pytest.mark.parametrize("command", [["models", "show"], ["predict", "-H", "h100-sxm-80gb", "-m"]])
def test_an_unmodelled_vision_tower_is_named(tmp_path: Path, command: list[str]) -> None:
    line = user_error(invoke([*command, _config(tmp_path, model_type="llava",
                                                vision_config={"model_type": "siglip_vision_model"},
                                                text_config={"model_type": "llama"})]))
    assert line.endswith(": llava with a siglip_vision_model vision tower is not supported; supported: "
                         "clip_vision_model (llava), llama4_vision_model (llama4), qwen2_vl (qwen2_vl), "
                         "qwen2_5_vl (qwen2_5_vl), pixtral (mistral3)")


def test_bitsandbytes_is_refused(tmp_path: Path) -> None:
    path = _config(tmp_path, model_type="llama", quantization_config={"quant_method": "bitsandbytes",
                                                                       "load_in_4bit": True})
    line = user_error(invoke(["predict", "-m", path, "-H", "a100-sxm-80gb"]))
    assert "quant_method 'bitsandbytes' is not supported; supported: fp8" in line


def test_llama_2_7b_at_100k_tokens_names_its_4096_positions() -> None:
    expected = "sequence length 100000 exceeds the 4096-token context of llama-2-7b; use a sequence length in 1..4096"
    line = user_error(invoke(["predict", "-m", "llama-2-7b", "-H", "a100-sxm-80gb", "-s", "100000"]))
    assert line == f"error: {expected}"
    line = user_error(invoke(["train", "-m", "llama-2-7b", "-c", "dgx-a100", "-s", "100000", "--dp", "8"]))
    assert line == f"error: {expected}"


def test_yarn_scaling_extends_the_context_to_its_factor(tmp_path: Path) -> None:
    path = _config(tmp_path, model_type="qwen2", num_key_value_heads=4, max_position_embeddings=32768,
                   rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768})
    ok = parse_json(invoke(["predict", "-m", path, "-H", "h100-sxm-80gb", "--mode", "prefill", "-s", "131072",
                            "--json"]))
    assert ok["seq_len"] == 131072 and ok["step_time_s"] > 0
    line = user_error(invoke(["predict", "-m", path, "-H", "h100-sxm-80gb", "--mode", "prefill", "-s", "131073"]))
    assert "exceeds the 131072-token context" in line


def test_deepseek_v3_predicts_with_fp8_weights_on_h100_and_w8a16_on_a100() -> None:
    args = ["predict", "-m", "deepseek-v3", "--mode", "decode", "-b", "8", "-s", "1024", "--dtype", "bf16", "--json"]
    # 671 B parameters in FP8 do not fit one 80 GB GPU: the answer is a verdict, its JSON names the weights
    h100, a100 = (_not_fitting_json(invoke([*args, "-H", gpu])) for gpu in ("h100-sxm-80gb", "a100-sxm-80gb"))
    assert h100["memory_weights_bytes"] > 600e9
    assert h100["quantization"] == "fp8 (the checkpoint's fp8 e4m3 (128x128 scales))"
    assert a100["quantization"].startswith("fp8 (the checkpoint's fp8 e4m3 (128x128 scales); weight-only w8a16 on "
                                           "a100-sxm-80gb, which has no FP8 math")


def _not_fitting_json(res: Result) -> dict:
    does_not_fit(res)
    data = json.loads(res.stdout)
    assert data["fits"] is False
    return data


def test_training_a_quantized_checkpoint_says_it_runs_in_the_training_dtype() -> None:
    # 21 B parameters with Adam states need ~330 GiB: a verdict, whose JSON still says how the weights run
    data = _not_fitting_json(invoke(["predict", "-m", "gpt-oss-20b", "-H", "h100-sxm-80gb", "--mode", "training",
                                     "-s", "128", "--dtype", "bf16", "--json"]))
    assert data["quantization"] == "none (training runs in bf16, not the checkpoint's mxfp4 (MoE experts))"


def test_gpt_oss_120b_is_served_on_one_h100_by_default() -> None:
    args = ["serve", "-m", "gpt-oss-120b", "-H", "h100-sxm-80gb", "--prompt-tokens", "128", "--output-tokens", "16",
            "-n", "4", "--json"]
    data = parse_json(invoke(args))
    assert data["requests_completed"] == 4
    assert data["weight_bytes_per_gpu"] < 0.9 * data["gpu_memory_bytes"]
    line = does_not_fit(invoke([*args[:-1], "-q", "none"]))  # a 16-bit copy needs four
    assert "GiB of weights per GPU" in line and "tp*pp=4" in line


@pytest.mark.parametrize(("fields", "fragment"), [
    # each was accepted: true as 1 layer (a 1.27 B "Llama-3-8B"), 32.5 as 32 layers, a string read as a number
    ({"num_hidden_layers": True}, "num_hidden_layers=True is not a whole number (bool)"),
    ({"num_hidden_layers": 32.5}, "num_hidden_layers=32.5 is not a whole number (float)"),
    ({"hidden_size": "4096"}, "hidden_size='4096' is not a whole number (str)"),
    # 32 query heads cannot share 7 KV heads evenly (transformers' repeat_kv fails); it was priced as 7.997 B
    ({"num_attention_heads": 32, "num_key_value_heads": 7}, "num_attention_heads=32 is not a multiple of "
                                                            "num_key_value_heads=7"),
])
def test_a_hand_written_config_with_a_malformed_count_is_one_error_line(tmp_path: Path, fields: dict[str, Any],
                                                                       fragment: str) -> None:
    config = _config(tmp_path, model_type="llama", **{"hidden_size": 4096, "num_attention_heads": 32, **fields})
    assert fragment in user_error(invoke(["models", "show", config]))
