"""The highest QPS a deployment sustains: judged in steady state, so the answer holds in a run ten times
longer, overload (a queue that grows) never meets the SLO, and no load above the saturated throughput is
claimed."""

from __future__ import annotations

import math
from typing import Any

import pytest

from perfcast.errors import ConfigError
from perfcast.serving import ServingConfig, WorkloadConfig, simulate_serving
from perfcast.serving.experiments.search import (
    OVERLOAD_TOL,
    Saturation,
    check_load,
    find_max_qps,
    judge_load,
    relaxation_s,
    saturation,
    steady_requests,
    window_lifetimes,
)
from perfcast.serving.sources.arrivals import generate_requests

# a small deployment (at most 16 sequences in a batch), so a run ten times the search's is quick
SMALL = ServingConfig(model="llama-2-7b", hardware="a100-sxm-80gb", max_num_seqs=16,
                      workload=WorkloadConfig(prompt_tokens=256, output_tokens=64))


def _at(cfg: ServingConfig, **load: Any) -> ServingConfig:
    return cfg.model_copy(update={"workload": cfg.workload.model_copy(update=load)})


@pytest.mark.parametrize("slo", [{"slo_ttft_s": 0.5, "slo_tpot_s": 0.03}, {"slo_tpot_s": 0.025}],
                         ids=["ttft-and-tpot", "tpot-only"])
def test_the_answer_still_meets_its_slo_simulated_ten_times_longer(slo: dict[str, float]) -> None:
    cfg = SMALL.model_copy(update=slo)
    found = find_max_qps(cfg)
    assert found.check is not None and found.saturation is not None and found.result is not None
    assert 0 < found.max_qps < found.saturation.requests_per_s
    # the same load (its plain Poisson rate), ten times as many requests as the search simulated at it
    longer = simulate_serving(_at(cfg, qps=found.max_qps, num_requests=10 * found.check.num_requests))
    m = longer.metrics
    assert m.requests_completed == m.requests_total
    for key, bound in (("ttft_s", cfg.slo_ttft_s), ("tpot_s", cfg.slo_tpot_s)):
        if bound is not None:
            assert getattr(m, key).p99 <= bound, (key, getattr(m, key).p99)
    # and its queue does not grow over the long run: it is a steady state
    steady = judge_load(cfg, found.max_qps, longer, found.saturation)
    assert steady.met, steady.reason
    # every load above the answer that was judged does not hold
    assert all(c.qps > found.max_qps for c in found.evaluated if not c.met)


def test_a_growing_queue_is_overload_and_never_meets_the_slo() -> None:
    cfg = SMALL.model_copy(update={"slo_tpot_s": 0.5})  # a TPOT bound a full batch meets: only the queue grows
    sat = saturation(cfg)
    above = check_load(cfg, 1.01 * sat.requests_per_s, sat)[0]
    assert above.verdict == "overload" and above.num_requests == 0  # not even simulated
    # a bound claiming more than the deployment serves: the simulation shows the queue growing
    claimed = Saturation(2.0 * sat.requests_per_s, sat.lifetime_s, sat.num_requests)
    check, result, _ = check_load(cfg, 1.1 * sat.requests_per_s, claimed)
    assert result is not None and check.verdict == "overload" and not check.met
    assert check.served_requests_per_s < (1 - OVERLOAD_TOL) * check.offered_requests_per_s
    assert "queue waiting for a first token grows" in check.reason
    # a short run's percentiles there meet the bound: that is why the served rate is checked
    assert result.metrics.tpot_s.p99 <= 0.5


def test_each_load_is_simulated_for_tens_of_request_lifetimes_at_exactly_its_rate() -> None:
    cfg = SMALL.model_copy(update={"slo_ttft_s": 0.5})
    sat = saturation(cfg)
    check, result, load = check_load(cfg, 0.5 * sat.requests_per_s, sat)
    assert result is not None and check.met
    assert check.simulated_s >= 30 * sat.lifetime_s
    # the warm-up: two lifetimes, or three relaxation times of the queue when longer
    relax = 1.0 / (sat.requests_per_s * (1.0 - math.sqrt(0.5)) ** 2)
    assert check.warmup_s == pytest.approx(max(2 * sat.lifetime_s, 3 * relax))
    assert check.num_requests == result.arrival_s.size >= 1000
    # replicas behind a router are independent streams of bursts: the window is shared out, down to a floor
    assert window_lifetimes(SMALL) == 30 and window_lifetimes(SMALL.model_copy(update={"num_replicas": 2})) == 15
    assert window_lifetimes(SMALL.model_copy(update={"num_replicas": 16})) == 8
    # the rate handed to the arrival process makes this seed's draws average exactly the load
    n = check.num_requests
    stream = generate_requests(num_requests=n, seed=42, arrival="poisson", qps=load.workload.qps,
                               prompt_tokens=1, output_tokens=1)
    assert (n - 1) / stream.arrival_s[-1] == pytest.approx(0.5 * sat.requests_per_s, rel=1e-9)


def test_near_saturation_the_window_holds_the_queues_relaxation() -> None:
    # at 96 % of the saturated throughput an M/M/1 queue relaxes over 1 / (mu (1 - sqrt(0.96))^2) = 2,475 / mu:
    # far longer than tens of request lifetimes, so the load is simulated for ten of those
    cfg = SMALL.model_copy(update={"slo_ttft_s": 100.0})
    sat = saturation(cfg)
    qps = 0.96 * sat.requests_per_s
    relax = relaxation_s(qps, sat)
    assert relax == pytest.approx(1.0 / (sat.requests_per_s * (1.0 - math.sqrt(0.96)) ** 2))
    assert relax > 30 * sat.lifetime_s
    assert steady_requests(cfg, qps, sat) >= qps * 13 * relax
    # closer still, a steady state takes more requests than a check simulates: not shown to hold, not simulated
    check, result, _ = check_load(cfg, 0.999 * sat.requests_per_s, sat)
    assert check.verdict == "unsettled" and result is None and "relaxes over" in check.reason


def test_no_load_meeting_the_slo_is_an_answer_not_an_error() -> None:
    found = find_max_qps(SMALL.model_copy(update={"slo_ttft_s": 1e-4}))  # below one prefill
    assert found.max_qps == 0 and found.result is None
    assert found.verdict.startswith("no load down to") and "ttft p99 above" in found.verdict
    assert all(not c.met for c in found.evaluated)


@pytest.mark.parametrize(("change", "message"), [
    ({}, "needs a TTFT, TPOT or end-to-end latency SLO"),
    ({"slo_ttft_s": 1.0, "workload": WorkloadConfig(trace="splitwise_conv", arrival="trace")}, "not trace"),
    ({"slo_ttft_s": 1.0, "workload": WorkloadConfig(prompt_tokens=8, output_tokens=8, concurrency=4)},
     "drop --max-concurrency"),
])
def test_what_a_qps_search_cannot_search_is_one_line(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        find_max_qps(SMALL.model_copy(update=change))


def test_the_saturated_throughput_bounds_every_load() -> None:
    sat = saturation(SMALL)
    assert sat.requests_per_s > 0 and math.isfinite(sat.requests_per_s) and sat.lifetime_s > 0
    # all at once, the deployment cannot finish faster than its saturated rate allows (within a few %)
    burst = simulate_serving(_at(SMALL, num_requests=400))
    assert burst.metrics.throughput_requests_per_s <= 1.05 * sat.requests_per_s


@pytest.mark.parametrize("guess_frac", [0.3, 0.88, 0.95], ids=["low", "close", "high"])
def test_a_guess_changes_the_loads_simulated_not_the_answer(guess_frac: float) -> None:
    cfg = SMALL.model_copy(update={"slo_tpot_s": 0.025})
    sat = saturation(cfg)
    plain = find_max_qps(cfg, sat=sat)
    guided = find_max_qps(cfg, sat=sat, guess_frac=guess_frac)
    assert plain.max_qps > 0
    assert guided.max_qps == plain.max_qps and guided.check == plain.check
    assert guided.config == plain.config
    assert all(c.qps > guided.max_qps for c in guided.evaluated if not c.met)
    assert all(c.qps <= guided.max_qps for c in guided.evaluated if c.met)
    # the unguided path's loads around the answer: a guess between them simulates just those two
    above = min(c.qps for c in plain.evaluated if c.qps > plain.max_qps)
    if plain.max_qps / sat.requests_per_s < guess_frac < above / sat.requests_per_s:
        assert sorted(c.qps for c in guided.evaluated) == [plain.max_qps, above]
        assert len(guided.evaluated) < len(plain.evaluated)
