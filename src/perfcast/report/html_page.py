"""One page of the HTML report: HTML fragments and plotly figures, plus the formatting every page shares.

Values arrive in base units (seconds, bytes, fractions; the key names say which); they are converted to display
units only here.
"""

from __future__ import annotations

import html
import json
import math
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Page", "esc", "fmt_bytes", "fmt_pct", "fmt_seconds", "fmt_value", "num", "table_html", "time_scale"]


def esc(text: object) -> str:
    """Text made safe for HTML."""
    return html.escape(str(text), quote=True)


def num(x: object) -> float | None:
    """A finite number, or None (booleans and strings are not numbers here)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(float(x)):
        return None
    return float(x)


def fmt_seconds(x: object) -> str:
    """Seconds in the unit that reads best (µs, ms, s)."""
    v = num(x)
    if v is None:
        return "-"
    if v == 0:
        return "0 s"
    if abs(v) >= 1:
        return f"{v:.3g} s" if abs(v) < 1000 else f"{v:,.0f} s"
    if abs(v) >= 1e-3:
        return f"{v * 1e3:.3g} ms"
    return f"{v * 1e6:.3g} µs"


def fmt_pct(x: object) -> str:
    """A fraction as a percentage."""
    v = num(x)
    return "-" if v is None else f"{100 * v:.1f}%"


def fmt_bytes(x: object) -> str:
    """Bytes in binary units."""
    v = num(x)
    if v is None:
        return "-"
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(v) >= scale:
            return f"{v / scale:.3g} {unit}"
    return f"{v:.0f} B"


def fmt_value(key: str, x: object) -> str:
    """A value formatted by the unit its key names (``_s``, ``_frac``, ``_bytes``); other numbers to four
    significant digits, text as is."""
    if x is None:
        return "-"
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return str(x)
    if key.endswith("_s"):
        return fmt_seconds(x)
    if key.endswith("_frac"):
        return fmt_pct(x)
    if key.endswith("_bytes"):
        return fmt_bytes(x)
    v = num(x)
    if v is None:
        return "-"
    return f"{v:,.0f}" if abs(v) >= 1e4 or (isinstance(x, int)) else f"{v:.4g}"


def time_scale(max_s: float) -> tuple[str, float]:
    """A display unit for times up to ``max_s``: (unit, factor from seconds)."""
    if max_s >= 1:
        return "s", 1.0
    if max_s >= 1e-3:
        return "ms", 1e3
    return "µs", 1e6


def table_html(header: list[str], rows: list[list[str]], *, cls: str = "data") -> str:
    """An HTML table of already escaped cells."""
    head = "".join(f"<th>{h}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


@dataclass
class Page:
    """A tab of the report: its HTML and the figures it declares (drawn when the tab is first shown)."""

    id: str
    title: str
    parts: list[str] = field(default_factory=list)
    figures: dict[str, dict[str, Any]] = field(default_factory=dict)

    def add(self, fragment: str) -> None:
        """Append HTML (already escaped)."""
        self.parts.append(fragment)

    def note(self, text: str) -> None:
        """Append a line of plain text."""
        self.parts.append(f'<p class="note">{esc(text)}</p>')

    def figure(self, fig: Any, *, caption: str = "") -> None:
        """Append a plotly figure (and a caption under it)."""
        fid = f"{self.id}-{len(self.figures)}"
        spec = json.loads(fig.to_json(validate=False))  # plotly's encoder: numpy arrays, dates
        spec["layout"].pop("template", None)  # one shared template for every figure (see html.py)
        self.figures[fid] = spec
        cap = f'<p class="caption">{esc(caption)}</p>' if caption else ""
        self.parts.append(f'<figure><div class="plot" id="fig-{fid}" data-fig="{fid}"></div>{cap}</figure>')

    def html(self) -> str:
        """The page's section element."""
        return f'<section class="page" id="page-{self.id}" hidden>{"".join(self.parts)}</section>'
