"""Unit tests of ``perfcast.serving.sources.mlperf`` and ``perfcast.serving.experiments.mlperf``: the MLPerf
presets, their length distributions, the official run's length and early stopping, the offline and server
scenarios, and one-line errors for names that are not presets."""

from __future__ import annotations

import math
import re
from fractions import Fraction

import numpy as np
import pytest

from perfcast.catalog.models import load_model
from perfcast.errors import ConfigError
from perfcast.serving.config import ServingConfig
from perfcast.serving.engine import simulate_serving
from perfcast.serving.experiments.mlperf import run_mlperf
from perfcast.serving.experiments.search import LoadVerdict
from perfcast.serving.sources.arrivals import generate_requests
from perfcast.serving.sources.mlperf import (
    SCENARIOS,
    _ncdf,
    _ndtri,
    apply_mlperf,
    benchmark_names,
    early_stopping_allowed,
    load_benchmark,
    mlperf_workload,
    official_queries,
    parse_workload,
    preset_trace,
    run_rules,
)
from perfcast.serving.sources.traces import load_trace

# the benchmarks and scenarios the README of the published ground truth names
README_BENCHMARKS = {"llama2-70b", "mixtral-8x7b", "llama3.1-8b", "llama3.1-405b", "gptj", "deepseek-r1"}

# a small deployment that serves every scenario quickly: Llama-3.1-8B on one H100 in FP8
SMALL = ServingConfig(model="llama-3.1-8b", hardware="h100-sxm-80gb", scheduler="orca", quantization="fp8",
                      max_num_seqs=512)


def test_every_benchmark_of_the_readme_has_a_preset_with_its_fields() -> None:
    assert set(benchmark_names()) == README_BENCHMARKS
    for name in benchmark_names():
        bench = load_benchmark(name)
        assert load_model(bench.model)  # a catalog model
        assert bench.dataset and bench.precision in {"fp16", "bf16", "fp8", "fp4"}
        assert {"offline", "server"} <= set(bench.scenarios) <= set(SCENARIOS)
        for dist in (bench.input, bench.output):
            assert dist.min_tokens < dist.mean_tokens < dist.max_tokens
            assert dist.mean_basis and dist.max_basis  # every number says where it comes from
        for scenario, limits in bench.scenarios.items():
            bounds = (limits.ttft_p99_s, limits.tpot_p99_s, limits.e2e_p99_s)
            if scenario == "offline":
                assert bounds == (None, None, None)
            else:  # a limit says which MLPerf round it applies from
                assert any(b is not None and b > 0 for b in bounds) and re.search(r"v\d\.\d", limits.basis)
        assert re.fullmatch(r"v\d\.\d", bench.introduced) and bench.queries_basis
        assert bench.offline_min_queries <= bench.dataset_samples


def test_interactive_limits_are_tighter_than_server_limits() -> None:
    for name in benchmark_names():
        scenarios = load_benchmark(name).scenarios
        if "interactive" in scenarios:
            server, inter = scenarios["server"], scenarios["interactive"]
            assert inter.tpot_p99_s is not None and server.tpot_p99_s is not None
            assert inter.tpot_p99_s < server.tpot_p99_s
            assert inter.ttft_p99_s is not None and server.ttft_p99_s is not None
            assert inter.ttft_p99_s <= server.ttft_p99_s


def test_inverse_normal_cdf_inverts_the_cdf() -> None:
    p = np.array([1e-12, 1e-6, 0.01, 0.02425, 0.3, 0.5, 0.77, 0.97575, 0.999, 1 - 1e-9])
    assert np.allclose(_ncdf(_ndtri(p)), p, rtol=1e-9, atol=1e-15)
    assert _ndtri(np.array([0.5]))[0] == pytest.approx(0.0, abs=1e-12)
    assert _ndtri(np.array([0.975]))[0] == pytest.approx(-_ndtri(np.array([0.025]))[0], rel=1e-9)


@pytest.mark.parametrize("name", sorted(README_BENCHMARKS))
def test_length_tables_have_the_stated_mean_and_respect_the_bounds(name: str) -> None:
    bench = load_benchmark(name)
    trace = load_trace(f"mlperf:{name}")
    assert trace.arrival_s is None and trace.num_requests >= 1000
    for lengths, dist in ((trace.prompt_tokens, bench.input), (trace.output_tokens, bench.output)):
        assert float(np.mean(lengths)) == pytest.approx(dist.mean_tokens, rel=0.01)
        assert lengths.min() >= dist.min_tokens and lengths.max() <= dist.max_tokens
        assert lengths.max() > dist.mean_tokens * 1.3 or dist.max_tokens < dist.mean_tokens * 1.3  # a spread
    # prompt and output lengths are drawn independently: no strong rank correlation
    ranks = [np.argsort(np.argsort(x)) for x in (trace.prompt_tokens, trace.output_tokens)]
    assert abs(np.corrcoef(*ranks)[0, 1]) < 0.05
    # a workload of 3,000 requests drawn from the table keeps the means within a few %
    stream = generate_requests(num_requests=3000, seed=7, arrival="fixed", qps=1.0, trace=trace)
    assert float(np.mean(stream.prompt_tokens)) == pytest.approx(bench.input.mean_tokens, rel=0.05)
    assert float(np.mean(stream.output_tokens)) == pytest.approx(bench.output.mean_tokens, rel=0.05)


def test_a_scenario_suffix_names_the_same_length_table() -> None:
    assert preset_trace("mlperf:gptj:server") is preset_trace("mlperf:gptj")


def test_workload_and_config_carry_the_scenario_limits() -> None:
    w = mlperf_workload("mlperf:llama2-70b:interactive", seed=3, instances=4)
    bench = load_benchmark("llama2-70b")
    assert w.limits == bench.scenarios["interactive"] and w.workload.seed == 3
    assert w.workload.trace == "mlperf:llama2-70b" and w.workload.qps is None
    assert w.workload.num_requests == 4 * mlperf_workload("mlperf:llama2-70b:interactive").workload.num_requests
    cfg = apply_mlperf(SMALL, "mlperf:gptj:server", num_requests=50)
    assert (cfg.slo_ttft_s, cfg.slo_tpot_s, cfg.slo_e2e_s) == (None, None, load_benchmark("gptj").scenarios[
        "server"].e2e_p99_s)
    gptj = load_benchmark("gptj")
    assert cfg.max_model_len == gptj.input.max_tokens + gptj.output.max_tokens and cfg.workload.num_requests == 50


@pytest.mark.parametrize("name", sorted(README_BENCHMARKS))
def test_official_run_length_follows_the_run_rules(name: str) -> None:
    bench, rules = load_benchmark(name), run_rules()
    for scenario in bench.scenarios:
        slack, least = ((rules.offline_slack, bench.offline_min_queries) if scenario == "offline"
                        else (1.0, rules.server_min_queries))
        counts = []
        for rate in (0.05, 0.7, 9.0, 61.0, 450.0):
            n = official_queries(bench, scenario, rate)
            needed = max(least, math.ceil(slack * rules.min_duration_s * rate))
            # long enough, and in equal-issue mode whole passes over the data set, no more than needed
            assert n >= needed and n % bench.dataset_samples == 0 and n - bench.dataset_samples < needed
            counts.append(n)
        assert counts == sorted(counts)
    with pytest.raises(ConfigError, match="finite, non-negative rate"):
        official_queries(bench, "server", math.nan)


def _binomial_cdf(t: int, n: int, p: Fraction) -> Fraction:
    return sum((Fraction(math.comb(n, k)) * p**k * (1 - p) ** (n - k) for k in range(t + 1)), Fraction(0))


@pytest.mark.parametrize("n", [300, 459, 662, 1500, 3000])
def test_early_stopping_allows_what_a_99_percent_binomial_bound_allows(n: int) -> None:
    rules = run_rules()
    tail, alpha = Fraction(1 - rules.latency_percentile).limit_denominator(10**6), Fraction(
        1 - rules.early_stopping_confidence).limit_denominator(10**6)
    t = early_stopping_allowed(n)
    if t is None:  # not even a run with no query over the limit shows the p99 at that confidence
        assert _binomial_cdf(0, n, tail) > alpha
        return
    assert _binomial_cdf(t, n, tail) <= alpha < _binomial_cdf(t + 1, n, tail)


def test_early_stopping_allows_less_than_the_percentile_and_more_of_longer_runs() -> None:
    assert early_stopping_allowed(458) is None and early_stopping_allowed(459) == 0
    assert early_stopping_allowed(662) == 1  # LoadGen's 662-query minimum: one query over the limit allowed
    shares = [early_stopping_allowed(n) / n for n in (1000, 4388, 24576, 49152, 270336)]  # type: ignore[operator]
    assert shares == sorted(shares) and shares[-1] < 1 - run_rules().latency_percentile


def test_offline_with_a_request_count_reports_that_run() -> None:
    res = run_mlperf(SMALL, "mlperf:llama3.1-8b:offline", num_requests=300)
    direct = simulate_serving(apply_mlperf(SMALL, "mlperf:llama3.1-8b:offline", num_requests=300))
    assert float(np.max(direct.arrival_s)) < 1e-6  # every request at once (the engine spaces them by 1e-12 s)
    makespan = float(np.max(direct.finish_s))
    assert res.tokens_per_s_total == pytest.approx(float(direct.output_tokens.sum()) / makespan, rel=1e-12)
    assert res.samples_per_s_total == pytest.approx(300 / makespan, rel=1e-12)
    assert res.qps is None and res.limits_met and res.official_queries == 300
    d = res.as_dict()
    assert d["mlperf_offline_tokens_per_s_total"] == res.tokens_per_s_total
    assert d["mlperf_offline_ttft_ms_p99"] == pytest.approx(direct.metrics.ttft_s.p99 * 1e3)
    assert d["mlperf_offline_tpot_ms_p99"] == pytest.approx(direct.metrics.tpot_s.p99 * 1e3)


def test_offline_stands_for_the_official_run_and_matches_simulating_it() -> None:
    gptj = SMALL.model_copy(update={"model": "gpt-j-6b"})
    bench = load_benchmark("gptj")
    res = run_mlperf(gptj, "mlperf:gptj:offline")
    n = res.official_queries
    # the count the official run issues at the rate reported
    assert n == official_queries(bench, "offline", res.samples_per_s_total)
    assert res.result.metrics.requests_total < n  # priced from two shorter runs
    whole = simulate_serving(apply_mlperf(gptj, "mlperf:gptj:offline", num_requests=n))
    assert res.samples_per_s_total == pytest.approx(whole.metrics.throughput_requests_per_s, rel=0.01)
    # GPT-J is not streamed: LoadGen infers its tokens per sample
    assert res.tokens_per_s_total == pytest.approx(res.samples_per_s_total * bench.inferred_tokens_per_sample)


def test_server_load_meets_the_limits_and_a_higher_load_breaks_them() -> None:
    name = "mlperf:llama3.1-8b:interactive"  # tight limits: the search ends below the offline rate
    bench = load_benchmark("llama3.1-8b")
    res = run_mlperf(SMALL, name, num_requests=400)
    limits = bench.scenarios["interactive"]
    assert res.qps is not None and res.qps > 0 and res.limits_met
    assert res.ttft_ms_p99 <= limits.ttft_p99_s * 1e3 and res.tpot_ms_p99 <= limits.tpot_p99_s * 1e3  # type: ignore
    failing = [c for c in res.qps_evaluated if not c.met]
    assert failing and min(c.qps for c in failing) > res.qps  # every load above the reported one failed
    assert min(failing, key=lambda c: c.qps).qps <= res.qps * 1.021  # ... and the next one is within 2 %
    # judged in steady state: tens of request lifetimes after a warm-up, far more than the 400 asked
    assert res.check is not None and res.check.met and res.check.num_requests > 400
    # and by LoadGen's early stopping over the official run at that rate
    assert {e.metric for e in res.early_stopping} == {"ttft", "tpot"}
    for e in res.early_stopping:
        assert e.passed and e.queries == res.official_queries and e.over_frac <= e.allowed_frac < 0.01
    offline = run_mlperf(SMALL, "mlperf:llama3.1-8b:offline", num_requests=400)
    assert res.qps < offline.samples_per_s_total
    higher = run_mlperf(SMALL, name, num_requests=400, qps=1.5 * res.qps)
    assert not higher.limits_met
    # LoadGen's completed rates: the official run's queries over the time to its last completion
    n = official_queries(bench, "interactive", res.qps)
    assert res.official_queries == n and res.drain_s > 0
    assert res.samples_per_s_total == pytest.approx(n / (n / res.qps + res.drain_s))
    assert res.samples_per_s_total < res.qps
    done = np.isfinite(res.result.finish_s)
    mean_out = float(np.mean(res.result.output_tokens[done]))
    assert res.tokens_per_s_total == pytest.approx(res.samples_per_s_total * mean_out)


def test_offline_server_and_interactive_order_on_one_system() -> None:
    results = {s: run_mlperf(SMALL, f"mlperf:llama3.1-8b:{s}") for s in SCENARIOS}
    tokens = [results[s].tokens_per_s_total for s in SCENARIOS]
    assert tokens[0] > tokens[1] > tokens[2] > 0
    server = results["server"]
    # loose server limits: the answer is the highest load whose steady state a run of the official length
    # shows; the step above it is not shown to hold
    assert server.limits_met and server.qps_evaluated[-1].verdict in (LoadVerdict.UNSETTLED, LoadVerdict.OVERLOAD)
    assert server.check is not None and server.check.num_requests <= max(server.official_queries, 20_000)


def test_a_short_run_above_capacity_looks_passing_but_is_not_reported() -> None:
    name = "mlperf:llama3.1-8b:server"
    limits = load_benchmark("llama3.1-8b").scenarios["server"]
    offline = run_mlperf(SMALL, "mlperf:llama3.1-8b:offline")
    qps = 1.05 * offline.samples_per_s_total
    short = apply_mlperf(SMALL, name, num_requests=300)
    transient = simulate_serving(short.model_copy(update={"workload": short.workload.model_copy(update={"qps": qps})}))
    # 300 requests into an empty deployment leave before the queue grows: the p99s look fine
    assert transient.metrics.ttft_s.p99 < limits.ttft_p99_s and transient.metrics.tpot_s.p99 < limits.tpot_p99_s  # type: ignore[operator]
    judged = run_mlperf(SMALL, name, qps=qps)
    assert not judged.limits_met and judged.check is not None and judged.check.verdict == LoadVerdict.OVERLOAD


def test_gptj_server_searches_under_its_end_to_end_bound() -> None:
    gptj = SMALL.model_copy(update={"model": "gpt-j-6b"})
    res = run_mlperf(gptj, "mlperf:gptj:server", num_requests=200)
    bench = load_benchmark("gptj")
    bound = bench.scenarios["server"].e2e_p99_s
    assert bound is not None and res.limits_met and res.result.metrics.e2e_s.p99 <= bound
    assert res.result.config.slo_e2e_s == bound and [e.metric for e in res.early_stopping] == ["e2e"]
    assert res.tokens_per_s_total == pytest.approx(res.samples_per_s_total * bench.inferred_tokens_per_sample)


@pytest.mark.parametrize("name, expected", [
    ("llama2-70b", "accepted: mlperf:<benchmark>:<scenario>"),
    ("mlperf:llama-2-70b:server", "accepted: llama2-70b, mixtral-8x7b"),
    ("mlperf:llama2-70b:batch", "accepted: offline, server, interactive"),
    ("mlperf:gptj:interactive", "accepted: offline, server"),
    ("mlperf:llama2-70b", "accepted: mlperf:llama2-70b:offline, mlperf:llama2-70b:server"),
])
def test_bad_names_are_one_line_errors_listing_the_accepted_ones(name: str, expected: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_workload(name)
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_unknown_benchmark_through_load_trace_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown MLPerf benchmark"):
        load_trace("mlperf:resnet50")
    assert math.isfinite(load_benchmark("gptj").output.mean_tokens)
