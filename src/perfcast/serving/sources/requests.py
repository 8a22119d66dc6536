"""A workload config's requests, as a run consumes them: arrival times, lengths, retrieval times, prefixes.

Lengths are as asked: the engine refuses a request beyond the deployment's context (as vLLM does) rather than
truncate it. Seeds: the lengths and arrivals come from the workload's ``seed`` (see
:mod:`~perfcast.serving.sources.arrivals`), the shared prefix each request picks from ``seed + 1`` and the
retrieval stage's lognormal times from ``seed + 3``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from perfcast.errors import ConfigError
from perfcast.serving.config import ServingConfig
from perfcast.serving.sources.arrivals import RequestStream, generate_requests
from perfcast.serving.sources.datasets import dataset_trace
from perfcast.serving.sources.traces import load_trace

__all__ = ["RunRequests", "request_stream", "run_requests"]


def request_stream(cfg: ServingConfig) -> RequestStream:
    """The arrival times and lengths ``cfg.workload`` asks for (no rate: every request at time 0)."""
    w = cfg.workload
    trace = load_trace(w.trace) if w.trace else None
    if w.trace and (w.output_tokens_mean is not None or w.output_tokens_max is not None):
        trace = dataset_trace(w.trace, output_mean_tokens=w.output_tokens_mean, output_max_tokens=w.output_tokens_max)
    lengths = (w.prompt_tokens, w.output_tokens)
    if trace is None and None in lengths:
        raise ConfigError("the workload needs request lengths: a trace (--trace) or both --prompt-tokens and "
                          "--output-tokens")
    if (w.prompt_tokens is None) != (w.output_tokens is None):
        raise ConfigError("give both --prompt-tokens and --output-tokens, or neither (lengths from the trace)")
    arrival = w.arrival
    qps = w.qps
    if arrival != "trace" and qps is None:
        arrival, qps = "fixed", 1e12  # no rate: every request arrives at once (an offline run)
    return generate_requests(num_requests=w.num_requests, seed=w.seed, arrival=arrival,
                             qps=None if arrival == "trace" else qps, burstiness_cv=w.burstiness_cv, trace=trace,
                             prompt_tokens=w.prompt_tokens, output_tokens=w.output_tokens,
                             range_ratio=w.length_range_ratio)


@dataclass(frozen=True)
class RunRequests:
    """Per request: arrival (s), prompt tokens (image and retrieved tokens included), output tokens, retrieval
    stage time (s; 0 without RAG) and the shared prefix it picks (None without shared prefixes)."""

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    retrieval_s: np.ndarray
    prefix_ids: np.ndarray | None

    @property
    def num_requests(self) -> int:
        """Requests of the run."""
        return int(self.arrival_s.size)


def run_requests(cfg: ServingConfig, extra_prompt_tokens: int) -> RunRequests:
    """``cfg``'s requests, each prompt carrying ``extra_prompt_tokens`` image and retrieved tokens."""
    w = cfg.workload
    stream = request_stream(cfg)
    n = stream.num_requests
    retrieval = np.zeros(n)
    if w.retrieval_latency_s > 0:
        cv = w.retrieval_latency_cv
        sigma = math.sqrt(math.log1p(cv * cv))
        retrieval = w.retrieval_latency_s * np.exp(
            np.random.default_rng(w.seed + 3).normal(-0.5 * sigma * sigma, sigma, size=n)) if cv else np.full(
            n, w.retrieval_latency_s)
    prefix_ids = None
    if w.shared_prefix_tokens:
        prefix_ids = np.random.default_rng(w.seed + 1).integers(0, w.num_prefixes, size=n)
    return RunRequests(arrival_s=np.asarray(stream.arrival_s, dtype=float),
                       prompt_tokens=np.asarray(stream.prompt_tokens, dtype=np.int64) + extra_prompt_tokens,
                       output_tokens=np.asarray(stream.output_tokens, dtype=np.int64), retrieval_s=retrieval,
                       prefix_ids=prefix_ids)
