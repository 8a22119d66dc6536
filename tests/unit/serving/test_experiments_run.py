"""Unit tests of ``perfcast.serving.experiments.run``: the one entry point runs each experiment as its own
function does."""

from __future__ import annotations

import numpy as np

from perfcast.serving import ServingConfig, WorkloadConfig, simulate_serving
from perfcast.serving.experiments.colocation import simulate_colocated
from perfcast.serving.experiments.run import Colocation, Simulation, run_experiment

_CFG = ServingConfig(model="llama-2-7b", hardware="a100-sxm-80gb",
                     workload=WorkloadConfig(prompt_tokens=256, output_tokens=32, num_requests=30, qps=4.0, seed=1))


def test_a_simulation_is_simulate_serving() -> None:
    direct = simulate_serving(_CFG, explain=True)
    run = run_experiment(Simulation(_CFG, explain=True))
    np.testing.assert_array_equal(run.finish_s, direct.finish_s)
    assert run.breakdown == direct.breakdown


def test_a_colocation_is_simulate_colocated() -> None:
    second = _CFG.model_copy(update={"workload": _CFG.workload.model_copy(update={"seed": 2})})
    direct = simulate_colocated(_CFG, second, memory_frac=0.6)
    run = run_experiment(Colocation(_CFG, second, memory_frac=0.6))
    assert run.passes == direct.passes
    np.testing.assert_array_equal(run.first.finish_s, direct.first.finish_s)
    np.testing.assert_array_equal(run.second.finish_s, direct.second.finish_s)
