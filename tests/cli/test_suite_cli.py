"""CLI: ``perfcast suite`` with the training and collective scenarios: one JSON object, readable tables, and
results files whose columns are the union of the rows' keys."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from cli_helpers import invoke, parse_json


def test_suite_t2_2_json_is_one_object_with_the_oom_verdict() -> None:
    data = parse_json(invoke(["suite", "--only", "T2.2", "--json"]))
    (sc,) = data["scenarios"]
    assert sc["id"] == "T2.2" and sc["kind"] == "training" and sc["status"] == "oom" and sc["predictions"] == 1
    (row,) = sc["rows"]
    assert row["fits_in_memory"] is False and row["memory_per_gpu_bytes"] > row["memory_capacity_bytes"]
    (note,) = sc["notes"]
    assert "out of memory" in note and "optimizer" in note and "activations" in note
    for key in ("step_time_s", "mfu", "tp_comm_s", "memory_per_gpu_bytes", "comm_total_s"):
        assert isinstance(row[key], (int, float)), key


def test_suite_prints_training_and_collective_tables() -> None:
    res = invoke(["suite", "--only", "T4.2,R2"])
    assert res.exit_code == 0, res.stderr
    assert "T4.2" in res.stdout and "OOM" in res.stdout and "trainable" in res.stdout
    assert "all_to_all" in res.stdout and "reference" in res.stdout


def test_suite_out_writes_heterogeneous_rows(tmp_path: Path) -> None:
    out = tmp_path / "res"
    data = parse_json(invoke(["suite", "--only", "T4.3,R2", "--json", "--out", str(out)]))
    assert [s["id"] for s in data["scenarios"]] == ["T4.3", "R2"]
    saved = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert [s["kind"] for s in saved] == ["training", "collective"]
    with (out / "results.csv").open(encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 3 + 120
    assert {"step_time_s", "time_s", "busbw_Bps", "op", "label"} <= set(rows[0])
    training = [r for r in rows if r["scenario"] == "T4.3"]
    collective = [r for r in rows if r["scenario"] == "R2"]
    assert all(r["step_time_s"] and not r["time_s"] for r in training)
    assert all(r["time_s"] and not r["step_time_s"] for r in collective)


def test_suite_i5_1_json_is_one_object_with_the_speculative_runs() -> None:
    data = parse_json(invoke(["suite", "--only", "I5.1", "--json"]))
    (sc,) = data["scenarios"]
    assert sc["id"] == "I5.1" and sc["kind"] == "serving" and sc["status"] == "ok" and sc["predictions"] == 4
    rows = {r["label"]: r for r in sc["rows"]}
    assert list(rows) == ["plain", "spec-0.6", "spec-0.75", "spec-0.9"]
    assert all(r["status"] == "ok" and r["model"] == "llama-2-70b" for r in rows.values())
    steps = [rows[k]["spec_tokens_per_step"] for k in ("spec-0.6", "spec-0.75", "spec-0.9")]
    assert steps == sorted(steps) and steps[0] > 1
    assert rows["spec-0.9"]["speedup_x.tpot"] > 1 and rows["spec-0.9"]["baseline"] == "plain"
    assert rows["spec-0.9"]["tpot_s.p50"] < rows["plain"]["tpot_s.p50"]
    assert len(sc["notes"]) == 4 and not any("NOT" in n for n in sc["notes"])


def test_suite_prints_the_serving_table_with_the_scenario_quantities() -> None:
    res = invoke(["suite", "--only", "E2"])
    assert res.exit_code == 0, res.stderr
    assert "E2: serving runs" in res.stdout and "retrieval share E2E" in res.stdout and "no-retrieval" in res.stdout
