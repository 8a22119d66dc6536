"""MLPerf Inference scenarios run on a deployment: the presets of :mod:`perfcast.serving.sources.mlperf`
simulated, and for server and interactive the load searched.

What MLPerf reports, and how each figure is obtained here (tokens are output tokens; TPOT excludes the first
token, as LoadGen's and perfcast's ``tpot_s``: ``(finish - first token) / (output tokens - 1)``; the rules are
LoadGen's from v4.0 on, as recalled: see :mod:`perfcast.serving.sources.mlperf` and its preset file):

* ``offline``: every sample issued at once; the result is samples (tokens) completed over the time to the last
  completion of the official run, whose length :func:`~perfcast.serving.sources.mlperf.official_queries` sets
  from the rate (1.1 x 600 s of it, at least the data set, whole passes over it). The fill and the ramp-down
  of the last batches are a smaller share of that run than of a short one (llama2-70b on 8 H100s: a run of
  12,000 requests completes 7 % fewer tokens per second than the official 73,728), so its duration is
  measured, not the short run's rate reused: a run of ``requests_per_instance`` per replica and one of
  twice that give the duration as ``fixed + n x per request`` (a steady flow after the fill plus a drain of
  fixed length), and the official ``n`` is priced on that line. Checked against simulations of the whole
  official run: llama2-70b 0.3 % (2 H100s, 24,576 queries) and 0.7 % (8 H100s, 73,728) high, mixtral-8x7b
  2 % high (8 H100s, 315,000, where the run's first minutes are faster than its later steady flow). When
  ``n`` is at most 1.5 times the short run it is simulated as it is. The simulation reported (per-request
  figures) is the longer run.
* ``server`` and ``interactive``: Poisson arrivals. LoadGen reports "completed samples per second" and, for
  the token benchmarks, "completed tokens per second": the official run's ``n`` queries (the rate times
  600 s, whole passes over the data set) over the time from the first arrival to the last completion,
  ``n / (n / qps + drain)``, at the highest Poisson rate whose run is valid. The drain (last arrival to last
  completion) is the simulation's at that load. GPT-J is not streamed: its tokens are inferred as samples x
  ``inferred_tokens_per_sample`` (69), as LoadGen does from v4.0.
* A valid server load here: judged in steady state by
  :func:`perfcast.serving.experiments.search.check_load` (warm-up discarded, the queue's relaxation waited
  out, a growing queue is overload whatever its percentiles, each p99 plus 1.645 batch-means standard errors
  within its limit), and passing LoadGen's early stopping for the official run at that rate: the share of the
  steady state's queries above each limit at most :func:`~perfcast.serving.sources.mlperf.early_stopping_allowed`
  of its ``n`` queries (0.89 % at 49,152 queries instead of 1 %). The saturated rate the search stays below is
  the offline result (MLPerf's maximum-throughput scenario) on the same deployment.
* The search: one seed (the workload's; every load sees the same bursts, gaps rescaled to the exact rate, so
  the verdict is monotone in the load); a bracket between the highest load that passes and the lowest that
  does not, narrowed to 2 % of the load: each load placed where the line through the ends' margins (the log
  of the worst p99 over its limit) crosses zero, then one just across it (within 1.8 %); by halves where the
  ends carry no margins (an overload) or their signs disagree with their verdicts, and after a line that did
  not halve the bracket (regula falsi safeguarded by bisection: TTFT near saturation is far from linear).
  A load is first simulated with at most as many requests as the official run at that rate issues (twice
  that when the first run leaves it unsettled, the steady-state rule's one growth), kept between
  ``load_requests_min`` (20,000: a long-output benchmark's official run, deepseek-r1's 4,388 queries, spans
  about as many request lifetimes as the steady-state window alone) and ``max_simulated_requests`` (50,000,
  a bound on the cost): a load whose steady state takes longer to show (near saturation the queue relaxes
  over ``1 / (1 - rho)^2``) is not shown to hold and is not reported. That is the search's ceiling: the
  highest load it tries, first when the offline run's median TPOT already meets the TPOT limit (the usual
  server case, where the answer is that ceiling), else the search starts from half of it. The load above the
  answer is recorded with its verdict (a miss, or "not checkable").

How many requests a p99 needs: over ``m`` independent requests the empirical p99's rank is uncertain by
``1.96 sqrt(0.0099 m)`` (95 %): at 10,000 requests the 98.8th - 99.2nd percentiles, about +-4 % of an
exponential tail's p99; at 1,000, -10 % / +21 %. Requests in flight together share their iterations, so
they are not independent: the steady-state rule measures at least 1,000 requests over a window of 30
request lifetimes over the replicas (at least 8), longer near saturation, and takes the p99's error from
batch means over that window, not from the count. The official runs (4,388 to hundreds of thousands of
queries) are longer than most simulated windows; early stopping is applied at their count.

A steady state versus one official run: a load only slightly above the saturated rate grows its queue too
slowly to fail a 600 s run (0.2 % above it adds about one request lifetime of waiting over 600 s), and a load
near saturation whose queue relaxes over longer than the run is judged by LoadGen on a transient that starts
from an empty system. MLPerf can pass either; perfcast reports neither. Its answer is a steady state, a few
percent below the highest load one official run could pass (the ceiling sits 3 - 5 % below the offline rate
on llama2-70b).

``num_requests`` replaces the offline run's count (no official length: the figures are that run's) and is the
fewest requests a server load is simulated with; ``qps`` judges that load instead of searching.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from perfcast.errors import ConfigError
from perfcast.serving.config import ServingConfig
from perfcast.serving.engine import simulate_serving
from perfcast.serving.experiments.search import (
    LoadCheck,
    LoadVerdict,
    Saturation,
    check_load,
    saturation_of,
    steady_requests,
)
from perfcast.serving.outcomes import RequestStatus
from perfcast.serving.result import ServingResult
from perfcast.serving.sources.mlperf import (
    PREFIX,
    MLPerfWorkload,
    apply_mlperf,
    early_stopping_allowed,
    load_requests_min,
    max_simulated_requests,
    mlperf_workload,
    official_queries,
)

__all__ = ["REL_TOL", "EarlyStopping", "MLPerfResult", "run_mlperf"]

REL_TOL = 0.02
"""The server search's resolution: it stops when the highest passing and the lowest failing load are this
close (relative)."""
_ACROSS = 0.9 * REL_TOL  # the step across a load placed on the line, closing the bracket below REL_TOL
_DIRECT_FRAC = 1.5  # an official offline run at most this many times the short run's count is simulated as it is


@dataclass(frozen=True)
class EarlyStopping:
    """LoadGen's early-stopping check of one latency over the official run at a load: at most ``allowed`` of
    its ``queries`` may exceed ``limit_s`` (None: too few queries for any); ``over_frac`` is the share of the
    steady state's queries above it (the simulation's measured window)."""

    metric: str  # ttft | tpot | e2e
    limit_s: float
    queries: int
    allowed: int | None
    over_frac: float

    @property
    def allowed_frac(self) -> float:
        """The largest share of the run's queries that may exceed the limit."""
        return math.nan if self.allowed is None else self.allowed / self.queries

    @property
    def passed(self) -> bool:
        """Whether the steady state's share above the limit is within the allowed share."""
        return self.allowed is not None and self.over_frac <= self.allowed_frac

    def as_dict(self) -> dict[str, Any]:
        """The check under plain keys."""
        return {"metric": self.metric, "limit_s": self.limit_s, "queries": self.queries, "allowed": self.allowed,
                "allowed_frac": _finite(self.allowed_frac), "over_frac": self.over_frac, "passed": self.passed}


@dataclass(frozen=True)
class MLPerfResult:
    """A scenario's figures: the simulation at the reported load, the official run they stand for, and for
    server/interactive the load and how it was judged."""

    workload: MLPerfWorkload
    result: ServingResult
    official_queries: int  # queries of the official run the figures stand for
    official_run_s: float  # first arrival to last completion of that run (s)
    qps: float | None = None
    qps_evaluated: tuple[LoadCheck, ...] = ()
    check: LoadCheck | None = None  # server/interactive: the verdict at ``qps``
    early_stopping: tuple[EarlyStopping, ...] = ()  # server/interactive: LoadGen's checks at ``qps``

    @property
    def drain_s(self) -> float:
        """Time from the last arrival to the last completion of the simulation (s)."""
        done = np.isfinite(self.result.finish_s)
        if not done.any():
            return math.nan
        return float(np.max(self.result.finish_s[done]) - np.max(self.result.arrival_s))

    @property
    def samples_per_s_total(self) -> float:
        """Samples completed per second of the official run, the whole deployment (see the module docstring)."""
        if self.official_queries == 0 or not self.official_run_s > 0:
            return 0.0
        return self.official_queries / self.official_run_s

    @property
    def tokens_per_s_total(self) -> float:
        """Output tokens completed per second of the official run, the whole deployment: the samples' rate times
        their mean output (GPT-J: times the tokens LoadGen infers per sample)."""
        inferred = self.workload.benchmark.inferred_tokens_per_sample
        return self.samples_per_s_total * (inferred if inferred is not None else self._mean_output_tokens())

    def _mean_output_tokens(self) -> float:
        done = np.array([s == RequestStatus.COMPLETED for s in self.result.status], dtype=bool)
        return float(np.mean(self.result.output_tokens[done])) if done.any() else 0.0

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
        """Server/interactive: the load meets the scenario's p99 limits in steady state and passes early
        stopping; offline: every request completed within them."""
        if self.check is not None:
            return self.check.met
        m, lim = self.result.metrics, self.workload.limits
        return (m.requests_completed == m.requests_total
                and (lim.ttft_p99_s is None or m.ttft_s.p99 <= lim.ttft_p99_s)
                and (lim.tpot_p99_s is None or m.tpot_s.p99 <= lim.tpot_p99_s)
                and (lim.e2e_p99_s is None or m.e2e_s.p99 <= lim.e2e_p99_s))

    def as_dict(self) -> dict[str, Any]:
        """The MLPerf figures under their metric names (``mlperf_<scenario>_...``), the limits, the load and the
        official run they stand for."""
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
            "official_queries": self.official_queries, "official_run_s": _finite(self.official_run_s),
            "early_stopping": [e.as_dict() for e in self.early_stopping],
            "num_requests": m.requests_total,
            "prompt_tokens_mean": float(np.mean(res.prompt_tokens)) if res.prompt_tokens.size else None,
            "output_tokens_mean": float(np.mean(res.output_tokens)) if res.output_tokens.size else None,
            "num_beams": res.config.workload.num_beams,
        }


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _with_requests(cfg: ServingConfig, n: int) -> ServingConfig:
    return cfg.model_copy(update={"workload": cfg.workload.model_copy(update={"num_requests": n})})


def _completed(result: ServingResult) -> np.ndarray:
    return np.array([s == RequestStatus.COMPLETED for s in result.status], dtype=bool)


def _offline(run: ServingConfig, w: MLPerfWorkload, num_requests: int | None) -> tuple[ServingResult, int, float]:
    """The offline run reported, the official query count its figures stand for and that run's duration (s):
    see the module docstring."""
    if num_requests is not None:
        res = simulate_serving(_with_requests(run, num_requests))
        return res, res.metrics.requests_completed, _makespan(res)
    short_n = run.workload.num_requests
    short = simulate_serving(run)
    n = official_queries(w.benchmark, "offline", short.metrics.throughput_requests_per_s)
    if n <= _DIRECT_FRAC * short_n:  # about as long as the short run: simulated as it is
        res = short if n == short_n else simulate_serving(_with_requests(run, n))
        return res, res.metrics.requests_completed, _makespan(res)
    long = simulate_serving(_with_requests(run, 2 * short_n))
    t_short, t_long = _makespan(short), _makespan(long)
    done_short, done_long = short.metrics.requests_completed, long.metrics.requests_completed
    if not (t_long > t_short and done_long > done_short):
        return long, done_long, t_long
    per_request_s = (t_long - t_short) / (done_long - done_short)
    fixed_s = t_long - done_long * per_request_s  # the fill and the drain, less the steady flow's share
    for _ in range(3):  # the longer official run's rate may ask for another pass over the data set
        more = official_queries(w.benchmark, "offline", n / (fixed_s + n * per_request_s))
        if more <= n:
            break
        n = more
    return long, n, fixed_s + n * per_request_s


def _makespan(result: ServingResult) -> float:
    done = _completed(result)
    return float(np.max(result.finish_s[done])) if done.any() else math.nan


def _early_stopping(cfg: ServingConfig, w: MLPerfWorkload, qps: float, check: LoadCheck,
                    result: ServingResult) -> tuple[EarlyStopping, ...]:
    """LoadGen's early-stopping checks of the official run at ``qps``, each limit's share estimated over the
    steady state's measured requests (those arriving after the warm-up)."""
    done = _completed(result) & (result.arrival_s >= check.warmup_s)
    arrival, first, finish = result.arrival_s[done], result.first_token_s[done], result.finish_s[done]
    output = result.output_tokens[done]
    n = official_queries(w.benchmark, w.scenario, qps)
    allowed = early_stopping_allowed(n)
    out = []
    many = output >= 2
    series = (("ttft", first - arrival, cfg.slo_ttft_s),
              ("tpot", (finish[many] - first[many]) / (output[many] - 1), cfg.slo_tpot_s),
              ("e2e", finish - arrival, cfg.slo_e2e_s))
    for metric, values, limit in series:
        if limit is None:
            continue
        over = float(np.mean(values > limit)) if values.size else math.nan
        out.append(EarlyStopping(metric, limit, n, allowed, over))
    return tuple(out)


@dataclass
class _Judged:
    check: LoadCheck
    result: ServingResult | None
    early: tuple[EarlyStopping, ...]


def _judge(run: ServingConfig, w: MLPerfWorkload, qps: float, sat: Saturation) -> _Judged:
    """Load ``qps`` judged in steady state, then by LoadGen's early stopping (a miss when a share is above it)."""
    check, result, _ = check_load(run, qps, sat)
    if not check.met or result is None:
        return _Judged(check, result, ())
    early = _early_stopping(run, w, qps, check, result)
    failed = [e for e in early if not e.passed]
    if failed:
        e = failed[0]
        allowed = "none" if e.allowed is None else f"{e.allowed:,} ({100 * e.allowed_frac:.3g} %)"
        check = dataclasses.replace(check, verdict=LoadVerdict.MISSES, reason=(
            f"{e.metric}: {100 * e.over_frac:.3g} % of the steady state's queries above {e.limit_s:g} s; LoadGen's "
            f"early stopping allows {allowed} of the official run's {e.queries:,}"))
    return _Judged(check, result, early)


def _budget(run: ServingConfig, w: MLPerfWorkload, qps: float) -> int:
    """The most requests load ``qps`` may be simulated with: the official run's count at that rate, within
    ``load_requests_min`` and ``max_simulated_requests``, at least the workload's own count."""
    official = official_queries(w.benchmark, w.scenario, qps)
    return max(min(max(official, load_requests_min()), max_simulated_requests()), run.workload.num_requests)


def _checkable(run: ServingConfig, w: MLPerfWorkload, sat: Saturation) -> float:
    """The highest load whose steady state :func:`check_load` measures within :func:`_budget` requests."""
    lo, hi = 0.0, sat.requests_per_s
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if steady_requests(run, mid, sat) <= _budget(run, w, mid):
            lo = mid
        else:
            hi = mid
    return lo


def _margin(check: LoadCheck) -> float | None:
    """How far a load's worst p99 is above (> 0) or below (< 0) its limit: the log of their ratio; None without
    p99s (an overload, or a load not simulated)."""
    logs = [math.log(t.p99_s / t.slo_s) for t in check.tails if t.p99_s > 0 and math.isfinite(t.p99_s)]
    return max(logs) if logs else None


def _interpolated(lo: float, m_lo: float | None, hi: float, m_hi: float | None) -> float | None:
    """The load where the margin crosses 0 on the line through the bracket's ends (kept within its middle
    90 %); None unless the ends' margins have the signs of their verdicts."""
    if m_lo is None or m_hi is None or not m_lo < 0.0 < m_hi:
        return None
    q = lo + (hi - lo) * -m_lo / (m_hi - m_lo)
    return min(max(q, lo + 0.05 * (hi - lo)), hi - 0.05 * (hi - lo))


def _search(run: ServingConfig, w: MLPerfWorkload, sat: Saturation, offline: ServingResult) -> tuple[
        float, list[LoadCheck], _Judged | None]:
    """The highest load that passes (0 when none down to 1/1024 of the ceiling does), every load judged (the
    one above the answer last) and the judgement at the answer (see the module docstring)."""
    ceiling = _checkable(run, w, sat)
    evaluated: list[LoadCheck] = []
    best: tuple[float, _Judged] | None = None
    lo, hi = 0.0, ceiling
    m_lo: float | None = None
    m_hi: float | None = None

    def ok(qps: float) -> bool:
        nonlocal best, lo, hi, m_lo, m_hi
        judged = _judge(run, w, qps, sat)
        evaluated.append(judged.check)
        if judged.check.met:
            if best is None or qps > best[0]:
                best = (qps, judged)
            if qps > lo:
                lo, m_lo = qps, _margin(judged.check)
        elif qps < hi or (qps == hi and m_hi is None):
            hi, m_hi = qps, _margin(judged.check)
        return judged.check.met

    # the order of the first loads only saves time (the bracket, and so the answer, is the same): the ceiling
    # first when the offline run's median TPOT, at a full batch, is within the TPOT limit
    tpot = run.slo_tpot_s
    offline_tpot = float(offline.metrics.tpot_s.p50)
    top_first = tpot is None or (math.isfinite(offline_tpot) and offline_tpot <= tpot)
    if not (top_first and ok(ceiling)):
        qps = 0.5 * ceiling
        while not ok(qps):
            qps /= 2.0
            if qps < ceiling / 1024:
                return 0.0, evaluated, None
        on_line = True
        while hi - lo > REL_TOL * hi:
            before = hi - lo
            qps_line = _interpolated(lo, m_lo, hi, m_hi) if on_line else None
            if qps_line is None:
                ok(0.5 * (lo + hi))
                on_line = True
                continue
            across = qps_line * (1.0 + _ACROSS) if ok(qps_line) else qps_line * (1.0 - _ACROSS)
            if lo < across < hi and hi - lo > REL_TOL * hi:
                ok(across)
            on_line = hi - lo <= 0.5 * before  # a line that did not halve the bracket: halve it next
    if not any(c.qps >= hi and not c.met for c in evaluated):  # the load above the answer was not simulated
        above = hi if hi > lo else ceiling * (1.0 + REL_TOL)
        if above >= sat.requests_per_s:
            verdict, reason = LoadVerdict.OVERLOAD, f"at or above the offline rate {sat.requests_per_s:.4g} requests/s"
        else:
            verdict, reason = LoadVerdict.UNSETTLED, (
                f"not checkable: its steady state takes {steady_requests(run, above, sat):,} requests to measure, "
                f"more than the official run at that rate issues ({_budget(run, w, above):,} with the simulation "
                "bound)")
        evaluated.append(LoadCheck(above, verdict, reason))
    assert best is not None
    return lo, evaluated, best[1]


def _official_server_run_s(w: MLPerfWorkload, qps: float, result: ServingResult) -> tuple[int, float]:
    """The official server run at ``qps``: its queries and its first arrival to last completion (s), the drain
    taken from ``result``."""
    if qps <= 0:
        return 0, math.nan
    n = official_queries(w.benchmark, w.scenario, qps)
    done = np.isfinite(result.finish_s)
    drain = float(np.max(result.finish_s[done]) - np.max(result.arrival_s)) if done.any() else math.nan
    return n, n / qps + max(drain, 0.0)


def run_mlperf(cfg: ServingConfig, name: str, *, num_requests: int | None = None,
               qps: float | None = None) -> MLPerfResult:
    """Run scenario ``name`` (``mlperf:<benchmark>:<scenario>``) on ``cfg``'s deployment (see the module
    docstring). For server/interactive, ``qps`` judges that Poisson load instead of searching."""
    run = apply_mlperf(cfg, name, num_requests=num_requests)
    w = mlperf_workload(name, num_requests=run.workload.num_requests, seed=cfg.workload.seed)
    bench = w.benchmark.name
    if w.scenario == "offline":
        res, n, span = _offline(run, w, num_requests)
        return MLPerfResult(w, res, n, span)
    # the offline result bounds the reported rate (offline is MLPerf's maximum-throughput scenario)
    offline_cfg = apply_mlperf(cfg, f"{PREFIX}:{bench}:offline", num_requests=num_requests)
    offline_run, n_off, span_off = _offline(offline_cfg.model_copy(update={
        "slo_ttft_s": None, "slo_tpot_s": None, "slo_e2e_s": None}), mlperf_workload(
        f"{PREFIX}:{bench}:offline", seed=cfg.workload.seed), num_requests)
    offline = n_off / span_off if span_off > 0 else math.nan
    if not (offline > 0 and math.isfinite(offline)):
        raise ConfigError(f"{bench} offline completes nothing on this deployment; no server load to search")
    sat = saturation_of(offline_run, requests_per_s=offline)
    if qps is not None:
        judged = _judge(run, w, qps, sat)
        result = judged.result
        if result is None:  # at or above the offline rate, or not checkable: shown on a run of the steady length
            longest = max(max_simulated_requests(), run.workload.num_requests)
            result = simulate_serving(_with_requests(run.model_copy(update={"workload": run.workload.model_copy(
                update={"qps": qps})}), min(steady_requests(run, qps, sat), longest)))
        n, span = _official_server_run_s(w, qps, result)
        return MLPerfResult(w, result, n, span, qps, (judged.check,), judged.check, judged.early)
    best, evaluated, found = _search(run, w, sat, offline_run)
    if found is None or found.result is None:
        last = evaluated[-1]
        result = simulate_serving(run.model_copy(update={"workload": run.workload.model_copy(
            update={"qps": last.qps})}))
        return MLPerfResult(w, result, 0, math.nan, 0.0, tuple(evaluated), last)
    n, span = _official_server_run_s(w, best, found.result)
    return MLPerfResult(w, found.result, n, span, best, tuple(evaluated), found.check, found.early)
