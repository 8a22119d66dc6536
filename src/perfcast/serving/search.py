"""The highest load a deployment sustains under latency SLOs (``perfcast serve --find-max-qps``).

A load meets the SLO when every request completes and the p99 TTFT, p99 TPOT and
(when given) p99 end-to-end latency are within their bounds. The search doubles
the QPS from a start until a load fails, then bisects between the last load that met the SLO and the first that
did not, to 2% relative width. Every load is simulated with the same seed, so
the arrival gaps are the same draws rescaled (see :mod:`perfcast.serving.arrivals`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from perfcast.errors import ConfigError
from perfcast.serving.config import ServingConfig
from perfcast.serving.engine import ServingResult, simulate_serving

__all__ = ["QPSSearch", "find_max_qps", "meets_slo"]


@dataclass
class QPSSearch:
    """The highest QPS found, the config at that load, every (qps, met) pair evaluated, and the simulation at
    the highest QPS (``result``; None only when the search stopped at its ``max_qps`` cap without one)."""

    max_qps: float
    config: ServingConfig
    evaluated: list[tuple[float, bool]] = field(default_factory=list)
    result: ServingResult | None = None


def _met(cfg: ServingConfig, result: ServingResult) -> bool:
    m = result.metrics
    if m.requests_completed < m.requests_total:
        return False
    if cfg.slo_ttft_s is not None and not m.ttft_s.p99 <= cfg.slo_ttft_s:
        return False
    if cfg.slo_e2e_s is not None and not m.e2e_s.p99 <= cfg.slo_e2e_s:
        return False
    return not (cfg.slo_tpot_s is not None and m.tpot_s.p99 > cfg.slo_tpot_s)


def meets_slo(cfg: ServingConfig) -> bool:
    """Whether ``cfg``'s load completes every request within the p99 TTFT, TPOT and end-to-end bounds."""
    return _met(cfg, simulate_serving(cfg))


def find_max_qps(cfg: ServingConfig, *, start_qps: float = 0.25, max_qps: float = 1e4,
                 rel_tol: float = 0.02, duration_s: float | None = None) -> QPSSearch:
    """Search the highest Poisson (or gamma) QPS at which ``cfg`` meets its SLOs.

    ``duration_s``: simulate each load for at least this long (``qps * duration_s`` requests when that is more
    than the workload's ``num_requests``), so a load the deployment cannot sustain has time to build its queue.
    """
    if cfg.slo_ttft_s is None and cfg.slo_tpot_s is None and cfg.slo_e2e_s is None:
        raise ConfigError("a QPS search needs a TTFT, TPOT or end-to-end latency SLO")
    if cfg.workload.arrival == "trace":
        raise ConfigError("a QPS search sets the arrival rate; use --arrival poisson or gamma, not trace")

    def at(qps: float) -> ServingConfig:
        n = cfg.workload.num_requests
        if duration_s is not None:
            n = max(n, math.ceil(qps * duration_s))
        return cfg.model_copy(update={"workload": cfg.workload.model_copy(update={"qps": qps, "num_requests": n})})

    evaluated: list[tuple[float, bool]] = []
    results: dict[float, ServingResult] = {}  # the simulation at the highest load met so far

    def ok(qps: float) -> bool:
        load = at(qps)
        result = simulate_serving(load)
        met = _met(load, result)
        evaluated.append((qps, met))
        if met and all(qps > q for q in results):
            results.clear()
            results[qps] = result
        return met

    lo, hi = 0.0, start_qps
    while ok(hi):
        lo, hi = hi, hi * 2.0
        if hi > max_qps:
            return QPSSearch(lo, at(lo), evaluated, results.get(lo))
    if lo == 0.0:
        while hi > start_qps / 64 and not ok(hi / 2.0):
            hi /= 2.0
        lo = hi / 2.0
        if not evaluated[-1][1]:
            raise ConfigError(f"no load down to {hi / 2:.3g} requests/s meets the SLO "
                              f"(ttft p99 <= {cfg.slo_ttft_s}, tpot p99 <= {cfg.slo_tpot_s}"
                              + (f", e2e p99 <= {cfg.slo_e2e_s}" if cfg.slo_e2e_s is not None else "")
                              + " s) on this deployment")
    while hi - lo > rel_tol * hi:
        mid = 0.5 * (lo + hi)
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return QPSSearch(lo, at(lo), evaluated, results.get(lo))
