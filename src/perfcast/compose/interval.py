"""Prediction intervals from validation residuals.

``perfcast fit`` measures the log error of out-of-sample predictions (kernel
test rows, and end-to-end rows leave-one-GPU-out) and stores its quantiles in
``data/coefficients/intervals.json``; a prediction ``t`` gets the interval
``(t * exp(q_low), t * exp(q_high))``. ``perfcast validate`` prints how often
measured values fall inside.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from perfcast.datafiles import data_path
from perfcast.errors import DataError

__all__ = ["INTERVAL_SCHEMA_VERSION", "interval_for", "load_intervals"]

INTERVAL_SCHEMA_VERSION = 1


@lru_cache(maxsize=1)
def load_intervals(path: str | None = None) -> dict[str, tuple[float, float]]:
    """Log-error quantiles ``(q_low, q_high)`` per prediction kind."""
    p = Path(path) if path else data_path("coefficients", "intervals.json")
    try:
        raw = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise DataError(f"cannot read prediction intervals {p}: {exc}") from None
    if raw.get("schema_version") != INTERVAL_SCHEMA_VERSION:
        raise DataError(f"{p}: intervals schema_version {raw.get('schema_version')!r}, expected "
                        f"{INTERVAL_SCHEMA_VERSION}; re-run `perfcast fit`")
    return {k: (float(v["log_low"]), float(v["log_high"])) for k, v in raw["kinds"].items()}


def interval_for(value: float, *, kind: str, fused: bool = False) -> tuple[float, float]:
    """The interval around a prediction of ``kind`` (falls back to the ``step`` kind)."""
    import math

    table = load_intervals()
    key = f"{kind}_fused" if fused and f"{kind}_fused" in table else kind
    lo, hi = table.get(key, table["step"])
    return value * math.exp(lo), value * math.exp(hi)
