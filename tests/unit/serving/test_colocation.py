"""Two models on the same GPUs: the memory split and the compute sharing both cost each model."""

from __future__ import annotations

import pytest

from perfcast.errors import ConfigError
from perfcast.results.serialize import to_json
from perfcast.serving import ServingConfig, WorkloadConfig, simulate_serving
from perfcast.serving.experiments.colocation import simulate_colocated

LOAD = WorkloadConfig(num_requests=60, qps=2.0, trace="splitwise_conv", seed=1)
FIRST = ServingConfig(model="llama-3.1-8b", hardware="h100-sxm-80gb", workload=LOAD)
SECOND = ServingConfig(model="mistral-7b", hardware="h100-sxm-80gb", workload=LOAD.model_copy(update={"seed": 2}))


@pytest.mark.parametrize("mode", ["time_sliced", "shared"])
def test_sharing_the_gpus_slows_both_models(mode: str) -> None:
    alone = simulate_serving(FIRST)
    pair = simulate_colocated(FIRST, SECOND, mode=mode, memory_frac=0.5)
    assert pair.first.metrics.requests_completed == 60 and pair.second.metrics.requests_completed == 60
    assert pair.first.metrics.tpot_s.p50 > 1.2 * alone.metrics.tpot_s.p50
    # each model keeps its weights and half of the usable memory: far fewer KV blocks than alone
    assert pair.first.kv_blocks_per_engine < 0.5 * alone.kv_blocks_per_engine
    assert 0 < pair.first.busy_frac <= 1 and 0 < pair.second.busy_frac <= 1
    assert to_json(pair)["colocated"]["model"] == "mistral-7b"


def test_colocated_models_must_share_the_gpus() -> None:
    with pytest.raises(ConfigError, match="same GPUs"):
        simulate_colocated(FIRST, SECOND.model_copy(update={"hardware": "a100-sxm-80gb"}))
    with pytest.raises(ConfigError, match="between 0 and 1"):
        simulate_colocated(FIRST, SECOND, memory_frac=1.0)
