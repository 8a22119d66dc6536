"""Prediction intervals fitted from validation residuals: ``data/coefficients/intervals.json``.

``perfcast fit --intervals-out`` measures the log error of out-of-sample predictions (kernel test rows, and
end-to-end rows leave-one-GPU-out) and stores its quantiles per prediction kind; a prediction ``t`` gets the
interval ``(t * exp(log_low), t * exp(log_high))`` (:func:`perfcast.compose.interval.interval_for`).
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from perfcast.datafiles import data_path
from perfcast.errors import DataError

__all__ = ["INTERVAL_SCHEMA_VERSION", "Intervals", "load_intervals"]

INTERVAL_SCHEMA_VERSION = 1


class Intervals(BaseModel):
    """Log-error quantiles ``(log_low, log_high)`` per prediction kind (``step`` is the fallback)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: int
    kinds: dict[str, tuple[float, float]]

    def bounds(self, kind: str, *, fused: bool = False) -> tuple[float, float]:
        """``(log_low, log_high)`` of ``kind`` (its ``_fused`` variant when ``fused`` and fitted; else ``step``)."""
        key = f"{kind}_fused" if fused and f"{kind}_fused" in self.kinds else kind
        return self.kinds.get(key, self.kinds["step"])


def load_intervals(path: str | Path | None = None) -> Intervals:
    """Read an intervals file (the package's own ``data/coefficients/intervals.json`` when ``path`` is None)."""
    if path is None:
        return _load_default()
    return _load(Path(path))


@lru_cache(maxsize=1)
def _load_default() -> Intervals:
    return _load(data_path("coefficients", "intervals.json"))


def _load(p: Path) -> Intervals:
    try:
        raw = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise DataError(f"cannot read prediction intervals {p}: {exc}") from None
    if raw.get("schema_version") != INTERVAL_SCHEMA_VERSION:
        raise DataError(f"{p}: intervals schema_version {raw.get('schema_version')!r}, expected "
                        f"{INTERVAL_SCHEMA_VERSION}; re-run `perfcast fit`")
    return Intervals(schema_version=INTERVAL_SCHEMA_VERSION,
                     kinds={k: (float(v["log_low"]), float(v["log_high"])) for k, v in raw["kinds"].items()})
