"""Vectorized training-step prediction over arrays of plans.

The model is :func:`perfcast.system.training.simulate_training`'s, rearranged
so that nothing is re-derived per plan:

1. Each distinct micro-batch shape (GPU count, ``tp``, ``cp``, ``ep``,
   ``etp``, micro-batch, precision recipe) is priced once per part (embedding,
   layer kind, head) and recompute mode by the same lower layers
   (``micro_batch_costs``, once per shape whatever the GPU count, and the
   training module's per-layer time, collectives included).
2. Each distinct ``(pp, vp)`` pair gives a stage layout: how many of each part
   every pipeline rank holds (ranks with the same holdings form one class).
3. Collective and optimizer times that depend on a plan's sizes and group
   (ZeRO-3 gathers, gradient reductions, pipeline sends) are computed once per
   distinct (operation, bytes, group, stride) and gathered back into arrays.
4. Stage sums, the pipeline makespan, the data-parallel tail and the memory
   per GPU are numpy arithmetic over all plans at once (in chunks of
   :data:`CHUNK_PLANS`, to bound the memory), with the formulas the
   exact predictor calls on one plan (:mod:`perfcast.system.step`,
   :func:`perfcast.system.schedule.steady_state_s`): one step formula, two
   callers.

Two differences from the exact predictor, both measured by the search that
re-ranks its best plans with :func:`simulate_training`: the pipeline makespan is
always the steady-state closed form (the exact predictor simulates the schedule
event by event when it has fewer than ~4,000 passes; the two agree within a
few percent), and no breakdown or timeline is kept. Memory is the same
arithmetic as the exact predictor (:class:`MemoryBreakdown`), so the
out-of-memory verdicts agree.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from perfcast.catalog.hardware import Hardware
from perfcast.catalog.models import ModelConfig, load_model
from perfcast.coefficients.bundle import Calibration, resolve_calibration
from perfcast.errors import ConfigError
from perfcast.sweep.space import ETP, PRECISIONS, RECOMPUTE, PlanArrays, SearchSpace
from perfcast.system.cluster import Cluster, load_cluster
from perfcast.system.collectives import collective_times
from perfcast.system.layers import MicroBatchCosts, micro_batch_costs
from perfcast.system.memory import training_memory
from perfcast.system.plan import ParallelPlan
from perfcast.system.schedule import steady_state_s
from perfcast.system.step import (
    data_parallel_exposed_s,
    in_flight_microbatches,
    memory_parts_bytes,
    step_time_s,
    zero3_layer_s,
)
from perfcast.system.training import LayerComm, layer_time, optimizer_time_s, split_layers
from perfcast.workload.precision import get_recipe

__all__ = ["CHUNK_PLANS", "PlanScores", "Pricer", "evaluate_plans"]

CHUNK_PLANS = 131_072  # plans priced at once: (plans x rank classes x parts) float arrays stay ~10 MB each


@dataclass(frozen=True)
class PlanScores:
    """Predicted figures per plan (arrays aligned with the :class:`PlanArrays` evaluated)."""

    step_time_s: np.ndarray
    tflops_per_gpu: np.ndarray
    memory_bytes: np.ndarray
    capacity_bytes: float

    def take(self, index: np.ndarray) -> PlanScores:
        """The scores at ``index``."""
        return PlanScores(self.step_time_s[index], self.tflops_per_gpu[index], self.memory_bytes[index],
                          self.capacity_bytes)

    @classmethod
    def concat(cls, parts: list[PlanScores]) -> PlanScores:
        """Scores of consecutive chunks, in order."""
        return cls(np.concatenate([p.step_time_s for p in parts]), np.concatenate([p.tflops_per_gpu for p in parts]),
                   np.concatenate([p.memory_bytes for p in parts]), parts[0].capacity_bytes)


@dataclass(frozen=True)
class _Shape:
    """One micro-batch shape's per-part costs (``K`` parts in model order)."""

    fwd_s: np.ndarray  # (3 recompute modes, K): forward of one micro-batch, TP/CP/EP comm included
    bwd_s: np.ndarray  # (3, K): backward incl. recompute
    params: np.ndarray  # (K,) parameters per GPU of one instance
    trainable: np.ndarray  # (K,)
    expert: np.ndarray  # (K,) trainable parameters of routed experts (ZeRO shards them over the expert-DP group)
    activation_bytes: np.ndarray  # (K,) saved for backward per micro-batch
    input_bytes: np.ndarray  # (K,) checkpointed layer input (full recompute)
    model_flops_per_token: float
    hidden_bytes: float
    weights_id: int  # shapes with the same parameters and trainable parameters per part share it


@dataclass(frozen=True)
class _Layout:
    """Which parts each pipeline rank holds under ``pp x vp`` virtual stages.

    Row 0 is rank 0, row 1 rank ``pp - 1`` (the two ranks whose memory is the
    peak), further rows the other distinct holdings.
    """

    counts: np.ndarray  # (classes, K) instances of each part on the rank (over its vp chunks)
    layers: np.ndarray  # (classes,) transformer layers on the rank
    total: np.ndarray  # (K,) instances over all stages
    first_stage: np.ndarray  # (K,) bool: parts on virtual stage 0


class Pricer:
    """The model, cluster and coefficients a search prices plans with, and the memos of what it derived."""

    def __init__(self, space: SearchSpace, *, cfg: ModelConfig | None = None, cluster: Cluster | None = None,
                 calibration: Calibration | None = None) -> None:
        self.space = space
        self.cfg = cfg or load_model(space.model)
        self.cluster = cluster or load_cluster(space.cluster)
        self.hw: Hardware = self.cluster.hardware()
        self.calibration = resolve_calibration(calibration)
        self.coeffs = self.calibration.kernel
        self.compose = self.calibration.compose
        self.training = self.calibration.training
        self.grad_bytes = 4.0  # gradients reduced in fp32 (ParallelPlan's default)
        self._shapes: dict[tuple[int, ...], _Shape] = {}
        self._costs_memo: dict[tuple[int, ...], MicroBatchCosts] = {}
        self._weights_ids: dict[bytes, int] = {}
        self._layouts: dict[tuple[int, int], _Layout] = {}
        self._comms: dict[int, LayerComm] = {}
        self._coll: dict[tuple[str, int, int, int], dict[float, float]] = {}  # (op, group, stride, GPUs): by size
        self._opt: dict[float, float] = {}
        self._labels: list[str] | None = None
        self._kinds: list[tuple[int, int]] = []  # (part index, count) of each layer kind, in model order

    # -- the cluster at a GPU count ------------------------------------------------------------------------

    def cluster_for(self, gpus: int) -> Cluster:
        """The cluster sized for ``gpus`` as :func:`simulate_training` sizes it."""
        gpn = self.cluster.gpus_per_node
        if gpus > gpn and gpus % gpn:
            raise ConfigError(f"{gpus} GPUs do not fill whole {self.cluster.id} nodes of {gpn} GPUs; "
                              f"use a multiple of {gpn}")
        return self.cluster.with_nodes(max(1, -(-gpus // gpn)))

    def _comm(self, gpus: int) -> LayerComm:
        c = self._comms.get(gpus)
        if c is None:
            c = self._comms[gpus] = LayerComm(self.cluster_for(gpus), self.calibration.collectives)
        return c

    # -- per shape ------------------------------------------------------------------------------------------

    def _plan(self, tp: int, cp: int, ep: int, etp: int, mb: int, prec: int, recompute: str = "none") -> ParallelPlan:
        return self.space.plan(tp=tp, pp=1, dp=1, cp=cp, ep=ep, vp=1, micro_batch=mb, recompute=recompute, zero=0,
                               precision=PRECISIONS[prec], etp=ETP[etp])

    def _costs(self, tp: int, cp: int, ep: int, etp: int, mb: int, prec: int) -> MicroBatchCosts:
        key = (tp, cp, ep, etp, mb, prec)  # the GPU count does not enter: one pricing for every count searched
        hit = self._costs_memo.get(key)
        if hit is None:
            hit = self._costs_memo[key] = micro_batch_costs(self.cfg, self._plan(tp, cp, ep, etp, mb, prec), self.hw,
                                                            self.coeffs, self.compose)
        return hit

    def shape(self, gpus: int, tp: int, cp: int, ep: int, mb: int, etp: int = 0, prec: int = 0) -> _Shape:
        """Per-part costs of one micro-batch shape (memoized); ``etp`` and ``prec`` are codes (indices into
        :data:`~perfcast.sweep.space.ETP` and :data:`~perfcast.sweep.space.PRECISIONS`)."""
        key = (gpus, tp, cp, ep, etp, mb, prec)
        hit = self._shapes.get(key)
        if hit is not None:
            return hit
        costs = self._costs(tp, cp, ep, etp, mb, prec)
        labels = [p.label for p in costs.parts]
        if self._labels is None:
            self._labels = labels
            self._kinds = [(i, p.count) for i, p in enumerate(costs.parts) if p.label not in ("embed", "head")]
        elif labels != self._labels:  # pragma: no cover - a model's parts do not depend on the plan
            raise RuntimeError(f"parts changed with the plan: {labels} vs {self._labels}")
        comm = self._comm(gpus)
        fwd = np.zeros((len(RECOMPUTE), len(labels)))
        bwd = np.zeros_like(fwd)
        for r, mode in enumerate(RECOMPUTE):
            plan = self._plan(tp, cp, ep, etp, mb, prec, mode)
            for k, part in enumerate(costs.parts):
                lt = layer_time(part, plan, comm, self.training, grad_bytes=self.grad_bytes)
                fwd[r, k], bwd[r, k] = lt.fwd_s, lt.bwd_s
        parts = costs.parts
        params, trainable = np.array([p.params for p in parts]), np.array([p.trainable_params for p in parts])
        weights_id = self._weights_ids.setdefault(params.tobytes() + trainable.tobytes(), len(self._weights_ids))
        shape = _Shape(fwd, bwd, params, trainable, np.array([p.expert_params for p in parts]),
                       np.array([p.activation_bytes for p in parts]), np.array([p.input_bytes for p in parts]),
                       costs.model_flops_per_token, costs.hidden_bytes, weights_id)
        if any(p.quantized_elements for p in parts):  # pragma: no cover - the search trains full models
            raise RuntimeError("quantized base weights are outside the training search")
        self._shapes[key] = shape
        return shape

    # -- per layout -----------------------------------------------------------------------------------------

    def layout(self, pp: int, vp: int) -> _Layout:
        """The stage layout of ``pp`` ranks with ``vp`` chunks each (memoized); needs a priced shape first."""
        hit = self._layouts.get((pp, vp))
        if hit is not None:
            return hit
        assert self._labels is not None, "price a shape before asking for a layout"
        n_parts = len(self._labels)
        sequence = [k for k, count in self._kinds for _ in range(count)]
        n_virtual = pp * vp
        stages = np.zeros((n_virtual, n_parts))
        pos = 0
        for s, c in enumerate(split_layers(len(sequence), n_virtual)):
            for k in sequence[pos:pos + c]:
                stages[s, k] += 1
            pos += c
        if self._labels[0] == "embed":
            stages[0, 0] += 1
        if self._labels[-1] == "head":
            stages[-1, -1] += 1
        ranks = stages.reshape(vp, pp, n_parts).sum(axis=0)  # stage c*pp + r lives on rank r
        rows = [ranks[0], ranks[pp - 1]]
        for r in range(1, pp - 1):
            if not any(np.array_equal(ranks[r], x) for x in rows):
                rows.append(ranks[r])
        counts = np.array(rows)
        layer_cols = [k for k, _ in self._kinds]
        out = _Layout(counts, counts[:, layer_cols].sum(axis=1), stages.sum(axis=0), stages[0] > 0)
        self._layouts[(pp, vp)] = out
        return out

    # -- collectives and optimizer, once per distinct argument -------------------------------------------------

    def collective(self, op: str, size_bytes: np.ndarray, group: np.ndarray, stride: np.ndarray,
                   gpus: np.ndarray) -> np.ndarray:
        """Collective times for arrays of arguments (0 for groups of one or nothing to move): what
        :meth:`LayerComm.time <perfcast.system.training.LayerComm.time>` gives each, the sizes of one group
        placement priced at once (:func:`~perfcast.system.collectives.collective_times`)."""
        size_bytes = np.asarray(size_bytes, dtype=float)
        out = np.zeros(size_bytes.shape)
        live = np.flatnonzero(((group > 1) & (size_bytes > 0)).ravel())
        if not live.size:
            return out
        flat = out.ravel()
        sizes, grp, strd, g = (np.ravel(a)[live] for a in (size_bytes, group, stride, gpus))
        first, which = _distinct(grp, strd, g)
        order = np.argsort(which, kind="stable")
        bounds = np.searchsorted(which[order], np.arange(first.size + 1))
        for k, i in enumerate(first):
            rows = order[bounds[k]:bounds[k + 1]]
            flat[live[rows]] = self._times(op, sizes[rows], int(grp[i]), int(strd[i]), int(g[i]))
        return flat.reshape(size_bytes.shape)

    def _times(self, op: str, sizes: np.ndarray, group: int, stride: int, gpus: int) -> np.ndarray:
        """Seconds of ``op`` at each size over ``group`` ranks ``stride`` apart on ``gpus`` GPUs (memoized)."""
        memo = self._coll.setdefault((op, group, stride, gpus), {})
        distinct, back = np.unique(sizes, return_inverse=True)
        todo = [x for x in distinct.tolist() if x not in memo]
        if todo:
            comm = self._comm(gpus)
            times = collective_times(op, np.array(todo), group, comm.cluster, coeffs=self.calibration.collectives,
                                     gpus_per_node=comm.per_node(stride, group))
            memo.update(zip(todo, times.tolist(), strict=True))
        return np.array([memo[x] for x in distinct.tolist()])[back.ravel()]

    def optimizer_s(self, params: np.ndarray) -> np.ndarray:
        """Adam step time on arrays of local parameter counts."""
        plan = self.space.plan(tp=1, pp=1, dp=1, cp=1, ep=1, vp=1, micro_batch=1, recompute="none", zero=0)

        def one(n: float) -> float:
            t = self._opt.get(n)
            if t is None:
                t = self._opt[n] = optimizer_time_s(n, plan, self.hw, self.coeffs)
            return t

        return _per_distinct(one, np.asarray(params, dtype=float))


def _distinct(*columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The index of one row per distinct row of the columns (in the order of the rows sorted column by column,
    first column slowest) and, per row, which of them it is. Each column is numbered by a 1-D sort and the
    numbers combined as one mixed-radix integer per row: much faster than ``np.unique(axis=0)`` on stacked rows."""
    key = np.zeros(columns[0].size, dtype=np.int64)
    span = 1  # key < span
    for c in columns:
        values, inverse = np.unique(np.ravel(c), return_inverse=True)
        if span * len(values) >= 2**62:  # renumber the key densely first (key < rows), to stay below 2^63
            _, key = np.unique(key, return_inverse=True)
            key, span = key.ravel(), key.size
        key = key * len(values) + inverse.ravel()
        span *= len(values)
    first, key = np.unique(key, return_index=True, return_inverse=True)[1:]
    return first, key.ravel()


def _per_distinct(fn: Callable[..., float], *columns: np.ndarray) -> np.ndarray:
    """``fn`` applied once per distinct row of the argument columns, spread back to every row."""
    if columns[0].size == 0:
        return np.zeros(0)
    flat = [np.asarray(c).ravel() for c in columns]
    first, inverse = _distinct(*flat)
    kinds = [float] + [int] * (len(columns) - 1)
    values = np.array([fn(*(kind(c[i]) for kind, c in zip(kinds, flat, strict=True))) for i in first])
    return values[inverse].reshape(columns[0].shape)


def _gather_shapes(pricer: Pricer, pl: PlanArrays) -> tuple[np.ndarray, list[_Shape]]:
    cols = (pl.gpus, pl.tp, pl.cp, pl.ep, pl.mb, pl.etp, pl.prec)
    first, inverse = _distinct(*cols)
    return inverse, [pricer.shape(*(int(c[i]) for c in cols)) for i in first]


def _gather_layouts(pricer: Pricer, pl: PlanArrays) -> tuple[np.ndarray, ...]:
    """Per plan: its layout's rank-class counts, layers per class, instances per part, parts on the first
    virtual stage, and which distinct layout it is."""
    first, inverse = _distinct(pl.pp, pl.vp)
    layouts = [pricer.layout(int(pl.pp[i]), int(pl.vp[i])) for i in first]
    classes = max(x.counts.shape[0] for x in layouts)

    def pad(a: np.ndarray) -> np.ndarray:  # extra rows repeat rank pp-1 (no effect on maxima or sums taken)
        return np.concatenate([a, np.repeat(a[1:2], classes - a.shape[0], axis=0)]) if a.shape[0] < classes else a

    counts = np.stack([pad(x.counts) for x in layouts])
    layers = np.stack([pad(x.layers[:, None])[:, 0] for x in layouts])
    total = np.stack([x.total for x in layouts])
    on_first = np.stack([x.first_stage for x in layouts])
    return counts[inverse], layers[inverse], total[inverse], on_first[inverse], inverse


def evaluate_plans(pricer: Pricer, pl: PlanArrays) -> PlanScores:
    """Step time, model TFLOP/s per GPU and peak memory per GPU of every plan (arrays)."""
    n = len(pl)
    if n <= CHUNK_PLANS:
        return _evaluate_chunk(pricer, pl)
    return PlanScores.concat([_evaluate_chunk(pricer, pl.take(slice(a, a + CHUNK_PLANS)))
                              for a in range(0, n, CHUNK_PLANS)])


def _evaluate_chunk(pricer: Pricer, pl: PlanArrays) -> PlanScores:
    n = len(pl)
    if n == 0:
        return PlanScores(np.zeros(0), np.zeros(0), np.zeros(0), pricer.hw.memory_bytes)
    space = pricer.space
    s_idx, shapes = _gather_shapes(pricer, pl)
    fwd = np.stack([s.fwd_s for s in shapes])[s_idx, pl.rc]  # (n, K)
    bwd = np.stack([s.bwd_s for s in shapes])[s_idx, pl.rc]
    params = np.stack([s.params for s in shapes])[s_idx]
    trainable = np.stack([s.trainable for s in shapes])[s_idx]
    expert = np.stack([s.expert for s in shapes])[s_idx]
    act = np.stack([s.activation_bytes for s in shapes])[s_idx]
    inp = np.stack([s.input_bytes for s in shapes])[s_idx]
    mf = np.array([s.model_flops_per_token for s in shapes])[s_idx]
    hidden = np.array([s.hidden_bytes for s in shapes])[s_idx]
    counts, layers, total, first, l_idx = _gather_layouts(pricer, pl)  # (n, C, K), (n, C), (n, K), (n, K), (n,)
    # the data-parallel collectives depend on the plan only through its weights per part, its layout, its
    # data-parallel group and ZeRO stage: priced on one plan of each such class, gathered back
    weights = np.array([s.weights_id for s in shapes])[s_idx]
    rep, cls = _distinct(weights, l_idx, pl.dp * pl.cp, pl.tp, pl.gpus, pl.zero)
    fwd, bwd, ag0 = _zero3_layers(pricer, pl, fwd, bwd, params, trainable, first, rep, cls)
    m = space.global_batch // (pl.mb * pl.dp)
    f_rank = np.einsum("nck,nk->nc", counts, fwd)
    f_rank[:, 0] += ag0
    b_rank = np.einsum("nck,nk->nc", counts, bwd)
    pipe = _pipeline_s(pricer, pl, f_rank + b_rank, np.einsum("nk,nk->n", total, fwd + bwd) + ag0, hidden, m)
    dp_exposed, opt = _data_parallel_s(pricer, pl, counts, layers, params, trainable, f_rank, b_rank, rep, cls)
    step = step_time_s(pipe, dp_exposed, opt, pricer.compose.host.step_overhead_s)

    tokens = space.global_batch * (1 if pricer.cfg.kind == "cnn" else space.seq_len)
    tflops = mf * tokens / step / pl.gpus / 1e12
    memory = np.maximum(_memory(pricer, pl, counts, (params, trainable, expert), act, inp, m, rank=0),
                        _memory(pricer, pl, counts, (params, trainable, expert), act, inp, m, rank=1))
    return PlanScores(step, tflops, memory, pricer.hw.memory_bytes)


def _zero3_layers(pricer: Pricer, pl: PlanArrays, fwd: np.ndarray, bwd: np.ndarray, params: np.ndarray,
                  trainable: np.ndarray, first: np.ndarray, rep: np.ndarray,
                  cls: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ZeRO-3: every layer gathers its parameters (forward and backward) and reduce-scatters its gradients.
    Returns the layers' forward and backward seconds with them, and the first layer's gather of each pass,
    which cannot be prefetched (s, 0 for other plans). The collectives are priced on the plans ``rep``, one
    per class of plans with the same ones (``cls``: each plan's)."""
    n, n_parts = fwd.shape
    z3 = pl.zero == 3
    if not z3.any():
        return fwd, bwd, np.zeros(n)
    r = rep[pl.zero[rep] == 3]
    args = ((pl.dp * pl.cp)[r], pl.tp[r], pl.gpus[r])
    ag, rs = np.zeros((rep.size, n_parts)), np.zeros((rep.size, n_parts))
    ag0 = np.zeros(rep.size)
    z3_rep = pl.zero[rep] == 3
    for k in range(n_parts):
        ag[z3_rep, k] = pricer.collective("all_gather", params[r, k] * 2.0, *args)
        rs[z3_rep, k] = pricer.collective("reduce_scatter", trainable[r, k] * pricer.grad_bytes, *args)
    first_max = np.where(first[r], params[r], 0.0).max(axis=1)
    ag0[z3_rep] = pricer.collective("all_gather", first_max * 2.0, *args)
    f3, b3 = zero3_layer_s(fwd, bwd, ag[cls], rs[cls], pricer.training.overlap_interference)
    fwd = np.where(z3[:, None], f3, fwd)
    bwd = np.where(z3[:, None], b3, bwd)
    return fwd, bwd, ag0[cls]


def _pipeline_s(pricer: Pricer, pl: PlanArrays, work: np.ndarray, chain: np.ndarray, hidden: np.ndarray,
                m: np.ndarray) -> np.ndarray:
    """The pipeline's makespan (s): activation sends between stages and the steady state of 1F1B /
    interleaved 1F1B over ``m`` micro-batches, from each rank class's ``work`` and the one-micro-batch
    ``chain`` through every stage (s); ``m`` micro-batches back to back without stages."""
    multi = pl.pp > 1
    send = np.zeros(len(pl))
    if multi.any():
        sp = pricer.space.sp & (pl.tp > 1)
        size = hidden / np.where(sp, 1, pl.tp)
        send[multi] = pricer.collective("send_recv", size[multi], np.full(int(multi.sum()), 2),
                                        (pl.tp * pl.cp * pl.dp)[multi], pl.gpus[multi])
    slowest = work.max(axis=1)
    return np.where(multi, steady_state_s(slowest, chain, m, pl.vp, pl.pp, send), m * chain)


def _data_parallel_s(pricer: Pricer, pl: PlanArrays, counts: np.ndarray, layers: np.ndarray,
                     params: np.ndarray, trainable: np.ndarray, f_rank: np.ndarray,
                     b_rank: np.ndarray, rep: np.ndarray, cls: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per rank class: the data-parallel gradient reduction's exposed seconds (ZeRO-1/2: and the parameter
    gather) and the optimizer step's seconds. The collectives and the optimizer step are priced on the plans
    ``rep``, one per class of plans with the same ones (``cls``: each plan's)."""
    ar, rs_t, ag_t, opt = _data_parallel_ops(pricer, pl.take(rep), counts[rep], params[rep], trainable[rep])
    zero = np.repeat(pl.zero[:, None], counts.shape[1], axis=1)
    dp_exposed = data_parallel_exposed_s(zero, ar[cls], rs_t[cls], ag_t[cls], b_rank, f_rank, np.maximum(1, layers),
                                         pricer.training.overlap_interference)
    return dp_exposed, opt[cls]


def _data_parallel_ops(pricer: Pricer, pl: PlanArrays, counts: np.ndarray, params: np.ndarray,
                       trainable: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per plan and rank class: the gradient all-reduce (ZeRO-0), reduce-scatter and parameter all-gather
    (ZeRO-1/2) and the optimizer step, seconds."""
    n = len(pl)
    gb = pricer.grad_bytes
    trn_c = np.einsum("nck,nk->nc", counts, trainable)
    par_c = np.einsum("nck,nk->nc", counts, params)
    classes = counts.shape[1]

    def per_class(a: np.ndarray) -> np.ndarray:
        return np.repeat(a[:, None], classes, axis=1)

    grp, stride, gpus = per_class(pl.dp * pl.cp), per_class(pl.tp), per_class(pl.gpus)
    zero = per_class(pl.zero)
    ar, rs_t, ag_t = np.zeros((n, classes)), np.zeros((n, classes)), np.zeros((n, classes))
    z0 = zero == 0
    if z0.any():
        ar[z0] = pricer.collective("all_reduce", trn_c[z0] * gb, grp[z0], stride[z0], gpus[z0])
    z12 = (zero == 1) | (zero == 2)
    if z12.any():
        rs_t[z12] = pricer.collective("reduce_scatter", trn_c[z12] * gb, grp[z12], stride[z12], gpus[z12])
        ag_t[z12] = np.where(trn_c[z12] > 0,
                             pricer.collective("all_gather", par_c[z12] * 2.0, grp[z12], stride[z12], gpus[z12]), 0.0)
    return ar, rs_t, ag_t, pricer.optimizer_s(trn_c / np.where(zero >= 1, grp, 1))


def _memory(pricer: Pricer, pl: PlanArrays, counts: np.ndarray, weights_of: tuple[np.ndarray, ...],
            act: np.ndarray, inp: np.ndarray, m: np.ndarray, *, rank: int) -> np.ndarray:
    """Peak bytes per GPU on rank 0 (``rank=0``) or rank ``pp - 1`` (``rank=1``), as the training module's;
    ``weights_of``: the parameters, trainable parameters and routed-expert parameters of each part."""
    params, trainable, expert = weights_of
    c = counts[:, rank, :]
    held = c > 0
    zeros = np.zeros(len(pl))
    weights, grads, optimizer, acts = memory_parts_bytes(
        params=np.einsum("nk,nk->n", c, params), trainable=np.einsum("nk,nk->n", c, trainable),
        quantized_elements=zeros, quantized_bytes=zeros, max_layer_params=np.where(held, params, 0.0).max(axis=1),
        saved_activation_bytes=np.einsum("nk,nk->n", c, act), checkpoint_bytes=np.einsum("nk,nk->n", c, inp),
        max_layer_activation_bytes=np.where(held, act, 0.0).max(axis=1),
        in_flight=in_flight_microbatches(pl.pp, pl.vp, m, 0 if rank == 0 else pl.pp - 1),
        full_recompute=pl.rc == RECOMPUTE.index("full"), zero=pl.zero, shards=pl.dp * pl.cp,
        weight_bytes_per_param=2.0,  # bf16 / fp16 weights (fp32 training is not searched)
        grad_bytes=pricer.grad_bytes, optimizer_bytes_per_param=12.0,  # Adam: fp32 master + two moments
        weight_copy_bytes_per_param=_WEIGHT_COPY_BYTES[pl.prec], expert_trainable=np.einsum("nk,nk->n", c, expert),
        expert_shards=_expert_shards(pl))
    mem = training_memory(weights=weights, gradients=grads, optimizer=optimizer,  # type: ignore[arg-type]
                          activations=acts, capacity=pricer.hw.memory_bytes)  # type: ignore[arg-type]
    return np.asarray(mem.total_bytes, dtype=float)


# per precision code: the low-precision copies of each weight a recipe keeps (bytes per parameter)
_WEIGHT_COPY_BYTES = np.array([get_recipe(name).weight_copy_bytes_per_param for name in PRECISIONS])


def _expert_shards(pl: PlanArrays) -> np.ndarray:
    """Data-parallel copies of each expert (:attr:`ParallelPlan.expert_shards` over arrays): dp*cp/ep with
    experts split like the MLP, tp*dp*cp/ep with whole experts."""
    whole = pl.etp == ETP.index(1)
    ranks = pl.dp * pl.cp * np.where(whole, pl.tp, 1)
    return np.where((pl.ep == 1) & ~whole, pl.dp * pl.cp, np.maximum(1, ranks // pl.ep))
