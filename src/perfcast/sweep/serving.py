"""Serving search: the deployment of a GPU budget that serves the most requests per second per GPU under an SLO.

For every tensor-parallel degree that divides the budget and the model's heads
(within one node), the budget is split into ``gpus / tp`` replicas behind a
least-outstanding router; for every scheduler (``vllm``, and ``sarathi`` with
each chunk size) and every ``max_num_seqs``, the highest Poisson load it
sustains within the p99 TTFT / TPOT SLO is searched under the steady-state rule
of :func:`perfcast.serving.experiments.search.find_max_qps` (tens of request lifetimes per
load after a warm-up, overload when the served throughput falls below the load,
p99s with error bars, below the saturated throughput). Deployments are ranked by
that load per GPU (goodput per GPU: at it the steady state meets the SLO). A
deployment that does not fit (weights, KV cache, one request of the workload),
or that misses the SLO even at the lowest load, is recorded with the reason and
kept out of the ranking.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from perfcast.catalog.models import load_model
from perfcast.errors import ConfigError, PerfcastError
from perfcast.results.serialize import to_json
from perfcast.serving.config import ServingConfig
from perfcast.serving.deployment import serving_memory
from perfcast.serving.experiments.run import MaxQpsSearch, run_experiment
from perfcast.serving.experiments.search import LoadCheck, steady_state_rule
from perfcast.sweep.summary import CandidateSummary, ServingSearchSummary
from perfcast.system.cluster import cluster_for_gpu, load_cluster
from perfcast.workload.sharding import check_tp

__all__ = ["ServingCandidate", "ServingSearch", "search_serving"]


@dataclass
class ServingCandidate:
    """One deployment: its knobs, the highest load meeting the SLO (or why there is none)."""

    tp: int
    replicas: int
    scheduler: str
    chunk_size: int | None
    max_num_seqs: int
    max_qps: float | None = None
    simulations: int = 0
    reason: str = ""
    metrics: dict[str, object] = field(default_factory=dict)
    check: LoadCheck | None = None  # the steady-state verdict at max_qps

    @property
    def gpus(self) -> int:
        """GPUs the deployment uses."""
        return self.tp * self.replicas

    @property
    def goodput_per_gpu(self) -> float:
        """Requests per second per GPU at the highest load meeting the SLO (0 when none does)."""
        return (self.max_qps or 0.0) / self.gpus

    def json_view(self) -> CandidateSummary:
        """The row as reported (its metrics' keys inline)."""
        return CandidateSummary(tp=self.tp, replicas=self.replicas, gpus=self.gpus, scheduler=self.scheduler,
                                chunk_size=self.chunk_size, max_num_seqs=self.max_num_seqs, max_qps=self.max_qps,
                                goodput_requests_per_s_per_gpu=self.goodput_per_gpu, simulations=self.simulations,
                                infeasible=self.reason or None, metrics=self.metrics)


@dataclass
class ServingSearch:
    """Every deployment tried, best first, and how many simulations the search ran."""

    model: str
    hardware: str
    gpus: int
    candidates: list[ServingCandidate]
    simulations: int
    search_time_s: float
    workload: dict[str, object] = field(default_factory=dict)  # the requests (lengths, arrivals), as simulated

    @property
    def feasible(self) -> list[ServingCandidate]:
        """Deployments with a load meeting the SLO, best first."""
        return [c for c in self.candidates if c.max_qps]

    def summary(self, top: int) -> ServingSearchSummary:
        """What the search reports: the best ``top`` deployments and the infeasible ones with their reasons."""
        return ServingSearchSummary(
            model=self.model, hardware=self.hardware, gpus=self.gpus, objective="goodput_per_gpu",
            configs_evaluated=len(self.candidates), configs_feasible=len(self.feasible),
            simulations=self.simulations, best=tuple(c.json_view() for c in self.feasible[:top]),
            infeasible=tuple(c.json_view() for c in self.candidates if not c.max_qps),
            search_time_s=self.search_time_s, workload=self.workload, steady_state_rule=steady_state_rule())


def _tp_choices(base: ServingConfig, gpus: int) -> list[int]:
    cfg = load_model(base.model)
    cluster = load_cluster(base.cluster) if base.cluster else cluster_for_gpu(base.hardware)
    out = []
    for tp in range(1, min(gpus, cluster.domain) + 1):
        if gpus % tp:
            continue
        try:
            check_tp(cfg, tp)
        except ConfigError:
            continue
        out.append(tp)
    return out


def search_serving(base: ServingConfig, gpus: int, *, tps: tuple[int, ...] | None = None,
                   schedulers: tuple[str, ...] = ("vllm", "sarathi"), chunk_sizes: tuple[int, ...] = (512, 2048),
                   max_num_seqs: tuple[int, ...] = (64, 256), requests_per_replica: int = 100,
                   progress: Callable[[int, int], None] | None = None) -> ServingSearch:
    """Search the deployments of ``gpus`` GPUs for ``base``'s model, hardware, load shape and SLO.

    ``base`` carries the model, hardware, workload (trace or lengths; its QPS is
    searched) and the SLO; ``requests_per_replica`` is the fewest requests each
    load simulates per replica (the steady-state rule simulates more where the
    p99s need them); ``progress(done, total)`` is called after each deployment.
    """
    if gpus < 1:
        raise ConfigError(f"--gpus must be a positive integer (got {gpus})")
    if base.slo_ttft_s is None and base.slo_tpot_s is None:
        raise ConfigError("a serving search needs an SLO: --slo-ttft-p99 and/or --slo-tpot-p99")
    t0 = time.perf_counter()
    choices = _tp_choices(base, gpus)
    if tps:
        bad = [t for t in tps if t not in choices]
        if bad:
            raise ConfigError(f"tp={bad[0]} does not divide the {gpus} GPUs and the model's heads within a node; "
                              f"use tp in {{{', '.join(map(str, choices))}}}")
        choices = sorted(set(tps))
    if not choices:
        raise ConfigError(f"no tensor-parallel degree divides both {gpus} GPUs and the heads of {base.model}")
    candidates: list[ServingCandidate] = []
    workload: dict[str, object] = {}
    total = sum(len(max_num_seqs) * sum(len(chunk_sizes) if sched == "sarathi" else 1 for sched in schedulers)
                for _ in choices)
    for tp in choices:
        replicas = gpus // tp
        for sched in schedulers:
            for chunk in (chunk_sizes if sched == "sarathi" else (None,)):
                for seqs in max_num_seqs:
                    c = ServingCandidate(tp, replicas, sched, chunk, seqs)
                    update: dict[str, object] = {
                        "tensor_parallel_size": tp, "num_replicas": replicas, "scheduler": sched,
                        "max_num_seqs": seqs, "router": "least_outstanding" if replicas > 1 else base.router,
                        "workload": base.workload.model_copy(update={
                            "num_requests": requests_per_replica * replicas})}
                    if chunk is not None:
                        update["chunk_size"] = chunk
                    cfg = base.model_copy(update=update)
                    try:
                        memory = serving_memory(cfg)
                        if not memory.fits:
                            c.reason = memory.verdict
                        else:
                            found = run_experiment(MaxQpsSearch(cfg))
                            c.simulations = 1 + len(found.evaluated)  # the saturation run and each load
                            c.max_qps, c.reason = found.max_qps, found.verdict
                            c.check = found.check
                            if found.result is not None and not workload:
                                workload = to_json(found.result.workload_summary())
                                for key in ("qps", "num_requests", "arrival_span_s", "offered_requests_per_s"):
                                    workload.pop(key, None)  # each load's own: in the candidates' rows
                            if found.result is not None and found.check is not None:
                                tails = {t.metric: t.p99_s for t in found.check.tails}
                                m = found.result.metrics
                                c.metrics = {"ttft_p99_s": tails.get("ttft", m.ttft_s.p99),
                                             "tpot_p99_s": tails.get("tpot", m.tpot_s.p99),
                                             "throughput_tokens_per_s_per_gpu": m.throughput_tokens_per_s / c.gpus,
                                             "saturated_requests_per_s": found.saturation.requests_per_s
                                             if found.saturation else None,
                                             "qps_search_requests": found.check.num_requests,
                                             "qps_search_simulated_s": found.check.simulated_s}
                    except PerfcastError as exc:
                        c.reason = str(exc)
                    candidates.append(c)
                    if progress is not None:
                        progress(len(candidates), total)
    candidates.sort(key=lambda c: (-c.goodput_per_gpu, c.tp, c.scheduler, c.chunk_size or 0, c.max_num_seqs))
    return ServingSearch(base.model, base.hardware, gpus, candidates, sum(c.simulations for c in candidates),
                         time.perf_counter() - t0, workload)
