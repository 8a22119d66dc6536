"""Summaries of a finished serving simulation: latency distributions, throughput, goodput, SLO attainment.

Per request (all times in seconds on one clock):

* TTFT (time to first token) = ``first_token_s - arrival_s``;
* TPOT (time per output token after the first) = ``(finish_s - first_token_s) / (output_tokens - 1)``,
  defined only for requests with at least 2 output tokens: a 1-token request has no TPOT, is left out
  of the TPOT distribution and meets any TPOT SLO;
* E2E (end-to-end latency) = ``finish_s - arrival_s``.

Only completed requests enter the distributions and throughputs; the times of incomplete requests are
ignored (they may be NaN). Percentiles use ``numpy.percentile(..., method="linear")``.

Rates divide by ``duration_s``, which defaults to (last finish among completed requests) - (first arrival
among all requests); with no completed request the default duration is 0 and every rate is 0 (a
non-zero amount over a zero duration, possible only in degenerate input, gives NaN).

* ``throughput_requests_per_s`` = completed requests / duration;
* ``throughput_tokens_per_s`` = output tokens of completed requests / duration;
* ``total_tokens_per_s`` = prompt + output tokens of completed requests / duration;
* ``goodput_requests_per_s`` = completed requests meeting every given SLO (TTFT <= ``slo_ttft_s``, TPOT <=
  ``slo_tpot_s``) / duration; with no SLO there is nothing to meet, and goodput is NaN (``null`` in JSON,
  "n/a" in a table), not the throughput;
* ``slo_attainment_frac`` = requests meeting every given SLO / all requests (an incomplete request misses);
  NaN with no SLO or no requests.

Both summaries write NaN as ``None`` (JSON null) through :func:`perfcast.results.serialize.to_json`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from perfcast.errors import ConfigError

__all__ = ["Distribution", "ServingMetrics", "distribution", "summarize_requests"]


@dataclass(frozen=True)
class Distribution:
    """Mean, median, 90th and 99th percentile and maximum of a set of values (seconds)."""

    mean: float
    p50: float
    p90: float
    p99: float
    max: float

    JSON_NAN_NULL: ClassVar[bool] = True  # to_json: NaN (empty input) becomes None


def distribution(values: np.ndarray) -> Distribution:
    """Summarize ``values`` (1-D, NaN-free); an empty input gives NaN in every field."""
    data = np.asarray(values, dtype=np.float64).ravel()
    if data.size == 0:
        nan = math.nan
        return Distribution(mean=nan, p50=nan, p90=nan, p99=nan, max=nan)
    if bool(np.isnan(data).any()):
        raise ValueError("distribution() got NaN values; pass only defined values")
    p50, p90, p99 = np.percentile(data, [50.0, 90.0, 99.0], method="linear")
    return Distribution(
        mean=float(data.mean()), p50=float(p50), p90=float(p90), p99=float(p99), max=float(data.max())
    )


@dataclass(frozen=True)
class ServingMetrics:
    """Latency distributions over completed requests plus throughput, goodput and SLO attainment."""

    ttft_s: Distribution
    tpot_s: Distribution
    e2e_s: Distribution
    requests_completed: int
    requests_total: int
    duration_s: float
    throughput_requests_per_s: float
    throughput_tokens_per_s: float
    total_tokens_per_s: float
    goodput_requests_per_s: float
    slo_attainment_frac: float
    slo_ttft_s: float | None = None
    slo_tpot_s: float | None = None

    JSON_NAN_NULL: ClassVar[bool] = True  # to_json: keys carry their units, NaN becomes None


def _check_slo(label: str, value: float | None) -> None:
    if value is not None and not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ConfigError(f"{label}={value!r} must be a finite number of seconds > 0")


def summarize_requests(
    *,
    arrival_s: np.ndarray,
    first_token_s: np.ndarray,
    finish_s: np.ndarray,
    prompt_tokens: np.ndarray,
    output_tokens: np.ndarray,
    completed: np.ndarray,
    slo_ttft_s: float | None = None,
    slo_tpot_s: float | None = None,
    duration_s: float | None = None,
) -> ServingMetrics:
    """Summarize one simulation's requests (equal-length 1-D arrays); see the module docstring."""
    arrays = _checked_arrays(arrival_s, first_token_s, finish_s, prompt_tokens, output_tokens, completed)
    _check_slo("slo_ttft_s", slo_ttft_s)
    _check_slo("slo_tpot_s", slo_tpot_s)
    if duration_s is not None and not (math.isfinite(duration_s) and duration_s > 0):
        raise ConfigError(f"duration_s={duration_s!r} must be a finite number of seconds > 0")

    done = arrays["completed"]
    arrival = arrays["arrival_s"][done]
    first = arrays["first_token_s"][done]
    finish = arrays["finish_s"][done]
    prompt = arrays["prompt_tokens"][done]
    output = arrays["output_tokens"][done]
    if not (bool(np.isfinite(arrival).all()) and bool(np.isfinite(first).all()) and bool(np.isfinite(finish).all())):
        raise ValueError("a completed request has a non-finite arrival, first-token or finish time")

    ttft = first - arrival
    e2e = finish - arrival
    has_tpot = output >= 2
    tpot = (finish[has_tpot] - first[has_tpot]) / (output[has_tpot] - 1)
    meets = _meets_slo(ttft, tpot, has_tpot, slo_ttft_s, slo_tpot_s)

    has_slo = slo_ttft_s is not None or slo_tpot_s is not None
    num_total = int(done.shape[0])
    num_completed = int(arrival.shape[0])
    num_good = int(meets.sum())
    if duration_s is None:
        span_s = float(finish.max() - arrays["arrival_s"].min()) if num_completed else 0.0
    else:
        span_s = float(duration_s)

    def rate(amount: float) -> float:
        if span_s > 0:
            return amount / span_s
        return 0.0 if amount == 0 else math.nan  # something completed in zero time: undefined

    num_output_tokens = float(output.sum())
    num_all_tokens = float(prompt.sum()) + num_output_tokens
    return ServingMetrics(
        ttft_s=distribution(ttft),
        tpot_s=distribution(tpot),
        e2e_s=distribution(e2e),
        requests_completed=num_completed,
        requests_total=num_total,
        duration_s=span_s,
        throughput_requests_per_s=rate(num_completed),
        throughput_tokens_per_s=rate(num_output_tokens),
        total_tokens_per_s=rate(num_all_tokens),
        goodput_requests_per_s=rate(num_good) if has_slo else math.nan,
        slo_attainment_frac=num_good / num_total if num_total and has_slo else math.nan,
        slo_ttft_s=None if slo_ttft_s is None else float(slo_ttft_s),
        slo_tpot_s=None if slo_tpot_s is None else float(slo_tpot_s),
    )


def _checked_arrays(arrival_s: np.ndarray, first_token_s: np.ndarray, finish_s: np.ndarray,
                    prompt_tokens: np.ndarray, output_tokens: np.ndarray,
                    completed: np.ndarray) -> dict[str, np.ndarray]:
    """The per-request arrays by name in their dtypes, refused unless they are 1-D of one length."""
    arrays = {
        "arrival_s": np.asarray(arrival_s, dtype=np.float64),
        "first_token_s": np.asarray(first_token_s, dtype=np.float64),
        "finish_s": np.asarray(finish_s, dtype=np.float64),
        "prompt_tokens": np.asarray(prompt_tokens, dtype=np.int64),
        "output_tokens": np.asarray(output_tokens, dtype=np.int64),
        "completed": np.asarray(completed, dtype=bool),
    }
    lengths = {name: arr.shape for name, arr in arrays.items()}
    if len(set(lengths.values())) != 1 or arrays["arrival_s"].ndim != 1:
        shown = ", ".join(f"{name} {shape}" for name, shape in lengths.items())
        raise ConfigError(f"summarize_requests needs equal-length 1-D arrays; got {shown}")
    return arrays


def _meets_slo(ttft: np.ndarray, tpot: np.ndarray, has_tpot: np.ndarray, slo_ttft_s: float | None,
               slo_tpot_s: float | None) -> np.ndarray:
    """Which completed requests meet both SLOs (s; a request of one token has no TPOT to miss)."""
    meets = np.ones(ttft.shape[0], dtype=bool)
    if slo_ttft_s is not None:
        meets &= ttft <= slo_ttft_s
    if slo_tpot_s is not None:
        tpot_ok = np.ones(ttft.shape[0], dtype=bool)
        tpot_ok[has_tpot] = tpot <= slo_tpot_s
        meets &= tpot_ok
    return meets
