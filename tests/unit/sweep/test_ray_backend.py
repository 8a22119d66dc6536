"""The Ray backend evaluates the same plans to the same numbers as the local one (starts a local Ray: slow-ish)."""

from __future__ import annotations

import numpy as np
import pytest

from perfcast.sweep.evaluate import Pricer, evaluate_plans
from perfcast.sweep.ray_backend import evaluate_with_ray
from perfcast.sweep.space import SearchSpace, enumerate_plans


def test_ray_gives_the_local_results() -> None:
    pytest.importorskip("ray")
    space = SearchSpace(model="llama-3-8b", cluster="dgx-h100", gpus=(16,), seq_len=4096, global_batch=64,
                        cp=(1, 2), vp=(1, 2), micro_batch=(1, 2))
    pricer = Pricer(space)
    plans, _, _ = enumerate_plans(space, pricer.cfg, pricer.cluster)
    local = evaluate_plans(pricer, plans)
    remote = evaluate_with_ray(space, plans, chunks=3)
    assert np.array_equal(local.step_time_s, remote.step_time_s)
    assert np.array_equal(local.memory_bytes, remote.memory_bytes)
    assert np.array_equal(local.tflops_per_gpu, remote.tflops_per_gpu)
