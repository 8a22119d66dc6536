"""The training search: exact re-ranking, the Pareto front, the published reference, and an empty space
naming the constraint that emptied it."""

from __future__ import annotations

import numpy as np
import pytest

from perfcast.errors import ConfigError
from perfcast.results.serialize import to_json
from perfcast.sweep.search import pareto_front, search_training
from perfcast.sweep.space import SearchSpace

SMALL = SearchSpace(model="llama-3-8b", cluster="dgx-h100", gpus=(16, 32), seq_len=4096, global_batch=64,
                    cp=(1, 2), vp=(1, 2), micro_batch=(1, 2))


def test_pareto_front_by_hand() -> None:
    tflops = np.array([100.0, 300.0, 200.0, 300.0, 50.0])
    memory = np.array([10.0, 40.0, 20.0, 30.0, 5.0])
    assert pareto_front(tflops, memory).tolist() == [4, 0, 2, 3]  # index 1 is beaten by 3 (same speed, less memory)


def test_best_plans_are_ranked_by_the_exact_predictor_and_fit() -> None:
    res = search_training(SMALL, top=4, price_per_gpu_hour_usd=2.0)
    assert res.plans_evaluated + sum(v for k, v in res.rejected.items() if k != "memory") == res.plans_enumerated
    assert res.plans_feasible == res.plans_evaluated - res.rejected["memory"]
    exact = [r.exact.tflops_per_gpu for r in res.best]
    assert exact == sorted(exact, reverse=True) and len(res.best) == 4
    assert all(r.exact.fits for r in res.best)
    row = to_json(res.best[0])
    for key in ("tp", "pp", "dp", "cp", "ep", "vp", "micro_batch", "recompute", "zero", "tflops_per_gpu",
                "step_time_s", "memory_per_gpu_gib", "cost_usd_per_step", "exact_tflops_per_gpu"):
        assert key in row, key
    assert row["cost_usd_per_step"] == pytest.approx(row["gpus"] * row["step_time_s"] / 3600 * 2.0)
    # the front: memory rises and throughput rises along it
    mem = [r.memory_per_gpu_bytes for r in res.pareto]
    tf = [r.tflops_per_gpu for r in res.pareto]
    assert mem == sorted(mem) and tf == sorted(tf) and len(set(tf)) == len(tf)
    assert res.agreement["memory_max_abs_err_frac"] < 1e-9
    assert not res.references  # no published run of this model


def test_objectives_differ_across_gpu_counts() -> None:
    fast = search_training(SMALL, objective="step-time", top=1).best[0]
    cheap = search_training(SMALL, objective="cost", top=1).best[0]
    assert fast.plan["gpus"] == 32 and cheap.plan["gpus"] == 16  # more GPUs finish a step sooner, fewer waste less
    assert fast.exact.step_time_s <= cheap.exact.step_time_s


def test_the_published_llama3_plan_is_compared() -> None:
    space = SearchSpace(model="llama-3-405b", cluster="dgx-h100", gpus=(16384,), seq_len=8192, global_batch=2048,
                        tp=(8,), pp=(16,), cp=(1, 2), vp=(1, 2, 4), micro_batch=(1,), recompute=("none",), zero=(1, 2))
    res = search_training(space, top=3)
    ref = res.references[0]
    assert (ref.row.plan["tp"], ref.row.plan["pp"], ref.row.plan["dp"]) == (8, 16, 128)
    assert ref.published.tflops_per_gpu == 400
    assert ref.best_vs_reference_frac == pytest.approx(
        res.best[0].exact.tflops_per_gpu / ref.row.exact.tflops_per_gpu - 1)
    assert "reference" in to_json(res)


def test_no_feasible_plan_names_memory() -> None:
    space = SearchSpace(model="llama-3-405b", cluster="dgx-h100", gpus=(8,), seq_len=8192, global_batch=8)
    with pytest.raises(ConfigError, match=r"the memory constraint .* removed the last plans .* least memory"):
        search_training(space)


def test_no_feasible_plan_names_the_batch() -> None:
    space = SearchSpace(model="llama-3-8b", cluster="dgx-h100", gpus=(64,), seq_len=4096, global_batch=3,
                        tp=(1, 2), pp=(1, 2), cp=(1,))  # dp >= 16 > 3 sequences
    with pytest.raises(ConfigError, match="the global batch constraint"):
        search_training(space)


def test_gpus_must_fill_nodes() -> None:
    space = SMALL.model_copy(update={"gpus": (12,)})
    with pytest.raises(ConfigError, match="use a multiple of 8"):
        search_training(space)


MOE = SearchSpace(model="mixtral-8x7b", cluster="dgx-h100", gpus=(16,), seq_len=4096, global_batch=64,
                  tp=(1, 2, 4), pp=(1, 2), cp=(1,), vp=(1, 2), micro_batch=(1, 2), zero=(1, 3),
                  precision=("bf16", "fp8"))


def test_an_moe_search_over_etp_and_precision_agrees_with_the_exact_predictor() -> None:
    res = search_training(MOE, top=5)
    assert res.rejected["precision"] == 0 and res.rejected["experts"] > 0
    assert res.agreement["memory_max_abs_err_frac"] < 1e-9
    assert res.agreement["step_time_median_abs_err_frac"] < 0.01 and res.agreement["step_time_max_abs_err_frac"] < 0.1
    row = to_json(res.best[0])
    assert row["precision"] in ("bf16", "fp8") and row["etp"] in ("tp", 1)
    assert res.best[0].exact.plan.precision == row["precision"] and res.best[0].exact.plan.etp == row["etp"]
    # both recipes and both expert layouts reach the exactly re-predicted plans
    seen = {(r.exact.plan.precision, r.exact.plan.etp) for r in res.best + res.pareto}
    assert {p for p, _ in seen} == {"bf16", "fp8"} and {e for _, e in seen} == {"tp", 1}
    dense = to_json(search_training(SMALL, top=1).best[0])
    assert "precision" not in dense and "etp" not in dense  # one recipe, a dense model: the rows as before


def test_a_recipe_the_gpu_cannot_run_is_named_when_it_empties_the_space() -> None:
    with pytest.raises(ConfigError, match=r"the precision constraint \(the GPU must run the precision recipe"):
        search_training(SMALL.model_copy(update={"precision": "nvfp4"}))
    res = search_training(SMALL.model_copy(update={"precision": ("bf16", "mxfp8")}), top=1)
    assert res.rejected["precision"] == res.plans_evaluated  # as many mxfp8 plans pruned as bf16 ones priced


def test_the_published_plan_is_compared_in_its_own_precision() -> None:
    space = SearchSpace(model="llama-3-405b", cluster="dgx-h100", gpus=(16384,), seq_len=8192, global_batch=2048,
                        tp=(8,), pp=(16,), cp=(1,), vp=(1, 2), micro_batch=(1,), recompute=("none",), zero=(1,))
    assert not search_training(space.model_copy(update={"precision": "fp8"}), top=1).references  # a bf16 run
    both = search_training(space.model_copy(update={"precision": ("fp8", "bf16")}), top=1)
    ref = both.references[0]
    assert ref.row.exact.plan.precision == "bf16" and to_json(ref.row)["precision"] == "bf16"
