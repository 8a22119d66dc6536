"""The highest load a deployment sustains under latency SLOs (``perfcast serve --find-max-qps``).

A load is sustained when the deployment serves it in steady state and the steady state meets the SLOs. A
short run cannot tell: a queue that grows still has small percentiles over its first requests, and the
p99 of a latency shared by every request in flight (TPOT, the batch's iteration time) is set by rare
bursts of arrivals that a few hundred requests do not contain. So each load is judged as follows.

1. Saturation. One closed-loop run (as many requests outstanding as twice the batch the deployment can
   hold, so its queue never empties) measures the saturated throughput ``mu`` (output tokens per second
   between the fill and the drain, over the mean output length) and a request's lifetime ``tau`` (decode
   time plus one iteration). No
   load at or above ``mu`` is sustainable: it is OVERLOAD without a simulation, and the search stays below.
2. Length. A load of ``qps`` requests/s is simulated for ``(WARMUP_LIFETIMES + w) * tau`` seconds of
   arrivals (at least ``MIN_REQUESTS`` requests and the workload's own count): the first
   ``WARMUP_LIFETIMES * tau`` seconds fill the empty deployment and are discarded; the window after them
   holds ``STEADY_LIFETIMES`` independent request lifetimes over the deployment's replicas, so the p99 is
   measured over enough bursts: ``w = STEADY_LIFETIMES / replicas`` lifetimes of each (R replicas behind the
   router see R independent streams of bursts), at least ``MIN_WINDOW_LIFETIMES``. Near saturation a queue
   forgets its start only over its relaxation time (:func:`relaxation_s`, ``1 / (mu (1 - sqrt(rho))^2)``,
   which grows as ``1 / (1 - rho)^2``), so the warm-up is at least ``RELAXATION_WARMUP`` and the window at
   least ``RELAXATION_WINDOW`` relaxation times: at 96 % of the saturated throughput that is thousands of
   request lifetimes, where a window of lifetimes saw a p99 TTFT ten times too small. A load whose steady
   state would take more than ``MAX_CHECK_REQUESTS`` requests to measure is not simulated: it is not shown
   to hold (``unsettled``).
3. Exactly the load asked. Poisson (or gamma) gaps drawn for a run average ``1/qps`` only up to their
   sampling error, a few % over a few thousand requests, and the TPOT tail moves about three times as much
   as the load. Each load's rate is therefore passed to the arrival process divided by the seed's realized
   mean gap (in units of ``1/qps``), so the simulated arrivals average exactly ``qps`` (a Poisson process
   conditioned on its count; the bursts within the run are untouched).
4. Verdict. Over the measured window, the admission rate (the offered load, arrivals per second, less the
   growth rate of the requests waiting for their first token, a least-squares slope over the window)
   falling more than ``OVERLOAD_TOL`` below the offered load, or the served throughput (less the growth of
   all requests in the system, running ones included) more than ``SERVED_TOL`` below it, is OVERLOAD: a
   queue that grows is not a steady state, whatever its percentiles say, and never meets the SLO.
   Otherwise each SLO'd p99 (TTFT, TPOT, end-to-end) is estimated with its standard error by batch means
   (``NUM_BATCHES`` consecutive batches of the measured requests). The load MEETS when every p99 plus ``Z``
   standard errors (one-sided 95 %) is within its bound, MISSES when some p99 minus ``Z`` standard errors is
   above it, and is UNSETTLED otherwise: the stopping rule then doubles its request count (the estimate's
   error shrinks by about sqrt(2)), at most ``MAX_GROWTH``-fold and only while that could settle it (every
   p99 plus its shrunk margin within its bound); still unsettled, it is not shown to hold and counts as a
   miss.
5. Search. From half the saturated throughput (or a given start), halving until a load meets, then
   bisecting between the highest load that meets and the lowest that does not (``mu`` at first) to
   ``rel_tol`` relative width. With common random numbers (one seed, gaps rescaled) the loads see the
   same bursts, so the verdict is monotone in the load.
6. Guided search (``guess_frac``, what ``perfcast search --serve`` passes from a deployment searched before).
   The answer of step 5 is a function of the loads on its path (halving, then bisection; each load's value
   fixed by the path above it), and a monotone verdict decides every load of that path once one load that
   meets lies at or above it, or one that does not lies at or below it. So the path of step 5 is replayed,
   each load on it answered by a load already simulated when monotonicity decides it and simulated only when
   nothing does; the loads simulated are chosen by the guess: the ends of the final interval the path would
   reach if the answer were ``guess_frac`` of ``mu`` (the lower end first, its run is shorter; galloping
   upwards, the upper one unless it lies beyond the gallop's bound). A guess
   contradicted by a simulation moves past that load to where that load's tightest p99 extrapolates to its
   bound (:func:`_tail_reach`), and at least by ``rel_tol`` of ``mu``, doubled at each further
   contradiction in the same direction (a gallop; upwards at most a quarter of the way left to ``mu``, where
   each load's run is longer than the last); contradicted in both directions, the answer is bracketed and
   the path's own bisection takes over. The path, hence the
   answer, is that of step 5 whatever the guess as long as the verdict is monotone in the load (a guess only
   changes which loads are simulated): a good guess simulates the two ends of the final interval and no
   other load, where step 5 simulates every load of its path, the ones near saturation the longest. Where a
   verdict sits within its error bars of the SLO (``unsettled``: a miss) the verdicts of neighbouring loads
   are not strictly monotone, and a guided search may stop on another load of that band than step 5.

A plain ``perfcast serve --qps`` run is judged by the same rules (:func:`steady_state`): its load against the
saturated throughput, and its own run, or a steady-state run of that load when its own is too short to tell;
a run of a few hundred requests can fill an empty deployment and leave before the queue of an overload grows.

The answer therefore meets its SLO in a run ten times longer (its p99 is within its error bars of the
steady state's), and it is below the saturated throughput. Requests refused at admission (longer than the
context, ...) are counted by the simulation and left out of every figure here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from functools import partial
from typing import Any, ClassVar

import numpy as np

from perfcast.errors import ConfigError
from perfcast.results.serialize import json_field
from perfcast.serving.config import ServingConfig
from perfcast.serving.engine import simulate_serving
from perfcast.serving.outcomes import RequestStatus
from perfcast.serving.result import ServingResult
from perfcast.serving.sources.arrivals import generate_requests

__all__ = ["MAX_CHECK_REQUESTS", "MAX_GROWTH", "MIN_REQUESTS", "MIN_WINDOW_LIFETIMES", "NUM_BATCHES", "OVERLOAD_TOL",
           "RELAXATION_WARMUP", "RELAXATION_WINDOW", "SERVED_TOL", "STEADY_LIFETIMES", "WARMUP_LIFETIMES", "Z",
           "JudgedLoad", "LoadCheck", "LoadVerdict", "QPSSearch", "Saturation", "SearchSummary", "SteadyState",
           "SteadyStateSummary", "TailEstimate", "check_load", "find_max_qps", "judge_load", "meets_slo",
           "relaxation_s", "saturation", "saturation_of", "steady_requests", "steady_state", "steady_state_rule",
           "warmup_s", "window_lifetimes"]

STEADY_LIFETIMES = 30.0
"""Request lifetimes of arrivals measured per load (after the warm-up)."""
WARMUP_LIFETIMES = 2.0
"""Request lifetimes of arrivals discarded at the start of each load (the empty deployment filling)."""
MIN_WINDOW_LIFETIMES = 8.0
"""Fewest request lifetimes a load's measured window spans, however many replicas share the load."""
MIN_REQUESTS = 1000
"""Fewest requests a load is simulated with."""
NUM_BATCHES = 4
"""Consecutive batches of the measured requests whose p99s give a p99's standard error."""
Z = 1.645
"""Standard errors between a p99 and its bound for a verdict (one-sided 95 %)."""
OVERLOAD_TOL = 0.002
"""Admission rate (requests reaching their first token) this far below the offered load (as a fraction of it)
is overload: the waiting queue grows."""
SERVED_TOL = 0.02
"""Served throughput (completions) this far below the offered load is overload: the requests in the system
grow (the running batch counts too, so its noise is larger)."""
MAX_GROWTH = 2
"""An unsettled load's request count doubles up to this many times its first count."""
RELAXATION_WARMUP = 3.0
"""Relaxation times of the queue (:func:`relaxation_s`) discarded at the start of a load, at least."""
RELAXATION_WINDOW = 10.0
"""Relaxation times of the queue a load's measured window spans, at least."""
_MIN_PER_BATCH = 50  # measured requests per batch below which a p99 is not estimated
_SATURATION_ROUNDS = 5  # closed-loop run: requests sent = this many times the concurrency

class LoadVerdict(StrEnum):
    """A load judged in steady state (step 4 of the module docstring): it meets the SLOs, misses them, overloads
    the deployment (a queue that grows), or stays unsettled within the requests it may take (not shown to hold)."""

    MEETS = "meets"
    MISSES = "misses"
    OVERLOAD = "overload"
    UNSETTLED = "unsettled"


@dataclass(frozen=True)
class Saturation:
    """The deployment with its queue never empty: completions per second and one request's lifetime (s)."""

    requests_per_s: float = field(metadata=json_field(key="saturated_requests_per_s"))
    lifetime_s: float = field(metadata=json_field(key="request_lifetime_s"))
    num_requests: int = field(metadata=json_field(key="saturation_requests"))


@dataclass(frozen=True)
class TailEstimate:
    """A p99 over the measured requests (s), its batch-means standard error (s) and its bound (s)."""

    metric: str  # ttft | tpot | e2e
    p99_s: float
    stderr_s: float
    slo_s: float


@dataclass(frozen=True)
class LoadCheck:
    """One load judged in steady state (see the module docstring)."""

    qps: float
    verdict: LoadVerdict
    reason: str
    num_requests: int = 0  # simulated (0: not simulated, above the saturated throughput)
    simulated_s: float = 0.0  # span of the arrivals
    warmup_s: float = 0.0  # arrivals before this are discarded
    measured_requests: int = 0
    offered_requests_per_s: float = math.nan
    admitted_requests_per_s: float = math.nan  # reaching their first token
    served_requests_per_s: float = math.nan  # completing
    tails: tuple[TailEstimate, ...] = ()

    # to_json: a row with ``met`` after the load, NaN rates (not measured) as None
    JSON_ORDER: ClassVar[tuple[str, ...]] = ("qps", "met", "verdict", "reason", "num_requests", "simulated_s",
                                             "warmup_s", "measured_requests", "offered_requests_per_s",
                                             "admitted_requests_per_s", "served_requests_per_s", "tails")
    JSON_NAN_NULL: ClassVar[bool] = True

    @property
    def met(self) -> bool:
        """Whether the load meets the SLOs in steady state."""
        return self.verdict == LoadVerdict.MEETS


@dataclass
class QPSSearch:
    """The highest load found (0 when none meets), the config and simulation at it, every load judged, and the
    saturation that bounds them. ``verdict`` says why no load meets when none does."""

    max_qps: float
    config: ServingConfig
    evaluated: list[LoadCheck] = field(default_factory=list)
    result: ServingResult | None = None
    saturation: Saturation | None = None
    check: LoadCheck | None = None  # the verdict at max_qps
    verdict: str = ""

    def json_view(self) -> SearchSummary:
        """``max_qps``, the saturation, the rule's constants and every load (``qps_evaluated``)."""
        return SearchSummary(self.max_qps, self.saturation, steady_state_rule(self.config), tuple(self.evaluated),
                             self.verdict or None)


@dataclass(frozen=True)
class SearchSummary:
    """What a QPS search reports: the highest load, the saturation's keys, the rule's constants, every load
    judged and, when no load meets, why."""

    max_qps: float
    saturation: Saturation | None = field(metadata=json_field(flatten=True))
    steady_state_rule: dict[str, float]
    qps_evaluated: tuple[LoadCheck, ...]
    qps_search_verdict: str | None = field(metadata=json_field(omit_none=True))


def steady_state_rule(cfg: ServingConfig | None = None) -> dict[str, float]:
    """The rule's constants (module docstring), and ``steady_lifetimes``, the window of ``cfg``'s deployment."""
    rule = {"warmup_lifetimes": WARMUP_LIFETIMES, "steady_lifetimes_over_replicas": STEADY_LIFETIMES,
            "min_window_lifetimes": MIN_WINDOW_LIFETIMES, "relaxation_warmup": RELAXATION_WARMUP,
            "relaxation_window": RELAXATION_WINDOW, "min_requests": MIN_REQUESTS,
            "max_check_requests": MAX_CHECK_REQUESTS, "num_batches": NUM_BATCHES, "z": Z,
            "overload_tol": OVERLOAD_TOL, "served_tol": SERVED_TOL, "max_growth": MAX_GROWTH}
    return rule if cfg is None else {**rule, "steady_lifetimes": window_lifetimes(cfg)}


def _with_load(cfg: ServingConfig, **load: Any) -> ServingConfig:
    return cfg.model_copy(update={"workload": cfg.workload.model_copy(update=load)})


def saturation_of(result: ServingResult, *, requests_per_s: float | None = None) -> Saturation:
    """The saturation a run with its queue never empty shows: ``requests_per_s`` and a request's lifetime (mean
    decode time of the completed requests plus one mean iteration, s).

    ``requests_per_s`` defaults to the output tokens emitted between the completion of the first fifth of the
    requests (the fill) and the completion that sends the last one (closed loop: the drain starts there),
    per second, over the mean output length. Tokens, each request's counted as emitted evenly between its
    first and last token, flow steadily where completions come in waves (requests of one length finish
    together)."""
    done = np.array([s == RequestStatus.COMPLETED for s in result.status], dtype=bool)
    finish = np.sort(result.finish_s[done])
    if finish.size < 2:
        raise ConfigError("the deployment completed fewer than two requests at saturation; no load to search")
    first, last, output = result.first_token_s[done], result.finish_s[done], result.output_tokens[done]
    if requests_per_s is None:
        drain = result.config.workload.concurrency or 0
        t1 = float(finish[finish.size // 5])
        t2 = float(finish[max(finish.size // 5 + 1, finish.size - 1 - drain)])
        decoding = np.maximum(last - first, 1e-12)

        def emitted(t: float) -> float:
            frac = np.clip((t - first) / decoding, 0.0, 1.0)
            return float(np.sum(np.where(t >= first, 1.0 + frac * (output - 1), 0.0)))

        requests_per_s = (emitted(t2) - emitted(t1)) / (t2 - t1) / float(output.mean()) if t2 > t1 else math.inf
    decode = float(np.mean(last - first))
    return Saturation(float(requests_per_s), decode + result.mean_iteration_s, int(result.arrival_s.size))


def saturation(cfg: ServingConfig) -> Saturation:
    """:class:`Saturation` of ``cfg``'s deployment from one closed-loop run: twice the sequences its engines
    hold at once (``max_num_seqs`` or what the KV cache holds, whichever is fewer) outstanding, the next
    request sent as one completes, ``_SATURATION_ROUNDS`` times that many requests."""
    probe = simulate_serving(_with_load(cfg, qps=None, num_requests=min(cfg.workload.num_requests, 64),
                                        concurrency=None))
    engines = cfg.num_replicas * cfg.pipeline_parallel_size
    per_engine = min(cfg.max_num_seqs, max(1, probe.max_concurrent_sequences))
    concurrency = 2 * engines * per_engine
    run = simulate_serving(_with_load(cfg, qps=None, num_requests=_SATURATION_ROUNDS * concurrency,
                                      concurrency=concurrency))
    return saturation_of(run)


def _rate_for(cfg: ServingConfig, qps: float, num_requests: int) -> float:
    """The rate to pass to the arrival process so that ``num_requests`` arrivals of the workload's seed average
    exactly ``qps`` (the seed's realized mean gap, in units of ``1/qps``, times ``qps``)."""
    if num_requests < 2 or cfg.workload.arrival == "fixed":
        return qps
    w = cfg.workload
    unit = generate_requests(num_requests=num_requests, seed=w.seed, arrival=w.arrival, qps=1.0,
                             burstiness_cv=w.burstiness_cv, prompt_tokens=1, output_tokens=1)
    return qps * float(unit.arrival_s[-1]) / (num_requests - 1)


def _tails(cfg: ServingConfig, result: ServingResult, measured: np.ndarray) -> tuple[TailEstimate, ...]:
    arrival, first, finish = result.arrival_s[measured], result.first_token_s[measured], result.finish_s[measured]
    output = result.output_tokens[measured]
    series: list[tuple[str, np.ndarray, float]] = []
    if cfg.slo_ttft_s is not None:
        series.append(("ttft", first - arrival, cfg.slo_ttft_s))
    if cfg.slo_tpot_s is not None:
        many = output >= 2
        series.append(("tpot", (finish[many] - first[many]) / (output[many] - 1), cfg.slo_tpot_s))
    if cfg.slo_e2e_s is not None:
        series.append(("e2e", finish - arrival, cfg.slo_e2e_s))
    out = []
    for name, values, slo in series:
        if values.size < NUM_BATCHES * _MIN_PER_BATCH:
            out.append(TailEstimate(name, math.nan, math.nan, slo))
            continue
        p99 = float(np.percentile(values, 99.0))
        batches = np.array([np.percentile(b, 99.0) for b in np.array_split(values, NUM_BATCHES)])
        out.append(TailEstimate(name, p99, float(batches.std(ddof=1)) / math.sqrt(NUM_BATCHES), slo))
    return tuple(out)


def judge_load(cfg: ServingConfig, qps: float, result: ServingResult, sat: Saturation) -> LoadCheck:
    """The steady-state verdict of ``result``, a simulation of load ``qps`` on ``cfg``'s deployment, judged
    after its warm-up (:func:`warmup_s`; see the module docstring)."""
    arrival = result.arrival_s
    served = np.array([RequestStatus.of(s) != RequestStatus.REJECTED for s in result.status], dtype=bool)
    end_s = float(arrival[-1])
    start_s = warmup_s(qps, sat)
    measured = served & (arrival >= start_s)
    base: dict[str, Any] = dict(num_requests=int(arrival.size), simulated_s=end_s, warmup_s=start_s,
                                measured_requests=int(measured.sum()))
    window_s = end_s - start_s
    if window_s <= 0 or base["measured_requests"] < NUM_BATCHES * _MIN_PER_BATCH:
        return LoadCheck(qps, LoadVerdict.UNSETTLED, "too few requests after the warm-up", **base)
    offered = float(measured.sum()) / window_s
    # least-squares growth rates over the window of the requests waiting for their first token and of all
    # requests in the system: what the deployment does not take in, and does not finish, of the load (fitted
    # over the whole window, far steadier than counting between two instants)
    times = np.linspace(start_s, end_s, 256)
    arrived = np.searchsorted(np.sort(arrival[served]), times, side="right").astype(float)
    started = np.searchsorted(np.sort(result.first_token_s[served]), times, side="right")
    finished = np.searchsorted(np.sort(result.finish_s[served]), times, side="right")
    admitted = offered - float(np.polyfit(times, arrived - started, 1)[0])
    completed = offered - float(np.polyfit(times, arrived - finished, 1)[0])
    base.update(offered_requests_per_s=offered, admitted_requests_per_s=admitted, served_requests_per_s=completed)
    if admitted < (1.0 - OVERLOAD_TOL) * offered:
        return LoadCheck(qps, LoadVerdict.OVERLOAD, f"admitted {admitted:.4g} of the {offered:.4g} requests/s "
                         "offered: the queue waiting for a first token grows", **base)
    if completed < (1.0 - SERVED_TOL) * offered:
        return LoadCheck(qps, LoadVerdict.OVERLOAD, f"served {completed:.4g} of the {offered:.4g} requests/s "
                         "offered: the requests in the system grow", **base)
    tails = _tails(cfg, result, measured)
    base["tails"] = tails
    if any(math.isnan(t.p99_s) for t in tails):
        return LoadCheck(qps, LoadVerdict.UNSETTLED, "too few requests for a p99", **base)
    for t in tails:
        if t.p99_s - Z * t.stderr_s > t.slo_s:
            return LoadCheck(qps, LoadVerdict.MISSES, f"{t.metric} p99 above {t.slo_s:.4g} s", **base)
    open_ = [t for t in tails if t.p99_s + Z * t.stderr_s > t.slo_s]
    if open_:
        return LoadCheck(qps, LoadVerdict.UNSETTLED,
                         f"{open_[0].metric} p99 within its error of {open_[0].slo_s:.4g} s", **base)
    if not tails:
        return LoadCheck(qps, LoadVerdict.MEETS, "admitted and served the load offered (no SLO to meet)", **base)
    return LoadCheck(qps, LoadVerdict.MEETS, "every p99 below its SLO by more than its error", **base)


def window_lifetimes(cfg: ServingConfig) -> float:
    """Request lifetimes the measured window of a load spans on ``cfg``'s deployment (module docstring)."""
    return max(STEADY_LIFETIMES / cfg.num_replicas, MIN_WINDOW_LIFETIMES)


def relaxation_s(qps: float, sat: Saturation) -> float:
    """How long the deployment's queue takes to forget its start at load ``qps`` (s): the relaxation time of
    an M/M/1 queue of service rate ``mu`` (the saturated throughput), ``1 / (mu (1 - sqrt(rho))^2)`` with
    ``rho = qps / mu`` (Morse 1955, "Stochastic properties of waiting lines"; Cohen, "The Single Server Queue",
    II.2). Far from saturation it is shorter than a request's lifetime; near it, it grows as
    ``1 / (1 - rho)^2`` and a window of lifetimes no longer holds the queue's bursts (at 96 % of the saturated
    throughput, minutes of arrivals). 0 at or above saturation, where no steady state exists to wait for (the
    load is overload)."""
    mu = sat.requests_per_s
    rho = qps / mu
    return 0.0 if rho >= 1.0 else 1.0 / (mu * (1.0 - math.sqrt(rho)) ** 2)


def warmup_s(qps: float, sat: Saturation) -> float:
    """Arrival time (s) before which a load's requests are discarded: ``WARMUP_LIFETIMES`` request lifetimes,
    or ``RELAXATION_WARMUP`` relaxation times of the queue when longer."""
    return max(WARMUP_LIFETIMES * sat.lifetime_s, RELAXATION_WARMUP * relaxation_s(qps, sat))


def steady_requests(cfg: ServingConfig, qps: float, sat: Saturation) -> int:
    """Requests a load of ``qps`` is first simulated with: its warm-up and measured window of arrivals (the
    window at least ``RELAXATION_WINDOW`` relaxation times of the queue), at least ``MIN_REQUESTS`` and the
    workload's own count."""
    window_s = max(window_lifetimes(cfg) * sat.lifetime_s, RELAXATION_WINDOW * relaxation_s(qps, sat))
    return max(MIN_REQUESTS, cfg.workload.num_requests, math.ceil(qps * (warmup_s(qps, sat) + window_s)))


def _may_settle(check: LoadCheck) -> bool:
    """Whether doubling an unsettled load's requests can make it meet: its p99s stay where they are and their
    standard errors shrink by sqrt(2) (a p99 above its bound cannot)."""
    return bool(check.tails) and all(t.p99_s + Z * t.stderr_s / math.sqrt(2.0) <= t.slo_s for t in check.tails)


def check_load(cfg: ServingConfig, qps: float, sat: Saturation) -> tuple[LoadCheck, ServingResult | None,
                                                                           ServingConfig]:
    """Judge load ``qps`` on ``cfg``'s deployment in steady state, growing its request count while unsettled;
    the verdict, the last simulation (None above the saturated throughput) and its config."""
    if qps >= sat.requests_per_s:
        return (LoadCheck(qps, LoadVerdict.OVERLOAD, f"at or above the saturated throughput {sat.requests_per_s:.4g} "
                                           "requests/s"), None, _with_load(cfg, qps=qps))
    first = steady_requests(cfg, qps, sat)
    if first > MAX_CHECK_REQUESTS:
        return (LoadCheck(qps, LoadVerdict.UNSETTLED, f"at {100 * qps / sat.requests_per_s:.1f} % of the saturated "
                          f"throughput the queue relaxes over {relaxation_s(qps, sat):.3g} s: a steady state takes "
                          f"more than {MAX_CHECK_REQUESTS:,} requests to measure, so this load is not shown to hold"),
                None, _with_load(cfg, qps=qps))
    n = first
    while True:
        load = _with_load(cfg, qps=_rate_for(cfg, qps, n), num_requests=n)
        result = simulate_serving(load)
        check = judge_load(cfg, qps, result, sat)
        if (check.verdict != LoadVerdict.UNSETTLED or n >= MAX_GROWTH * first or 2 * n > MAX_CHECK_REQUESTS
                or not _may_settle(check)):
            return check, result, load
        n *= 2


MAX_CHECK_REQUESTS = 200_000
"""Most requests one load is simulated with to judge it in steady state (a search's load, a plain run's load),
and the saturation run of :func:`steady_state`: near saturation the queue's relaxation asks for more, and such
a load is ``unsettled`` (not shown to hold)."""


@dataclass(frozen=True)
class SteadyState:
    """A plain run's load judged in steady state (:func:`steady_state`): the verdict, the saturation it is judged
    against (None when not checked) and the p99s (s) of the run judged, over its measured window."""

    check: LoadCheck
    saturation: Saturation | None = None
    p99_s: dict[str, float] = field(default_factory=dict)

    def json_view(self) -> SteadyStateSummary:
        """The saturation's keys and ``steady_state`` (the verdict, with ``p99_s``)."""
        return SteadyStateSummary(self.saturation, JudgedLoad(self.check, self.p99_s))


@dataclass(frozen=True)
class JudgedLoad:
    """A load's verdict with the p99s (s) of the run judged."""

    check: LoadCheck = field(metadata=json_field(flatten=True))
    p99_s: dict[str, float]


@dataclass(frozen=True)
class SteadyStateSummary:
    """What a plain run's steady-state check reports: the saturation's keys and the judged load."""

    saturation: Saturation | None = field(metadata=json_field(flatten=True))
    steady_state: JudgedLoad


def _p99s(result: ServingResult, warmup_s: float) -> dict[str, float]:
    """p99 TTFT, TPOT and end-to-end latency (s) of the completed requests that arrived after ``warmup_s``."""
    done = np.array([s == RequestStatus.COMPLETED for s in result.status], dtype=bool) & (result.arrival_s >= warmup_s)
    if not done.any():
        return {}
    arrival, first, finish = result.arrival_s[done], result.first_token_s[done], result.finish_s[done]
    output = result.output_tokens[done]
    many = output >= 2
    out = {"ttft": float(np.percentile(first - arrival, 99.0))}
    if many.any():
        out["tpot"] = float(np.percentile((finish[many] - first[many]) / (output[many] - 1), 99.0))
    out["e2e"] = float(np.percentile(finish - arrival, 99.0))
    return out


def steady_state(cfg: ServingConfig, result: ServingResult) -> SteadyState | None:
    """Whether the load of a plain run (``result``, open-loop arrivals at ``cfg.workload.qps``) holds in steady
    state: the run judged by :func:`judge_load` against the deployment's :func:`saturation`, or, when it is too
    short to tell (a few hundred requests fill an empty deployment and leave before its queue grows), the load
    simulated in steady state by :func:`check_load`; with the p99s of the run judged after its warm-up. None for
    a run with no rate to sustain (every request at once, a closed loop, trace arrival times). When either run
    would exceed ``MAX_CHECK_REQUESTS`` the verdict is ``unsettled`` and says it was not checked."""
    w = cfg.workload
    if w.qps is None or w.concurrency is not None or w.arrival == "trace":
        return None
    engines = cfg.num_replicas * cfg.pipeline_parallel_size
    bound = _SATURATION_ROUNDS * 2 * engines * cfg.max_num_seqs
    if bound > MAX_CHECK_REQUESTS:
        return SteadyState(LoadCheck(w.qps, LoadVerdict.UNSETTLED, "not checked: its saturation run would simulate "
                                     f"up to {bound:,} requests"))
    sat = saturation(cfg)
    check = judge_load(cfg, w.qps, result, sat)
    if check.verdict == LoadVerdict.UNSETTLED:
        check, run, _ = check_load(cfg, w.qps, sat)
        if run is None:  # at or above saturation, or too near it to measure: no run
            return SteadyState(check, sat)
        result = run
    return SteadyState(check, sat, _p99s(result, check.warmup_s))


def meets_slo(cfg: ServingConfig) -> bool:
    """Whether ``cfg``'s load (its ``qps``) meets the p99 TTFT, TPOT and end-to-end bounds in steady state."""
    _check_searchable(cfg)
    if cfg.workload.qps is None:
        raise ConfigError("meets_slo needs a load: set the workload's qps")
    return check_load(cfg, cfg.workload.qps, saturation(cfg))[0].met


def _check_searchable(cfg: ServingConfig) -> None:
    if cfg.slo_ttft_s is None and cfg.slo_tpot_s is None and cfg.slo_e2e_s is None:
        raise ConfigError("a QPS search needs a TTFT, TPOT or end-to-end latency SLO")
    if cfg.workload.arrival == "trace":
        raise ConfigError("a QPS search sets the arrival rate; use --arrival poisson or gamma, not trace")
    if cfg.workload.concurrency is not None:
        raise ConfigError("a QPS search offers open-loop loads; drop --max-concurrency")


@dataclass(frozen=True)
class _PathEnd:
    """Where :func:`_walk` stops: at a load it has no verdict for (``ask``), or at the answer (``lo``, 0 when no
    load meets; ``hi``, the lowest load on the path that does not)."""

    ask: float | None
    lo: float = 0.0
    hi: float = 0.0
    visited: tuple[float, ...] = ()


def _walk(mu: float, start_qps: float, rel_tol: float, verdict: Callable[[float], bool | None]) -> _PathEnd:
    """The path of step 5 (module docstring): halving from ``start_qps`` until a load meets, then bisecting to
    ``rel_tol``, each load's verdict from ``verdict`` (None: not known; the walk stops there and asks it)."""
    visited: list[float] = []
    hi, qps = mu, start_qps
    while True:
        visited.append(qps)
        met = verdict(qps)
        if met is None:
            return _PathEnd(qps, visited=tuple(visited))
        if met:
            break
        hi = qps
        qps /= 2.0
        if qps < mu / 1024:
            return _PathEnd(None, 0.0, hi, tuple(visited))
    lo = qps
    while hi - lo > rel_tol * hi:
        mid = 0.5 * (lo + hi)
        visited.append(mid)
        met = verdict(mid)
        if met is None:
            return _PathEnd(mid, visited=tuple(visited))
        if met:
            lo = mid
        else:
            hi = mid
    return _PathEnd(None, lo, hi, tuple(visited))


def _tail_reach(check: LoadCheck, mu: float) -> float:
    """The load (requests/s) at which the tightest p99 of ``check`` would reach its bound, extrapolated from that
    one load as if the latency grew from nothing: TTFT and end-to-end as a queueing delay (as ``rho / (1 - rho)``,
    ``rho`` the load over the saturated throughput ``mu``), TPOT as the batch's iteration time (as ``rho``).
    Both grow from a floor (a prefill, one decode step) in fact, so the reach errs towards the load judged.
    The load judged itself when no p99 was measured (overload)."""
    rho = check.qps / mu
    reach = math.inf
    for t in check.tails:
        over = t.p99_s / t.slo_s
        if not (math.isfinite(over) and over > 0):
            continue
        if t.metric == "tpot":
            reach = min(reach, rho / over)
        else:
            x = rho / (1.0 - rho) / over
            reach = min(reach, x / (1.0 + x))
    return check.qps if math.isinf(reach) else reach * mu


def _hoped(known: Callable[[float], bool | None], guess: float, qps: float) -> bool:
    """The verdict at ``qps`` if known, else whether it is at most the guessed answer ``guess``."""
    met = known(qps)
    return qps <= guess if met is None else met


def find_max_qps(cfg: ServingConfig, *, start_qps: float | None = None, rel_tol: float = 0.02,
                 sat: Saturation | None = None, guess_frac: float | None = None) -> QPSSearch:
    """The highest Poisson (or gamma) load ``cfg``'s deployment sustains within its SLOs (module docstring).

    ``sat`` replaces the closed-loop saturation run (e.g. an offline benchmark's throughput as the bound);
    ``start_qps`` is the first load tried (default: half the saturated throughput). ``guess_frac`` (a
    fraction of the saturated throughput, e.g. a similar deployment's answer) chooses which loads of the
    search's path are simulated (step 6): the answer is the same, with fewer simulations when the guess is
    close. When no load down to 1/1024 of the saturated throughput meets the SLOs, ``max_qps`` is 0 and
    ``verdict`` says why.
    """
    _check_searchable(cfg)
    sat = sat or saturation(cfg)
    mu = sat.requests_per_s
    if not (math.isfinite(mu) and mu > 0):
        raise ConfigError(f"the deployment's saturated throughput is {mu!r} requests/s; no load to search")
    evaluated: list[LoadCheck] = []
    runs: dict[float, tuple[LoadCheck, ServingResult | None, ServingConfig]] = {}

    def known(qps: float) -> bool | None:
        """The verdict at ``qps``: simulated, or decided by a load simulated above (meets) or below (not)."""
        if qps in runs:
            return runs[qps][0].met
        if any(c.met and c.qps >= qps for c in evaluated):
            return True
        if any(not c.met and c.qps <= qps for c in evaluated):
            return False
        return None

    def simulate(qps: float) -> None:
        found = check_load(cfg, qps, sat)
        evaluated.append(found[0])
        runs[qps] = found

    start = start_qps if start_qps is not None and 0 < start_qps < mu else 0.5 * mu
    guess = None if guess_frac is None or not math.isfinite(guess_frac) else guess_frac * mu
    step, direction, ceiling = rel_tol * mu, 0, mu
    while (end := _walk(mu, start, rel_tol, known)).ask is not None:
        probe = end.ask
        if guess is not None:
            hoped = _walk(mu, start, rel_tol, partial(_hoped, known, guess))
            open_ends = [q for q in (hoped.lo, hoped.hi) if q in hoped.visited and known(q) is None]
            far = [q for q in open_ends if q <= ceiling] if direction > 0 else []
            probe = (max(far) if far else min(open_ends) if open_ends
                     else next(q for q in reversed(hoped.visited) if known(q) is None))
        simulate(probe)
        if guess is not None and runs[probe][0].met != (probe <= guess):  # the guess was wrong here
            sign = 1 if runs[probe][0].met else -1
            if direction == -sign:  # wrong both ways: the answer is bracketed, the path bisects the bracket
                guess = None
                continue
            step = 2.0 * step if sign == direction else rel_tol * mu  # a gallop
            direction = sign
            reach = _tail_reach(runs[probe][0], mu)  # where its tightest p99 reaches its bound, when it says
            ceiling = probe + 0.25 * (mu - probe)
            guess = probe - max(step, probe - reach) if sign < 0 else min(probe + max(step, reach - probe), ceiling)
    if end.lo == 0.0:
        last = min(evaluated, key=lambda c: c.qps)
        verdict = (f"no load down to {end.hi:.3g} requests/s meets the SLO (" + ", ".join(
            f"{name} p99 <= {slo:g} s" for name, slo in (("ttft", cfg.slo_ttft_s), ("tpot", cfg.slo_tpot_s),
                                                        ("e2e", cfg.slo_e2e_s)) if slo is not None)
            + f"): at {last.qps:.3g} requests/s {last.reason}")
        return QPSSearch(0.0, _with_load(cfg, qps=end.hi), evaluated, None, sat, last, verdict)
    if end.lo not in runs:  # decided by a load above it that met, off the path: its own run is the answer's
        simulate(end.lo)
    check, result, load = runs[end.lo]
    return QPSSearch(end.lo, load, evaluated, result, sat, check)
