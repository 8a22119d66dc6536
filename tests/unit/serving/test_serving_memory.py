"""One GPU's memory in a serving deployment and the does-not-fit verdict (weights, activations, KV cache)."""

from __future__ import annotations

import pytest

from perfcast.errors import ConfigError
from perfcast.results.serialize import to_json
from perfcast.serving import ServingConfig, WorkloadConfig, simulate_serving
from perfcast.serving.deployment import serving_memory

WORK = WorkloadConfig(num_requests=20, qps=2.0, prompt_tokens=512, output_tokens=64)


def _cfg(**kw: object) -> ServingConfig:
    return ServingConfig(**({"model": "llama-2-7b", "hardware": "a100-sxm-80gb", "workload": WORK} | kw))  # type: ignore[arg-type]


def test_the_parts_add_up_within_the_usable_memory_and_the_run_uses_that_cache() -> None:
    m = serving_memory(_cfg())
    assert m.fits and m.verdict == "fits"
    assert m.usable_bytes == pytest.approx(0.9 * 80 * 2**30)
    assert m.weights_bytes + m.activations_peak_bytes + m.kv_cache_bytes <= m.usable_bytes
    # what is left after whole blocks is less than one block
    assert m.usable_bytes - m.weights_bytes - m.activations_peak_bytes - m.kv_cache_bytes < m.kv_bytes_per_token * 16
    res = simulate_serving(_cfg())
    assert res.memory == m and res.kv_blocks_per_engine == m.kv_blocks
    assert to_json(res)["fits"] is True and to_json(res)["memory_kv_cache_bytes"] == m.kv_cache_bytes


def test_weights_above_the_usable_memory_do_not_fit() -> None:
    cfg = _cfg(model="llama-2-70b")
    m = serving_memory(cfg)
    assert not m.fits and m.kv_cache_bytes == 0 and m.weights_bytes > m.usable_bytes
    assert m.verdict.startswith("llama-2-70b needs 128.5 GiB of weights per GPU at tp=1, pp=1")
    with pytest.raises(ConfigError, match="GiB of weights per GPU"):  # nothing to simulate
        simulate_serving(cfg)
    assert serving_memory(cfg.model_copy(update={"tensor_parallel_size": 2})).fits


def test_no_room_left_for_the_kv_cache_does_not_fit() -> None:
    m = serving_memory(_cfg(gpu_memory_utilization=0.158))  # 12.6 GiB of weights and 0.2 of activations
    assert not m.fits and "leaves no room for a KV cache" in m.verdict and m.kv_blocks == 0


def test_a_kv_cache_too_small_for_one_request_of_the_workload_does_not_fit() -> None:
    long = WorkloadConfig(num_requests=20, prompt_tokens=3000, output_tokens=1000)
    m = serving_memory(_cfg(gpu_memory_utilization=0.17, workload=long))
    assert not m.fits and 0 < m.kv_blocks * 16 < 4000
    assert "too few for one request of the workload: the smallest needs 3,000 + 1,000 tokens" in m.verdict
    # the same cache holds shorter requests
    assert serving_memory(_cfg(gpu_memory_utilization=0.17)).fits


def test_a_speculative_draft_shares_the_gpus_weights_and_kv_cache() -> None:
    """vLLM loads the draft beside the target and keeps both models' KV cache of every token; perfcast counted
    neither (a Llama-2-70B draft 'fit' on one 80 GB GPU with a Llama-2-7B target)."""
    plain = serving_memory(_cfg())
    spec = serving_memory(_cfg(speculative_model="llama-2-7b", num_speculative_tokens=4))
    assert spec.weights_bytes == pytest.approx(2 * plain.weights_bytes)
    assert spec.kv_bytes_per_token == plain.kv_bytes_per_token  # the target's
    # each block now holds the draft's cache of its tokens too (same shape: twice the bytes per block)
    left = plain.usable_bytes - spec.weights_bytes - spec.activations_peak_bytes
    assert spec.kv_blocks == int(left / (2 * 16 * plain.kv_bytes_per_token))
    big = serving_memory(_cfg(speculative_model="llama-2-70b", num_speculative_tokens=4))
    assert not big.fits and "(with the draft llama-2-70b)" in big.verdict


@pytest.mark.parametrize(("draft", "fragment"), [
    ("llama-3.2-1b", "has a 128,256-token vocabulary and llama-2-7b 32,000"),  # another tokenizer
    ("bert-base", "is not a text decoder"),
])
def test_a_draft_that_cannot_propose_the_targets_tokens_is_refused(draft: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        serving_memory(_cfg(speculative_model=draft, num_speculative_tokens=4))
