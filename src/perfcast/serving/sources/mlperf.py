"""MLPerf Inference datacenter LLM benchmarks as workload presets: ``mlperf:<benchmark>:<scenario>``.

The presets (``data/presets/mlperf.yaml``) give, per benchmark, the catalog model, the data set, a default
precision and the prompt and output token-length distributions, and per scenario the latency limits of
the MLPerf rules. Every number in that file states its basis (the rules as recalled, derived from them, or
an assumption); read it before trusting a figure.

Lengths: each distribution is a lognormal truncated to ``[min_tokens, max_tokens]`` whose mean is the
stated ``mean_tokens`` (its log-space spread ``sigma`` is an assumption). A preset is served to the
simulator as a synthetic length table of ``synthetic_rows`` rows (the distribution's quantiles, rounded to
whole tokens; output lengths permuted with a fixed seed so they are independent of prompt lengths), under
the trace name ``mlperf:<benchmark>`` (see :func:`perfcast.serving.sources.traces.load_trace`); a workload then
draws its requests' rows with its own seed, like any trace without arrival times.

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

__all__ = ["PREFIX", "SCENARIOS", "SERVER_DURATION_S", "LengthDistribution", "MLPerfBenchmark", "MLPerfWorkload",
           "ScenarioLimits", "apply_mlperf", "benchmark_names", "default_quantization", "is_mlperf_name",
           "load_benchmark", "mlperf_workload", "parse_workload", "preset_trace", "requests_per_instance"]

PREFIX = "mlperf"
SCENARIOS: tuple[str, ...] = ("offline", "server", "interactive")
"""Scenario names, in the order of the MLPerf rules."""
SERVER_DURATION_S = 600.0
"""MLPerf's minimum performance-run duration (s): the run the server throughput is stated over."""

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


class MLPerfBenchmark(_Frozen):
    """One benchmark: the model it runs, its data set, default precision, lengths and scenarios."""

    name: str
    model: str = Field(description="catalog model id")
    dataset: str
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
    requests_per_instance: dict[str, int]
    synthetic_rows: int = Field(ge=256)
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
    """Requests one instance (replica) of the deployment is given in ``scenario`` by default."""
    return _presets().requests_per_instance[scenario]


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
