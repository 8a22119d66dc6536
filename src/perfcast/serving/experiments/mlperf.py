"""MLPerf Inference scenarios run on a deployment: the presets of :mod:`perfcast.serving.sources.mlperf`
simulated, and for server and interactive the load searched.

Scenarios and what they report (tokens are output tokens; TPOT excludes the first token, as MLPerf
LoadGen's and perfcast's ``tpot_s``: ``(finish - first token) / (output tokens - 1)``):

* ``offline``: every request arrives at time 0 (a saturating load). ``tokens_per_s_total`` = output
  tokens / makespan, ``samples_per_s_total`` = completed requests / makespan (makespan = last finish).
* ``server`` and ``interactive``: Poisson arrivals. The reported load is the highest QPS the deployment
  sustains within the scenario's p99 TTFT and p99 TPOT limits (GPT-J: p99 end-to-end latency), found by
  :func:`perfcast.serving.experiments.search.find_max_qps` under its steady-state rule (each load simulated for tens of
  request lifetimes after a warm-up, overload when the served throughput falls below the load, p99s with
  their error bars), bounded by the offline rate (offline is the maximum-throughput scenario: it serves as
  the saturated throughput) and started at half of it. The p99 TTFT/TPOT are those of the simulation at
  that load; ``samples_per_s_total`` is the QPS (LoadGen's "scheduled samples per second");
  ``tokens_per_s_total`` follows LoadGen's "completed tokens per second" (the server result of its token
  benchmarks): tokens completed over the time to the last completion of a ``SERVER_DURATION_S`` run,
  ``qps * mean output tokens * D / (D + drain)``, the drain (last arrival to last completion) taken from the
  simulation. That LoadGen counts the drain is perfcast's reading of it, not checked against its code. A
  given ``qps`` is judged by the same steady-state rule instead of searched.

Request counts: offline runs ``requests_per_instance`` of the scenario times the deployment's replicas (or
an explicit ``num_requests``); a server load simulates as many requests as the steady-state rule asks, at
least that count (MLPerf's minimum run time and query counts are not reproduced).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from perfcast.errors import ConfigError
from perfcast.serving.config import ServingConfig
from perfcast.serving.engine import simulate_serving
from perfcast.serving.experiments.search import LoadCheck, check_load, find_max_qps, saturation_of, steady_requests
from perfcast.serving.result import ServingResult
from perfcast.serving.sources.mlperf import PREFIX, SERVER_DURATION_S, MLPerfWorkload, apply_mlperf, mlperf_workload

__all__ = ["MLPerfResult", "run_mlperf"]


@dataclass(frozen=True)
class MLPerfResult:
    """A scenario's figures: the simulation at the reported load, and for server/interactive the load."""

    workload: MLPerfWorkload
    result: ServingResult
    qps: float | None = None
    qps_evaluated: tuple[LoadCheck, ...] = ()
    check: LoadCheck | None = None  # server/interactive: the steady-state verdict at ``qps``

    @property
    def drain_s(self) -> float:
        """Time from the last arrival to the last completion (s)."""
        done = np.isfinite(self.result.finish_s)
        if not done.any():
            return math.nan
        return float(np.max(self.result.finish_s[done]) - np.max(self.result.arrival_s))

    @property
    def tokens_per_s_total(self) -> float:
        """Output tokens per second of the whole deployment (see the module docstring per scenario)."""
        if self.qps is None:
            return self.result.metrics.throughput_tokens_per_s
        done = np.isfinite(self.result.finish_s)
        mean_out = float(np.mean(self.result.output_tokens[done])) if done.any() else math.nan
        return self.qps * mean_out * SERVER_DURATION_S / (SERVER_DURATION_S + max(self.drain_s, 0.0))

    @property
    def samples_per_s_total(self) -> float:
        """Requests per second of the whole deployment: completed over the makespan (offline), the Poisson
        rate (server, interactive)."""
        return self.result.metrics.throughput_requests_per_s if self.qps is None else self.qps

    def _p99_s(self, metric: str) -> float:
        """A p99 (s): in steady state (the search's measured requests) where the load was judged on it, else
        over every request of the run."""
        for tail in self.check.tails if self.check is not None else ():
            if tail.metric == metric:
                return tail.p99_s
        return float(getattr(self.result.metrics, f"{metric}_s").p99)

    @property
    def ttft_ms_p99(self) -> float:
        """p99 time to first token (ms)."""
        return self._p99_s("ttft") * 1e3

    @property
    def tpot_ms_p99(self) -> float:
        """p99 time per output token after the first (ms)."""
        return self._p99_s("tpot") * 1e3

    @property
    def limits_met(self) -> bool:
        """Server/interactive: the load meets the scenario's p99 limits in steady state; offline: every request
        completed within them."""
        if self.check is not None:
            return self.check.met
        m, lim = self.result.metrics, self.workload.limits
        return (m.requests_completed == m.requests_total
                and (lim.ttft_p99_s is None or m.ttft_s.p99 <= lim.ttft_p99_s)
                and (lim.tpot_p99_s is None or m.tpot_s.p99 <= lim.tpot_p99_s)
                and (lim.e2e_p99_s is None or m.e2e_s.p99 <= lim.e2e_p99_s))

    def as_dict(self) -> dict[str, Any]:
        """The MLPerf figures under their metric names (``mlperf_<scenario>_...``), the limits and the load."""
        s, m = self.workload.scenario, self.result.metrics
        res = self.result
        return {
            "workload": self.workload.name, "benchmark": self.workload.benchmark.name, "scenario": s,
            "dataset": self.workload.benchmark.dataset,
            f"mlperf_{s}_tokens_per_s_total": self.tokens_per_s_total,
            f"mlperf_{s}_samples_per_s_total": self.samples_per_s_total,
            f"mlperf_{s}_ttft_ms_p99": _finite(self.ttft_ms_p99), f"mlperf_{s}_tpot_ms_p99": _finite(self.tpot_ms_p99),
            "limits": self.workload.limits.as_dict(), "limits_met": self.limits_met,
            "qps_requests_per_s": self.qps, "drain_s": None if self.qps is None else _finite(self.drain_s),
            "num_requests": m.requests_total,
            "prompt_tokens_mean": float(np.mean(res.prompt_tokens)) if res.prompt_tokens.size else None,
            "output_tokens_mean": float(np.mean(res.output_tokens)) if res.output_tokens.size else None,
            "num_beams": res.config.workload.num_beams,
        }


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def run_mlperf(cfg: ServingConfig, name: str, *, num_requests: int | None = None,
               qps: float | None = None) -> MLPerfResult:
    """Run scenario ``name`` (``mlperf:<benchmark>:<scenario>``) on ``cfg``'s deployment (see the module
    docstring). For server/interactive, ``qps`` simulates that Poisson load instead of searching."""
    run = apply_mlperf(cfg, name, num_requests=num_requests)
    w = mlperf_workload(name, num_requests=run.workload.num_requests, seed=cfg.workload.seed)
    if w.scenario == "offline":
        return MLPerfResult(w, simulate_serving(run))
    # the offline rate bounds the reported one (offline is MLPerf's maximum-throughput scenario): it is the
    # saturated throughput of the search, which starts at half of it
    bench = w.benchmark.name
    offline_cfg = apply_mlperf(cfg, f"{PREFIX}:{bench}:offline", num_requests=num_requests)
    offline_run = simulate_serving(offline_cfg.model_copy(update={"slo_ttft_s": None, "slo_tpot_s": None,
                                                                  "slo_e2e_s": None}))
    offline = offline_run.metrics.throughput_requests_per_s
    if not (offline > 0 and math.isfinite(offline)):
        raise ConfigError(f"{bench} offline completes nothing on this deployment; no server load to search")
    sat = saturation_of(offline_run, requests_per_s=offline)
    if qps is not None:
        check, result, load = check_load(run, qps, sat)
        if result is None:  # at or above the offline rate: overload, shown on a run of the steady-state length
            result = simulate_serving(load.model_copy(update={"workload": load.workload.model_copy(update={
                "num_requests": steady_requests(run, qps, sat)})}))
        return MLPerfResult(w, result, qps, (check,), check)
    search = find_max_qps(run, start_qps=0.5 * offline, sat=sat)
    result = search.result if search.result is not None else simulate_serving(search.config)
    return MLPerfResult(w, result, search.max_qps, tuple(search.evaluated), search.check or search.evaluated[-1])
