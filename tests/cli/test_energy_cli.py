"""CLI: ``predict``, ``train`` and ``serve`` print energy with units in the keys (``--json``) and an energy line
in their tables; the energy model says what it is fitted on."""

from __future__ import annotations

import pytest
from cli_helpers import invoke, parse_json

PREDICT = ["predict", "--model", "gpt2", "--hardware", "a100-sxm-80gb", "--batch-size", "2", "--seq-len", "256"]
TRAIN = ["train", "--model", "llama-2-7b", "--cluster", "dgx-a100", "--nodes", "1", "--tp", "2", "--dp", "4",
         "--seq-len", "2048", "--micro-batch", "1", "--global-batch", "32", "--recompute", "selective", "--zero", "1"]
SERVE = ["serve", "--model", "llama-2-7b", "--hardware", "a100-sxm-80gb", "--qps", "2", "--num-requests", "30",
         "--prompt-tokens", "256", "--output-tokens", "64", "--seed", "1"]
A100_TDP_W = 400.0  # a100-sxm-80gb.yaml


def test_predict_json_has_energy_keys() -> None:
    data = parse_json(invoke([*PREDICT, "--json"]))
    assert data["energy_J"] > 0 and 0 < data["avg_power_W"] <= A100_TDP_W
    assert data["energy_J"] == pytest.approx(data["avg_power_W"] * data["step_time_s"], rel=1e-9)
    assert set(data["energy_by_group_J"]) <= set(data["time_by_group_s"])
    assert "fitted" in data["energy_model"] and "measured GPU power" in data["energy_model"]


def test_train_json_has_energy_keys() -> None:
    data = parse_json(invoke([*TRAIN, "--json"]))
    assert data["energy_per_step_J"] == pytest.approx(data["energy_per_gpu_per_step_J"] * data["num_gpus"])
    assert data["energy_per_token_J"] == pytest.approx(data["energy_per_step_J"] / data["tokens_per_step"])
    assert 0 < data["avg_power_per_gpu_W"] <= A100_TDP_W
    assert set(data["energy_breakdown_per_gpu_J"]) == {"matrix_J", "memory_bound_J", "comm_J", "idle_J"}


def test_serve_json_has_energy_keys() -> None:
    data = parse_json(invoke([*SERVE, "--json"]))
    assert data["energy_J"] > 0 and 0 < data["avg_power_per_gpu_W"] <= A100_TDP_W
    assert data["energy_per_output_token_J"] > 0 and data["energy_power_limited"] is False


@pytest.mark.parametrize("args", [PREDICT, TRAIN, SERVE], ids=["predict", "train", "serve"])
def test_text_output_has_an_energy_line(args: list[str]) -> None:
    res = invoke(args)
    assert res.exit_code == 0, res.stderr
    assert "energy" in res.stdout and " J" in res.stdout
