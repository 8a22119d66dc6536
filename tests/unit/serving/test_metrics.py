"""Unit tests of ``perfcast.serving.metrics``: hand-computed TTFT/TPOT/E2E, rates, goodput and SLO attainment."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest

from perfcast.errors import ConfigError
from perfcast.results.serialize import to_json
from perfcast.serving.metrics import Distribution, ServingMetrics, distribution, summarize_requests


# -- distribution ---------------------------------------------------------------------------------------------------
def test_distribution_of_hand_values() -> None:
    d = distribution(np.array([4.0, 1.0, 3.0, 2.0]))
    assert d.mean == 2.5
    assert d.p50 == 2.5  # linear interpolation between 2 and 3
    assert d.p90 == pytest.approx(3.7)  # rank 0.9 * 3 = 2.7 -> 3 + 0.7 * (4 - 3)
    assert d.p99 == pytest.approx(3.97)
    assert d.max == 4.0
    assert to_json(d) == {"mean": 2.5, "p50": 2.5, "p90": d.p90, "p99": d.p99, "max": 4.0}


def test_distribution_matches_numpy_linear_percentiles() -> None:
    values = np.random.default_rng(0).lognormal(size=1001)
    d = distribution(values)
    expected = np.percentile(values, [50, 90, 99], method="linear")
    assert (d.p50, d.p90, d.p99) == tuple(float(x) for x in expected)
    assert d.mean == pytest.approx(values.mean()) and d.max == values.max()
    assert all(isinstance(v, float) for v in to_json(d).values())


def test_distribution_of_one_value_and_of_nothing() -> None:
    one = distribution(np.array([0.25]))
    assert one == Distribution(mean=0.25, p50=0.25, p90=0.25, p99=0.25, max=0.25)
    empty = distribution(np.array([]))
    assert all(math.isnan(v) for v in (empty.mean, empty.p50, empty.p90, empty.p99, empty.max))
    assert to_json(empty) == {"mean": None, "p50": None, "p90": None, "p99": None, "max": None}


def test_distribution_refuses_nan() -> None:
    with pytest.raises(ValueError, match="NaN"):
        distribution(np.array([1.0, math.nan]))


# -- summarize_requests ---------------------------------------------------------------------------------------------
def _case(**overrides: Any) -> ServingMetrics:
    """Four requests; the last one did not complete (its times are NaN)."""
    kwargs: dict[str, Any] = dict(
        arrival_s=np.array([0.0, 1.0, 2.0, 3.0]),
        first_token_s=np.array([0.5, 1.2, 3.0, math.nan]),
        finish_s=np.array([1.5, 1.2, 7.0, math.nan]),
        prompt_tokens=np.array([100, 10, 50, 20]),
        output_tokens=np.array([11, 1, 5, 8]),
        completed=np.array([True, True, True, False]),
    )
    kwargs.update(overrides)
    return summarize_requests(**kwargs)


def test_hand_computed_latencies() -> None:
    m = _case()
    # TTFT = first - arrival: 0.5, 0.2, 1.0
    assert m.ttft_s.mean == pytest.approx((0.5 + 0.2 + 1.0) / 3)
    assert m.ttft_s.p50 == pytest.approx(0.5) and m.ttft_s.max == pytest.approx(1.0)
    # TPOT = (finish - first) / (output - 1): 1.0 / 10 = 0.1, and 4.0 / 4 = 1.0; the 1-token request has none
    assert m.tpot_s.mean == pytest.approx(0.55)
    assert m.tpot_s.p50 == pytest.approx(0.55) and m.tpot_s.max == pytest.approx(1.0)
    # E2E = finish - arrival: 1.5, 0.2, 5.0
    assert m.e2e_s.max == pytest.approx(5.0) and m.e2e_s.p50 == pytest.approx(1.5)
    assert m.e2e_s.mean == pytest.approx((1.5 + 0.2 + 5.0) / 3)


def test_hand_computed_rates() -> None:
    m = _case()
    assert m.requests_completed == 3 and m.requests_total == 4
    assert m.duration_s == pytest.approx(7.0)  # last finish 7.0 - first arrival 0.0
    assert m.throughput_requests_per_s == pytest.approx(3 / 7)
    assert m.throughput_tokens_per_s == pytest.approx((11 + 1 + 5) / 7)  # the incomplete request's 8 excluded
    assert m.total_tokens_per_s == pytest.approx((111 + 11 + 55) / 7)
    # no SLO: goodput and attainment are not defined (null in JSON), not the throughput and 100 %
    assert math.isnan(m.goodput_requests_per_s) and math.isnan(m.slo_attainment_frac)
    assert to_json(m)["goodput_requests_per_s"] is None and to_json(m)["slo_attainment_frac"] is None
    assert _case(slo_ttft_s=100.0).slo_attainment_frac == pytest.approx(3 / 4)  # the incomplete request misses


def test_explicit_duration_overrides_the_span() -> None:
    m = _case(duration_s=10.0)
    assert m.duration_s == 10.0
    assert m.throughput_requests_per_s == pytest.approx(0.3)
    assert m.throughput_tokens_per_s == pytest.approx(1.7)


@pytest.mark.parametrize(
    ("slo", "num_good"),
    [
        (dict(slo_ttft_s=0.6), 2),  # TTFT 0.5, 0.2 pass; 1.0 misses
        (dict(slo_tpot_s=0.5), 2),  # TPOT 0.1 passes, the 1-token request has no TPOT and passes, 1.0 misses
        (dict(slo_tpot_s=0.05), 1),  # only the 1-token request
        (dict(slo_ttft_s=0.3, slo_tpot_s=0.5), 1),  # only request 1 (TTFT 0.2, no TPOT)
        (dict(slo_ttft_s=5.0, slo_tpot_s=5.0), 3),
        (dict(slo_ttft_s=0.5), 2),  # the bound is inclusive: TTFT 0.5 meets 0.5
    ],
)
def test_goodput_and_slo_attainment(slo: dict[str, float], num_good: int) -> None:
    m = _case(**slo)
    assert m.goodput_requests_per_s == pytest.approx(num_good / 7.0)
    assert m.slo_attainment_frac == pytest.approx(num_good / 4)
    assert m.goodput_requests_per_s <= m.throughput_requests_per_s
    assert m.slo_ttft_s == slo.get("slo_ttft_s") and m.slo_tpot_s == slo.get("slo_tpot_s")


def test_incomplete_requests_are_excluded_even_with_finite_times() -> None:
    full = _case(completed=np.array([True, True, True, True]),
                 first_token_s=np.array([0.5, 1.2, 3.0, 100.0]), finish_s=np.array([1.5, 1.2, 7.0, 200.0]))
    partial = _case(first_token_s=np.array([0.5, 1.2, 3.0, 100.0]), finish_s=np.array([1.5, 1.2, 7.0, 200.0]))
    assert full.ttft_s.max == pytest.approx(97.0)
    assert partial.ttft_s.max == pytest.approx(1.0)
    assert partial.duration_s == pytest.approx(7.0)


def test_only_one_token_requests_give_an_empty_tpot_distribution() -> None:
    m = summarize_requests(
        arrival_s=np.array([0.0, 0.5]), first_token_s=np.array([1.0, 2.0]), finish_s=np.array([1.0, 2.0]),
        prompt_tokens=np.array([3, 4]), output_tokens=np.array([1, 1]), completed=np.array([True, True]),
        slo_tpot_s=0.001,
    )
    assert math.isnan(m.tpot_s.p99)
    assert to_json(m)["tpot_s"]["mean"] is None
    assert m.slo_attainment_frac == 1.0  # nothing to miss
    assert m.ttft_s.mean == pytest.approx(1.25)


def test_nothing_completed_gives_zero_rates_and_nan_latencies() -> None:
    m = _case(completed=np.zeros(4, dtype=bool), slo_ttft_s=1.0)
    assert m.requests_completed == 0
    assert m.duration_s == 0.0
    assert m.throughput_requests_per_s == 0.0 and m.goodput_requests_per_s == 0.0
    assert m.slo_attainment_frac == 0.0
    assert math.isnan(m.e2e_s.mean)


def test_no_requests_at_all() -> None:
    empty = np.array([])
    m = summarize_requests(arrival_s=empty, first_token_s=empty, finish_s=empty, prompt_tokens=empty,
                           output_tokens=empty, completed=np.array([], dtype=bool))
    assert m.requests_total == 0 and m.throughput_requests_per_s == 0.0
    assert math.isnan(m.slo_attainment_frac)
    assert to_json(m)["slo_attainment_frac"] is None


def test_json_is_ready_with_unit_keys() -> None:
    out = to_json(_case(slo_ttft_s=0.6))
    for key in ("ttft_s", "tpot_s", "e2e_s"):
        assert set(out[key]) == {"mean", "p50", "p90", "p99", "max"}
    for key in ("requests_completed", "throughput_requests_per_s", "throughput_tokens_per_s",
                "goodput_requests_per_s", "slo_attainment_frac", "duration_s", "total_tokens_per_s"):
        assert key in out
    assert out["requests_completed"] == 3 and type(out["requests_completed"]) is int
    assert out["slo_ttft_s"] == 0.6 and out["slo_tpot_s"] is None
    assert json.loads(json.dumps(out, allow_nan=False)) == out


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        (dict(completed=np.array([True, False])), "equal-length 1-D arrays"),
        (dict(slo_ttft_s=0.0), "slo_ttft_s=0.0 must be a finite number of seconds > 0"),
        (dict(slo_tpot_s=-1.0), "slo_tpot_s=-1.0 must be a finite number of seconds > 0"),
        (dict(duration_s=0.0), "duration_s=0.0 must be a finite number of seconds > 0"),
    ],
)
def test_bad_arguments_are_config_errors(overrides: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        _case(**overrides)


def test_a_completed_request_without_times_is_a_bug() -> None:
    with pytest.raises(ValueError, match="non-finite"):
        _case(completed=np.ones(4, dtype=bool))
