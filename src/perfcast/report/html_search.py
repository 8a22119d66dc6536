"""The report's search page: per plan search, the Pareto front of throughput (TFLOP/s per GPU) against memory per
GPU, the best plans highlighted and the reference (published) plan marked, and a table of the best plans."""

from __future__ import annotations

from typing import Any

from perfcast.report.data import SearchData
from perfcast.report.html_page import Page, esc, fmt_seconds, num, table_html

__all__ = ["NO_SEARCH", "PLAN_KEYS", "add_search", "pareto_figure", "plan_text"]

NO_SEARCH = ("No plan search here: write one with `perfcast search ... --json --out DIR/NAME.search.json`, "
             "then `perfcast report DIR`.")

PLAN_KEYS = ("gpus", "tp", "pp", "dp", "cp", "ep", "vp", "sp", "micro_batch", "recompute", "zero", "schedule")


def plan_text(plan: dict[str, Any]) -> str:
    """The plan's settings (those of :data:`PLAN_KEYS` it has) as ``key=value`` words."""
    words = []
    for k in PLAN_KEYS:
        v = plan.get(k)
        if isinstance(v, bool):
            words.append(k if v else f"no_{k}")
        elif v is not None and not isinstance(v, (dict, list)):
            words.append(f"{k}={v}")
    return " ".join(words)


def _reference(data: dict[str, Any]) -> dict[str, Any] | None:
    ref = data.get("reference")
    if isinstance(ref, dict):
        return ref
    plans = [p for p in (data.get("pareto") or []) + (data.get("best") or []) if isinstance(p, dict)]
    return next((p for p in plans if p.get("reference") is True), None)


def _xy(plans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in plans if isinstance(p, dict) and num(p.get("memory_per_gpu_gib")) is not None
            and num(p.get("tflops_per_gpu")) is not None]


def _trace(go: Any, plans: list[dict[str, Any]], **kwargs: Any) -> Any:
    return go.Scatter(x=[p["memory_per_gpu_gib"] for p in plans], y=[p["tflops_per_gpu"] for p in plans],
                      customdata=[f"{esc(plan_text(p))}<br>step {fmt_seconds(p.get('step_time_s'))}" for p in plans],
                      hovertemplate="%{y:.4g} TFLOP/s per GPU, %{x:.4g} GiB per GPU<br>%{customdata}<extra></extra>",
                      **kwargs)


def pareto_figure(data: dict[str, Any], title: str) -> Any:
    """The Pareto front (line), the best plans (stars) and the reference plan (diamond)."""
    import plotly.graph_objects as go

    pareto = sorted(_xy(data.get("pareto") or []), key=lambda p: float(p["memory_per_gpu_gib"]))
    best = _xy(data.get("best") or [])
    fig = go.Figure()
    if pareto:
        fig.add_trace(_trace(go, pareto, mode="lines+markers", name="Pareto front", line={"shape": "hv"},
                             marker={"size": 7, "color": "#1f77b4"}))
    if best:
        fig.add_trace(_trace(go, best, mode="markers", name="best plans",
                             marker={"symbol": "star", "size": 16, "color": "#ff7f0e",
                                     "line": {"width": 1, "color": "#333"}}))
    ref = _reference(data)
    if ref is not None and _xy([ref]):
        fig.add_trace(_trace(go, [ref], mode="markers", name="reference plan",
                             marker={"symbol": "diamond", "size": 15, "color": "#d62728",
                                     "line": {"width": 1, "color": "#333"}}))
    fig.update_layout(title=title, height=440, xaxis_title="memory per GPU (GiB)",
                      yaxis_title="throughput (TFLOP/s per GPU)", margin={"t": 60, "b": 40})
    return fig


def add_search(page: Page, searches: list[SearchData]) -> None:
    """The search page: one line saying how to produce it when there is no search."""
    page.add("<h2>Parallel-plan search</h2>")
    if not searches:
        page.note(NO_SEARCH)
        return
    for s in searches:
        d = s.data
        page.add(f"<h3>{esc(s.name)}</h3>")
        if "plans_evaluated" in d:
            page.note(f"objective {d.get('objective', '-')}; {d.get('plans_evaluated', '-')} plans evaluated, "
                      f"{d.get('plans_feasible', '-')} feasible; {len(d.get('pareto') or [])} on the Pareto front.")
        for line in s.notes:
            page.note(line)
        ref = _reference(d)
        if ref is not None:
            name = f"{ref['label']}, " if ref.get("label") else ""
            page.note(f"reference plan ({name}marked by a diamond): {plan_text(ref)}: predicted "
                      f"{num(ref.get('tflops_per_gpu')) or 0:.4g} TFLOP/s per GPU, "
                      f"{num(ref.get('memory_per_gpu_gib')) or 0:.4g} GiB per GPU"
                      + (f"; published {ref['published_tflops_per_gpu']:.4g} TFLOP/s per GPU"
                         if num(ref.get("published_tflops_per_gpu")) is not None else ""))
        page.figure(pareto_figure(d, f"{s.name}: throughput vs memory per GPU"),
                    caption="The line joins the plans no other plan beats on both throughput and memory (the "
                            "Pareto front); stars are the best plans by the objective, the diamond the reference "
                            "(published) plan." if d.get("pareto") else
                            "Stars are the best plans by the objective, the diamond the reference (published) plan.")
        best = [p for p in d.get("best") or [] if isinstance(p, dict)]
        if best:
            page.add(table_html(["plan", "TFLOP/s per GPU", "memory per GPU", "step time"],
                                [[esc(plan_text(p)), f"{num(p.get('tflops_per_gpu')) or 0:.4g}",
                                  f"{num(p.get('memory_per_gpu_gib')) or 0:.4g} GiB", fmt_seconds(p.get("step_time_s"))]
                                 for p in best]))
