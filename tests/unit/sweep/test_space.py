"""The search space: the vectorized constraints refuse exactly the plans ``check_plan`` refuses, and each
removal is counted once."""

from __future__ import annotations

import numpy as np

from perfcast.catalog.models import load_model
from perfcast.errors import ConfigError
from perfcast.sweep.space import CONSTRAINTS, PlanArrays, SearchSpace, _grid, _masks, enumerate_plans, resolve_axes
from perfcast.system.cluster import load_cluster
from perfcast.system.plan import check_plan

SPACE = SearchSpace(model="llama-2-13b", cluster="dgx-a100", gpus=(16, 32), seq_len=4096, global_batch=64,
                    tp=(1, 2, 4, 8, 16), pp=(1, 2, 4, 8, 40, 64), cp=(1, 2, 3), vp=(1, 2, 3), micro_batch=(1, 2, 4))


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
        plan = every.plan(int(i), SPACE)
        gpus = int(g["gpus"][i])
        try:
            check_plan(plan, cfg, cl.with_nodes(gpus // 8), num_gpus=gpus)
            accepted = True
        except ConfigError:
            accepted = False
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
