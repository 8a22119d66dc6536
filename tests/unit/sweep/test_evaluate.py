"""The vectorized evaluator against the exact predictor: the same memory (so the same OOM verdicts), step times
within the pipeline closed form's error, exactly equal where there is no pipeline."""

from __future__ import annotations

import numpy as np
import pytest

from perfcast.sweep.evaluate import Pricer, evaluate_plans
from perfcast.sweep.space import SearchSpace, enumerate_plans
from perfcast.system.training import simulate_training

SPACE = SearchSpace(model="llama-3-8b", cluster="dgx-h100", gpus=(16, 64), seq_len=4096, global_batch=128,
                    cp=(1, 2), vp=(1, 2, 4), micro_batch=(1, 2))


@pytest.fixture(scope="module")
def evaluated() -> tuple[Pricer, object, object]:
    pricer = Pricer(SPACE)
    plans, _, _ = enumerate_plans(SPACE, pricer.cfg, pricer.cluster)
    return pricer, plans, evaluate_plans(pricer, plans)


def test_memory_matches_the_exact_predictor_and_step_time_is_close(evaluated) -> None:
    pricer, plans, scores = evaluated
    rng = np.random.default_rng(7)
    step_err, mem_err = [], []
    for i in rng.choice(len(plans), 60, replace=False):
        exact = simulate_training(pricer.cfg, pricer.cluster, plans.plan(int(i), SPACE))
        mem_err.append(abs(scores.memory_bytes[i] / exact.memory.total_bytes - 1))
        step_err.append(abs(scores.step_time_s[i] / exact.step_time_s - 1))
        assert scores.tflops_per_gpu[i] * scores.step_time_s[i] == pytest.approx(
            exact.tflops_per_gpu * exact.step_time_s, rel=1e-9)  # same FLOP convention
        if plans.pp[i] == 1:  # no pipeline schedule: the same arithmetic
            assert step_err[-1] < 1e-9, plans.row(int(i))
    assert max(mem_err) < 1e-9
    assert np.median(step_err) < 0.01 and max(step_err) < 0.10


def test_chunks_evaluate_to_the_same_numbers(evaluated) -> None:
    pricer, plans, scores = evaluated
    half = len(plans) // 2
    fresh = Pricer(SPACE)
    parts = [evaluate_plans(fresh, plans.take(slice(half, None))), evaluate_plans(fresh, plans.take(slice(0, half)))]
    assert np.array_equal(np.concatenate([parts[1].step_time_s, parts[0].step_time_s]), scores.step_time_s)
    assert np.array_equal(np.concatenate([parts[1].memory_bytes, parts[0].memory_bytes]), scores.memory_bytes)


def test_more_recompute_never_needs_more_memory(evaluated) -> None:
    _, plans, scores = evaluated
    key = {tuple(plans.row(i)[f] for f in ("gpus", "tp", "pp", "dp", "cp", "vp", "mb", "zero")): i
           for i in range(len(plans)) if plans.rc[i] == 0}
    checked = 0
    for i in range(len(plans)):
        if plans.rc[i] == 2:
            j = key[tuple(plans.row(i)[f] for f in ("gpus", "tp", "pp", "dp", "cp", "vp", "mb", "zero"))]
            assert scores.memory_bytes[i] <= scores.memory_bytes[j]
            # never faster; equal (to rounding) where a host-bound step hides the recomputed kernels
            assert scores.step_time_s[i] >= scores.step_time_s[j] * (1 - 1e-12)
            checked += 1
    assert checked > 50
