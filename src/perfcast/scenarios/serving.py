"""Run a serving scenario: each run is one simulation (:func:`perfcast.serving.simulate_serving`).

A row carries the run's JSON summary (``ttft_s``, ``tpot_s``, ``e2e_s`` percentiles, throughput, goodput,
KV use, preemptions) flattened to dotted keys (``ttft_s.p99``). Each ordering the scenario expects (a
reference's finding, e.g. VIDUR's vLLM vs Sarathi) becomes a note saying whether perfcast reproduces it.
"""

from __future__ import annotations

from typing import Any

from perfcast.errors import PerfcastError
from perfcast.scenarios.result import ScenarioResult
from perfcast.scenarios.schema import ServingScenario
from perfcast.serving.engine import simulate_serving

__all__ = ["run_serving_scenario"]


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        elif not isinstance(v, list):
            out[f"{prefix}{k}"] = v
    return out


def run_serving_scenario(sc: ServingScenario) -> ScenarioResult:
    """Simulate every run; one failure does not stop the others."""
    res = ScenarioResult(sc.id, sc.title, "ok", kind="serving")
    by_label: dict[str, dict[str, object]] = {}
    for run in sc.runs:
        row: dict[str, object] = {"label": run.label, "model": run.config.model, "hardware": run.config.hardware,
                                  "scheduler": run.config.scheduler}
        try:
            row.update(_flat(simulate_serving(run.config).as_dict()))
            row["status"] = "ok"
        except PerfcastError as exc:
            row.update(status="error", error=str(exc))
        res.rows.append(row)
        by_label[run.label] = row
    for exp in sc.expected:
        lo, hi = by_label.get(exp.lower), by_label.get(exp.higher)
        if lo is None or hi is None or lo.get("status") != "ok" or hi.get("status") != "ok":
            res.notes.append(f"{exp.metric}: cannot compare {exp.lower!r} with {exp.higher!r} (a run is missing)")
            continue
        a, b = float(str(lo[exp.metric])), float(str(hi[exp.metric]))
        verdict = "reproduced" if a < b else "NOT reproduced"
        res.notes.append(f"{exp.metric}: {exp.lower} {a:.4g} vs {exp.higher} {b:.4g}: the ordering {exp.source} "
                         f"reports is {verdict}")
    return res.settle()
