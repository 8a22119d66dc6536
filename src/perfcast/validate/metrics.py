"""Error metrics of predictions against measurements."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["ErrorFigures", "ErrorSummary", "summarize"]


@dataclass(frozen=True, slots=True)
class ErrorSummary:
    """Errors of one group of rows: absolute percentage errors as fractions."""

    rows: int
    predicted: int
    mape: float
    median_ape: float
    max_ape: float
    bias: float
    interval_coverage: float

    @property
    def coverage(self) -> float:
        """Fraction of rows that got a prediction."""
        return self.predicted / self.rows if self.rows else 0.0

    def json_view(self) -> ErrorFigures:
        """The figures as reported: fractions rounded to 4 decimals."""
        return ErrorFigures(rows=self.rows, predicted_rows=self.predicted, coverage_frac=round(self.coverage, 4),
                            mape_frac=round(self.mape, 4), median_ape_frac=round(self.median_ape, 4),
                            max_ape_frac=round(self.max_ape, 4), median_bias_frac=round(self.bias, 4),
                            interval_coverage_frac=round(self.interval_coverage, 4))


@dataclass(frozen=True, slots=True)
class ErrorFigures:
    """An :class:`ErrorSummary` as reported: row counts and fractions rounded to 4 decimals (NaN: nothing
    predicted, or no interval)."""

    rows: int
    predicted_rows: int
    coverage_frac: float
    mape_frac: float
    median_ape_frac: float
    max_ape_frac: float
    median_bias_frac: float
    interval_coverage_frac: float


def summarize(measured: np.ndarray, predicted: np.ndarray, low: np.ndarray | None = None,
              high: np.ndarray | None = None) -> ErrorSummary:
    """Summarize rows with a finite positive measurement; rows without a prediction count against coverage."""
    measured = np.asarray(measured, dtype=float)
    predicted = np.asarray(predicted, dtype=float)
    has_meas = np.isfinite(measured) & (measured > 0)
    ok = has_meas & np.isfinite(predicted)
    n = int(has_meas.sum())
    if not ok.any():
        return ErrorSummary(n, 0, float("nan"), float("nan"), float("nan"), float("nan"), float("nan"))
    rel = predicted[ok] / measured[ok] - 1.0
    ape = np.abs(rel)
    cov = float("nan")
    if low is not None and high is not None:
        lo, hi = np.asarray(low, dtype=float)[ok], np.asarray(high, dtype=float)[ok]
        cov = float(np.mean((measured[ok] >= lo) & (measured[ok] <= hi)))
    return ErrorSummary(n, int(ok.sum()), float(ape.mean()), float(np.median(ape)), float(ape.max()),
                        float(np.median(rel)), cov)
