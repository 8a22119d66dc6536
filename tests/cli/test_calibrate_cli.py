"""perfcast calibrate --quick end to end into a temporary file, then predict on it (no timing assertions)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from perfcast.cli import app

pytest.importorskip("torch")
pytestmark = pytest.mark.cli
runner = CliRunner()


def test_quick_calibration_writes_a_usable_hardware_file(tmp_path: Path) -> None:
    out = tmp_path / "hardware" / "local-cpu.yaml"
    res = runner.invoke(app, ["calibrate", "--quick", "--threads", "1", "--out", str(out), "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["hardware"] == "local-cpu" and data["threads"] == 1 and data["peak_fp32_flops_per_s"] > 0
    assert "perfcast calibrate" in out.read_text()
    again = runner.invoke(app, ["calibrate", "--quick", "--out", str(out)])
    assert again.exit_code == 2 and "--force" in again.stderr
    pred = runner.invoke(app, ["predict", "-m", "bert-base", "-H", str(out), "-s", "64", "--json"])
    assert pred.exit_code == 0, pred.output
    assert json.loads(pred.stdout)["step_time_s"] > 0


def test_local_scenario_without_calibration_says_to_calibrate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) \
        -> None:
    from perfcast.scenarios.run import run_scenario
    from perfcast.scenarios.schema import load_scenario

    monkeypatch.setenv("PERFCAST_CATALOG", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path))
    res = run_scenario(load_scenario("R6"))
    assert res.status == "error" and "perfcast calibrate" in res.error
