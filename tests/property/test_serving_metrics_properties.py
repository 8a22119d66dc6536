"""Property: serving metrics and request streams keep their invariants for any valid input.

Metrics: percentiles are ordered, TTFT <= E2E, goodput <= throughput, a tighter SLO never raises goodput,
SLO attainment is a fraction, and stretching every time by c stretches latencies by c and divides rates by c.
Streams: the same seed gives identical arrays, arrivals start at 0 and never go backwards, and every
request fits ``max_tokens`` with at least one prompt and one output token.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfcast.serving.metrics import Distribution, summarize_requests
from perfcast.serving.sources.arrivals import generate_requests
from perfcast.serving.sources.traces import Trace

_SETTINGS = settings(max_examples=60, deadline=None, derandomize=True)


@st.composite
def finished_requests(draw: st.DrawFn) -> dict[str, Any]:
    """A finished simulation: ordered arrivals, first token after arrival, finish after first token."""
    n = draw(st.integers(min_value=1, max_value=40))
    seed = draw(st.integers(min_value=0, max_value=2**32 - 1))
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(0.5, n)) - 0.1
    first = arrival + rng.exponential(0.3, n)
    output = rng.integers(1, 50, n)
    finish = first + (output - 1) * rng.uniform(0.001, 0.2, n)
    completed = rng.random(n) < draw(st.floats(min_value=0.0, max_value=1.0))
    first[~completed] = np.nan
    finish[~completed] = np.nan
    return dict(arrival_s=arrival, first_token_s=first, finish_s=finish, prompt_tokens=rng.integers(1, 500, n),
                output_tokens=output, completed=completed)


def _ordered(d: Distribution) -> bool:
    if np.isnan(d.mean):
        return all(np.isnan(v) for v in (d.p50, d.p90, d.p99, d.max))
    eps = 1e-12 * max(1.0, abs(d.max))
    return d.p50 <= d.p90 + eps and d.p90 <= d.p99 + eps and d.p99 <= d.max + eps and d.mean <= d.max + eps


slo_s = st.none() | st.floats(min_value=1e-3, max_value=5.0)


@_SETTINGS
@given(requests=finished_requests(), slo_ttft_s=slo_s, slo_tpot_s=slo_s)
def test_metric_invariants(requests: dict[str, Any], slo_ttft_s: float | None,
                           slo_tpot_s: float | None) -> None:
    m = summarize_requests(**requests, slo_ttft_s=slo_ttft_s, slo_tpot_s=slo_tpot_s)
    for d in (m.ttft_s, m.tpot_s, m.e2e_s):
        assert _ordered(d)
    if m.requests_completed:
        assert m.ttft_s.max <= m.e2e_s.max and m.ttft_s.mean <= m.e2e_s.mean + 1e-12
        assert m.ttft_s.p50 >= 0 and m.e2e_s.p50 >= 0
    assert 0 <= m.requests_completed <= m.requests_total == requests["arrival_s"].shape[0]
    assert m.throughput_tokens_per_s <= m.total_tokens_per_s
    if slo_ttft_s is None and slo_tpot_s is None:  # nothing to meet: goodput is not defined
        assert np.isnan(m.goodput_requests_per_s) and np.isnan(m.slo_attainment_frac)
    else:
        assert 0.0 <= m.goodput_requests_per_s <= m.throughput_requests_per_s
        assert 0.0 <= m.slo_attainment_frac <= m.requests_completed / m.requests_total


@_SETTINGS
@given(requests=finished_requests(), slo_ttft_s=st.floats(min_value=1e-3, max_value=5.0),
       tighter_frac=st.floats(min_value=1e-3, max_value=1.0))
def test_tighter_slo_never_raises_goodput(requests: dict[str, Any], slo_ttft_s: float,
                                          tighter_frac: float) -> None:
    loose = summarize_requests(**requests, slo_ttft_s=slo_ttft_s, slo_tpot_s=slo_ttft_s)
    tight = summarize_requests(**requests, slo_ttft_s=slo_ttft_s * tighter_frac, slo_tpot_s=slo_ttft_s)
    assert tight.goodput_requests_per_s <= loose.goodput_requests_per_s
    assert tight.slo_attainment_frac <= loose.slo_attainment_frac


@_SETTINGS
@given(requests=finished_requests(), scale=st.floats(min_value=0.01, max_value=100.0))
def test_stretching_time_scales_latency_and_rates(requests: dict[str, Any], scale: float) -> None:
    base = summarize_requests(**requests)
    stretched = {**requests, **{k: requests[k] * scale for k in ("arrival_s", "first_token_s", "finish_s")}}
    m = summarize_requests(**stretched)
    assert m.requests_completed == base.requests_completed
    if base.requests_completed and base.duration_s > 0:
        assert m.e2e_s.p90 == pytest.approx(base.e2e_s.p90 * scale, rel=1e-9, abs=1e-12)
        assert m.ttft_s.mean == pytest.approx(base.ttft_s.mean * scale, rel=1e-9, abs=1e-12)
        assert m.throughput_requests_per_s == pytest.approx(base.throughput_requests_per_s / scale, rel=1e-9)


_TRACE = Trace(name="prop", prompt_tokens=np.array([1, 7, 300, 5000], dtype=np.int64),
               output_tokens=np.array([1, 2, 900, 40], dtype=np.int64),
               arrival_s=np.array([0.0, 0.0, 0.3, 2.0]), source="test")


@_SETTINGS
@given(
    num_requests=st.integers(min_value=1, max_value=500),
    seed=st.integers(min_value=0, max_value=2**63 - 1),
    arrival=st.sampled_from(["poisson", "gamma", "fixed", "trace"]),
    qps=st.floats(min_value=1e-3, max_value=1e4),
    cv=st.floats(min_value=0.05, max_value=10.0),
    max_tokens=st.none() | st.integers(min_value=2, max_value=6000),
)
def test_stream_invariants(num_requests: int, seed: int, arrival: Any, qps: float, cv: float,
                           max_tokens: int | None) -> None:
    kwargs: dict[str, Any] = dict(num_requests=num_requests, seed=seed, arrival=arrival, burstiness_cv=cv,
                                  trace=_TRACE, max_tokens=max_tokens, qps=None if arrival == "trace" else qps)
    a = generate_requests(**kwargs)
    b = generate_requests(**kwargs)
    for name in ("arrival_s", "prompt_tokens", "output_tokens"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert a.num_requests == num_requests
    assert a.arrival_s[0] == 0.0
    assert bool(np.all(np.diff(a.arrival_s) >= 0)) and bool(np.all(np.isfinite(a.arrival_s)))
    assert int(a.prompt_tokens.min()) >= 1 and int(a.output_tokens.min()) >= 1
    if max_tokens is not None:
        assert int((a.prompt_tokens + a.output_tokens).max()) <= max_tokens
