"""The design space of a training search: the degrees and settings tried, and the plans they make.

A :class:`SearchSpace` names a model, a cluster type, one or more GPU counts,
the sequence length and global batch (held fixed), and the candidate values of
each axis: ``tp``, ``pp``, ``cp``, ``ep``, ``vp`` (virtual stages per pipeline
rank), ``micro_batch``, ``recompute`` and ``zero``. ``dp`` is what is left:
``gpus / (tp * pp * cp)``. An axis left unset takes a default range derived from
the model and the cluster (see :func:`resolve_axes`).

:func:`enumerate_plans` builds the cartesian product as arrays and removes the
plans :func:`perfcast.system.plan.check_plan` would refuse, one constraint at a
time, counting how many each one removed (the counts say which constraint
emptied a space with no feasible plan).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from perfcast.catalog.models import ModelConfig, check_context
from perfcast.system.cluster import Cluster
from perfcast.system.plan import ParallelPlan, divisors

__all__ = ["CONSTRAINTS", "RECOMPUTE", "Axes", "PlanArrays", "SearchSpace", "enumerate_plans", "resolve_axes"]

RECOMPUTE: tuple[str, ...] = ("none", "selective", "full")  # index = the recompute code of PlanArrays.rc

# Constraint name -> what it checks, in the order they are applied (memory comes after pricing).
CONSTRAINTS: dict[str, str] = {
    "gpu count": "tp*pp*cp must divide the GPU count",
    "attention heads": "tp must divide the attention heads (and suit the KV heads) within one node's fabric",
    "layers": "pp and pp*vp must fit the layers (divide them unless stages may be uneven); vp > 1 needs pp > 1",
    "global batch": "micro_batch*dp must divide the global batch; interleaving needs micro-batches divisible by pp",
    "sequence": "cp must divide the sequence (2*cp for ring attention)",
    "experts": "ep needs an MoE model, must divide its experts and dp*cp",
    "memory": "the plan must fit in the allowed share of GPU memory",
}


# the search prices plans in int64 and float64 numpy arrays: 2^24 sequences per step (8,000x Llama 3's 2,048) and
# 2^24 tokens per sequence keep every product (tokens x hidden x layers) exact and far from int64's limit
MAX_GLOBAL_BATCH = 2**24
MAX_SEQ_LEN = 2**24
# GPUs (and so any parallel degree) per plan: 2^24 is 160x the largest cluster built (~100,000 GPUs)
MAX_GPUS = 2**24
_Gpus = Annotated[int, Field(ge=1, le=MAX_GPUS)]
_Degree = Annotated[int, Field(le=MAX_GPUS)]  # (checked >= 1 where the axes resolve)


class SearchSpace(BaseModel):
    """What a training search explores (batch sizes in sequences, lengths in tokens).

    Axes set to ``None`` take the defaults of :func:`resolve_axes`. The fixed
    settings (``precision``, ``sp``, ``tp_comm_overlap``, ``uneven_stages``) apply
    to every plan (``sp`` only where ``tp > 1``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    model: str
    cluster: str
    gpus: tuple[_Gpus, ...] = Field(min_length=1, description="GPU counts to try (each a whole number of nodes)")
    seq_len: int = Field(gt=0, le=MAX_SEQ_LEN)
    global_batch: int = Field(gt=0, le=MAX_GLOBAL_BATCH, description="sequences per optimizer step")
    tp: tuple[_Degree, ...] | None = None
    pp: tuple[_Degree, ...] | None = None
    cp: tuple[_Degree, ...] | None = None
    ep: tuple[_Degree, ...] | None = None
    vp: tuple[_Degree, ...] | None = None
    micro_batch: tuple[Annotated[int, Field(le=MAX_GLOBAL_BATCH)], ...] | None = None
    recompute: tuple[Literal["none", "selective", "full"], ...] = RECOMPUTE  # type: ignore[assignment]
    zero: tuple[Literal[0, 1, 2, 3], ...] = (0, 1, 2, 3)
    precision: Literal["bf16", "fp16", "fp8", "fp8-cs", "fp8-block", "mxfp8", "nvfp4"] = Field(
        default="bf16", description="training precision recipe (perfcast.workload.precision; fp32 is not searched)")
    sp: bool = Field(default=True, description="sequence parallelism wherever tp > 1")
    tp_comm_overlap: bool = Field(default=True, description="TP collectives overlapped with GEMMs")
    uneven_stages: bool = Field(default=True, description="pp*vp need not divide the layers")
    max_memory_frac: float = Field(default=1.0, gt=0, le=1, description="share of GPU memory a plan may use")

    def plan(self, *, tp: int, pp: int, dp: int, cp: int, ep: int, vp: int, micro_batch: int, recompute: str,
             zero: int) -> ParallelPlan:
        """The full :class:`ParallelPlan` of one point of the space."""
        return ParallelPlan(
            tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, vp=vp, sp=self.sp and tp > 1,
            tp_comm_overlap=self.tp_comm_overlap and tp > 1,
            zero=zero, recompute=recompute, micro_batch=micro_batch,  # type: ignore[arg-type]
            global_batch=self.global_batch, seq_len=self.seq_len, precision=self.precision,
            schedule="interleaved" if vp > 1 else "1f1b", uneven_stages=self.uneven_stages)


@dataclass(frozen=True)
class Axes:
    """Concrete candidate values of every axis."""

    gpus: tuple[int, ...]
    tp: tuple[int, ...]
    pp: tuple[int, ...]
    cp: tuple[int, ...]
    ep: tuple[int, ...]
    vp: tuple[int, ...]
    micro_batch: tuple[int, ...]
    recompute: tuple[int, ...]
    zero: tuple[int, ...]

    @property
    def size(self) -> int:
        """Points in the cartesian product."""
        n = 1
        for values in (self.gpus, self.tp, self.pp, self.cp, self.ep, self.vp, self.micro_batch, self.recompute,
                       self.zero):
            n *= len(values)
        return n


def _layers(cfg: ModelConfig) -> int:
    return cfg.num_layers + (cfg.num_decoder_layers or 0)


def resolve_axes(space: SearchSpace, cfg: ModelConfig, cluster: Cluster) -> Axes:
    """Candidate values: the space's own, or defaults.

    Defaults: ``tp`` the divisors of the scale-up domain; ``pp`` the divisors of
    any GPU count up to the layers (of the layers too if stages must be even);
    ``cp`` 1, 2, 4 ... 32; ``ep`` the divisors of the experts (1 for a dense
    model); ``vp`` 1-8; ``micro_batch`` 1, 2, 4, 8.
    """
    layers = _layers(cfg)
    pp_default: set[int] = set()
    for g in space.gpus:
        pp_default.update(d for d in divisors(g, layers) if space.uneven_stages or layers % d == 0)
    experts = cfg.moe.num_experts if cfg.moe is not None else 1
    return Axes(
        gpus=tuple(sorted(set(space.gpus))),
        tp=tuple(sorted(set(space.tp or divisors(cluster.domain)))),
        pp=tuple(sorted(set(space.pp or pp_default))),
        cp=tuple(sorted(set(space.cp or (1, 2, 4, 8, 16, 32)))),
        ep=tuple(sorted(set(space.ep or divisors(experts)))),
        vp=tuple(sorted(set(space.vp or range(1, 9)))),
        micro_batch=tuple(sorted(set(space.micro_batch or (1, 2, 4, 8)))),
        recompute=tuple(sorted({RECOMPUTE.index(r) for r in space.recompute})),
        zero=tuple(sorted(set(space.zero))),
    )


@dataclass(frozen=True)
class PlanArrays:
    """Plans as parallel integer arrays (one entry per plan); ``rc`` indexes :data:`RECOMPUTE`."""

    gpus: np.ndarray
    tp: np.ndarray
    pp: np.ndarray
    dp: np.ndarray
    cp: np.ndarray
    ep: np.ndarray
    vp: np.ndarray
    mb: np.ndarray
    rc: np.ndarray
    zero: np.ndarray

    FIELDS = ("gpus", "tp", "pp", "dp", "cp", "ep", "vp", "mb", "rc", "zero")

    def __len__(self) -> int:
        return int(self.tp.shape[0])

    def take(self, index: np.ndarray | slice) -> PlanArrays:
        """The plans at ``index`` (a boolean mask, integer indices or a slice)."""
        return PlanArrays(**{f: getattr(self, f)[index] for f in self.FIELDS})

    def row(self, i: int) -> dict[str, int]:
        """Plan ``i``'s degrees as plain ints."""
        return {f: int(getattr(self, f)[i]) for f in self.FIELDS}

    def plan(self, i: int, space: SearchSpace) -> ParallelPlan:
        """Plan ``i`` as a :class:`ParallelPlan`."""
        r = self.row(i)
        return space.plan(tp=r["tp"], pp=r["pp"], dp=r["dp"], cp=r["cp"], ep=r["ep"], vp=r["vp"],
                          micro_batch=r["mb"], recompute=RECOMPUTE[r["rc"]], zero=r["zero"])

    @classmethod
    def from_rows(cls, rows: list[dict[str, int]]) -> PlanArrays:
        """Arrays from plan dicts with the keys of :attr:`FIELDS`."""
        return cls(**{f: np.array([r[f] for r in rows], dtype=np.int64) for f in cls.FIELDS})


def _grid(axes: Axes) -> dict[str, np.ndarray]:
    names = ("gpus", "tp", "pp", "cp", "ep", "vp", "mb", "rc", "zero")
    values = (axes.gpus, axes.tp, axes.pp, axes.cp, axes.ep, axes.vp, axes.micro_batch, axes.recompute, axes.zero)
    mesh = np.meshgrid(*[np.asarray(v, dtype=np.int64) for v in values], indexing="ij")
    return {n: m.ravel() for n, m in zip(names, mesh, strict=True)}


def _masks(g: dict[str, np.ndarray], space: SearchSpace, cfg: ModelConfig, cluster: Cluster,
           ) -> list[tuple[str, np.ndarray]]:
    """Per constraint, which plans break it (mirrors :func:`perfcast.system.plan.check_plan`)."""
    tp, pp, cp, ep, vp, mb, gpus = g["tp"], g["pp"], g["cp"], g["ep"], g["vp"], g["mb"], g["gpus"]
    rest = tp * pp * cp
    dp = np.where(gpus % rest == 0, gpus // np.maximum(rest, 1), 0)
    g["dp"] = dp
    heads, kv = cfg.num_heads, cfg.num_kv_heads
    bad_tp = (heads % tp != 0) | ((kv % tp != 0) & (tp % kv != 0)) | ((tp > 1) & (cluster.domain % tp != 0))
    layers = _layers(cfg)
    nv = pp * vp
    bad_layers = (pp > layers) | ((vp > 1) & (pp == 1)) | (nv > layers)
    if not space.uneven_stages:
        bad_layers |= (layers % pp != 0) | (layers % nv != 0)
    gb = space.global_batch
    unit = np.maximum(mb * dp, 1)
    m = gb // unit
    bad_batch = (gb % unit != 0) | ((vp > 1) & (m % pp != 0)) | (dp == 0)
    seq = space.seq_len
    check_context(cfg, seq)  # one sequence length for the whole space: beyond the context it is bad input
    bad_seq = (cp > 1) & (seq % (2 * cp) != 0)
    if cfg.moe is None:
        bad_ep = ep > 1
    else:
        bad_ep = (ep > 1) & ((cfg.moe.num_experts % ep != 0) | ((dp * cp) % ep != 0))
    return [("gpu count", dp == 0), ("attention heads", bad_tp), ("layers", bad_layers),
            ("global batch", bad_batch), ("sequence", bad_seq), ("experts", bad_ep)]


def enumerate_plans(space: SearchSpace, cfg: ModelConfig, cluster: Cluster) -> tuple[PlanArrays, dict[str, int], int]:
    """Every plan of the space that :func:`~perfcast.system.plan.check_plan` accepts.

    Returns the plans, how many plans each constraint removed (applied in the
    order of :data:`CONSTRAINTS`; a plan is counted once, by the first
    constraint it breaks) and how many plans the product had.
    """
    axes = resolve_axes(space, cfg, cluster)
    g = _grid(axes)
    masks = _masks(g, space, cfg, cluster)
    alive = np.ones(axes.size, dtype=bool)
    removed: dict[str, int] = {}
    for name, bad in masks:
        hit = alive & bad
        removed[name] = int(hit.sum())
        alive &= ~bad
    plans = PlanArrays(gpus=g["gpus"][alive], tp=g["tp"][alive], pp=g["pp"][alive], dp=g["dp"][alive],
                       cp=g["cp"][alive], ep=g["ep"][alive], vp=g["vp"][alive], mb=g["mb"][alive],
                       rc=g["rc"][alive], zero=g["zero"][alive])
    return plans, removed, axes.size
