"""perfcast calibrate --quick end to end: into a file, into the user catalog the hardware catalog reads (so
``-H local-cpu`` works with no environment variable), and by a local_cpu scenario on a machine never calibrated.
No timing assertions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import invoke, parse_json, user_error

pytest.importorskip("torch")


def test_quick_calibration_writes_a_usable_hardware_file(tmp_path: Path) -> None:
    out = tmp_path / "local-cpu.yaml"
    data = parse_json(invoke(["calibrate", "--quick", "--threads", "1", "--out", str(out), "--json"]))
    assert data["hardware"] == "local-cpu" and data["threads"] == 1 and data["peak_fp32_flops_per_s"] > 0
    assert "perfcast calibrate" in out.read_text()
    before = out.read_bytes()
    assert "--force" in user_error(invoke(["calibrate", "--quick", "--out", str(out)]))
    assert out.read_bytes() == before
    pred = parse_json(invoke(["predict", "-m", "bert-base", "-H", str(out), "-s", "64", "--json"]))
    assert pred["step_time_s"] > 0


def test_an_out_file_in_a_missing_folder_is_refused_before_benchmarking(tmp_path: Path) -> None:
    line = user_error(invoke(["calibrate", "--quick", "--out", str(tmp_path / "nope" / "local-cpu.yaml")]))
    assert "does not exist" in line and str(tmp_path / "nope") in line


def test_threads_beyond_this_machines_cpus_are_refused() -> None:
    line = user_error(invoke(["calibrate", "--quick", "--threads", "100000", "--out", "x.yaml"]))
    assert "--threads 100000" in line and "logical CPUs" in line


def test_calibrate_writes_where_the_catalog_reads_with_no_environment_variable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PERFCAST_CATALOG")
    monkeypatch.setenv("HOME", str(tmp_path))
    before = user_error(invoke(["predict", "-m", "bert-base", "-H", "local-cpu", "-s", "64"]))
    assert "not been calibrated yet" in before and "perfcast calibrate" in before
    data = parse_json(invoke(["calibrate", "--quick", "--threads", "1", "--json"]))
    assert data["file"] == str(tmp_path / ".perfcast" / "catalog" / "hardware" / "local-cpu.yaml")
    pred = parse_json(invoke(["predict", "-m", "bert-base", "-H", "local-cpu", "-s", "64", "--json"]))
    assert pred["hardware"] == "local-cpu" and pred["step_time_s"] > 0


def test_a_local_cpu_scenario_calibrates_a_machine_never_calibrated(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PERFCAST_CATALOG", str(tmp_path / "catalog"))
    sc = tmp_path / "cpu.yaml"
    sc.write_text("id: mine\ntitle: BERT on this CPU\nkind: local_cpu\nmin_time_s: 0.02\n"
                  "cases:\n  - {model: bert-base, batch_size: 1, seq_len: 8}\n", encoding="utf-8")
    data = parse_json(invoke(["run", str(sc), "--json"]))
    assert data["status"] == "ok" and data["rows"][0]["predicted_s"] > 0
    written = tmp_path / "catalog" / "hardware" / "local-cpu.yaml"
    assert written.is_file() and "calibrate --quick" in written.read_text()
    assert any("calibrate --quick" in n and str(written) in n for n in data["notes"])
    again = json.loads(invoke(["run", str(sc), "--json"]).stdout)  # calibrated now: no second calibration
    assert not any("calibrate --quick" in n for n in again["notes"])
