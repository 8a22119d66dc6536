"""report.html in a real headless Chromium (Debian's chromium package): built by ``perfcast suite --out DIR`` from a
small real suite run plus a validation.json and a search JSON in DIR; every tab opens, nothing is fetched from
the network, the console has no error, and every figure the report declares is drawn. A screenshot of each tab
is saved (its path printed)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from perfcast.cli import app
from perfcast.groundtruth.files import find_groundtruth
from perfcast.report.html import is_perfcast_report
from perfcast.validate.export import write_validation
from perfcast.validate.metrics import summarize
from perfcast.validate.report import GroupReport, TableReport, ValidationReport, _points, run_validation

CHROMIUM = Path("/usr/bin/chromium")
SCENARIOS = "T4.2,T3.2,I1.1,I2.2"  # training with an OOM run, pipeline; serving with one request and a sweep
PAGES = ("overview", "training", "serving", "validation", "search")


def _validation(folder: Path) -> int:
    """validation.json from two real tables when the ground truth is here, else from a table made up in the
    test; returns how many table reports have points."""
    root = find_groundtruth(required=False)
    if root is not None and (root / "published" / "gemm.csv").is_file() and (root / "neusight" / "e2e.csv").is_file():
        rep = run_validation([root / "published" / "gemm.csv", root / "neusight" / "e2e.csv"])
    else:
        rng = np.random.default_rng(1)
        measured = rng.uniform(0.1, 10.0, 50)
        predicted = measured * rng.uniform(0.7, 1.3, 50)
        device = np.array(["a100-sxm-80gb"] * 25 + ["h100-sxm"] * 25)
        groups = [GroupReport(d, summarize(measured[device == d], predicted[device == d])) for d in set(device)]
        rep = ValidationReport([TableReport("made-up.csv", "made_up", "time_ms", "test data",
                                            summarize(measured, predicted), groups,
                                            points=_points(measured, predicted, device))])
    write_validation(rep, folder)
    return sum(1 for t in rep.tables if t.points is not None and t.points.measured)


def _search(folder: Path) -> None:
    plan = {"gpus": 1024, "tp": 8, "pp": 8, "dp": 16, "cp": 1, "ep": 1, "vp": 1, "micro_batch": 1,
            "recompute": "selective", "zero": 1}
    front = [{**plan, "pp": pp, "dp": 128 // pp, "tflops_per_gpu": 300.0 + 20 * i, "memory_per_gpu_gib": 20.0 + 8 * i,
              "step_time_s": 9.0 - i} for i, pp in enumerate((16, 8, 4, 2))]
    data = {"objective": "tflops", "plans_evaluated": 1200, "plans_feasible": 700, "best": front[-2:], "pareto": front,
            "reference": {**plan, "label": "a published run", "tflops_per_gpu": 330.0, "memory_per_gpu_gib": 45.0,
                          "step_time_s": 8.2}}
    (folder / "test.search.json").write_text(json.dumps(data), encoding="utf-8")


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium: "
                                                   "apt-get install chromium")
def test_report_renders_every_figure_in_chromium(tmp_path: Path) -> None:
    sync_api = pytest.importorskip("playwright.sync_api", reason="needs playwright: pip install -e '.[test]'")
    out = tmp_path / "suite"
    out.mkdir()
    scatters = _validation(out)
    _search(out)
    res = CliRunner().invoke(app, ["suite", "--only", SCENARIOS, "--json", "--out", str(out)])
    assert res.exit_code == 0, res.stderr
    data = json.loads(res.stdout)
    report = out / "report.html"
    assert is_perfcast_report(report)
    kinds = [s["kind"] for s in data["scenarios"]]
    # 2 per training scenario (step parts, memory), 2 per serving scenario (CDFs, throughput vs TTFT), the error
    # bars and a scatter per validated table, the search's front
    expected = 2 * kinds.count("training") + 2 * kinds.count("serving") + 1 + scatters + 1

    console: list[str] = []
    remote: list[str] = []
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.on("console", lambda m: console.append(f"{m.type}: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: console.append(f"pageerror: {e}"))

        def no_network(route: object) -> None:
            req = route.request  # type: ignore[attr-defined]
            if req.url.startswith("file://"):
                route.continue_()  # type: ignore[attr-defined]
            else:
                remote.append(req.url)
                route.abort()  # type: ignore[attr-defined]

        page.route("**/*", no_network)
        page.goto(report.as_uri())
        declared = int(page.evaluate("document.body.dataset.figures"))
        assert declared == expected
        for name in PAGES:
            page.click(f"nav a[data-page={name}]")
            page.wait_for_function(
                "name => [...document.querySelectorAll('#page-' + name + ' div.plot')]"
                ".every(d => d.querySelector('.main-svg'))", arg=name)
            assert page.is_visible(f"#page-{name}")
            shot = tmp_path / f"report-{name}.png"
            page.screenshot(path=str(shot), full_page=True)
            print(f"screenshot: {shot}")
        drawn = page.evaluate("[...document.querySelectorAll('.js-plotly-plot')]"
                              ".filter(d => d.querySelector('.main-svg')).length")
        browser.close()
    assert console == []
    assert remote == []
    assert drawn == declared
    print(f"report: {report}")
