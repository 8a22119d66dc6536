"""CLI: ``perfcast run FILE.yaml`` (a user's scenario file through the suite's schema and runners), and the suite's
new scenario kinds and statuses."""

from __future__ import annotations

import json
from pathlib import Path

from cli_helpers import invoke, parse_json, user_error

LATENCY = """id: mine
title: my GPT-2 latency
kind: model_latency
dtype: fp16
hardware: [a100-sxm-80gb]
runs:
  - {model: gpt2, batch_size: 4, seq_len: 256}
"""


def _write(tmp_path: Path, text: str, name: str = "mine.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_run_json_is_one_object(tmp_path: Path) -> None:
    data = parse_json(invoke(["run", str(_write(tmp_path, LATENCY)), "--json"]))
    assert (data["id"], data["kind"], data["status"], data["predictions"]) == ("mine", "model_latency", "ok", 1)
    (row,) = data["rows"]
    assert row["status"] == "ok" and row["step_time_s"] > 0


def test_run_text_prints_the_scenario(tmp_path: Path) -> None:
    res = invoke(["run", str(_write(tmp_path, LATENCY))])
    assert res.exit_code == 0, res.stderr
    assert "mine: my GPT-2 latency: ok" in res.stdout and "predicted step time" in res.stdout


def test_run_a_diffusion_file(tmp_path: Path) -> None:
    text = ("id: sd\ntitle: t\nkind: diffusion\nruns:\n  - {unet: sd-1.5-unet, vae: sd-1.5-vae, "
            "hardware: h100-sxm-80gb, batch_size: 2, steps: 20}\n")
    res = invoke(["run", str(_write(tmp_path, text))])
    assert res.exit_code == 0, res.stderr
    assert "seconds/image" in res.stdout and "VAE decode" in res.stdout


def test_unknown_key_names_the_file_the_key_and_the_accepted_keys(tmp_path: Path) -> None:
    path = _write(tmp_path, LATENCY.replace("seq_len: 256", "seq_len: 256, sequence: 9"))
    line = user_error(invoke(["run", str(path)]))
    assert str(path) in line and "key 'runs.0.sequence': unknown key" in line
    assert "accepted keys are model, mode, batch_size, seq_len" in line


def test_misspelt_top_level_key_suggests_the_right_one(tmp_path: Path) -> None:
    line = user_error(invoke(["run", str(_write(tmp_path, LATENCY.replace("hardware:", "hardwar:")))]))
    assert "key 'hardwar': unknown key (did you mean 'hardware'?)" in line


def test_wrong_type_names_the_key_and_what_is_expected(tmp_path: Path) -> None:
    line = user_error(invoke(["run", str(_write(tmp_path, LATENCY.replace("batch_size: 4", "batch_size: four")))]))
    assert str(tmp_path) in line and "key 'runs.0.batch_size'" in line and "valid integer" in line
    assert "'four'" in line


def test_wrong_kind_and_missing_file_and_not_yaml(tmp_path: Path) -> None:
    line = user_error(invoke(["run", str(_write(tmp_path, LATENCY.replace("model_latency", "latency")))]))
    assert "not a scenario kind" in line and "rlhf" in line and "diffusion" in line
    assert "does not exist" in user_error(invoke(["run", str(tmp_path / "absent.yaml")]))
    assert "must be YAML" in user_error(invoke(["run", str(_write(tmp_path, "{}", "x.json"))]))


def test_suite_writes_ok_and_oom_statuses(tmp_path: Path) -> None:
    out = tmp_path / "res"
    data = parse_json(invoke(["suite", "--only", "T2.2,E1", "--json", "--out", str(out)]))
    assert [s["status"] for s in data["scenarios"]] == ["oom", "ok"]
    saved = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert [(s["id"], s["status"]) for s in saved] == [("T2.2", "oom"), ("E1", "ok")]
    assert saved[1]["rows"][0]["iteration_time_s"] > 0


def test_suite_prints_the_new_kinds() -> None:
    res = invoke(["suite", "--only", "E1,E4"])
    assert res.exit_code == 0, res.stderr
    assert "one PPO iteration" in res.stdout and "seconds per image" in res.stdout
    assert "conv kernel model is coarse" in " ".join(res.stdout.split())


# -- verdicts: 0 an answer, 1 out of memory or a scenario that errored, 2 a bad file -----------------------------
OOM = """id: big
title: Llama-2-70B with TP=8 x DP=4 on 4 nodes, no sequence parallelism
kind: training
runs:
  - label: too big
    model: llama-2-70b
    cluster: dgx-h100
    nodes: 4
    plan: {tp: 8, dp: 4, zero: 1, seq_len: 4096, micro_batch: 1, global_batch: 128, recompute: selective}
"""
BROKEN = LATENCY.replace("model: gpt2", "model: gpt-banana")


def test_run_of_an_out_of_memory_scenario_prints_its_breakdown_and_exits_1(tmp_path: Path) -> None:
    path = _write(tmp_path, OOM)
    res = invoke(["run", str(path), "--json"])
    assert res.exit_code == 1 and "Traceback" not in res.stdout + res.stderr
    data = json.loads(res.stdout)
    assert data["status"] == "oom" and data["rows"][0]["fits_in_memory"] is False
    assert data["rows"][0]["memory_per_gpu_bytes"] > data["rows"][0]["memory_capacity_bytes"]
    (line,) = res.stderr.splitlines()
    assert line.startswith("does not fit: big: too big: out of memory")
    text = invoke(["run", str(path)])
    assert text.exit_code == 1 and "out of memory" in text.stdout and "optimizer" in text.stdout


def test_run_of_a_scenario_that_errors_exits_1_with_one_line(tmp_path: Path) -> None:
    res = invoke(["run", str(_write(tmp_path, BROKEN)), "--json"])
    assert res.exit_code == 1
    assert json.loads(res.stdout)["status"] == "error"
    (line,) = res.stderr.splitlines()
    assert line.startswith("failed: mine: ")


def test_suite_exits_1_when_a_scenario_errors_and_0_for_expected_oom_answers(tmp_path: Path) -> None:
    broken = _write(tmp_path, BROKEN)
    res = invoke(["suite", "--only", f"R2,{broken}", "--json"])
    assert res.exit_code == 1
    assert [s["status"] for s in json.loads(res.stdout)["scenarios"]] == ["ok", "error"]
    assert res.stderr.splitlines() == ["failed: 1 of 2 scenarios errored: mine (see their error above)"]
    text = invoke(["suite", "--only", f"{broken}"])
    assert text.exit_code == 1 and "gpt-banana" in text.stdout
    assert invoke(["suite", "--only", "T4.2", "--json"]).exit_code == 0  # full fine-tuning OOM: the answer
