"""Compact series a serving scenario's rows carry for the HTML report (not for the printed tables or the CSV).

- :func:`latency_quantiles`: each run's TTFT, TPOT and E2E of the completed requests at the quantiles
  0, 0.01, ..., 1 (101 values each, seconds): enough to draw a latency CDF without the thousands of raw
  per-request values.
- :func:`load_curve`: a small QPS sweep of one run's deployment (the scenario's own config, only the arrival
  rate changes): the run is first simulated as a burst (every request at time 0) whose request throughput
  estimates the deployment's capacity, then at :data:`LOAD_FRACS` of that rate with the config's arrival
  process. Each point has the offered QPS, the achieved throughput and the TTFT p50/p99: the
  throughput-vs-TTFT curve.
"""

from __future__ import annotations

import math

import numpy as np

from perfcast.errors import PerfcastError
from perfcast.results.serialize import to_json
from perfcast.serving.config import ServingConfig
from perfcast.serving.experiments.run import Simulation, run_experiment
from perfcast.serving.outcomes import RequestStatus
from perfcast.serving.result import ServingResult

__all__ = ["LOAD_FRACS", "MIN_REQUESTS_FOR_CURVE", "NUM_QUANTILES", "latency_quantiles", "load_curve",
           "sweepable"]

NUM_QUANTILES = 101  # quantiles 0, 0.01, ..., 1
LOAD_FRACS = (0.25, 0.5, 0.75, 1.0, 1.25, 1.5)  # offered loads as fractions of the burst throughput
MIN_REQUESTS_FOR_CURVE = 50  # below this a TTFT p99 is one request, not a tail


def _quantiles(values: np.ndarray) -> list[float]:
    if values.size == 0:
        return []
    return [float(v) for v in np.quantile(values, np.linspace(0.0, 1.0, NUM_QUANTILES))]


def latency_quantiles(res: ServingResult) -> dict[str, list[float]]:
    """``{"q": [0, 0.01, ..., 1], "ttft_s": [...], "tpot_s": [...], "e2e_s": [...]}`` over the completed requests
    (a series is empty when no request has that latency; TPOT needs two or more output tokens)."""
    done = np.array([s == RequestStatus.COMPLETED for s in res.status], dtype=bool) & np.isfinite(res.finish_s)
    arrival, first, finish = res.arrival_s[done], res.first_token_s[done], res.finish_s[done]
    output = res.output_tokens[done]
    many = output >= 2
    tpot = (finish[many] - first[many]) / (output[many] - 1)
    return {"q": [round(float(q), 2) for q in np.linspace(0.0, 1.0, NUM_QUANTILES)],
            "ttft_s": _quantiles(first - arrival), "tpot_s": _quantiles(tpot), "e2e_s": _quantiles(finish - arrival)}


def sweepable(cfg: ServingConfig) -> bool:
    """Whether a QPS sweep of ``cfg`` means something: the arrival rate can be set (not a recorded trace's
    arrivals) and there are enough requests for a tail."""
    return cfg.workload.arrival != "trace" and cfg.workload.num_requests >= MIN_REQUESTS_FOR_CURVE


def _at(cfg: ServingConfig, qps: float | None) -> ServingConfig:
    return cfg.model_copy(update={"workload": cfg.workload.model_copy(update={"qps": qps})})


def load_curve(cfg: ServingConfig) -> list[dict[str, float | None]]:
    """The throughput-vs-TTFT points of ``cfg`` at :data:`LOAD_FRACS` of its burst throughput (see the module
    docstring); empty when the config cannot be swept or the burst run fails."""
    if not sweepable(cfg):
        return []
    try:
        capacity_rps = run_experiment(Simulation(_at(cfg, None))).metrics.throughput_requests_per_s
    except PerfcastError:
        return []
    if not (math.isfinite(capacity_rps) and capacity_rps > 0):
        return []
    points: list[dict[str, float | None]] = []
    for frac in LOAD_FRACS:
        qps = frac * capacity_rps
        try:
            m = run_experiment(Simulation(_at(cfg, qps))).metrics
        except PerfcastError:
            continue
        ttft = to_json(m.ttft_s)
        points.append({"load_frac": frac, "qps": qps, "throughput_tokens_per_s": m.throughput_tokens_per_s,
                       "throughput_requests_per_s": m.throughput_requests_per_s,
                       "ttft_p50_s": ttft["p50"], "ttft_p99_s": ttft["p99"],
                       "completed_frac": m.requests_completed / m.requests_total if m.requests_total else 0.0})
    return points
