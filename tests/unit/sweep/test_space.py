"""The search space: the vectorized constraints refuse exactly the plans ``check_plan`` refuses, and each
removal is counted once."""

from __future__ import annotations

import numpy as np
import pytest

from perfcast.catalog.models import ModelConfig, load_model
from perfcast.errors import ConfigError
from perfcast.sweep.space import (
    CONSTRAINTS,
    ETP,
    PRECISIONS,
    PlanArrays,
    SearchSpace,
    _grid,
    _masks,
    enumerate_plans,
    recipe_refusal,
    resolve_axes,
)
from perfcast.system.cluster import Cluster, load_cluster
from perfcast.system.plan import ParallelPlan, check_plan
from perfcast.system.training import simulate_training

SPACE = SearchSpace(model="llama-2-13b", cluster="dgx-a100", gpus=(16, 32), seq_len=4096, global_batch=64,
                    tp=(1, 2, 4, 8, 16), pp=(1, 2, 4, 8, 40, 64), cp=(1, 2, 3), vp=(1, 2, 3), micro_batch=(1, 2, 4))


def _accepted(plan: ParallelPlan, cfg: ModelConfig, cl: Cluster, gpus: int) -> bool:
    """Whether check_plan accepts ``plan`` on ``gpus`` GPUs of the 8-GPU-node cluster ``cl``."""
    try:
        check_plan(plan, cfg, cl.with_nodes(gpus // 8), num_gpus=gpus)
    except ConfigError:
        return False
    return True


def test_the_masks_agree_with_check_plan_on_every_point() -> None:
    cfg, cl = load_model(SPACE.model), load_cluster(SPACE.cluster)
    g = _grid(resolve_axes(SPACE, cfg, cl))
    masks = _masks(g, SPACE, cfg, cl)
    bad = np.zeros(g["tp"].size, dtype=bool)
    for _, m in masks:
        bad |= m
    every = PlanArrays(**{f: g[f] for f in PlanArrays.FIELDS})
    # recompute and zero do not enter check_plan: one value of each is enough
    points = np.flatnonzero((g["rc"] == 0) & (g["zero"] == 0))
    assert points.size > 500
    for i in points:
        if g["dp"][i] == 0:  # no integer dp: check_plan cannot even be asked
            continue
        accepted = _accepted(every.plan(int(i), SPACE), cfg, cl, int(g["gpus"][i]))
        assert accepted == (not bad[i]), every.row(int(i))


def test_each_removed_plan_is_counted_once_in_constraint_order() -> None:
    cfg, cl = load_model(SPACE.model), load_cluster(SPACE.cluster)
    plans, removed, total = enumerate_plans(SPACE, cfg, cl)
    assert list(removed) == [c for c in CONSTRAINTS if c not in ("memory", "precision")]  # one recipe: not listed
    assert len(plans) + sum(removed.values()) == total == resolve_axes(SPACE, cfg, cl).size
    assert removed["attention heads"] > 0 and removed["gpu count"] > 0  # tp=16 (> a node) and cp=3 never work
    assert np.all(plans.tp * plans.pp * plans.dp * plans.cp == plans.gpus)


def test_default_axes_follow_the_model_and_cluster() -> None:
    space = SearchSpace(model="llama-3.1-405b", cluster="dgx-h100", gpus=(16384,), seq_len=8192, global_batch=2048)
    axes = resolve_axes(space, load_model(space.model), load_cluster(space.cluster))
    assert axes.tp == (1, 2, 4, 8)
    assert axes.pp == (1, 2, 4, 8, 16, 32, 64)  # divisors of 16,384 up to the 126 layers (uneven stages allowed)
    assert axes.ep == (1,)  # dense model
    even = space.model_copy(update={"uneven_stages": False})
    assert resolve_axes(even, load_model(space.model), load_cluster(space.cluster)).pp == (1, 2)


# an MoE model (128 experts, 32 heads, 4 KV heads) with both expert tensor-parallel modes and two recipes
MOE = SearchSpace(model="qwen3-30b-a3b", cluster="dgx-h100", gpus=(16, 32), seq_len=4096, global_batch=64,
                  tp=(1, 2, 4, 8), pp=(1, 2, 4), cp=(1, 2), ep=(1, 2, 4, 8, 16, 32, 64), vp=(1, 2), micro_batch=(1, 2),
                  recompute=("none",), zero=(0,), precision=("bf16", "fp8"))


@pytest.mark.parametrize("sp", [True, False])
def test_the_expert_masks_agree_with_check_plan_on_every_point(sp: bool) -> None:
    space = MOE.model_copy(update={"sp": sp})
    cfg, cl = load_model(space.model), load_cluster(space.cluster)
    g = _grid(resolve_axes(space, cfg, cl))
    bad = np.zeros(g["tp"].size, dtype=bool)
    for _, m in _masks(g, space, cfg, cl):
        bad |= m
    every = PlanArrays(**{f: g[f] for f in PlanArrays.FIELDS})
    axes = resolve_axes(space, cfg, cl)
    # etp 1 at tp 1 and cp 1 is etp tp: not enumerated twice
    duplicate = (g["etp"] == ETP.index(1)) & (g["tp"] == 1) & (g["cp"] == 1)
    etp_stride = int(np.prod([len(v) for v in list(axes.columns().values())[6:]]))  # the axes after etp
    seen = {"etp 1, ep > dp*cp": 0, "refused": 0, "EP group unplaced": 0}
    for i in np.flatnonzero((g["dp"] > 0) & (g["prec"] == 0)):
        plan = every.plan(int(i), space)
        accepted = _accepted(plan, cfg, cl, int(g["gpus"][i]))
        twin = i - etp_stride if duplicate[i] else i  # a duplicate is judged by its etp tp twin's verdict
        assert g["etp"][twin] == ETP.index("tp") or not duplicate[i]
        if accepted and bad[twin]:  # check_plan accepts it, but the training module cannot place its EP group
            with pytest.raises(ConfigError, match="domains|does not fit|split evenly"):
                simulate_training(cfg, cl, plan)
            seen["EP group unplaced"] += 1
        else:
            assert accepted == (not bad[twin]), every.row(int(i))
        seen["refused"] += not accepted
        seen["etp 1, ep > dp*cp"] += accepted and plan.etp == 1 and plan.ep > plan.dp * plan.cp
    # EP ranks sit tp apart (Megatron-Core's expert grid): an EP group dividing dp*cp always places
    assert seen["refused"] > 100 and seen["EP group unplaced"] == 0
    # EP folded over TP x CP x DP (ep > dp*cp) needs whole experts beside TP, which need sequence parallelism
    assert seen["etp 1, ep > dp*cp"] > 20 if sp else seen["etp 1, ep > dp*cp"] == 0


def test_stages_enumerate_what_the_whole_product_keeps_in_its_order() -> None:
    cfg, cl = load_model(MOE.model), load_cluster("dgx-b200")
    space = MOE.model_copy(update={"cluster": "dgx-b200", "recompute": ("none", "full"), "zero": (0, 3),
                                   "precision": ("bf16", "mxfp8", "fp8")})
    g = _grid(resolve_axes(space, cfg, cl))
    alive = np.ones(g["tp"].size, dtype=bool)
    counts = {}
    for name, bad in _masks(g, space, cfg, cl):
        counts[name] = int((alive & bad).sum())
        alive &= ~bad
    plans, removed, total = enumerate_plans(space, cfg, cl)
    assert removed == counts and total == g["tp"].size
    for f in PlanArrays.FIELDS:
        assert np.array_equal(getattr(plans, f), g[f][alive]), f


def test_a_recipe_the_gpu_cannot_run_is_pruned_by_name() -> None:
    space = MOE.model_copy(update={"precision": ("bf16", "nvfp4")})
    cfg = load_model(space.model)
    h100, _, _ = enumerate_plans(space, cfg, load_cluster("dgx-h100"))
    plans, removed, _ = enumerate_plans(space.model_copy(update={"cluster": "dgx-b200"}), cfg,
                                        load_cluster("dgx-b200"))
    nvfp4 = PRECISIONS.index("nvfp4")
    assert not (h100.prec == nvfp4).any() and len(h100) > 0
    assert (plans.prec == nvfp4).sum() == (plans.prec == PRECISIONS.index("bf16")).sum() == len(h100)
    _, removed_h100, _ = enumerate_plans(space, cfg, load_cluster("dgx-h100"))
    assert removed_h100["precision"] == len(h100) and removed["precision"] == 0
    assert recipe_refusal("nvfp4", load_cluster("dgx-h100").hardware()).startswith("precision nvfp4 needs MX")
    assert "no fp8 peak" in recipe_refusal("fp8", load_cluster("dgx-a100").hardware())
    assert recipe_refusal("fp8", load_cluster("dgx-h100").hardware()) is None


def test_one_recipe_stays_the_fixed_setting() -> None:
    assert SearchSpace(**{**SPACE.model_dump(), "precision": ["fp8"]}).precision == "fp8"
    assert SearchSpace(**{**SPACE.model_dump(), "precision": ("fp8", "bf16")}).precision_text == "fp8,bf16"
    with pytest.raises(ValueError, match="listed twice"):
        SearchSpace(**{**SPACE.model_dump(), "precision": ("fp8", "fp8")})
    with pytest.raises(ValueError):
        SearchSpace(**{**SPACE.model_dump(), "precision": "fp32"})  # not searched


def test_the_etp_axis_collapses_for_a_dense_model() -> None:
    cfg, cl = load_model(MOE.model), load_cluster(MOE.cluster)
    assert resolve_axes(MOE, cfg, cl).etp == (ETP.index("tp"), ETP.index(1))
    assert resolve_axes(SPACE, load_model(SPACE.model), cl).etp == (ETP.index("tp"),)


def test_an_ep_group_carved_from_cp_and_dp_ranks_places_and_prices() -> None:
    # ep 8 over cp 2 x dp 4 with experts split like the MLP (tp 2): Megatron-Core's expert grid puts EP ranks tp
    # apart, so the group spans 16 GPUs (two nodes), not 32
    cfg, cl = load_model("qwen3-30b-a3b"), load_cluster("dgx-h100")
    plan = ParallelPlan(tp=2, cp=2, dp=4, ep=8, sp=True, seq_len=8192, micro_batch=1, global_batch=16, zero=1)
    res = simulate_training(cfg, cl, plan)
    assert res.comm_total_s["ep_comm_s"] > 0 and res.fits
