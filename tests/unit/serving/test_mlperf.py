"""Unit tests of ``perfcast.serving.sources.mlperf`` and ``perfcast.serving.experiments.mlperf``: the MLPerf
presets, their length distributions, the offline and server scenarios, and one-line errors for names that are
not presets."""

from __future__ import annotations

import math

import numpy as np
import pytest

from perfcast.catalog.models import load_model
from perfcast.errors import ConfigError
from perfcast.serving.config import ServingConfig
from perfcast.serving.engine import simulate_serving
from perfcast.serving.experiments.mlperf import run_mlperf
from perfcast.serving.sources.arrivals import generate_requests
from perfcast.serving.sources.mlperf import (
    SCENARIOS,
    _ncdf,
    _ndtri,
    apply_mlperf,
    benchmark_names,
    load_benchmark,
    mlperf_workload,
    parse_workload,
    preset_trace,
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
            else:
                assert any(b is not None and b > 0 for b in bounds) and limits.basis


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


def test_offline_is_a_saturating_load_of_the_preset_lengths() -> None:
    res = run_mlperf(SMALL, "mlperf:llama3.1-8b:offline", num_requests=300)
    direct = simulate_serving(apply_mlperf(SMALL, "mlperf:llama3.1-8b:offline", num_requests=300))
    assert float(np.max(direct.arrival_s)) < 1e-6  # every request at once (the engine spaces them by 1e-12 s)
    makespan = float(np.max(direct.finish_s))
    assert res.tokens_per_s_total == pytest.approx(float(direct.output_tokens.sum()) / makespan, rel=1e-12)
    assert res.samples_per_s_total == pytest.approx(300 / makespan, rel=1e-12)
    assert res.qps is None and res.limits_met
    d = res.as_dict()
    assert d["mlperf_offline_tokens_per_s_total"] == res.tokens_per_s_total
    assert d["mlperf_offline_ttft_ms_p99"] == pytest.approx(direct.metrics.ttft_s.p99 * 1e3)
    assert d["mlperf_offline_tpot_ms_p99"] == pytest.approx(direct.metrics.tpot_s.p99 * 1e3)


def test_server_load_meets_the_limits_and_a_higher_load_breaks_them() -> None:
    name = "mlperf:llama3.1-8b:interactive"  # tight limits: the search ends below the offline rate
    res = run_mlperf(SMALL, name, num_requests=400)
    limits = load_benchmark("llama3.1-8b").scenarios["interactive"]
    assert res.qps is not None and res.qps > 0 and res.limits_met
    assert res.ttft_ms_p99 <= limits.ttft_p99_s * 1e3 and res.tpot_ms_p99 <= limits.tpot_p99_s * 1e3  # type: ignore
    assert res.samples_per_s_total == res.qps
    failing = [c.qps for c in res.qps_evaluated if not c.met]
    assert failing and min(failing) > res.qps  # every load above the reported one that was tried failed
    # judged in steady state: tens of request lifetimes after a warm-up, far more than the 400 asked
    assert res.check is not None and res.check.met and res.check.num_requests > 400
    offline = run_mlperf(SMALL, "mlperf:llama3.1-8b:offline", num_requests=400)
    assert res.qps < offline.samples_per_s_total
    higher = run_mlperf(SMALL, name, num_requests=400, qps=1.5 * res.qps)
    assert not higher.limits_met
    # the tokens/s of a server run count the drain after the last arrival (LoadGen's completed tokens/s)
    mean_out = float(np.mean(res.result.output_tokens))
    assert res.tokens_per_s_total < res.qps * mean_out
    assert res.tokens_per_s_total == pytest.approx(res.qps * mean_out * 600 / (600 + res.drain_s))


def test_gptj_server_searches_under_its_end_to_end_bound() -> None:
    gptj = SMALL.model_copy(update={"model": "gpt-j-6b"})
    res = run_mlperf(gptj, "mlperf:gptj:server", num_requests=200)
    bound = load_benchmark("gptj").scenarios["server"].e2e_p99_s
    assert bound is not None and res.limits_met and res.result.metrics.e2e_s.p99 <= bound
    assert res.result.config.slo_e2e_s == bound


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
