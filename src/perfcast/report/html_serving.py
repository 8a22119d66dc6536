"""The report's serving page: per serving scenario, each run's TTFT, TPOT and E2E latency CDFs (from the rows'
``latency_quantiles``) and the throughput-vs-TTFT curve (the row's ``load_curve`` QPS sweep, with the scenario's
own runs as points)."""

from __future__ import annotations

from typing import Any

from perfcast.report.html_page import Page, esc, fmt_seconds, num

__all__ = ["add_serving_scenario", "cdf_figure", "load_figure"]

_LATENCIES = (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("e2e_s", "E2E"))
_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf")


def _name(row: dict[str, Any], i: int) -> str:
    return str(row.get("label") or row.get("scheduler") or f"run {i + 1}")


def cdf_figure(rows: list[dict[str, Any]], title: str) -> Any:
    """Three panels (TTFT, TPOT, E2E): one CDF line per run, latency on a log axis."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=3, subplot_titles=[t for _, t in _LATENCIES], horizontal_spacing=0.06)
    for i, row in enumerate(rows):
        q = row["latency_quantiles"]
        color = _COLORS[i % len(_COLORS)]
        for col, (key, label) in enumerate(_LATENCIES, 1):
            values = q.get(key) or []
            if not values:
                continue
            fig.add_trace(go.Scatter(x=values, y=q.get("q", []), mode="lines", name=_name(row, i),
                                     legendgroup=str(i), showlegend=col == 1, line={"color": color, "shape": "hv"},
                                     hovertemplate=f"{esc(_name(row, i))}<br>{label} %{{x:.4g}} s"
                                                   "<br>fraction %{y:.2f}<extra></extra>"),
                          row=1, col=col)
            fig.update_xaxes(type="log", title_text=f"{label} (s)", row=1, col=col)
    fig.update_yaxes(title_text="fraction of requests", range=[0, 1.02], row=1, col=1)
    fig.update_layout(title=title, height=400, legend_title="run", margin={"t": 80, "b": 40})
    return fig


def load_figure(rows: list[dict[str, Any]], title: str) -> tuple[Any, str]:
    """Throughput (output tokens/s) vs TTFT: the QPS sweep's p50 and p99 lines where a row has one, and every run
    of the scenario as a point (p99 filled, p50 open). Returns the figure and a caption saying what was swept."""
    import plotly.graph_objects as go

    fig = go.Figure()
    swept = next((r for r in rows if r.get("load_curve")), None)
    caption = "Points: the scenario's own runs (filled: TTFT p99, open: p50). "
    if swept is not None:
        curve = [p for p in swept["load_curve"] if num(p.get("throughput_tokens_per_s")) is not None]
        hover = [f"offered {p['qps']:.3g} req/s ({100 * p['load_frac']:.0f}% of burst throughput)<br>"
                 f"completed {100 * (num(p.get('completed_frac')) or 0):.0f}%" for p in curve]
        for key, label, dash in (("ttft_p99_s", "sweep TTFT p99", "solid"), ("ttft_p50_s", "sweep TTFT p50", "dot")):
            fig.add_trace(go.Scatter(x=[p["throughput_tokens_per_s"] for p in curve], y=[p.get(key) for p in curve],
                                     mode="lines+markers", name=label, line={"color": "#444", "dash": dash},
                                     customdata=hover,
                                     hovertemplate="%{x:.4g} tok/s, TTFT %{y:.4g} s<br>%{customdata}<extra></extra>"))
        caption += (f"Lines: a QPS sweep of the deployment and workload of run {_name(swept, 0)}, simulated at "
                    f"{len(curve)} loads from {min(p['load_frac'] for p in curve):.0%} to "
                    f"{max(p['load_frac'] for p in curve):.0%} of its burst throughput "
                    "(every request at once), same seed.") if curve else ""
    else:
        caption += ("No sweep: the scenario's runs have a single request or replay recorded arrivals, so the "
                    "points are the runs themselves.")
    for i, row in enumerate(rows):
        x = num(row.get("throughput_tokens_per_s"))
        if x is None:
            continue
        color = _COLORS[i % len(_COLORS)]
        for key, symbol, show in (("ttft_s.p99", "circle", True), ("ttft_s.p50", "circle-open", False)):
            y = num(row.get(key))
            if y is None:
                continue
            fig.add_trace(go.Scatter(x=[x], y=[y], mode="markers", name=_name(row, i), legendgroup=f"run{i}",
                                     showlegend=show, marker={"symbol": symbol, "size": 11, "color": color},
                                     hovertemplate=f"{esc(_name(row, i))}: %{{x:.4g}} tok/s, TTFT "
                                                   f"{key.split('.')[1]} %{{y:.4g}} s<extra></extra>"))
    fig.update_layout(title=title, height=420, xaxis_title="throughput (output tokens/s)",
                      yaxis={"title": "TTFT (s)", "type": "log"}, margin={"t": 60, "b": 40})
    return fig, caption


def add_serving_scenario(page: Page, sc: dict[str, Any]) -> None:
    """A serving scenario's section: a line per run, the latency CDFs and the throughput-vs-TTFT figure."""
    rows = [r for r in sc.get("rows", []) if r.get("status") == "ok"]
    page.add(f'<h2 id="sc-{esc(sc["id"])}">{esc(sc["id"])}: {esc(sc.get("title", ""))}</h2>')
    if sc.get("error"):
        page.note(f"{sc.get('status', 'error')}: {sc['error']}")
    for r in sc.get("rows", []):
        if r.get("status") != "ok":
            page.note(f"{r.get('label') or r.get('model', '')}: {r.get('status')}: {r.get('error', '')}")
    for note in sc.get("notes", []):
        page.note(str(note))
    if not rows:
        page.note("no run was simulated")
        return
    page.note("; ".join(f"{_name(r, i)}: TTFT p99 {fmt_seconds(r.get('ttft_s.p99'))}, TPOT p99 "
                        f"{fmt_seconds(r.get('tpot_s.p99'))}, {num(r.get('throughput_tokens_per_s')) or 0:,.0f} tok/s"
                        for i, r in enumerate(rows)))
    with_q = [r for r in rows if isinstance(r.get("latency_quantiles"), dict)]
    if with_q:
        page.figure(cdf_figure(with_q, f"{sc['id']}: latency CDFs"),
                    caption="Share of completed requests at or under each latency (101 quantiles per run).")
    else:
        page.note("no latency distribution in these results (re-run `perfcast suite --out DIR`)")
    fig, caption = load_figure(rows, f"{sc['id']}: throughput vs TTFT")
    page.figure(fig, caption=caption)
