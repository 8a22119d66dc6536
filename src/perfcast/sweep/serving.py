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

Cost. Nearly all the time is spent simulating loads, and the loads near
saturation are the longest to simulate (the steady-state rule's window grows
with the queue's relaxation time). So:

- the deployments that fit (:func:`~perfcast.serving.deployment.serving_memory`,
  no simulation) are searched in chains, one per ``max_num_seqs`` (deployments
  listed tp-major, so the next one in a chain differs in its scheduler or
  tensor-parallel degree only);
- each deployment's QPS search is guided (step 6 of
  :mod:`perfcast.serving.experiments.search`) by the answer of the deployment
  before it in its chain, as a fraction of its saturated throughput, the
  chain's first by ``FIRST_GUESS_FRAC``: the same path of loads as an unguided
  search, with its verdicts taken from the loads simulated where monotonicity
  decides them, so a close guess simulates about two loads (the ends of the
  final interval) instead of six or seven from half the saturated throughput;
- with ``workers`` > 1 the chains run in forked processes that send their rows
  back as JSON. A chain is searched alone and in its own order whatever the
  worker count, so the result (every row, the simulations counted) is the same
  for any count; only the wall time changes.

A guess changes which loads are simulated, never the steady-state rule by which
each one is judged. Where the verdicts of neighbouring loads are not monotone
(loads within their error bars of the SLO are ``unsettled``, a miss, and a
slightly higher load can meet) a guided search can stop on another load of that
band than the unguided one.
"""

from __future__ import annotations

import json
import multiprocessing
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from perfcast.catalog.models import load_model
from perfcast.errors import ConfigError, PerfcastError
from perfcast.results.serialize import to_json
from perfcast.serving.config import ServingConfig
from perfcast.serving.deployment import serving_memory
from perfcast.serving.experiments.search import (
    LoadCheck,
    LoadVerdict,
    QPSSearch,
    TailEstimate,
    find_max_qps,
    steady_state_rule,
)
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


def _load_check(d: dict[str, Any]) -> LoadCheck:
    """A :class:`LoadCheck` from its plain values (``dataclasses.asdict``)."""
    return LoadCheck(**{**d, "verdict": LoadVerdict(d["verdict"]),
                        "tails": tuple(TailEstimate(**t) for t in d["tails"])})


def _answer_frac(found: QPSSearch) -> float | None:
    """A searched deployment's answer as a fraction of its saturated throughput: the middle of its final
    interval (between the highest load that meets and the next load of the path up), the guess for another."""
    if found.saturation is None or not found.max_qps:
        return None
    higher = [c.qps for c in found.evaluated if not c.met and c.qps > found.max_qps]
    top = min(higher) if higher else found.saturation.requests_per_s
    return 0.5 * (found.max_qps + top) / found.saturation.requests_per_s


def _search_one(cfg: ServingConfig, gpus: int, guess_frac: float | None) -> tuple[dict[str, Any], float | None]:
    """Search ``cfg``'s highest load within its SLO (guided by ``guess_frac``): what its row records (plain JSON
    values, the same whether searched here or in a worker process) and its answer as a guess for the next."""
    try:
        found = find_max_qps(cfg, guess_frac=guess_frac)
    except PerfcastError as exc:
        return {"reason": str(exc)}, None
    row: dict[str, Any] = {"simulations": 1 + len(found.evaluated),  # the saturation run and each load
                           "max_qps": found.max_qps, "reason": found.verdict,
                           "check": None if found.check is None else asdict(found.check)}
    if found.result is not None and found.check is not None:
        tails = {t.metric: t.p99_s for t in found.check.tails}
        m = found.result.metrics
        row["metrics"] = {"ttft_p99_s": tails.get("ttft", m.ttft_s.p99),
                          "tpot_p99_s": tails.get("tpot", m.tpot_s.p99),
                          "throughput_tokens_per_s_per_gpu": m.throughput_tokens_per_s / gpus,
                          "saturated_requests_per_s": found.saturation.requests_per_s if found.saturation else None,
                          "qps_search_requests": found.check.num_requests,
                          "qps_search_simulated_s": found.check.simulated_s}
        workload = dict(to_json(found.result.workload_summary()))
        for key in ("qps", "num_requests", "arrival_span_s", "offered_requests_per_s"):
            workload.pop(key, None)  # each load's own: in the candidates' rows
        row["workload"] = workload
    return row, _answer_frac(found)


FIRST_GUESS_FRAC = 0.9
"""The guessed answer (a fraction of the saturated throughput) the first deployment of a chain is searched from:
the tail latencies of a queue rise steeply over the last tenth before saturation, where SLO'd answers gather
(a guess only chooses the loads simulated, see :func:`perfcast.serving.experiments.search.find_max_qps`)."""


def _search_chain(configs: list[ServingConfig], gpus: list[int]) -> list[dict[str, Any]]:
    """The rows of one chain of deployments, searched in order, each guided by the answer before it."""
    rows: list[dict[str, Any]] = []
    guess: float | None = FIRST_GUESS_FRAC
    for cfg, n in zip(configs, gpus, strict=True):
        row, answer = _search_one(cfg, n, guess)
        rows.append(row)
        guess = answer if answer is not None else guess
    return rows


def _worker(conn: Connection, chains: list[tuple[list[ServingConfig], list[int]]]) -> None:
    """A forked worker: search its chains and send their rows back as one JSON text (never pickled)."""
    try:
        conn.send_bytes(json.dumps({"rows": [_search_chain(*chain) for chain in chains]}).encode())
    except BaseException as exc:  # noqa: BLE001 - reported by the parent, which raises it
        conn.send_bytes(json.dumps({"error": "".join(traceback.format_exception(exc))}).encode())
    finally:
        conn.close()


def _search_chains(chains: list[tuple[list[ServingConfig], list[int]]], workers: int,
                   done: Callable[[int], None]) -> list[list[dict[str, Any]]]:
    """Every chain's rows, in order: in this process, or over ``workers`` forked processes (chain ``k`` on worker
    ``k % workers``). The rows are the same either way: each chain is searched alone, in its own order."""
    if workers <= 1 or len(chains) <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        out = []
        for chain in chains:
            out.append(_search_chain(*chain))
            done(len(chain[0]))
        return out
    ctx = multiprocessing.get_context("fork")
    jobs = []
    for w in range(min(workers, len(chains))):
        mine = list(range(w, len(chains), workers))
        receive, send = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_worker, args=(send, [chains[k] for k in mine]), daemon=True)
        proc.start()
        send.close()
        jobs.append((mine, receive, proc))
    rows: dict[int, list[dict[str, Any]]] = {}
    for mine, receive, proc in jobs:
        try:
            reply = json.loads(receive.recv_bytes())
        except EOFError:
            reply = {"error": "the worker process ended without a reply"}
        proc.join()
        if "error" in reply:
            raise RuntimeError(f"a serving-search worker failed: {reply['error']}")
        for k, chain_rows in zip(mine, reply["rows"], strict=True):
            rows[k] = chain_rows
            done(len(chain_rows))
    return [rows[k] for k in range(len(chains))]


def search_serving(base: ServingConfig, gpus: int, *, tps: tuple[int, ...] | None = None,
                   schedulers: tuple[str, ...] = ("vllm", "sarathi"), chunk_sizes: tuple[int, ...] = (512, 2048),
                   max_num_seqs: tuple[int, ...] = (64, 256), requests_per_replica: int = 100,
                   progress: Callable[[int, int], None] | None = None, workers: int = 1) -> ServingSearch:
    """Search the deployments of ``gpus`` GPUs for ``base``'s model, hardware, load shape and SLO.

    ``base`` carries the model, hardware, workload (trace or lengths; its QPS is
    searched) and the SLO; ``requests_per_replica`` is the fewest requests each
    load simulates per replica (the steady-state rule simulates more where the
    p99s need them); ``progress(done, total)`` is called as deployments are done;
    ``workers`` > 1 searches the chains of deployments in that many forked
    processes (the result is the same whatever the count).
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
    configs: list[ServingConfig] = []
    for tp in choices:
        replicas = gpus // tp
        for sched in schedulers:
            for chunk in (chunk_sizes if sched == "sarathi" else (None,)):
                for seqs in max_num_seqs:
                    update: dict[str, object] = {
                        "tensor_parallel_size": tp, "num_replicas": replicas, "scheduler": sched,
                        "max_num_seqs": seqs, "router": "least_outstanding" if replicas > 1 else base.router,
                        "workload": base.workload.model_copy(update={
                            "num_requests": requests_per_replica * replicas})}
                    if chunk is not None:
                        update["chunk_size"] = chunk
                    candidates.append(ServingCandidate(tp, replicas, sched, chunk, seqs))
                    configs.append(base.model_copy(update=update))
    done = 0

    def finish(count: int = 1) -> None:
        nonlocal done
        done += count
        if progress is not None:
            progress(done, len(candidates))

    # which deployments fit (cheap); then the QPS searches, one chain per batch size (max_num_seqs), each deployment
    # guided by the answer of the one before it in its chain (module docstring)
    chains: dict[int, list[int]] = {}
    for i, (c, cfg) in enumerate(zip(candidates, configs, strict=True)):
        try:
            memory = serving_memory(cfg)
        except PerfcastError as exc:
            c.reason = str(exc)
            finish()
            continue
        if not memory.fits:
            c.reason = memory.verdict
            finish()
        else:
            chains.setdefault(c.max_num_seqs, []).append(i)
    order = list(chains.values())
    results = _search_chains([([configs[i] for i in chain], [candidates[i].gpus for i in chain]) for chain in order],
                             workers, finish)
    workload: dict[str, object] = {}
    rows = {i: row for chain, chain_rows in zip(order, results, strict=True) for i, row in zip(chain, chain_rows,
                                                                                                  strict=True)}
    for i in sorted(rows):
        c, row = candidates[i], rows[i]
        c.simulations, c.max_qps, c.reason = row.get("simulations", 0), row.get("max_qps"), row["reason"]
        c.metrics = row.get("metrics", {})
        c.check = _load_check(row["check"]) if row.get("check") else None
        if "workload" in row and not workload:  # the first deployment's requests, in the order listed
            workload = row["workload"]
    candidates.sort(key=lambda c: (-c.goodput_per_gpu, c.tp, c.scheduler, c.chunk_size or 0, c.max_num_seqs))
    return ServingSearch(base.model, base.hardware, gpus, candidates, sum(c.simulations for c in candidates),
                         time.perf_counter() - t0, workload)
