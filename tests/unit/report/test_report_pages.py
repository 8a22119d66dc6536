"""The HTML report from plain data: one inlined plotly.js, a figure per declared plot, the pages' hints when a part
is missing, the training breakdown adding up to the step, and the input files refused in one line when wrong."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from perfcast.errors import DataError
from perfcast.report.data import (
    ReportInputs,
    SearchData,
    read_inputs,
    read_search,
    read_validation,
    search_of_rows,
)
from perfcast.report.html import build_report, is_perfcast_report, write_report
from perfcast.report.html_page import fmt_bytes, fmt_pct, fmt_seconds, fmt_value
from perfcast.report.html_search import NO_SEARCH, pareto_figure, plan_text
from perfcast.report.html_training import STEP_PARTS, step_figure
from perfcast.report.html_validation import NO_VALIDATION
from perfcast.results.validation import VALIDATION_SCHEMA_VERSION
from perfcast.validate.export import validation_file
from perfcast.validate.metrics import summarize
from perfcast.validate.report import MAX_POINTS, GroupReport, Points, TableReport, ValidationReport, _points


def _training_row(label: str, *, fits: bool = True) -> dict[str, object]:
    parts = {"compute_s": 0.8, "recompute_s": 0.1, "comm_exposed_s": 0.05, "tp_comm_s": 0.05, "tp_comm_total_s": 0.2,
             "bubble_s": 0.03, "optimizer_s": 0.01, "overhead_s": 0.01}
    return {"label": label, "status": "ok", "step_time_s": 1.0, "mfu": 0.4, "fits_in_memory": fits,
            "memory_per_gpu_bytes": 70 * 2**30, "memory_capacity_bytes": 80 * 2**30,
            "memory_weights_bytes": 20 * 2**30, "memory_gradients_bytes": 20 * 2**30,
            "memory_optimizer_bytes": 10 * 2**30, "memory_activations_bytes": 20 * 2**30, **parts}


def _serving_row(label: str) -> dict[str, object]:
    q = [i / 100 for i in range(101)]
    return {"label": label, "status": "ok", "ttft_s.p99": 0.5, "tpot_s.p99": 0.02, "ttft_s.p50": 0.1,
            "throughput_tokens_per_s": 900.0,
            "latency_quantiles": {"q": q, "ttft_s": [0.05 + x for x in q], "tpot_s": [0.01 + x / 50 for x in q],
                                  "e2e_s": [1 + x for x in q]},
            "load_curve": [{"load_frac": f, "qps": f * 4, "throughput_tokens_per_s": 1000 * f,
                            "ttft_p50_s": 0.1 / (2 - f), "ttft_p99_s": 0.3 / (2 - f), "completed_frac": 1.0}
                           for f in (0.25, 0.5, 1.0, 1.5)]}


PLAN = {"gpus": 64, "tp": 8, "pp": 2, "dp": 4, "cp": 1, "micro_batch": 1, "recompute": "selective", "zero": 1}
SEARCH = {"objective": "tflops", "plans_evaluated": 120, "plans_feasible": 80,
          "best": [{**PLAN, "tflops_per_gpu": 400.0, "memory_per_gpu_gib": 60.0, "step_time_s": 3.0}],
          "pareto": [{**PLAN, "tp": 4, "tflops_per_gpu": 300.0, "memory_per_gpu_gib": 30.0, "step_time_s": 4.0},
                     {**PLAN, "tflops_per_gpu": 400.0, "memory_per_gpu_gib": 60.0, "step_time_s": 3.0}],
          "reference": {**PLAN, "pp": 4, "label": "a published run", "tflops_per_gpu": 350.0,
                        "memory_per_gpu_gib": 50.0, "step_time_s": 3.5}}


def _validation_report(n: int = 40) -> ValidationReport:
    rng = np.random.default_rng(0)
    measured = rng.uniform(1.0, 100.0, n)
    predicted = measured * rng.uniform(0.8, 1.2, n)
    device = np.array(["a100" if i % 2 else "h100" for i in range(n)])
    groups = [GroupReport(d, summarize(measured[device == d], predicted[device == d])) for d in ("a100", "h100")]
    return ValidationReport([TableReport("t.csv", "kind", "time_ms", "a note", summarize(measured, predicted),
                                         groups, points=_points(measured, predicted, device))])


def _inputs() -> ReportInputs:
    results = [{"id": "T", "title": "train", "kind": "training", "status": "ok", "error": "",
                "metrics": {"predictions": 2, "mape_frac": None}, "notes": [],
                "rows": [_training_row("a"), _training_row("b", fits=False)]},
               {"id": "S", "title": "serve", "kind": "serving", "status": "ok", "error": "", "metrics": {},
                "notes": ["a note"], "rows": [_serving_row("x"), _serving_row("y")]},
               {"id": "R12", "title": "search", "kind": "search", "status": "ok", "error": "", "metrics": {},
                "notes": [], "rows": [{"label": "405b", "status": "ok", "kind": "search", "search": SEARCH}]}]
    return ReportInputs(results=results, validation=validation_file(_validation_report()),
                        searches=[SearchData("file", SEARCH)])


def test_the_report_inlines_plotly_once_and_declares_every_figure() -> None:
    built = build_report(_inputs())
    text = built.text
    assert text.count("* plotly.js v") == 1  # the bundle's banner: inlined exactly once
    assert "<script src=" not in text and "<link " not in text  # nothing loaded from elsewhere
    # training 2 (step, memory), serving 2 (CDFs, load), validation 2 (error bars, one scatter), search 2 (the
    # file and the search scenario's row)
    assert built.figures == 8
    assert f'data-figures="{built.figures}"' in text
    assert text.count('class="plot"') == built.figures
    assert NO_VALIDATION not in text and NO_SEARCH not in text
    assert "b (OOM)" in text and "a published run" in text


def test_missing_parts_say_how_to_produce_them() -> None:
    built = build_report(ReportInputs())
    assert built.figures == 0
    assert NO_VALIDATION in built.text and NO_SEARCH in built.text
    assert "perfcast suite --out DIR" in built.text


def test_the_step_parts_add_up_to_the_step_time() -> None:
    row = _training_row("a")
    fig = step_figure([row], "t")
    assert fig.layout.yaxis.title.text == "step time (s)"
    assert sum(trace.y[0] for trace in fig.data) == pytest.approx(float(str(row["step_time_s"])))
    assert [t.name for t in fig.data] == [name for name, _, _ in STEP_PARTS]


def test_write_report_marks_its_file(tmp_path: Path) -> None:
    path = tmp_path / "r.html"
    write_report(ReportInputs(), path)
    assert is_perfcast_report(path)
    other = tmp_path / "mine.html"
    other.write_text("<html>my own notes</html>", encoding="utf-8")
    assert not is_perfcast_report(other)


def test_formatting_converts_units_only_at_the_edge() -> None:
    assert fmt_seconds(0.0123) == "12.3 ms" and fmt_seconds(2.5) == "2.5 s" and fmt_seconds(None) == "-"
    assert fmt_pct(0.123) == "12.3%" and fmt_bytes(3 * 2**30) == "3 GiB"
    assert fmt_value("ttft_s", 2e-5) == "20 µs" and fmt_value("mape_frac", None) == "-"
    assert plan_text(PLAN) == "gpus=64 tp=8 pp=2 dp=4 cp=1 micro_batch=1 recompute=selective zero=1"


def test_validation_points_are_sampled_evenly_and_counted() -> None:
    n = 3 * MAX_POINTS
    measured = np.arange(1.0, n + 1)
    predicted = measured.copy()
    predicted[0] = np.nan  # no prediction: not a point
    p = _points(measured, predicted, np.array(["d"] * n))
    assert isinstance(p, Points) and p.total == n - 1
    assert len(p.measured) == MAX_POINTS and p.measured == sorted(p.measured)
    assert p.measured[0] == 2.0 and p.measured[-1] == float(n)


def test_validation_file_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "validation.json"
    data = validation_file(_validation_report()).model_dump(mode="json")
    path.write_text(json.dumps(data), encoding="utf-8")
    back = read_validation(path)
    (t,) = back.tables
    assert back.schema_version == VALIDATION_SCHEMA_VERSION and t.points is not None and t.points.total == 40
    assert set(t.groups) == {"a100", "h100"} and t.overall["rows"] == 40


def test_wrong_input_files_are_one_line_errors(tmp_path: Path) -> None:
    bad = tmp_path / "validation.json"
    bad.write_text(json.dumps({"schema_version": 99, "tables": []}), encoding="utf-8")
    with pytest.raises(DataError, match="schema_version 99"):
        read_validation(bad)
    with pytest.raises(DataError, match="no results.json"):
        read_inputs(tmp_path)
    (tmp_path / "results.json").write_text("{}", encoding="utf-8")
    with pytest.raises(DataError, match="list of scenario objects"):
        read_inputs(tmp_path)
    s = tmp_path / "x.search.json"
    s.write_text(json.dumps({"best": []}), encoding="utf-8")
    with pytest.raises(DataError, match="pareto"):
        read_search(s)


def test_a_search_scenario_of_plan_rows_marks_the_published_plan() -> None:
    rows = [{"label": "best 1", "status": "ok", **PLAN, "tflops_per_gpu": 500.0, "memory_per_gpu_gib": 40.0},
            {"label": "published plan", "status": "ok", **PLAN, "tflops_per_gpu": 480.0, "memory_per_gpu_gib": 82.0,
             "published_tflops_per_gpu": 400.0}]
    (found,) = search_of_rows({"id": "R12", "title": "t", "kind": "search", "notes": ["n"], "rows": rows})
    assert found.data["reference"] is rows[1] and found.data["best"] == [rows[0]] and found.notes[0] == "n"
    fig = pareto_figure(found.data, "t")
    assert [t.name for t in fig.data] == ["best plans", "reference plan"]
    assert list(fig.data[1].y) == [480.0]
