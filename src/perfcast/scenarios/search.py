"""Run a search scenario: a design-space search of training plans (:func:`perfcast.sweep.search_training`).

Rows: the best plans (``label`` ``best 1`` ...), ranked by the exact predictor,
each with the vectorized and the exact figures; then, when the search has a
published run to compare with, that run's plan (``label`` ``published plan``)
with the published throughput, whether it fits, and ``best_vs_reference_frac``
= best plan's exact TFLOP/s per GPU / the published plan's - 1. A note says
how many plans were searched, how fast, and by how much the best plan beats,
matches or trails the published one.
"""

from __future__ import annotations

from perfcast.errors import PerfcastError
from perfcast.results.scenario import ScenarioResult
from perfcast.results.serialize import to_json
from perfcast.scenarios.schema import SearchScenario
from perfcast.sweep.search import PlanRow, search_training

__all__ = ["run_search_scenario"]


def _row(label: str, r: PlanRow) -> dict[str, object]:
    row: dict[str, object] = {"label": label, "status": "ok", **to_json(r)}
    if r.exact is not None:
        row["fits_in_memory"] = r.exact.fits
        row["memory_per_gpu_bytes"] = r.exact.memory.total_bytes
        row["memory_capacity_bytes"] = r.exact.memory.capacity_bytes
    return row


def run_search_scenario(sc: SearchScenario) -> ScenarioResult:
    """Search the scenario's space; one row per best plan, plus the published plan when there is one."""
    res = ScenarioResult(sc.id, sc.title, "ok", kind="search")
    try:
        found = search_training(sc.space, objective=sc.objective, top=sc.top)
    except PerfcastError as exc:
        res.error = str(exc)
        return res.settle()
    res.rows = [_row(f"best {i + 1}", r) for i, r in enumerate(found.best)]
    a = found.agreement
    res.notes.append(f"{found.plans_evaluated:,} plans evaluated of {found.plans_enumerated:,} "
                     f"({found.plans_feasible:,} fit in memory) in {found.search_time_s:.2f} s; vectorized vs exact "
                     f"step time on {int(a['plans_compared'])} plans: median "
                     f"{100 * a['step_time_median_abs_err_frac']:.2f}%, "
                     f"max {100 * a['step_time_max_abs_err_frac']:.1f}%")
    for ref in found.references:
        row = _row("published plan", ref.row)
        row.update(published_tflops_per_gpu=ref.published.tflops_per_gpu, source=ref.source,
                   best_vs_reference_frac=ref.best_vs_reference_frac, vp_note=ref.vp_note,
                   rank_among_searched=ref.rank)
        res.rows.append(row)
        best = found.best[0]
        assert best.exact is not None and ref.row.exact is not None
        frac = ref.best_vs_reference_frac
        verdict = "beats" if frac > 0.005 else "trails" if frac < -0.005 else "matches"
        fits = "fits in memory" if ref.fits else "is predicted out of memory"
        res.notes.append(
            f"best plan ({_plan(best)}) {best.exact.tflops_per_gpu:.0f} TFLOP/s per GPU {verdict} the published plan "
            f"({ref.published.label}: {_plan(ref.row)}; {ref.row.exact.tflops_per_gpu:.0f} TFLOP/s predicted, "
            f"{ref.published.tflops_per_gpu:.0f} published; it {fits}) by {100 * frac:+.1f}%")
    return res.settle()


def _plan(r: PlanRow) -> str:
    d = to_json(r)
    return (f"tp {d['tp']} pp {d['pp']} dp {d['dp']} cp {d['cp']} vp {d['vp']} micro-batch {d['micro_batch']} "
            f"recompute {d['recompute']} zero {d['zero']}")
