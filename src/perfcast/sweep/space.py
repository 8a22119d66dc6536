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

import math
from dataclasses import dataclass
from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from perfcast.catalog.hardware import Hardware
from perfcast.catalog.models import ModelConfig, check_context
from perfcast.coefficients.bundle import resolve_calibration
from perfcast.errors import ConfigError, UnsupportedError
from perfcast.system.cluster import Cluster
from perfcast.system.collectives.placement import place
from perfcast.system.plan import ParallelPlan, divisors
from perfcast.system.training import LayerComm
from perfcast.workload.precision import check_recipe_hardware, get_recipe

__all__ = ["CONSTRAINTS", "ETP", "PRECISIONS", "RECOMPUTE", "Axes", "PlanArrays", "SearchSpace", "enumerate_plans",
           "recipe_refusal", "resolve_axes"]

RECOMPUTE: tuple[str, ...] = ("none", "selective", "full")  # index = the recompute code of PlanArrays.rc
# the recipes a search may try (fp32 is not searched); index = the precision code of PlanArrays.prec
Precision = Literal["bf16", "fp16", "fp8", "fp8-cs", "fp8-block", "mxfp8", "nvfp4"]
PRECISIONS: tuple[str, ...] = ("bf16", "fp16", "fp8", "fp8-cs", "fp8-block", "mxfp8", "nvfp4")
# expert tensor parallelism (ParallelPlan.etp): experts split like the MLP, or whole (Megatron's MoE parallel
# folding); index = the code of PlanArrays.etp
ETP: tuple[Literal["tp", 1], ...] = ("tp", 1)

# Constraint name -> what it checks, in the order they are applied (memory comes after pricing). "precision" is
# counted only when a space tries several recipes or one the GPU cannot run.
CONSTRAINTS: dict[str, str] = {
    "gpu count": "tp*pp*cp must divide the GPU count",
    "attention heads": "tp must divide the attention heads (and suit the KV heads) within one node's fabric",
    "layers": "pp and pp*vp must fit the layers (divide them unless stages may be uneven); vp > 1 needs pp > 1",
    "global batch": "micro_batch*dp must divide the global batch; interleaving needs micro-batches divisible by pp",
    "sequence": "cp must divide the sequence (2*cp for ring attention)",
    "experts": "ep > 1 and etp 1 need an MoE model; ep must divide its experts and dp*cp (etp tp: experts split "
               "like the MLP) or tp*dp*cp (etp 1: whole experts, which beside tp > 1 need sequence parallelism; at "
               "tp 1 and cp 1, etp 1 is etp tp and is not enumerated twice); the EP group (ranks tp apart with "
               "etp tp) must fit the GPUs",
    "precision": "the GPU must run the precision recipe (FP8 needs an FP8 peak, MXFP8 and NVFP4 compute capability "
                 ">= 10)",
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

    Axes set to ``None`` take the defaults of :func:`resolve_axes`. ``precision``
    is one recipe or several to try (default bf16 alone). The fixed settings
    (``sp``, ``tp_comm_overlap``, ``uneven_stages``) apply to every plan (``sp``
    only where ``tp > 1``).
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
    etp: tuple[Literal["tp", 1], ...] | None = Field(
        default=None, min_length=1, description="expert tensor parallelism: 'tp' (experts split like the MLP) and/or "
                                                "1 (whole experts, EP folded over TP x CP x DP)")
    vp: tuple[_Degree, ...] | None = None
    micro_batch: tuple[Annotated[int, Field(le=MAX_GLOBAL_BATCH)], ...] | None = None
    recompute: tuple[Literal["none", "selective", "full"], ...] = RECOMPUTE  # type: ignore[assignment]
    zero: tuple[Literal[0, 1, 2, 3], ...] = (0, 1, 2, 3)
    precision: Precision | tuple[Precision, ...] = Field(
        default="bf16", description="training precision recipe(s) to try (perfcast.workload.precision; fp32 is not "
                                    "searched)")
    sp: bool = Field(default=True, description="sequence parallelism wherever tp > 1")
    tp_comm_overlap: bool = Field(default=True, description="TP collectives overlapped with GEMMs")
    uneven_stages: bool = Field(default=True, description="pp*vp need not divide the layers")
    max_memory_frac: float = Field(default=1.0, gt=0, le=1, description="share of GPU memory a plan may use")

    @field_validator("precision")
    @classmethod
    def _one_or_distinct(cls, v: str | tuple[str, ...]) -> str | tuple[str, ...]:
        if isinstance(v, tuple):
            if not v:
                raise ValueError("give at least one precision recipe")
            if len(set(v)) != len(v):
                raise ValueError(f"precision recipes listed twice: {', '.join(v)}")
            if len(v) == 1:  # one recipe, however given, is the fixed setting
                return v[0]
        return v

    @property
    def precisions(self) -> tuple[str, ...]:
        """The recipes tried, in the order given."""
        return self.precision if isinstance(self.precision, tuple) else (self.precision,)

    @property
    def precision_text(self) -> str:
        """The recipes tried as the CLI takes them (``bf16`` or ``bf16,fp8``)."""
        return ",".join(self.precisions)

    def plan(self, *, tp: int, pp: int, dp: int, cp: int, ep: int, vp: int, micro_batch: int, recompute: str,
             zero: int, precision: str | None = None, etp: Literal["tp", 1] = "tp") -> ParallelPlan:
        """The full :class:`ParallelPlan` of one point of the space (``precision``: the space's first recipe when
        None)."""
        return ParallelPlan(
            tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, etp=etp, vp=vp, sp=self.sp and tp > 1,
            tp_comm_overlap=self.tp_comm_overlap and tp > 1,
            zero=zero, recompute=recompute, micro_batch=micro_batch,  # type: ignore[arg-type]
            global_batch=self.global_batch, seq_len=self.seq_len,
            precision=precision or self.precisions[0],  # type: ignore[arg-type]
            schedule="interleaved" if vp > 1 else "1f1b", uneven_stages=self.uneven_stages)


@dataclass(frozen=True)
class Axes:
    """Concrete candidate values of every axis (``etp``, ``precision`` and ``recompute`` as codes: indices into
    :data:`ETP`, :data:`PRECISIONS` and :data:`RECOMPUTE`)."""

    gpus: tuple[int, ...]
    tp: tuple[int, ...]
    pp: tuple[int, ...]
    cp: tuple[int, ...]
    ep: tuple[int, ...]
    vp: tuple[int, ...]
    micro_batch: tuple[int, ...]
    recompute: tuple[int, ...]
    zero: tuple[int, ...]
    etp: tuple[int, ...] = (0,)
    precision: tuple[int, ...] = (0,)

    @property
    def size(self) -> int:
        """Points in the cartesian product."""
        n = 1
        for values in self.columns().values():
            n *= len(values)
        return n

    def columns(self) -> dict[str, tuple[int, ...]]:
        """Each axis's values under its :class:`PlanArrays` name, in the order plans are enumerated."""
        return {"gpus": self.gpus, "tp": self.tp, "pp": self.pp, "cp": self.cp, "ep": self.ep, "etp": self.etp,
                "vp": self.vp, "mb": self.micro_batch, "prec": self.precision, "rc": self.recompute,
                "zero": self.zero}


def _layers(cfg: ModelConfig) -> int:
    return cfg.num_layers + (cfg.num_decoder_layers or 0)


def resolve_axes(space: SearchSpace, cfg: ModelConfig, cluster: Cluster) -> Axes:
    """Candidate values: the space's own, or defaults.

    Defaults: ``tp`` the divisors of the scale-up domain; ``pp`` the divisors of
    any GPU count up to the layers (of the layers too if stages must be even);
    ``cp`` 1, 2, 4 ... 32; ``ep`` the divisors of the experts (1 for a dense
    model); ``etp`` both ``"tp"`` and ``1`` for an MoE model, ``"tp"`` for a
    dense one (the axis collapses); ``vp`` 1-8; ``micro_batch`` 1, 2, 4, 8.
    """
    layers = _layers(cfg)
    pp_default: set[int] = set()
    for g in space.gpus:
        pp_default.update(d for d in divisors(g, layers) if space.uneven_stages or layers % d == 0)
    experts = cfg.moe.num_experts if cfg.moe is not None else 1
    etp = space.etp or (ETP if cfg.moe is not None else ("tp",))
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
        etp=tuple(sorted({ETP.index(e) for e in etp})),
        precision=tuple(sorted({PRECISIONS.index(p) for p in space.precisions})),
    )


def recipe_refusal(name: str, hw: Hardware) -> str | None:
    """Why ``hw`` cannot train with the recipe ``name`` (None when it can): MXFP8 and NVFP4 need MX block-scaled
    tensor cores, the other low-precision recipes a datasheet peak for their GEMM format (FP8)."""
    recipe = get_recipe(name)
    try:
        check_recipe_hardware(recipe, hw)
        if recipe.low_precision:
            hw.peak(recipe.fprop)
    except UnsupportedError as exc:
        return str(exc)
    return None


@dataclass(frozen=True)
class PlanArrays:
    """Plans as parallel integer arrays (one entry per plan); ``rc``, ``etp`` and ``prec`` are codes (indices into
    :data:`RECOMPUTE`, :data:`ETP` and :data:`PRECISIONS`)."""

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
    etp: np.ndarray
    prec: np.ndarray

    FIELDS = ("gpus", "tp", "pp", "dp", "cp", "ep", "vp", "mb", "rc", "zero", "etp", "prec")

    def __len__(self) -> int:
        return int(self.tp.shape[0])

    def take(self, index: np.ndarray | slice) -> PlanArrays:
        """The plans at ``index`` (a boolean mask, integer indices or a slice)."""
        return PlanArrays(**{f: getattr(self, f)[index] for f in self.FIELDS})

    def row(self, i: int) -> dict[str, int]:
        """Plan ``i``'s degrees and codes as plain ints."""
        return {f: int(getattr(self, f)[i]) for f in self.FIELDS}

    def plan(self, i: int, space: SearchSpace) -> ParallelPlan:
        """Plan ``i`` as a :class:`ParallelPlan`."""
        return plan_of(self.row(i), space)

    @classmethod
    def from_rows(cls, rows: list[dict[str, int]]) -> PlanArrays:
        """Arrays from plan dicts with the keys of :attr:`FIELDS`."""
        return cls(**{f: np.array([r[f] for r in rows], dtype=np.int64) for f in cls.FIELDS})


def plan_of(r: dict[str, int], space: SearchSpace) -> ParallelPlan:
    """The :class:`ParallelPlan` of a plan dict (the keys of :attr:`PlanArrays.FIELDS`)."""
    return space.plan(tp=r["tp"], pp=r["pp"], dp=r["dp"], cp=r["cp"], ep=r["ep"], vp=r["vp"], micro_batch=r["mb"],
                      recompute=RECOMPUTE[r["rc"]], zero=r["zero"], precision=PRECISIONS[r["prec"]],
                      etp=ETP[r["etp"]])


def _product(columns: dict[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    mesh = np.meshgrid(*[np.asarray(v, dtype=np.int64) for v in columns.values()], indexing="ij")
    return {n: m.ravel() for n, m in zip(columns, mesh, strict=True)}


def _grid(axes: Axes) -> dict[str, np.ndarray]:
    """The whole cartesian product (tests; :func:`enumerate_plans` builds it in stages)."""
    return _product(axes.columns())


def _cross(rows: dict[str, np.ndarray], columns: dict[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    """Every row of ``rows`` with every point of the product of ``columns`` (rows outermost)."""
    inner = _product(columns)
    n, k = next(iter(rows.values())).size, next(iter(inner.values())).size
    out = {name: np.repeat(v, k) for name, v in rows.items()}
    out.update({name: np.tile(v, n) for name, v in inner.items()})
    return out


_STAGE_1 = ("gpus", "tp", "pp", "cp", "vp", "mb")  # the axes the first five constraints read


def _shape_masks(g: dict[str, np.ndarray], space: SearchSpace, cfg: ModelConfig, cluster: Cluster,
                 ) -> list[tuple[str, np.ndarray]]:
    """The constraints on the degrees, batch and sequence (sets ``g["dp"]``), as check_plan applies them."""
    tp, pp, cp, vp, mb, gpus = g["tp"], g["pp"], g["cp"], g["vp"], g["mb"], g["gpus"]
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
    return [("gpu count", dp == 0), ("attention heads", bad_tp), ("layers", bad_layers),
            ("global batch", bad_batch), ("sequence", bad_seq)]


def _expert_mask(g: dict[str, np.ndarray], space: SearchSpace, cfg: ModelConfig, cluster: Cluster,
                 axes: Axes) -> np.ndarray:
    """Plans check_plan refuses for their expert parallelism, those whose EP group the training module cannot
    place on their GPUs, and the duplicates of etp 1 (a dense model's, and at tp 1 and cp 1 when etp tp is tried
    too: the same plan)."""
    tp, dp, cp, ep, whole = g["tp"], g["dp"], g["cp"], g["ep"], g["etp"] == ETP.index(1)
    if cfg.moe is None:
        return (ep > 1) | whole
    folded = np.where(whole, tp * dp * cp, dp * cp)  # the ranks EP is carved from
    bad = (ep > 1) & ((cfg.moe.num_experts % ep != 0) | (folded % ep != 0))
    if not space.sp:  # whole experts beside TP: each TP rank dispatches its own (sequence-parallel) tokens
        bad |= (ep > 1) & whole & (tp > 1)
    if ETP.index("tp") in axes.etp:  # at tp 1 and cp 1 whole experts are split ones: the same plan, priced alike
        bad |= whole & (tp == 1) & (cp == 1)
    # the all-to-all of a plan's EP group, as system.training places it (ranks tp apart with experts split like the
    # MLP, 1 apart folded: system.training.ep_stride): a group the cluster cannot place is pruned
    live = (ep > 1) & ~bad
    if live.any():
        stride = np.where(whole, 1, tp)
        groups, inverse = np.unique(np.stack([g["gpus"][live], ep[live], stride[live]]), axis=1, return_inverse=True)
        unplaced = np.array([not _ep_group_fits(cluster, *(int(x) for x in col)) for col in groups.T])
        bad[live] = unplaced[inverse.ravel()]
    return bad


def _ep_group_fits(cluster: Cluster, gpus: int, ep: int, stride: int) -> bool:
    """Whether the training module can place an EP group of ``ep`` ranks ``stride`` apart on ``gpus`` GPUs."""
    sized = cluster.with_nodes(max(1, -(-gpus // cluster.gpus_per_node)))  # as simulate_training sizes it
    try:
        place(sized, ep, LayerComm(sized, resolve_calibration(None).collectives).per_node(stride, ep))
    except ConfigError:
        return False
    return True


def _precision_mask(g: dict[str, np.ndarray], hw: Hardware) -> np.ndarray:
    """Plans in a recipe the GPU cannot run."""
    refused = [code for code, name in enumerate(PRECISIONS) if recipe_refusal(name, hw) is not None]
    return np.isin(g["prec"], refused)


def _masks(g: dict[str, np.ndarray], space: SearchSpace, cfg: ModelConfig, cluster: Cluster,
           ) -> list[tuple[str, np.ndarray]]:
    """Per constraint, which plans of the whole product ``g`` break it (mirrors
    :func:`perfcast.system.plan.check_plan`)."""
    axes = resolve_axes(space, cfg, cluster)
    return [*_shape_masks(g, space, cfg, cluster), ("experts", _expert_mask(g, space, cfg, cluster, axes)),
            ("precision", _precision_mask(g, cluster.hardware()))]


def enumerate_plans(space: SearchSpace, cfg: ModelConfig, cluster: Cluster) -> tuple[PlanArrays, dict[str, int], int]:
    """Every plan of the space that :func:`~perfcast.system.plan.check_plan` and the training module accept,
    in a precision recipe the cluster's GPU runs.

    Returns the plans (in the order of the product of :meth:`Axes.columns`, last
    axis fastest), how many plans each constraint removed (applied in the order
    of :data:`CONSTRAINTS`; a plan is counted once, by the first constraint it
    breaks; ``precision`` is listed when the space tries several recipes or it
    removed plans) and how many plans the product had.
    """
    axes = resolve_axes(space, cfg, cluster)
    cols = axes.columns()
    removed: dict[str, int] = {}

    def keep(rows: dict[str, np.ndarray], checks: list[tuple[str, np.ndarray]],
             later: tuple[str, ...]) -> dict[str, np.ndarray]:
        """Apply ``checks`` in order to ``rows``, each removed row standing for the points of the ``later``
        axes; the rows left."""
        weight = int(np.prod([len(cols[a]) for a in later]))
        alive = np.ones(next(iter(rows.values())).size, dtype=bool)
        for name, bad in checks:
            hit = alive & bad
            removed[name] = removed.get(name, 0) + int(hit.sum()) * weight
            alive &= ~bad
        return {k: v[alive] for k, v in rows.items()}

    g = _product({a: cols[a] for a in _STAGE_1})
    g = keep(g, _shape_masks(g, space, cfg, cluster), ("ep", "etp", "rc", "zero", "prec"))
    g = _cross(g, {"ep": cols["ep"], "etp": cols["etp"]})
    g = keep(g, [("experts", _expert_mask(g, space, cfg, cluster, axes))], ("rc", "zero", "prec"))
    g = _cross(g, {"prec": cols["prec"]})
    g = keep(g, [("precision", _precision_mask(g, cluster.hardware()))], ("rc", "zero"))
    if len(cols["prec"]) == 1 and not removed["precision"]:
        del removed["precision"]  # one recipe the GPU runs: not a searched axis
    outer = {a: v for a, v in cols.items() if a not in ("rc", "zero")}
    order = _product_order(g, outer)
    g = _cross({k: v[order] for k, v in g.items()}, {"rc": cols["rc"], "zero": cols["zero"]})
    return PlanArrays(**{f: g[f] for f in PlanArrays.FIELDS}), removed, axes.size


def _product_order(g: dict[str, np.ndarray], cols: dict[str, tuple[int, ...]]) -> np.ndarray:
    """The permutation putting the rows of ``g`` in the order of the product of ``cols`` (first axis slowest)."""
    index = [np.searchsorted(np.asarray(values), g[name]) for name, values in cols.items()]
    if math.prod(len(v) for v in cols.values()) >= 2**62:  # pragma: no cover - no space this large enumerates
        return np.lexsort(index[::-1])
    flat = np.zeros(index[0].size, dtype=np.int64)
    for i, values in zip(index, cols.values(), strict=True):  # one mixed-radix number per row: one sort
        flat = flat * len(values) + i
    return np.argsort(flat, kind="stable")
