"""Run a serving scenario: each run is one simulation (:func:`perfcast.serving.experiments.run.run_experiment`).

A row carries the run's JSON summary (``ttft_s``, ``tpot_s``, ``e2e_s`` percentiles, throughput, goodput,
KV use, preemptions) flattened to dotted keys (``ttft_s.p99``). A run may instead

- search the highest QPS it sustains within its SLOs (:func:`perfcast.serving.experiments.search.find_max_qps`, the
  steady-state rule): the row has ``max_qps``, the loads tried, the saturated throughput, and the metrics of
  the simulation at ``max_qps`` (its request count and arrival span as ``qps_search_*``);
- serve a second model on the same GPUs
  (:func:`perfcast.serving.experiments.colocation.simulate_colocated`): two rows, one per model; when a run of
  the scenario serves that model's config alone, the row gets ``slowdown_x.{ttft,tpot,e2e}`` = co-located
  mean / alone mean (the interference).

A run with a ``baseline`` gets ``speedup_x.{ttft,tpot,e2e}`` = the baseline's mean / its own. Each ordering
the scenario expects (a reference's finding, e.g. VIDUR's vLLM vs Sarathi) becomes a note saying whether
perfcast reproduces it.

For the HTML report every simulated row also carries ``latency_quantiles`` (TTFT, TPOT and E2E at 101
quantiles) and the first run whose arrival rate can be swept carries ``load_curve`` (throughput vs TTFT over a
few loads; :mod:`perfcast.scenarios.serving_curves`). Both are nested values: the CSV and the printed tables
leave them out.
"""

from __future__ import annotations

import math
from typing import Any

from perfcast.errors import PerfcastError
from perfcast.results.scenario import ScenarioResult
from perfcast.results.serialize import to_json
from perfcast.scenarios.schema import ServingRun, ServingScenario
from perfcast.scenarios.serving_curves import latency_quantiles, load_curve, sweepable
from perfcast.serving.config import ServingConfig
from perfcast.serving.experiments.run import Colocation, MaxQpsSearch, Simulation, run_experiment
from perfcast.serving.result import ServingResult

__all__ = ["run_serving_scenario"]

_RATIO_KEYS = (("ttft", "ttft_s.mean"), ("tpot", "tpot_s.mean"), ("e2e", "e2e_s.mean"))


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        elif not isinstance(v, list):
            out[f"{prefix}{k}"] = v
    return out


def _head(label: str, cfg: ServingConfig) -> dict[str, object]:
    return {"label": label, "model": cfg.model, "hardware": cfg.hardware, "scheduler": cfg.scheduler,
            "cluster": cfg.cluster or cfg.hardware, "qps": cfg.workload.qps, "block_size": cfg.block_size,
            "preemption_mode": cfg.preemption_mode}


def _value(row: dict[str, object], key: str) -> float | None:
    v = row.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


def _ratios(row: dict[str, object], num: dict[str, object], den: dict[str, object], prefix: str) -> None:
    """``row[prefix.name]`` = num's mean / den's mean for TTFT, TPOT and E2E (where both are positive)."""
    for name, key in _RATIO_KEYS:
        a, b = _value(num, key), _value(den, key)
        if a is not None and b is not None and a > 0 and b > 0:
            row[f"{prefix}.{name}"] = a / b


def _run_rows(run: ServingRun) -> list[dict[str, object]]:
    """The run's rows (two for a co-located run); a failure becomes an error row per model."""
    cfg = run.config
    if run.colocate is not None:
        second = run.colocate
        rows = [_head(lab, c) for lab, c in zip(run.labels, (cfg, second), strict=True)]
        try:
            co = run_experiment(Colocation(cfg, second, mode=run.colocation, memory_frac=run.memory_frac))
        except PerfcastError as exc:
            for row in rows:
                row.update(status="error", error=str(exc))
            return rows
        results: tuple[ServingResult, ServingResult] = (co.first, co.second)
        for row, res, other, frac in zip(rows, results, reversed(rows), (run.memory_frac, 1 - run.memory_frac),
                                         strict=True):
            row.update(_flat(to_json(res)))
            row["latency_quantiles"] = latency_quantiles(res)
            row.update(status="ok", colocation=run.colocation, colocated_with=other["label"], memory_frac=frac,
                       colocation_passes=co.passes, gpu_busy_frac=res.busy_frac)
        return rows
    row = _head(run.label, cfg)
    try:
        if run.search_max_qps:
            search = run_experiment(MaxQpsSearch(cfg, start_qps=cfg.workload.qps))
            if search.result is None:  # no load meets the SLO: the verdict is the row's answer
                row.update(status="error", error=search.verdict, qps_loads_tried=len(search.evaluated))
                return [row]
            sim = search.result
            row.update(_flat(to_json(sim)))
            row.update(qps=search.max_qps, max_qps=search.max_qps, qps_loads_tried=len(search.evaluated),
                       qps_search_requests=sim.arrival_s.size, qps_search_simulated_s=float(sim.arrival_s[-1]),
                       saturated_requests_per_s=search.saturation.requests_per_s if search.saturation else None)
        else:
            sim = run_experiment(Simulation(cfg))
            row.update(_flat(to_json(sim)))
        row["latency_quantiles"] = latency_quantiles(sim)
        row["status"] = "ok"
    except PerfcastError as exc:
        row.update(status="error", error=str(exc))
    return [row]


def run_serving_scenario(sc: ServingScenario) -> ScenarioResult:
    """Simulate every run; one failure does not stop the others."""
    res = ScenarioResult(sc.id, sc.title, "ok", kind="serving")
    by_label: dict[str, dict[str, object]] = {}
    alone: list[tuple[ServingConfig, dict[str, object]]] = []  # plain runs, to match co-located models with
    per_run = []
    for run in sc.runs:
        rows = _run_rows(run)
        per_run.append(rows)
        res.rows.extend(rows)
        by_label.update({str(r["label"]): r for r in rows})
        if run.colocate is None and not run.search_max_qps:
            alone.append((run.config, rows[0]))
    for run, rows in zip(sc.runs, per_run, strict=True):
        base = by_label.get(run.baseline) if run.baseline is not None else None
        for row in rows:
            if base is not None and base.get("status") == "ok" and row.get("status") == "ok":
                row["baseline"] = run.baseline
                _ratios(row, base, row, "speedup_x")
        if run.colocate is not None:
            for row, cfg in zip(rows, (run.config, run.colocate), strict=True):
                match = next((r for c, r in alone if c == cfg and r.get("status") == "ok"), None)
                if match is not None and row.get("status") == "ok":
                    row["alone_run"] = match["label"]
                    _ratios(row, row, match, "slowdown_x")
    swept = next(((run, rows[0]) for run, rows in zip(sc.runs, per_run, strict=True) if run.colocate is None
                  and rows[0].get("status") == "ok" and sweepable(run.config)), None)
    if swept is not None:  # the throughput-vs-TTFT curve of the first run that can be swept
        swept[1]["load_curve"] = load_curve(swept[0].config)
    for exp in sc.expected:
        lo, hi = by_label.get(exp.lower), by_label.get(exp.higher)
        if lo is None or hi is None or lo.get("status") != "ok" or hi.get("status") != "ok":
            res.notes.append(f"{exp.metric}: cannot compare {exp.lower!r} with {exp.higher!r} (a run is missing)")
            continue
        a, b = _value(lo, exp.metric), _value(hi, exp.metric)
        if a is None or b is None:
            res.notes.append(f"{exp.metric}: cannot compare {exp.lower!r} with {exp.higher!r} (no such value)")
            continue
        verdict = "reproduced" if a < b else "NOT reproduced"
        res.notes.append(f"{exp.metric}: {exp.lower} {a:.4g} vs {exp.higher} {b:.4g}; expected lower for "
                         f"{exp.lower} ({exp.source}): {verdict}")
    return res.settle()
