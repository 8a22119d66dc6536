"""Prediction intervals from validation residuals (fitted quantiles: :mod:`perfcast.coefficients.intervals`).

A prediction ``t`` of a kind gets the interval ``(t * exp(q_low), t * exp(q_high))``; ``perfcast validate``
prints how often measured values fall inside.
"""

from __future__ import annotations

import math

from perfcast.coefficients.intervals import Intervals

__all__ = ["interval_for"]


def interval_for(value: float, intervals: Intervals, *, kind: str, fused: bool = False) -> tuple[float, float]:
    """The interval around a prediction of ``kind`` (falls back to the ``step`` kind), in ``value``'s unit."""
    lo, hi = intervals.bounds(kind, fused=fused)
    return value * math.exp(lo), value * math.exp(hi)
