"""``report.html``: the suite's results, the validation and the plan searches as one self-contained HTML file.

One file, no network: plotly.js is inlined once, every figure is JSON in the page (drawn when its tab is first
shown) and they share one inlined template. Tabs: overview (a line per scenario), training, serving, validation
and search. ``<body data-figures="N">`` declares how many figures the report draws in all.

The report renders plain data (:mod:`perfcast.report.data`); it never runs a prediction.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfcast.report.data import ReportInputs, SearchData, search_of_rows
from perfcast.report.html_page import Page, esc, fmt_pct, fmt_seconds, fmt_value, table_html
from perfcast.report.html_search import add_search
from perfcast.report.html_serving import add_serving_scenario
from perfcast.report.html_training import add_training_scenario
from perfcast.report.html_validation import add_validation

__all__ = ["GENERATOR", "ReportHtml", "build_report", "is_perfcast_report", "write_report"]

GENERATOR = "perfcast report"  # the <meta name="generator"> that marks a file this module wrote

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#222;background:#fafafa}
header{background:#263238;color:#fff;padding:10px 24px}
header h1{font-size:20px;margin:0 0 4px 0}
header p{margin:0;font-size:13px;color:#cfd8dc}
nav{display:flex;gap:4px;background:#37474f;padding:0 24px;position:sticky;top:0;z-index:10}
nav a{color:#eceff1;text-decoration:none;padding:10px 16px;font-size:14px}
nav a.active{background:#fafafa;color:#263238;font-weight:600}
main{padding:8px 24px 40px 24px}
section h2{font-size:18px;border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:28px}
p.note{font-size:13px;margin:4px 0;color:#444}
p.caption{font-size:12px;color:#666;margin:2px 0 0 0}
figure{margin:12px 0;background:#fff;border:1px solid #e0e0e0;padding:6px}
div.plot{width:100%;min-height:360px}
table.data{border-collapse:collapse;font-size:12.5px;margin:10px 0;background:#fff}
table.data th,table.data td{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}
table.data th{background:#eceff1}
.status-ok{color:#2e7d32;font-weight:600}.status-oom{color:#ef6c00;font-weight:600}
.status-error{color:#c62828;font-weight:600}
"""

_JS = """
(function () {
  var spec = JSON.parse(document.getElementById('perfcast-figures').textContent);
  function draw(page) {
    page.querySelectorAll('div.plot').forEach(function (div) {
      if (div.dataset.drawn) { Plotly.Plots.resize(div); return; }
      var fig = spec.figures[div.dataset.fig];
      fig.layout.template = spec.template;
      Plotly.newPlot(div, fig.data, fig.layout, {responsive: true, displaylogo: false});
      div.dataset.drawn = '1';
    });
  }
  function show() {
    var hash = decodeURIComponent(location.hash.slice(1)).split(':');
    var page = document.getElementById('page-' + hash[0]) || document.querySelector('section.page');
    document.querySelectorAll('section.page').forEach(function (p) { p.hidden = p !== page; });
    document.querySelectorAll('nav a').forEach(function (a) {
      a.classList.toggle('active', 'page-' + a.dataset.page === page.id);
    });
    draw(page);
    var anchor = hash[1] && document.getElementById('sc-' + hash[1]);
    if (anchor) { anchor.scrollIntoView(); } else { window.scrollTo(0, 0); }
  }
  window.addEventListener('hashchange', show);
  show();
})();
"""


def _status(status: object) -> str:
    s = str(status)
    return f'<span class="status-{esc(s)}">{esc(s)}</span>'


def _headline(sc: dict[str, Any]) -> str:
    """The scenario's main numbers, from its first predicted row."""
    rows = [r for r in sc.get("rows", []) if r.get("status") in ("ok", "oom")]
    if not rows:
        return "-"
    r = rows[0]
    kind = sc.get("kind")
    name = esc(r.get("label") or r.get("model") or "")
    more = f" (+{len(rows) - 1} more)" if len(rows) > 1 else ""
    if kind == "training":
        oom = " OOM" if r.get("fits_in_memory") is False or r.get("status") == "oom" else ""
        return (f"{name}: step {fmt_seconds(r.get('step_time_s'))}, MFU {fmt_pct(r.get('mfu'))}, "
                f"{fmt_value('memory_per_gpu_bytes', r.get('memory_per_gpu_bytes'))}/GPU{oom}{more}")
    if kind == "serving":
        return (f"{name}: TTFT p99 {fmt_seconds(r.get('ttft_s.p99'))}, TPOT p99 {fmt_seconds(r.get('tpot_s.p99'))}, "
                f"{fmt_value('', r.get('throughput_tokens_per_s'))} tok/s{more}")
    return f"{len(rows)} predictions"


def _metric_label(key: str) -> str:
    """``mape_frac`` -> ``MAPE``, ``with_measurement`` -> ``with measurement`` (the value carries the unit)."""
    for suffix in ("_frac", "_bytes", "_s"):
        key = key.removesuffix(suffix)
    return key.replace("_", " ").replace("mape", "MAPE")


def _overview(inputs: ReportInputs) -> Page:
    page = Page("overview", "Overview")
    page.add("<h2>Scenarios</h2>")
    if not inputs.results:
        page.note("No suite results: run `perfcast suite --out DIR`.")
        return page
    header = ["id", "title", "kind", "status", "headline", "metrics"]
    rows = []
    tab = {"training": "training", "serving": "serving", "search": "search"}
    for sc in inputs.results:
        where = tab.get(str(sc.get("kind")))
        sid = esc(sc["id"])
        link = f'<a href="#{where}:{sid}">{sid}</a>' if where else sid
        metrics = ", ".join(f"{esc(_metric_label(k))} {esc(fmt_value(k, v))}"
                            for k, v in (sc.get("metrics") or {}).items())
        error = f"<br><small>{esc(sc['error'])}</small>" if sc.get("error") else ""
        rows.append([link, esc(sc.get("title", "")), esc(sc.get("kind", "")), _status(sc.get("status")) + error,
                     _headline(sc), metrics])
    page.add(table_html(header, rows))
    return page


def _searches(inputs: ReportInputs) -> list[SearchData]:
    """The search files and every ``search`` scenario row carrying a search."""
    return [s for sc in inputs.results for s in search_of_rows(sc)] + list(inputs.searches)


def _pages(inputs: ReportInputs) -> list[Page]:
    training = Page("training", "Training")
    serving = Page("serving", "Serving")
    for sc in inputs.results:
        if sc.get("kind") == "training":
            add_training_scenario(training, sc)
        elif sc.get("kind") == "serving":
            add_serving_scenario(serving, sc)
    for page, what in ((training, "training"), (serving, "serving")):
        if not page.parts:
            page.note(f"No {what} scenario in these results: run `perfcast suite --out DIR` "
                      f"(or --only some {what} scenario ids).")
    validation = Page("validation", "Validation")
    add_validation(validation, inputs.validation)
    search = Page("search", "Search")
    add_search(search, _searches(inputs))
    return [_overview(inputs), training, serving, validation, search]


@dataclass(frozen=True)
class ReportHtml:
    """The HTML document and how many figures it draws."""

    text: str
    figures: int


def build_report(inputs: ReportInputs, *, title: str = "perfcast report") -> ReportHtml:
    """The whole HTML document."""
    import plotly.io as pio
    import plotly.offline

    pages = _pages(inputs)
    figures = {fid: spec for p in pages for fid, spec in p.figures.items()}
    template = pio.templates["plotly_white"].to_plotly_json()
    blob = json.dumps({"template": template, "figures": figures}, allow_nan=False).replace("</", "<\\/")
    nav = "".join(f'<a href="#{p.id}" data-page="{p.id}">{esc(p.title)}'
                  f'{f" ({len(p.figures)})" if p.figures else ""}</a>' for p in pages)
    source = f"from {esc(inputs.source)}; " if inputs.source else ""
    return ReportHtml((
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="generator" content="{GENERATOR}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{_CSS}</style>"
        f'<script type="text/javascript">{plotly.offline.get_plotlyjs()}</script></head>'
        f'<body data-figures="{len(figures)}"><header><h1>{esc(title)}</h1>'
        f"<p>{source}{len(inputs.results)} scenarios, {len(figures)} figures. Predictions, not measurements, except "
        "where a page says measured.</p></header>"
        f"<nav>{nav}</nav><main>{''.join(p.html() for p in pages)}</main>"
        f'<script type="application/json" id="perfcast-figures">{blob}</script>'
        f"<script>{_JS}</script></body></html>\n"
    ), len(figures))


def is_perfcast_report(path: Path) -> bool:
    """Whether ``path`` is a report this module wrote (its head carries the generator mark)."""
    try:
        with path.open("r", encoding="utf-8", errors="replace") as fh:
            head = fh.read(1024)
    except OSError:
        return False
    return f'<meta name="generator" content="{GENERATOR}">' in head


def write_report(inputs: ReportInputs, path: Path, *, title: str = "perfcast report") -> ReportHtml:
    """Write the report to ``path`` (the caller decides whether an existing file may be replaced)."""
    built = build_report(inputs, title=title)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(built.text, encoding="utf-8")
    return built
