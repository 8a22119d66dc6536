"""Design-space search of training plans: enumerate, price in arrays, prune, rank, re-rank exactly.

1. :func:`~perfcast.sweep.space.enumerate_plans` builds the space (the
   parallel degrees, expert tensor parallelism, micro-batch, recompute, ZeRO
   and precision recipe) and removes the plans ``check_plan`` refuses and the
   recipes the GPU cannot run, counting each constraint's removals.
2. :func:`~perfcast.sweep.evaluate.evaluate_plans` predicts every remaining
   plan at once (locally, or in chunks on Ray with ``backend="ray"``); plans
   that need more than ``max_memory_frac`` of the GPU's memory are dropped.
3. The best plans under the objective are re-predicted with the exact
   :func:`~perfcast.system.training.simulate_training` and re-ranked by it;
   both figures are reported, with how far apart they are (``agreement``).
4. The Pareto front of throughput (TFLOP/s per GPU, higher is better) against
   memory per GPU (lower is better) is taken over every feasible plan.
5. Where a published run matches the search (``data/presets/published_plans.yaml``), its
   plan is predicted the same way and the best plan is compared with it.

Objectives: ``tflops`` (model TFLOP/s per GPU, higher is better), ``step-time``
(seconds per step, lower) and ``cost`` (GPU-hours per token, lower; in US
dollars when a price per GPU-hour is given). With one GPU count and a fixed
global batch the three rank alike; they differ when several GPU counts are
searched.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from perfcast.errors import ConfigError
from perfcast.sweep.evaluate import PlanScores, Pricer, evaluate_plans
from perfcast.sweep.published import PublishedPlan, find_published, load_published
from perfcast.sweep.space import (
    CONSTRAINTS,
    ETP,
    PRECISIONS,
    RECOMPUTE,
    PlanArrays,
    SearchSpace,
    enumerate_plans,
    recipe_refusal,
)
from perfcast.sweep.summary import ExactFigures, PlanRowSummary, ReferenceSummary, TrainingSearchSummary
from perfcast.system.plan import check_plan
from perfcast.system.training import TrainingResult, simulate_training

__all__ = ["OBJECTIVES", "PlanRow", "Reference", "SearchResult", "pareto_front", "search_training"]

Objective = Literal["tflops", "step-time", "cost"]
OBJECTIVES: tuple[str, ...] = ("tflops", "step-time", "cost")
_GIB = 2.0**30


@dataclass(frozen=True)
class PlanRow:
    """One plan with its vectorized prediction and, when re-predicted, the exact one."""

    plan: dict[str, int]  # PlanArrays.row keys
    step_time_s: float
    tflops_per_gpu: float
    memory_per_gpu_bytes: float
    tokens_per_step: int
    price_per_gpu_hour_usd: float | None
    exact: TrainingResult | None = None
    axes: tuple[str, ...] = ()  # the searched axes reported beside the degrees: "etp" (MoE), "precision" (several)

    @property
    def gpu_hours_per_step(self) -> float:
        """GPU-hours one step takes (vectorized step time)."""
        return self.plan["gpus"] * self.step_time_s / 3600.0

    def json_view(self) -> PlanRowSummary:
        """The row as reported: memory in GiB, the exact figures under ``exact_*``."""
        p, price, e = self.plan, self.price_per_gpu_hour_usd, self.exact
        exact = None if e is None else ExactFigures(
            exact_tflops_per_gpu=e.tflops_per_gpu, exact_step_time_s=e.step_time_s,
            exact_memory_per_gpu_gib=e.memory.total_bytes / _GIB, exact_mfu=e.mfu, exact_bubble_frac=e.bubble_frac,
            exact_fits_in_memory=e.fits,
            exact_cost_usd_per_step=None if price is None else p["gpus"] * e.step_time_s / 3600.0 * price)
        return PlanRowSummary(
            gpus=p["gpus"], tp=p["tp"], pp=p["pp"], dp=p["dp"], cp=p["cp"], ep=p["ep"], vp=p["vp"],
            micro_batch=p["mb"], recompute=RECOMPUTE[p["rc"]], zero=p["zero"],
            etp=ETP[p["etp"]] if "etp" in self.axes else None,
            precision=PRECISIONS[p["prec"]] if "precision" in self.axes else None, tflops_per_gpu=self.tflops_per_gpu,
            step_time_s=self.step_time_s, memory_per_gpu_gib=self.memory_per_gpu_bytes / _GIB,
            gpu_hours_per_step=self.gpu_hours_per_step,
            gpu_hours_per_million_tokens=self.gpu_hours_per_step * 1e6 / self.tokens_per_step,
            cost_usd_per_step=None if price is None else self.gpu_hours_per_step * price, exact=exact)


@dataclass(frozen=True)
class Reference:
    """A published run's plan predicted like the searched ones, beside the best plan found."""

    published: PublishedPlan
    source: str
    row: PlanRow
    vp_note: str
    fits: bool
    best_vs_reference_frac: float
    rank: int | None  # 1-based rank of the published degrees among the feasible searched plans (None: not feasible)

    def json_view(self) -> ReferenceSummary:
        """The comparison as reported (the row's keys inline)."""
        return ReferenceSummary(label=self.published.label, source=self.source,
                                published_tflops_per_gpu=self.published.tflops_per_gpu, row=self.row.json_view(),
                                fits_in_memory=self.fits, vp_note=self.vp_note,
                                best_vs_reference_frac=self.best_vs_reference_frac, rank_among_searched=self.rank)


@dataclass
class SearchResult:
    """What a search found (figures per GPU; ``best`` ranked by the exact predictor)."""

    space: SearchSpace
    objective: str
    backend: str
    plans_enumerated: int
    plans_evaluated: int
    plans_feasible: int
    rejected: dict[str, int]
    best: list[PlanRow]
    pareto: list[PlanRow]
    references: list[Reference] = field(default_factory=list)
    agreement: dict[str, float] = field(default_factory=dict)
    search_time_s: float = 0.0
    evaluate_time_s: float = 0.0

    def json_view(self) -> TrainingSearchSummary:
        """What the search reports (the keys of ``perfcast search --json``)."""
        refs = [r.json_view() for r in self.references]
        return TrainingSearchSummary(
            model=self.space.model, cluster=self.space.cluster, gpus=tuple(self.space.gpus),
            seq_len=self.space.seq_len, global_batch=self.space.global_batch, objective=self.objective,
            backend=self.backend, plans_enumerated=self.plans_enumerated, plans_evaluated=self.plans_evaluated,
            plans_feasible=self.plans_feasible, rejected=dict(self.rejected),
            best=tuple(r.json_view() for r in self.best), pareto=tuple(r.json_view() for r in self.pareto),
            agreement=dict(self.agreement), search_time_s=self.search_time_s, evaluate_time_s=self.evaluate_time_s,
            reference=refs[0] if refs else None, other_references=tuple(refs[1:]) if len(refs) > 1 else None)


def _tokens(space: SearchSpace, pricer: Pricer) -> int:
    return space.global_batch * (1 if pricer.cfg.kind == "cnn" else space.seq_len)


def _keys(objective: str, step_s: np.ndarray, tflops: np.ndarray, gpus: np.ndarray) -> np.ndarray:
    """Lower is better."""
    if objective == "tflops":
        return -tflops
    if objective == "step-time":
        return step_s
    return gpus * step_s  # GPU-seconds per step: cost, since every plan runs the same tokens per step


def pareto_front(tflops: np.ndarray, memory_bytes: np.ndarray) -> np.ndarray:
    """Indices of the plans no other plan beats on both throughput (higher) and memory (lower),
    by increasing memory."""
    order = np.lexsort((-tflops, memory_bytes))
    front = []
    best = -np.inf
    for i in order:
        if tflops[i] > best:
            front.append(int(i))
            best = float(tflops[i])
    return np.array(front, dtype=np.int64)


def _no_feasible(total: int, rejected: dict[str, int], detail: str = "") -> ConfigError:
    last = [name for name, count in rejected.items() if count][-1]
    counts = ", ".join(f"{name} {count:,}" for name, count in rejected.items() if count)
    return ConfigError(f"no feasible plan among {total:,}: the {last} constraint ({CONSTRAINTS[last]}) removed the "
                       f"last plans{detail}; removed per constraint: {counts}; widen the axes, change the GPU "
                       f"count or global batch, or allow more memory")


def _evaluate(pricer: Pricer, plans: PlanArrays, backend: str) -> PlanScores:
    if backend == "ray":
        from perfcast.sweep.ray_backend import evaluate_with_ray

        return evaluate_with_ray(pricer.space, plans)
    if backend != "local":
        raise ConfigError(f"--backend {backend!r} is not a backend; use local or ray")
    return evaluate_plans(pricer, plans)


def search_training(space: SearchSpace, *, objective: str = "tflops", top: int = 10, backend: str = "local",
                    price_per_gpu_hour_usd: float | None = None, exact_candidates: int | None = None,
                    pricer: Pricer | None = None) -> SearchResult:
    """Search ``space`` for the best training plans (see the module docstring).

    ``exact_candidates`` (default ``max(3 * top, 30)``) plans, best first by the
    vectorized prediction, are re-predicted exactly; the best ``top`` of them by
    the exact prediction are returned.
    """
    if objective not in OBJECTIVES:
        raise ConfigError(f"--objective {objective!r} is not an objective; use one of {', '.join(OBJECTIVES)}")
    if top < 1:
        raise ConfigError(f"--top must be at least 1 (got {top})")
    t0 = time.perf_counter()
    pricer = pricer or Pricer(space)
    for g in space.gpus:
        pricer.cluster_for(g)  # a GPU count must be whole nodes
    plans, rejected, total = enumerate_plans(space, pricer.cfg, pricer.cluster)
    if len(plans) == 0:
        refused = [r for r in (recipe_refusal(name, pricer.hw) for name in space.precisions) if r]
        raise _no_feasible(total, rejected, detail=f" ({'; '.join(refused)})" if rejected.get("precision") else "")
    t1 = time.perf_counter()
    scores = _evaluate(pricer, plans, backend)
    evaluate_s = time.perf_counter() - t1
    limit = space.max_memory_frac * scores.capacity_bytes
    fits = scores.memory_bytes <= limit
    rejected["memory"] = int((~fits).sum())
    if not fits.any():
        least = int(np.argmin(scores.memory_bytes))
        raise _no_feasible(total, rejected, detail=(
            f" (the least memory any plan needs is {scores.memory_bytes[least] / _GIB:.1f} GiB per GPU, "
            f"{_plan_text(plans.row(least), _reported_axes(space, pricer))}, vs {limit / _GIB:.1f} GiB allowed)"))
    feasible = np.flatnonzero(fits)
    tokens = _tokens(space, pricer)
    key = _keys(objective, scores.step_time_s, scores.tflops_per_gpu, plans.gpus.astype(float))
    axes = _reported_axes(space, pricer)

    def row(i: int, exact: bool) -> PlanRow:
        r = plans.row(i)
        res = (simulate_training(pricer.cfg, pricer.cluster, plans.plan(i, space), calibration=pricer.calibration)
               if exact else None)
        return PlanRow(r, float(scores.step_time_s[i]), float(scores.tflops_per_gpu[i]),
                       float(scores.memory_bytes[i]), tokens, price_per_gpu_hour_usd, res, axes)

    order = feasible[np.lexsort((feasible, scores.memory_bytes[feasible], key[feasible]))]
    n_exact = exact_candidates if exact_candidates is not None else max(3 * top, 30)
    candidates = [row(int(i), True) for i in order[:n_exact]]
    exact_key = {id(c): float(_keys(objective, np.array([c.exact.step_time_s]), np.array([c.exact.tflops_per_gpu]),
                                    np.array([float(c.plan["gpus"])]))[0]) for c in candidates if c.exact}
    ranked = sorted((c for c in candidates if c.exact is not None and c.exact.memory.total_bytes <= limit),
                    key=lambda c: (exact_key[id(c)], c.memory_per_gpu_bytes))
    best = ranked[:top]
    front = [row(int(feasible[i]), True)
             for i in pareto_front(scores.tflops_per_gpu[feasible], scores.memory_bytes[feasible])]
    result = SearchResult(space=space, objective=objective, backend=backend, plans_enumerated=total,
                          plans_evaluated=len(plans), plans_feasible=int(fits.sum()), rejected=rejected, best=best,
                          pareto=front, evaluate_time_s=evaluate_s)
    result.references = _references(space, pricer, plans, scores, key, fits, best, tokens, price_per_gpu_hour_usd,
                                    axes)
    checked = candidates + front + [r.row for r in result.references]
    result.agreement = _agreement(checked, candidates, ranked)
    result.search_time_s = time.perf_counter() - t0
    return result


def _reported_axes(space: SearchSpace, pricer: Pricer) -> tuple[str, ...]:
    """The axes beyond the degrees a row reports: ``etp`` for an MoE model, ``precision`` when several recipes
    are searched (one recipe is the search's, reported once)."""
    return (("etp",) if pricer.cfg.moe is not None else ()) + (("precision",) if len(space.precisions) > 1 else ())


def _plan_text(r: dict[str, int], axes: tuple[str, ...] = ()) -> str:
    extra = (f" etp {ETP[r['etp']]}" if "etp" in axes else "") + (
        f" {PRECISIONS[r['prec']]}" if "precision" in axes else "")
    return (f"tp {r['tp']} pp {r['pp']} dp {r['dp']} cp {r['cp']} ep {r['ep']}{extra} vp {r['vp']} micro-batch "
            f"{r['mb']} recompute {RECOMPUTE[r['rc']]} zero {r['zero']}")


def _agreement(checked: list[PlanRow], candidates: list[PlanRow], ranked: list[PlanRow]) -> dict[str, float]:
    """How far the vectorized figures are from the exact ones on every plan predicted both ways, and where
    the exact winner stood in the vectorized ranking (1: both predictors pick the same plan)."""
    step = np.array([abs(c.step_time_s / c.exact.step_time_s - 1.0) for c in checked if c.exact])
    mem = np.array([abs(c.memory_per_gpu_bytes / c.exact.memory.total_bytes - 1.0) for c in checked if c.exact])
    out = {"plans_compared": float(step.size), "step_time_median_abs_err_frac": float(np.median(step)),
           "step_time_max_abs_err_frac": float(step.max()), "memory_max_abs_err_frac": float(mem.max())}
    if ranked:
        out["exact_best_vectorized_rank"] = float(1 + next(k for k, c in enumerate(candidates) if c is ranked[0]))
    return out


def _references(space: SearchSpace, pricer: Pricer, plans: PlanArrays, scores: PlanScores, key: np.ndarray,
                fits: np.ndarray, best: list[PlanRow], tokens: int, price: float | None,
                axes: tuple[str, ...]) -> list[Reference]:
    found = find_published(space, pricer.cfg, pricer.hw.id)
    if not found or not best or best[0].exact is None:
        return []
    source, _ = load_published()
    out = []
    for pub in found:
        if recipe_refusal(pub.precision, pricer.hw) is not None:  # the searched plans in it were pruned too
            continue
        rows = []
        for vp in sorted(set(space.vp or range(1, 9))):
            r = {"gpus": pub.gpus, "tp": pub.tp, "pp": pub.pp, "dp": pub.dp, "cp": pub.cp, "ep": pub.ep, "vp": vp,
                 "mb": pub.micro_batch, "rc": RECOMPUTE.index(pub.recompute), "zero": pub.zero,
                 "etp": ETP.index(pub.etp), "prec": PRECISIONS.index(pub.precision)}
            one = PlanArrays.from_rows([r])
            plan = one.plan(0, space)
            try:
                check_plan(plan, pricer.cfg, pricer.cluster_for(pub.gpus), num_gpus=pub.gpus)
            except ConfigError:
                continue
            sc = evaluate_plans(pricer, one)
            exact = simulate_training(pricer.cfg, pricer.cluster, plan, calibration=pricer.calibration)
            rows.append(PlanRow(r, float(sc.step_time_s[0]), float(sc.tflops_per_gpu[0]),
                                float(sc.memory_bytes[0]), tokens, price, exact, axes))
        if not rows:
            continue
        ref = max(rows, key=lambda x: x.exact.tflops_per_gpu if x.exact else 0.0)
        assert ref.exact is not None and best[0].exact is not None
        note = (f"the source does not give the number of virtual stages; vp={ref.plan['vp']} predicts fastest "
                f"of vp in {{{', '.join(str(x.plan['vp']) for x in rows)}}}")
        same = np.flatnonzero(np.all(np.stack([getattr(plans, f) == ref.plan[f] for f in PlanArrays.FIELDS]), axis=0))
        rank = None
        if same.size and fits[same[0]]:
            rank = int((key[fits] < key[same[0]]).sum()) + 1
        out.append(Reference(pub, source, ref, note, ref.exact.memory.total_bytes <= space.max_memory_frac *
                             ref.exact.memory.capacity_bytes,
                             best[0].exact.tflops_per_gpu / ref.exact.tflops_per_gpu - 1.0, rank))
    return out
