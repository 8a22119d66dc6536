"""The report's validation page (from ``perfcast validate --out DIR``): the error per table, a table of the
errors per table and device, and per table predicted vs measured on log-log axes coloured by device."""

from __future__ import annotations

from typing import Any

from perfcast.report.html_page import Page, esc, fmt_pct, num, table_html
from perfcast.results.validation import ValidationFile, ValidationTable

__all__ = ["NO_VALIDATION", "add_validation", "error_figure", "scatter_figure"]

NO_VALIDATION = ("No validation results here: run `perfcast validate --out DIR` (about 2 minutes), then "
                 "`perfcast report DIR` (or pass `--validation FILE`).")


def _short(t: ValidationTable) -> str:
    target = t.target if len(t.target) <= 40 else t.target[:37] + "..."
    return f"{t.table}: {target}"


def error_figure(tables: list[ValidationTable]) -> Any:
    """Horizontal bars: MAPE and median absolute error of every table report."""
    import plotly.graph_objects as go

    names = [_short(t) for t in tables]
    fig = go.Figure()
    for key, label, color in (("mape_frac", "MAPE", "#1f77b4"), ("median_ape_frac", "median |error|", "#aec7e8")):
        fig.add_trace(go.Bar(name=label, y=names, x=[100 * (num(t.overall.get(key)) or 0.0) for t in tables],
                             orientation="h", marker_color=color,
                             customdata=[t.overall.get("predicted_rows") for t in tables],
                             hovertemplate=f"%{{y}}<br>{label} %{{x:.1f}}% over %{{customdata}} rows<extra></extra>"))
    fig.update_layout(title="Error per table", barmode="group", xaxis_title="absolute error (%)",
                      yaxis={"autorange": "reversed", "automargin": True}, height=max(360, 34 * len(tables) + 120),
                      margin={"t": 60, "b": 40, "l": 20})
    return fig


def scatter_figure(t: ValidationTable) -> Any:
    """Predicted vs measured, log-log, a colour per device, with the y = x line."""
    import plotly.graph_objects as go

    assert t.points is not None
    p = t.points
    fig = go.Figure()
    for device in dict.fromkeys(p.device):
        idx = [i for i, d in enumerate(p.device) if d == device]
        fig.add_trace(go.Scatter(x=[p.measured[i] for i in idx], y=[p.predicted[i] for i in idx], mode="markers",
                                 name=device or "(no device)", marker={"size": 5, "opacity": 0.6},
                                 hovertemplate=f"{esc(device)}<br>measured %{{x:.4g}}<br>predicted %{{y:.4g}}"
                                               "<extra></extra>"))
    values = [v for v in p.measured + p.predicted if v > 0]
    if values:
        lo, hi = min(values), max(values)
        fig.add_trace(go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", name="y = x",
                                 line={"color": "#555", "dash": "dash", "width": 1}, hoverinfo="skip"))
    shown = f"{len(p.measured):,} of {p.total:,} rows" if len(p.measured) < p.total else f"{p.total:,} rows"
    fig.update_layout(title=f"{t.table}<br><sub>{esc(t.target)}; {shown}</sub>", height=440,
                      xaxis={"type": "log", "title": f"measured ({esc(t.target)})"},
                      yaxis={"type": "log", "title": "predicted"}, legend_title="device", margin={"t": 80, "b": 40})
    return fig


def _summary_cells(name: str, s: dict[str, float | int | None]) -> list[str]:
    return [name, esc(s.get("rows", "-")), fmt_pct(s.get("coverage_frac")), fmt_pct(s.get("mape_frac")),
            fmt_pct(s.get("median_ape_frac")), fmt_pct(s.get("max_ape_frac")), fmt_pct(s.get("median_bias_frac")),
            fmt_pct(s.get("interval_coverage_frac"))]


def add_validation(page: Page, validation: ValidationFile | None) -> None:
    """The validation page: one line saying how to produce it when there are no results."""
    page.add("<h2>Predicted vs measured</h2>")
    if validation is None:
        page.note(NO_VALIDATION)
        return
    tables = [t for t in validation.tables if t.status == "ok" and num(t.overall.get("mape_frac")) is not None]
    skipped = [t for t in validation.tables if t not in tables]
    page.note(f"{len(tables)} table reports with predictions"
              + (f"; {len(skipped)} without ({', '.join(t.table for t in skipped)})" if skipped else "") + ".")
    if tables:
        page.figure(error_figure(tables), caption="MAPE = mean |predicted / measured - 1| over the table's "
                                                  "measured rows; how each table was fitted is noted below.")
    header = ["table / device", "rows", "coverage", "MAPE", "median", "max", "median bias", "in interval"]
    rows: list[list[str]] = []
    for t in tables:
        rows.append(_summary_cells(f"<b>{esc(_short(t))}</b><br><small>{esc(t.note)}</small>", t.overall))
        rows += [_summary_cells(f"&nbsp;&nbsp;{esc(g)}", s) for g, s in t.groups.items()]
    page.add(table_html(header, rows))
    for t in tables:
        if t.points is not None and t.points.measured:
            page.figure(scatter_figure(t), caption=t.note)
