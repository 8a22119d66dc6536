"""MLPerf Inference datacenter LLM benchmarks as workload presets: ``mlperf:<benchmark>:<scenario>``.

The presets (``data/presets/mlperf.yaml``) give, per benchmark, the catalog model, the data set and its size,
the round it entered MLPerf, a default precision and the prompt and output token-length distributions, per
scenario the latency limits of the MLPerf rules, and the run rules LoadGen applies to every benchmark (minimum
duration, query counts, p99 and early stopping). Every number in that file states its basis (the rules as
recalled with the round they apply from, derived from them, or an assumption; "unsure" where the
recollection is loose); read it before trusting a figure.

The limits (p99, seconds), as shipped: llama2-70b server TTFT 2 / TPOT 0.2 (v4.0+), interactive 0.45 / 0.04
(v5.0+); mixtral-8x7b server 2 / 0.2 (v4.1+); llama3.1-405b server 6 / 0.175 (v5.0+), interactive 4.5 / 0.08
(v5.1, unsure); llama3.1-8b server 2 / 0.1 and interactive 0.5 / 0.03 (v5.1, unsure); gptj server a 20 s
p99 on the whole query (v3.1+); deepseek-r1 server 2 / 0.08 (v5.1, unsure; no interactive scenario is
recalled for it, none is shipped).

The official run (:func:`official_queries`): a performance run lasts at least ``min_duration_s`` (600 s).
Offline issues ``offline_slack`` (1.1) times the expected rate times that duration, at least the benchmark's
``offline_min_queries`` (its data set's size); server issues the Poisson rate times the duration, at least
``server_min_queries``; LLM benchmarks run in LoadGen's equal-issue mode, which rounds the count up to whole
passes over the data set. A server run's p99 passes LoadGen's early stopping (:func:`early_stopping_allowed`)
when at most that many of its queries exceed the limit: a binomial bound at 99 % confidence, so the run of
``n`` queries must hold the share above the limit below 1 % by a margin (0.89 % at 49,152 queries, 0.75 % at
8,313).

Lengths: each distribution is a lognormal truncated to ``[min_tokens, max_tokens]`` whose mean is the
stated ``mean_tokens`` (its log-space spread ``sigma`` is an assumption). A preset is served to the
simulator as a synthetic length table of ``synthetic_rows`` rows (the distribution's quantiles, rounded to
whole tokens; output lengths permuted with a fixed seed so they are independent of prompt lengths), under
the trace name ``mlperf:<benchmark>`` (see :func:`perfcast.serving.sources.traces.load_trace`); a workload then
draws its requests' rows with its own seed, like any trace without arrival times. The output means are the
reference model's (the accuracy check holds a run's mean output within +-10 % of the reference run's
``tokens_per_sample``; the system under test generates its own outputs); most prompt means, and every
``sigma``, are assumptions. An equal-issue run issues each sample equally often; the simulation draws rows
with replacement instead (over 20,000 draws the means stay within about 1 % of the table's).

How a scenario runs on a deployment and what it reports is
:mod:`perfcast.serving.experiments.mlperf`'s.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from perfcast.catalog.hardware import load_hardware
from perfcast.datafiles import data_path
from perfcast.errors import CatalogError, ConfigError
from perfcast.serving.config import PRECISION_QUANTIZATION, ServingConfig, WorkloadConfig
from perfcast.serving.sources.trace import Trace

__all__ = ["PREFIX", "SCENARIOS", "LengthDistribution", "MLPerfBenchmark", "MLPerfWorkload", "RunRules",
           "ScenarioLimits", "apply_mlperf", "benchmark_names", "default_quantization", "early_stopping_allowed",
           "is_mlperf_name", "load_benchmark", "load_requests_min", "max_simulated_requests", "mlperf_workload",
           "official_queries", "parse_workload", "preset_trace", "requests_per_instance", "run_rules"]

PREFIX = "mlperf"
SCENARIOS: tuple[str, ...] = ("offline", "server", "interactive")
"""Scenario names, in the order of the MLPerf rules."""

_DATA = data_path("presets", "mlperf.yaml")
_FORM = "mlperf:<benchmark>:<scenario>"


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LengthDistribution(_Frozen):
    """Token lengths: a lognormal truncated to ``[min_tokens, max_tokens]`` with mean ``mean_tokens``."""

    mean_tokens: float = Field(gt=0, description="mean length (tokens)")
    mean_basis: str
    max_tokens: int = Field(ge=1, description="longest length (tokens)")
    max_basis: str
    min_tokens: int = Field(default=1, ge=1, description="shortest length (tokens)")
    sigma: float = Field(gt=0, le=3, description="log-space spread before truncation (an assumption)")

    @model_validator(mode="after")
    def _mean_inside(self) -> LengthDistribution:
        if not self.min_tokens < self.mean_tokens < self.max_tokens:
            raise ValueError(f"mean_tokens {self.mean_tokens} must lie strictly between min_tokens "
                             f"{self.min_tokens} and max_tokens {self.max_tokens}")
        return self

    def quantiles(self, n: int) -> np.ndarray:
        """``n`` lengths (int64 tokens, ascending) at probabilities ``(i + 0.5) / n`` of the distribution."""
        mu = _fit_mu(self.mean_tokens, self.sigma, self.min_tokens, self.max_tokens, min(n, 2048))
        x = _truncated_lognormal(mu, self.sigma, self.min_tokens, self.max_tokens, n)
        return np.clip(np.rint(x), self.min_tokens, self.max_tokens).astype(np.int64)


class ScenarioLimits(_Frozen):
    """A scenario's p99 latency limits (seconds; None = no limit) and where they come from."""

    ttft_p99_s: float | None = Field(default=None, gt=0)
    tpot_p99_s: float | None = Field(default=None, gt=0)
    e2e_p99_s: float | None = Field(default=None, gt=0)
    basis: str = ""

    def as_dict(self) -> dict[str, float | None]:
        """``{"ttft_p99_s", "tpot_p99_s", "e2e_p99_s"}``."""
        return {"ttft_p99_s": self.ttft_p99_s, "tpot_p99_s": self.tpot_p99_s, "e2e_p99_s": self.e2e_p99_s}


class RunRules(_Frozen):
    """LoadGen's rules for the length of an official performance run and the judging of its p99s."""

    min_duration_s: float = Field(gt=0, description="shortest performance run (s)")
    min_duration_basis: str
    offline_slack: float = Field(ge=1, description="Offline issues this many times rate x min duration samples")
    offline_slack_basis: str
    server_min_queries: int = Field(ge=1, description="fewest queries of a server run")
    server_min_queries_basis: str
    latency_percentile: float = Field(gt=0, lt=1, description="the percentile the latency limits bound")
    latency_percentile_basis: str
    early_stopping_confidence: float = Field(gt=0, lt=1, description="confidence of the early-stopping bound")
    early_stopping_basis: str


class MLPerfBenchmark(_Frozen):
    """One benchmark: the model it runs, its data set, default precision, lengths and scenarios."""

    name: str
    model: str = Field(description="catalog model id")
    introduced: str = Field(description="the MLPerf Inference round the benchmark entered (v4.0, ...)")
    dataset: str
    dataset_samples: int = Field(ge=1, description="samples in the data set (LoadGen's performance sample count)")
    offline_min_queries: int = Field(ge=1, description="fewest samples an official Offline run issues")
    equal_issue: bool = Field(default=True, description="runs issue whole passes over the data set (LoadGen's "
                                                        "sample_concatenate_permutation)")
    queries_basis: str = ""
    inferred_tokens_per_sample: float | None = Field(
        default=None, gt=0, description="tokens LoadGen counts per sample of a benchmark it does not stream "
                                        "(GPT-J); None: the tokens generated")
    inferred_tokens_basis: str = ""
    precision: str = Field(description="default precision when a row gives none (fp16 | fp8 | fp4)")
    precision_basis: str = ""
    input: LengthDistribution
    output: LengthDistribution
    num_beams: int = Field(default=1, ge=1, description="beams each sample decodes (beam search; 1 = greedy)")
    num_beams_basis: str = ""
    scenarios: dict[str, ScenarioLimits]
    note: str = ""

    @model_validator(mode="after")
    def _known_scenarios(self) -> MLPerfBenchmark:
        unknown = sorted(set(self.scenarios) - set(SCENARIOS))
        if unknown:
            raise ValueError(f"unknown scenarios {unknown}; known: {', '.join(SCENARIOS)}")
        for name, lim in self.scenarios.items():
            if name != "offline" and lim.ttft_p99_s is None and lim.tpot_p99_s is None and lim.e2e_p99_s is None:
                raise ValueError(f"scenario {name} has no latency limit")
        return self


class _Presets(_Frozen):
    run_rules: RunRules
    requests_per_instance: dict[str, int]
    synthetic_rows: int = Field(ge=256)
    load_requests_min: int = Field(ge=1000)
    max_simulated_requests: int = Field(ge=1000)

    @model_validator(mode="after")
    def _bounds_ordered(self) -> _Presets:
        if self.load_requests_min > self.max_simulated_requests:
            raise ValueError(f"load_requests_min {self.load_requests_min} exceeds max_simulated_requests "
                             f"{self.max_simulated_requests}")
        return self
    benchmarks: dict[str, MLPerfBenchmark]


@functools.cache
def _presets() -> _Presets:
    try:
        raw = yaml.safe_load(_DATA.read_text(encoding="utf-8"))
        for name, body in raw["benchmarks"].items():
            body["name"] = name
        return _Presets.model_validate(raw)
    except (OSError, KeyError, TypeError, yaml.YAMLError, ValidationError) as exc:
        raise CatalogError(f"{_DATA}: not a valid MLPerf preset file ({str(exc).splitlines()[0]})") from None


def benchmark_names() -> tuple[str, ...]:
    """The benchmarks perfcast has presets for."""
    return tuple(_presets().benchmarks)


def load_benchmark(name: str) -> MLPerfBenchmark:
    """The preset of benchmark ``name`` (``llama2-70b``, ...); ConfigError listing the names otherwise."""
    presets = _presets().benchmarks
    if name not in presets:
        raise ConfigError(f"unknown MLPerf benchmark {name!r}; accepted: {', '.join(presets)} "
                          f"(in the form {_FORM})")
    return presets[name]


def is_mlperf_name(name: str) -> bool:
    """Whether ``name`` is meant as an MLPerf preset (starts with ``mlperf:``)."""
    return name.strip().lower().startswith(PREFIX + ":")


def parse_workload(name: str, *, scenario_required: bool = True) -> tuple[MLPerfBenchmark, str | None]:
    """``mlperf:<benchmark>:<scenario>`` -> (benchmark preset, scenario); one-line ConfigError otherwise.

    With ``scenario_required=False`` the scenario may be left out (``mlperf:<benchmark>``; None is returned).
    """
    parts = [p.strip() for p in name.strip().split(":")]
    if not parts or parts[0].lower() != PREFIX or len(parts) not in (2, 3) or not parts[1]:
        raise ConfigError(f"workload {name!r} is not an MLPerf preset; accepted: {_FORM} with benchmark one of "
                          f"{', '.join(benchmark_names())} and scenario one of {', '.join(SCENARIOS)}")
    bench = load_benchmark(parts[1].lower())
    if len(parts) == 2:
        if scenario_required:
            raise ConfigError(f"workload {name!r} names no scenario; accepted: "
                              + ", ".join(f"{PREFIX}:{bench.name}:{s}" for s in bench.scenarios))
        return bench, None
    scenario = parts[2].lower()
    if scenario not in bench.scenarios:
        raise ConfigError(f"MLPerf benchmark {bench.name} has no scenario {parts[2]!r}; accepted: "
                          f"{', '.join(bench.scenarios)}")
    return bench, scenario


@functools.cache
def _trace(benchmark: str) -> Trace:
    bench = load_benchmark(benchmark)
    n = _presets().synthetic_rows
    prompt = bench.input.quantiles(n)
    output = bench.output.quantiles(n)[np.random.default_rng(0).permutation(n)]
    for arr in (prompt, output):
        arr.flags.writeable = False
    return Trace(name=f"{PREFIX}:{benchmark}", prompt_tokens=prompt, output_tokens=output, arrival_s=None,
                 source=f"perfcast MLPerf preset {benchmark} ({bench.dataset}): synthetic lengths from "
                        "data/presets/mlperf.yaml, not the data set itself")


def preset_trace(name: str) -> Trace:
    """The synthetic length table of ``mlperf:<benchmark>`` (a scenario suffix is accepted and ignored)."""
    bench, _ = parse_workload(name, scenario_required=False)
    return _trace(bench.name)


@dataclass(frozen=True)
class MLPerfWorkload:
    """A resolved preset: the benchmark, the scenario, its limits and the requests to simulate."""

    name: str
    benchmark: MLPerfBenchmark
    scenario: str
    limits: ScenarioLimits
    workload: WorkloadConfig


def mlperf_workload(name: str, *, num_requests: int | None = None, seed: int = 42,
                    instances: int = 1) -> MLPerfWorkload:
    """The requests (lengths from the preset; arrivals at time 0 for offline, Poisson otherwise with the rate
    left to the caller or the search) and the latency limits of ``mlperf:<benchmark>:<scenario>``; by default
    ``requests_per_instance`` of the scenario times ``instances`` requests."""
    bench, scenario = parse_workload(name)
    assert scenario is not None
    n = num_requests if num_requests is not None else requests_per_instance(scenario) * max(1, instances)
    work = WorkloadConfig(num_requests=n, seed=seed, arrival="poisson", qps=None, trace=f"{PREFIX}:{bench.name}",
                          num_beams=bench.num_beams)
    return MLPerfWorkload(f"{PREFIX}:{bench.name}:{scenario}", bench, scenario, bench.scenarios[scenario], work)


def requests_per_instance(scenario: str) -> int:
    """Requests one instance (replica) of the deployment is given in ``scenario`` by default: offline, the
    short run that estimates the rate the official run's length follows from; server and interactive, the
    fewest requests a load is simulated with."""
    return _presets().requests_per_instance[scenario]


def max_simulated_requests() -> int:
    """The most requests one server load is simulated with (a bound on the cost)."""
    return _presets().max_simulated_requests


def load_requests_min() -> int:
    """The fewest requests a server load may be simulated with, whatever the official run's count."""
    return _presets().load_requests_min


def run_rules() -> RunRules:
    """LoadGen's run-length and p99 rules (see the module docstring)."""
    return _presets().run_rules


def official_queries(benchmark: MLPerfBenchmark, scenario: str, rate_per_s: float) -> int:
    """Queries (samples) an official performance run of ``scenario`` issues at ``rate_per_s`` samples/s (the
    Poisson rate of server and interactive, the expected throughput of offline): the rate times the minimum
    duration (times the Offline slack), at least the scenario's minimum count, rounded up to whole passes over
    the data set in equal-issue mode."""
    if scenario not in SCENARIOS:
        raise ConfigError(f"unknown MLPerf scenario {scenario!r}; known: {', '.join(SCENARIOS)}")
    if not (math.isfinite(rate_per_s) and rate_per_s >= 0):
        raise ConfigError(f"an official run needs a finite, non-negative rate; got {rate_per_s!r} samples/s")
    rules = run_rules()
    if scenario == "offline":
        n = max(benchmark.offline_min_queries, math.ceil(rules.offline_slack * rules.min_duration_s * rate_per_s))
    else:
        n = max(rules.server_min_queries, math.ceil(rules.min_duration_s * rate_per_s))
    if benchmark.equal_issue:
        n = -(-n // benchmark.dataset_samples) * benchmark.dataset_samples
    return n


def early_stopping_allowed(queries: int) -> int | None:
    """The most of ``queries`` that may exceed a latency limit for LoadGen's early stopping to pass the p99:
    the largest ``t`` with ``P(Binomial(queries, 1 - percentile) <= t) <= 1 - confidence`` (a run with more
    above the limit does not show, at that confidence, that the percentile is within it). None when even
    ``t = 0`` does not pass (too few queries)."""
    rules = run_rules()
    tail = 1.0 - rules.latency_percentile
    alpha = 1.0 - rules.early_stopping_confidence
    if queries < 1:
        return None
    log_alpha = math.log(alpha)
    log_pmf = queries * math.log1p(-tail)  # P(X = 0)
    log_cdf = log_pmf
    if log_cdf > log_alpha:
        return None
    t = 0
    ratio = math.log(tail) - math.log1p(-tail)
    while t < queries:
        log_pmf += math.log(queries - t) - math.log(t + 1) + ratio
        nxt = float(np.logaddexp(log_cdf, log_pmf))
        if nxt > log_alpha:
            return t
        log_cdf = nxt
        t += 1
    return t


def default_quantization(benchmark: MLPerfBenchmark, hardware: str) -> str:
    """The serving quantization of the preset's default precision on ``hardware`` (``none`` where the GPU has
    no FP8/FP4 math: an FP8 default falls back to 16-bit weights there)."""
    quant = PRECISION_QUANTIZATION[benchmark.precision]
    if quant != "none" and quant not in load_hardware(hardware).supported_dtypes():
        return "none"
    return quant


def apply_mlperf(cfg: ServingConfig, name: str, *, num_requests: int | None = None) -> ServingConfig:
    """``cfg``'s deployment under the preset's requests and latency limits (its SLO fields set from the
    scenario; ``max_model_len`` defaults to the longest prompt plus the longest output). The preset's beams
    apply unless ``cfg.workload`` sets ``num_beams`` itself."""
    w = mlperf_workload(name, num_requests=num_requests, seed=cfg.workload.seed, instances=cfg.num_replicas)
    bench = w.benchmark
    work = w.workload
    if "num_beams" in cfg.workload.model_fields_set:
        work = work.model_copy(update={"num_beams": cfg.workload.num_beams})
    return cfg.model_copy(update={
        "workload": work, "slo_ttft_s": w.limits.ttft_p99_s, "slo_tpot_s": w.limits.tpot_p99_s,
        "slo_e2e_s": w.limits.e2e_p99_s,
        "max_model_len": cfg.max_model_len or bench.input.max_tokens + bench.output.max_tokens})


def _ndtri(p: np.ndarray) -> np.ndarray:
    """Inverse standard normal CDF: Acklam's rational approximation refined by one Halley step."""
    a = (-3.969683028665376e01, 2.209460984245205e02, -2.759285104469687e02, 1.383577518672690e02,
         -3.066479806614716e01, 2.506628277459239e00)
    b = (-5.447609879822406e01, 1.615858368580409e02, -1.556989798598866e02, 6.680131188771972e01,
         -1.328068155288572e01)
    c = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e00, -2.549732539343734e00,
         4.374664141464968e00, 2.938163982698783e00)
    d = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e00, 3.754408661907416e00)
    p = np.clip(np.asarray(p, dtype=np.float64), 1e-300, 1.0 - 1e-16)
    x = np.empty_like(p)
    low, high = p < 0.02425, p > 1.0 - 0.02425
    mid = ~(low | high)
    q = p[mid] - 0.5
    r = q * q
    x[mid] = ((((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q
              / (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1.0))
    for mask, sign, tail in ((low, 1.0, p[low]), (high, -1.0, 1.0 - p[high])):
        t = np.sqrt(-2.0 * np.log(tail))
        x[mask] = sign * (((((c[0] * t + c[1]) * t + c[2]) * t + c[3]) * t + c[4]) * t + c[5]) / (
            (((d[0] * t + d[1]) * t + d[2]) * t + d[3]) * t + 1.0)
    e = _ncdf(x) - p
    u = e * math.sqrt(2.0 * math.pi) * np.exp(0.5 * x * x)
    return x - u / (1.0 + 0.5 * x * u)


def _ncdf(x: np.ndarray) -> np.ndarray:
    return 0.5 * np.vectorize(math.erfc, otypes=[np.float64])(-np.asarray(x) / math.sqrt(2.0))


def _truncated_lognormal(mu: float, sigma: float, lo: float, hi: float, n: int) -> np.ndarray:
    fa, fb = _ncdf(np.array([(math.log(lo) - mu) / sigma, (math.log(hi) - mu) / sigma]))
    p = fa + (np.arange(n) + 0.5) / n * (fb - fa)
    return np.clip(np.exp(mu + sigma * _ndtri(p)), lo, hi)


def _fit_mu(mean: float, sigma: float, lo: float, hi: float, n: int) -> float:
    """The log-space location whose truncated lognormal (quantile grid of ``n``) has mean ``mean``."""
    a, b = math.log(lo) - 8.0 * sigma, math.log(hi) + 8.0 * sigma
    for _ in range(60):
        mid = 0.5 * (a + b)
        if float(_truncated_lognormal(mid, sigma, lo, hi, n).mean()) < mean:
            a = mid
        else:
            b = mid
    return 0.5 * (a + b)
