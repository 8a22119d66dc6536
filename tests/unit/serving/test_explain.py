"""Unit tests of ``perfcast.serving.explain`` through the engine: a run asked to explain its time gives the same
figures, and its parts add up to the run's GPU time."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from perfcast.results.serialize import to_json
from perfcast.serving import ServingConfig, WorkloadConfig, simulate_serving

_LOAD = WorkloadConfig(prompt_tokens=512, output_tokens=64, num_requests=40, qps=8.0, seed=3)


@pytest.mark.parametrize("fields", [
    {},
    {"pipeline_parallel_size": 2},
    {"tensor_parallel_size": 2},
    {"model": "llama-2-13b", "speculative_model": "llama-2-7b", "num_speculative_tokens": 3},
    {"scheduler": "sarathi", "chunk_size": 256},
    {"model": "llava-1.5-7b", "workload": _LOAD.model_copy(update={"images_per_request": 1})},
], ids=["plain", "pp2", "tp2", "speculative", "sarathi", "images"])
def test_explaining_changes_no_figure_and_its_parts_sum_to_the_gpu_time(fields: dict[str, Any]) -> None:
    cfg = ServingConfig(**{"model": "llama-2-7b", "hardware": "a100-sxm-80gb", "workload": _LOAD, **fields})
    plain = simulate_serving(cfg)
    explained = simulate_serving(cfg, explain=True)
    assert plain.breakdown is None
    for name in ("first_token_s", "finish_s", "generated_tokens"):
        np.testing.assert_array_equal(getattr(plain, name), getattr(explained, name))
    assert explained.gpu_time_s == plain.gpu_time_s and explained.iterations == plain.iterations
    parts = explained.breakdown
    assert parts is not None
    assert min(to_json(parts).values()) >= 0
    assert parts.total_s - parts.kv_swap_s == pytest.approx(plain.gpu_time_s, rel=1e-9)
    assert parts.linear_s > 0 and parts.attention_prefill_s > 0
    if "speculative_model" in fields:  # the target verifies its draft's tokens as a prefill over each context
        assert parts.draft_model_s > 0 and parts.attention_decode_s == 0
    else:
        assert parts.attention_decode_s > 0
    if "images_per_request" in str(fields):
        assert parts.vision_encoder_s > 0
    if cfg.tensor_parallel_size > 1:
        assert parts.communication_s > 0
    assert "iteration_breakdown_s" in to_json(explained) and "iteration_breakdown_s" not in to_json(plain)
