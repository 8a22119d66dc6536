"""What the searches report, as typed values: a training plan's row (:class:`PlanRowSummary`), the comparison with
a published run (:class:`ReferenceSummary`), a training search (:class:`TrainingSearchSummary`), a serving
deployment's row (:class:`CandidateSummary`) and a serving search (:class:`ServingSearchSummary`).
:func:`perfcast.results.serialize.to_json` writes them with their field names (units in them) as keys."""

from __future__ import annotations

from dataclasses import dataclass, field

from perfcast.results.serialize import json_field

__all__ = ["CandidateSummary", "ExactFigures", "PlanRowSummary", "ReferenceSummary", "ServingSearchSummary",
           "TrainingSearchSummary"]


@dataclass(frozen=True, slots=True)
class ExactFigures:
    """A plan re-predicted by the exact training predictor (per GPU; memory in GiB)."""

    exact_tflops_per_gpu: float
    exact_step_time_s: float
    exact_memory_per_gpu_gib: float
    exact_mfu: float
    exact_bubble_frac: float
    exact_fits_in_memory: bool
    exact_cost_usd_per_step: float | None = field(default=None, metadata=json_field(omit_none=True))


@dataclass(frozen=True, slots=True)
class PlanRowSummary:
    """One searched plan: its degrees (with ``etp`` for an MoE model and the ``precision`` recipe when a search
    tries several), the vectorized figures (memory in GiB), the cost when priced, and the exact figures when
    re-predicted (their keys ``exact_*`` in the row)."""

    gpus: int
    tp: int
    pp: int
    dp: int
    cp: int
    ep: int
    vp: int
    micro_batch: int
    recompute: str
    zero: int
    etp: str | int | None = field(metadata=json_field(omit_none=True))  # "tp" or 1; reported for MoE models
    precision: str | None = field(metadata=json_field(omit_none=True))  # reported when several are searched
    tflops_per_gpu: float
    step_time_s: float
    memory_per_gpu_gib: float
    gpu_hours_per_step: float
    gpu_hours_per_million_tokens: float
    cost_usd_per_step: float | None = field(metadata=json_field(omit_none=True))
    exact: ExactFigures | None = field(metadata=json_field(flatten=True))


@dataclass(frozen=True, slots=True)
class ReferenceSummary:
    """A published run's plan predicted like the searched ones (its row's keys inline), beside the best found."""

    label: str
    source: str
    published_tflops_per_gpu: float
    row: PlanRowSummary = field(metadata=json_field(flatten=True))
    fits_in_memory: bool
    vp_note: str
    best_vs_reference_frac: float
    rank_among_searched: int | None  # 1-based among the feasible searched plans; None: not feasible


@dataclass(frozen=True, slots=True)
class TrainingSearchSummary:
    """A training search (the keys of ``perfcast search --json``): the space, counts, the best plans and the
    Pareto front, the vectorized-vs-exact agreement, the times and the published references."""

    model: str
    cluster: str
    gpus: tuple[int, ...]
    seq_len: int
    global_batch: int
    objective: str
    backend: str
    plans_enumerated: int
    plans_evaluated: int
    plans_feasible: int
    rejected: dict[str, int]
    best: tuple[PlanRowSummary, ...]
    pareto: tuple[PlanRowSummary, ...]
    agreement: dict[str, float]
    search_time_s: float
    evaluate_time_s: float
    reference: ReferenceSummary | None = field(metadata=json_field(omit_none=True))
    other_references: tuple[ReferenceSummary, ...] | None = field(metadata=json_field(omit_none=True))


@dataclass(frozen=True, slots=True)
class CandidateSummary:
    """One serving deployment: its knobs, the highest load meeting the SLO, the simulations it took, why it is
    infeasible (when it is) and its figures at that load (their keys inline)."""

    tp: int
    replicas: int
    gpus: int
    scheduler: str
    chunk_size: int | None
    max_num_seqs: int
    max_qps: float | None
    goodput_requests_per_s_per_gpu: float
    simulations: int
    infeasible: str | None = field(metadata=json_field(omit_none=True))
    metrics: dict[str, object] = field(metadata=json_field(flatten=True))


@dataclass(frozen=True, slots=True)
class ServingSearchSummary:
    """A serving search: the budget, counts, the best deployments and the infeasible ones with their reasons,
    the time, the workload as simulated and the steady-state rule."""

    model: str
    hardware: str
    gpus: int
    objective: str
    configs_evaluated: int
    configs_feasible: int
    simulations: int
    best: tuple[CandidateSummary, ...]
    infeasible: tuple[CandidateSummary, ...]
    search_time_s: float
    workload: dict[str, object]
    steady_state_rule: dict[str, float]
