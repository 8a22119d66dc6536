"""CLI: ``perfcast suite --out DIR`` writes report.html beside results.json (whose serving rows carry the latency
series the CSV leaves out); ``perfcast report DIR`` rebuilds it without running anything; neither replaces a
file perfcast did not write unless ``--force``; ``perfcast validate --out`` guards its validation.json the same
way."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from cli_helpers import invoke, parse_json, user_error

from perfcast.report.html import is_perfcast_report


@pytest.fixture(scope="module")
def suite_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("suite") / "res"
    parse_json(invoke(["suite", "--only", "I1.1", "--json", "--out", str(out)]))
    return out


def test_suite_out_writes_the_report_and_keeps_series_out_of_the_csv(suite_dir: Path) -> None:
    assert is_perfcast_report(suite_dir / "report.html")
    (sc,) = json.loads((suite_dir / "results.json").read_text(encoding="utf-8"))
    (row,) = sc["rows"]
    assert len(row["latency_quantiles"]["ttft_s"]) == 101
    with (suite_dir / "results.csv").open(encoding="utf-8", newline="") as fh:
        header = next(csv.reader(fh))
    assert "ttft_s.p99" in header and "latency_quantiles" not in header


def test_report_rebuilds_its_own_file_and_refuses_others(suite_dir: Path, tmp_path: Path) -> None:
    data = parse_json(invoke(["report", str(suite_dir), "--json"]))
    assert data["report"] == str(suite_dir / "report.html") and data["figures"] == 2  # I1.1: CDFs, throughput
    mine = tmp_path / "notes.html"
    mine.write_text("<html>mine</html>", encoding="utf-8")
    line = user_error(invoke(["report", str(suite_dir), "--out", str(mine)]))
    assert "exists" in line and "--force" in line
    assert mine.read_text(encoding="utf-8") == "<html>mine</html>"
    parse_json(invoke(["report", str(suite_dir), "--out", str(mine), "--force", "--json"]))
    assert is_perfcast_report(mine)


def test_a_users_report_html_in_the_folder_stops_the_suite_before_it_runs(tmp_path: Path) -> None:
    (tmp_path / "report.html").write_text("mine", encoding="utf-8")
    line = user_error(invoke(["suite", "--only", "I1.1", "--out", str(tmp_path)]))
    assert "not a perfcast report" in line and not (tmp_path / "results.json").exists()


def test_report_of_a_folder_without_results_says_what_to_run(tmp_path: Path) -> None:
    line = user_error(invoke(["report", str(tmp_path)]))
    assert "perfcast suite --out" in line
    line = user_error(invoke(["report", str(tmp_path / "nowhere")]))
    assert "not a folder" in line


def test_validate_out_refuses_a_validation_json_it_did_not_write(tmp_path: Path) -> None:
    (tmp_path / "validation.json").write_text("{}", encoding="utf-8")
    line = user_error(invoke(["validate", "--out", str(tmp_path)]))
    assert "--force" in line
