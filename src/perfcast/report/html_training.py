"""The report's training page: per training scenario, the step time of each run split into its exposed parts
(stacked bars) and the memory per GPU by part against the GPU's capacity."""

from __future__ import annotations

from typing import Any

from perfcast.report.html_page import Page, esc, fmt_pct, fmt_seconds, num, time_scale

__all__ = ["STEP_PARTS", "add_training_scenario", "memory_figure", "step_figure"]

# (label, the row keys whose seconds make that exposed part, colour): the parts add up to step_time_s
STEP_PARTS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("compute", ("compute_s",), "#4c72b0"),
    ("recompute", ("recompute_s",), "#8172b3"),
    ("exposed communication", ("comm_exposed_s",), "#dd8452"),
    ("pipeline bubble", ("bubble_s",), "#c44e52"),
    ("optimizer", ("optimizer_s",), "#55a868"),
    ("other (launch, sync)", ("overhead_s",), "#937860"),
)
_MEMORY_PARTS = (("weights", "memory_weights_bytes", "#4c72b0"), ("gradients", "memory_gradients_bytes", "#dd8452"),
                 ("optimizer states", "memory_optimizer_bytes", "#55a868"),
                 ("activations", "memory_activations_bytes", "#8172b3"),
                 ("comm buffers", "memory_comm_buffers_bytes", "#ccb974"),
                 ("CUDA context", "memory_context_bytes", "#64b5cd"),
                 ("fragmentation", "memory_fragmentation_bytes", "#da8bc3"))
_COMM_NAMES = {"tp_comm_s": "TP", "cp_comm_s": "CP", "ep_comm_s": "EP", "fsdp_comm_s": "FSDP",
               "pp_send_s": "PP send", "dp_comm_s": "DP"}


def _labels(rows: list[dict[str, Any]]) -> list[str]:
    """A distinct x label per run (the label, else the model; repeated ones numbered); OOM runs say so."""
    out: list[str] = []
    for i, row in enumerate(rows):
        name = str(row.get("label") or row.get("model") or f"run {i + 1}")
        if name in out:
            name = f"{name} #{i + 1}"
        out.append(name)
    return [f"{n} (OOM)" if _oom(r) else n for n, r in zip(out, rows, strict=True)]


def _oom(row: dict[str, Any]) -> bool:
    return row.get("fits_in_memory") is False or row.get("status") == "oom"


def _part_s(row: dict[str, Any], keys: tuple[str, ...]) -> float:
    return sum(num(row.get(k)) or 0.0 for k in keys)


def step_figure(rows: list[dict[str, Any]], title: str) -> Any:
    """Stacked bars: each run's step time by exposed part."""
    import plotly.graph_objects as go

    labels = _labels(rows)
    unit, scale = time_scale(max((num(r.get("step_time_s")) or 0.0) for r in rows))
    fig = go.Figure()
    for name, keys, color in STEP_PARTS:
        values = [_part_s(r, keys) for r in rows]
        if not any(v > 0 for v in values):
            continue
        hover = None
        if name == "exposed communication":
            hover = ["<br>".join(f"{_COMM_NAMES[k]}: {fmt_seconds(r.get(k))} exposed of "
                                 f"{fmt_seconds(r.get(k.removesuffix('_s') + '_total_s'))}"
                                 for k in _COMM_NAMES if (num(r.get(k.removesuffix('_s') + '_total_s')) or 0) > 0)
                     or "none" for r in rows]
        fig.add_trace(go.Bar(name=name, x=labels, y=[v * scale for v in values], customdata=hover, marker_color=color,
                             hovertemplate=f"%{{x}}<br>{name}: %{{y:.4g}} {unit}"
                                           + ("<br>%{customdata}" if hover else "") + "<extra></extra>"))
    fig.update_layout(barmode="stack", title=title, yaxis_title=f"step time ({unit})", legend_title="exposed part",
                      height=420, margin={"t": 60, "b": 40})
    return fig


def memory_figure(rows: list[dict[str, Any]], title: str) -> Any:
    """Stacked bars: each run's memory per GPU by part, with the GPU's capacity marked."""
    import plotly.graph_objects as go

    labels = _labels(rows)
    gib = 2.0**30
    fig = go.Figure()
    for name, key, color in _MEMORY_PARTS:
        values = [(num(r.get(key)) or 0.0) / gib for r in rows]
        if any(v > 0 for v in values):
            fig.add_trace(go.Bar(name=name, x=labels, y=values, marker_color=color,
                                 hovertemplate=f"%{{x}}<br>{name}: %{{y:.3g}} GiB<extra></extra>"))
    if not fig.data:  # rows without the breakdown: the total only
        fig.add_trace(go.Bar(name="total", x=labels, y=[(num(r.get("memory_per_gpu_bytes")) or 0.0) / gib
                                                         for r in rows]))
    capacity = [(num(r.get("memory_capacity_bytes")) or 0.0) / gib for r in rows]
    if any(c > 0 for c in capacity):
        fig.add_trace(go.Scatter(name="GPU capacity", x=labels, y=capacity, mode="markers",
                                 marker={"symbol": "line-ew-open", "size": 44, "line": {"width": 3, "color": "#d62728"},
                                         "color": "#d62728"},
                                 hovertemplate="%{x}<br>capacity: %{y:.3g} GiB<extra></extra>"))
    fig.update_layout(barmode="stack", title=title, yaxis_title="memory per GPU (GiB)", legend_title="part",
                      height=420, margin={"t": 60, "b": 40})
    return fig


def add_training_scenario(page: Page, sc: dict[str, Any]) -> None:
    """A training scenario's section: its runs' table line, the step breakdown and memory figures."""
    rows = [r for r in sc.get("rows", []) if r.get("status") in ("ok", "oom")]  # an OOM run is a prediction
    page.add(f'<h2 id="sc-{esc(sc["id"])}">{esc(sc["id"])}: {esc(sc.get("title", ""))}</h2>')
    if sc.get("error"):
        page.note(f"{sc.get('status', 'error')}: {sc['error']}")
    for r in sc.get("rows", []):
        if r.get("status") not in ("ok", "oom"):
            page.note(f"{r.get('label') or r.get('model', '')}: {r.get('status')}: {r.get('error', '')}")
    if not rows:
        page.note("no run was predicted")
        return
    oom = [r for r in rows if _oom(r)]
    summary = "; ".join(f"{lab}: step {fmt_seconds(r.get('step_time_s'))}, MFU {fmt_pct(r.get('mfu'))}"
                        for lab, r in zip(_labels(rows), rows, strict=True))
    page.note(summary)
    page.figure(step_figure(rows, f"{sc['id']}: step time by exposed part"),
                caption="The parts add up to the step time: compute, recomputation, communication not hidden "
                        "behind compute (hover for each collective's exposed and total time), pipeline bubble, "
                        "optimizer step and launch/sync overhead.")
    page.figure(memory_figure(rows, f"{sc['id']}: memory per GPU"),
                caption="Memory per GPU by part; the red tick is the GPU's capacity"
                        + (f" ({len(oom)} run(s) do not fit: OOM)." if oom else "."))
