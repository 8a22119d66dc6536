"""Beam search in the serving simulator: a request of ``b`` beams prefills once, decodes ``b`` rows per step, holds
its prompt's KV once and ``b`` copies of its generated tokens, and counts ``b`` sequences against max_num_seqs."""

from __future__ import annotations

import numpy as np
import pytest

from perfcast.errors import ConfigError
from perfcast.serving import ServingConfig, WorkloadConfig, simulate_serving
from perfcast.serving.kv import CountingBlockManager, KVCacheError
from perfcast.serving.sources.mlperf import apply_mlperf, mlperf_workload

BASE = dict(model="llama-2-7b", hardware="a100-sxm-80gb", max_num_seqs=128)


def _cfg(*, n: int, prompt: int, output: int, beams: int = 1, qps: float | None = None, **kw: object) -> ServingConfig:
    work = WorkloadConfig(num_requests=n, qps=qps, prompt_tokens=prompt, output_tokens=output, num_beams=beams,
                          seed=3)
    return ServingConfig(**(BASE | {"workload": work} | kw))  # type: ignore[arg-type]


# -- the KV cache ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("prompt", "beams"), [(40, 4), (48, 3), (5, 2), (16, 1)])
def test_beams_share_the_prompts_full_blocks_and_grow_together(prompt: int, beams: int) -> None:
    bs = 16
    kv = CountingBlockManager(1000, bs, 0.0)
    kv.allocate(7, prompt, None, beams, prompt)
    shared = prompt // bs
    assert kv.num_used_blocks == shared + beams * (-(-prompt // bs) - shared)
    kv.add_to_group(7)
    for step in range(1, 40):
        kv.grow_group(1)
        t = prompt + step
        assert kv.seq_num_tokens(7) == t
        assert kv.num_used_blocks == shared + beams * (-(-t // bs) - shared)  # each beam owns its tail
        kv.check_invariants()
    # the unfilled slots are every beam's, in its own last block
    assert kv.fragmentation_frac == pytest.approx(beams * (-(-t // bs) * bs - t) / (kv.num_used_blocks * bs))


def test_group_growth_of_beams_equals_growing_each_request() -> None:
    a, b = CountingBlockManager(400, 8, 0.0), CountingBlockManager(400, 8, 0.0)
    for kv in (a, b):
        for sid, (prompt, beams) in enumerate([(13, 4), (30, 1), (9, 2), (64, 3)]):
            kv.allocate(sid, prompt, None, beams, prompt)
            kv.add_to_group(sid)
    a.grow_group(21)
    for sid in range(4):
        b.append(sid, 21)
    assert a.num_free_blocks == b.num_free_blocks
    assert a.fragmentation_frac == b.fragmentation_frac
    assert [a.seq_num_blocks(s) for s in range(4)] == [b.seq_num_blocks(s) for s in range(4)]
    a.check_invariants()
    b.check_invariants()


def test_group_growth_of_beams_stops_at_capacity() -> None:
    kv = CountingBlockManager(30, 4, 0.0)
    kv.allocate(0, 10, None, 4, 10)  # 2 shared + 4 tails of 1 block = 6 blocks
    kv.add_to_group(0)
    assert kv.num_used_blocks == 6
    j = kv.max_group_growth(1000)
    assert j == 2 + 4 * 6  # 24 free blocks: 6 per beam, and 2 more tokens fit in each beam's partial tail
    kv.grow_group(j)
    assert kv.num_used_blocks == kv.num_blocks
    assert kv.max_group_growth(1) == 0
    with pytest.raises(KVCacheError):
        kv.grow_group(1)
    kv.check_invariants()


def test_swapping_a_beam_request_moves_all_its_blocks() -> None:
    kv = CountingBlockManager(100, 16, 0.0, num_cpu_blocks=100)
    kv.allocate(1, 50, None, 4, 50)
    kv.append(1, 20)
    held = kv.seq_num_blocks(1)
    assert kv.swap_out(1) == held and kv.num_used_blocks == 0
    assert kv.swap_in(1) == held and kv.num_used_blocks == held
    kv.check_invariants()


# -- the engine --------------------------------------------------------------------------------------------------
def test_beams_cost_more_per_step_than_one_sequence_and_less_than_independent_requests() -> None:
    prompt, output, beams = 1500, 64, 4
    kw = {"max_num_batched_tokens": 8192}  # the separate requests' prompts prefill in one iteration
    one = simulate_serving(_cfg(n=1, prompt=prompt, output=output, **kw))
    beam = simulate_serving(_cfg(n=1, prompt=prompt, output=output, beams=beams, **kw), audit=True)
    apart = simulate_serving(_cfg(n=beams, prompt=prompt, output=output, **kw))  # the same rows as requests
    assert beam.metrics.tpot_s.mean > one.metrics.tpot_s.mean  # b rows per step
    # the prompt is computed once: the first token comes as soon as one request's and well before b prompts'
    assert beam.first_token_s[0] - beam.arrival_s[0] == pytest.approx(one.first_token_s[0] - one.arrival_s[0])
    assert beam.metrics.ttft_s.mean < 0.5 * apart.metrics.ttft_s.mean
    # the decode steps then read the same rows and context as b independent sequences
    # (the last b - 1 requests, prefilled together after the first, then decode just as the beams do)
    tpot_apart = (apart.finish_s[-1] - apart.first_token_s[-1]) / (output - 1)
    assert beam.metrics.tpot_s.mean == pytest.approx(tpot_apart, rel=1e-9)
    # output tokens count once, and each beam holds its own
    assert beam.generated_tokens[0] == output
    assert beam.metrics.throughput_tokens_per_s < apart.metrics.throughput_tokens_per_s


@pytest.mark.parametrize("scheduler", ["vllm", "sarathi", "orca", "lightllm", "static"])
def test_beam_requests_complete_with_their_tokens_within_capacity(scheduler: str) -> None:
    cfg = ServingConfig(model="llama-2-7b", hardware="a100-sxm-80gb", scheduler=scheduler, max_num_seqs=64,
                        gpu_memory_utilization=0.9 if scheduler == "static" else 0.3, workload=WorkloadConfig(
                            num_requests=60, qps=8.0, trace="arxiv_summarization", seed=5, num_beams=4))
    res = simulate_serving(cfg, audit=True)  # audits KV use <= capacity and the decode rows every iteration
    done = np.array([s == "completed" for s in res.status])
    assert done.all(), res.status
    np.testing.assert_array_equal(res.generated_tokens, res.output_tokens)
    assert res.kv_utilization_max_frac <= 1.0


@pytest.mark.parametrize("scheduler", ["vllm", "sarathi", "orca", "lightllm"])
def test_beam_decode_stretches_match_running_every_iteration(scheduler: str) -> None:
    cfg = ServingConfig(model="llama-2-7b", hardware="a100-sxm-80gb", scheduler=scheduler, max_num_seqs=64,
                        workload=WorkloadConfig(num_requests=50, qps=1.0, trace="splitwise_conv", seed=9, num_beams=3))
    fast, slow = simulate_serving(cfg, audit=True), simulate_serving(cfg, keep_events=True)
    assert fast.iterations == slow.iterations == len(slow.events)
    np.testing.assert_array_equal(fast.generated_tokens, slow.generated_tokens)
    for name in ("first_token_s", "finish_s"):
        np.testing.assert_allclose(getattr(fast, name), getattr(slow, name), rtol=1e-9)


def test_max_num_seqs_counts_beams() -> None:
    res = simulate_serving(_cfg(n=10, prompt=100, output=30, beams=4, max_num_seqs=8), keep_events=True)
    rows = [e.decode_seqs for e in res.events if e.decode_seqs]
    assert max(rows) == 8  # two requests of four beams at a time
    assert all(r % 4 == 0 for r in rows)
    assert all(s == "completed" for s in res.status)


def test_more_beams_than_max_num_seqs_is_refused() -> None:
    with pytest.raises(ConfigError, match="beams exceed max_num_seqs 2"):
        simulate_serving(_cfg(n=3, prompt=100, output=30, beams=4, max_num_seqs=2))


def test_memory_pressure_with_beams_preempts_and_completes() -> None:
    cfg = _cfg(n=40, prompt=1800, output=300, beams=4, max_num_seqs=256, gpu_memory_utilization=0.3)
    res = simulate_serving(cfg, audit=True)
    assert res.preemptions > 0
    np.testing.assert_array_equal(res.generated_tokens, res.output_tokens)


@pytest.mark.parametrize("kw", [{"enable_prefix_caching": True},
                                {"speculative_model": "llama-2-7b", "num_speculative_tokens": 3}])
def test_beams_with_prefix_caching_or_speculation_are_one_line_errors(kw: dict[str, object]) -> None:
    with pytest.raises(ConfigError, match="beam search") as err:
        simulate_serving(_cfg(n=2, prompt=100, output=10, beams=2, **kw))
    assert "\n" not in str(err.value)


def test_num_beams_must_be_positive() -> None:
    with pytest.raises(ValueError, match="num_beams"):
        WorkloadConfig(num_beams=0)


# -- MLPerf ------------------------------------------------------------------------------------------------------
def test_the_gptj_preset_decodes_four_beams_and_others_one() -> None:
    assert mlperf_workload("mlperf:gptj:offline").workload.num_beams == 4
    assert mlperf_workload("mlperf:llama2-70b:offline").workload.num_beams == 1
    cfg = ServingConfig(model="gpt-j-6b", hardware="h100-sxm-80gb")
    assert apply_mlperf(cfg, "mlperf:gptj:server").workload.num_beams == 4
    mine = cfg.model_copy(update={"workload": WorkloadConfig(num_beams=1)})  # a beam width given explicitly wins
    assert apply_mlperf(mine, "mlperf:gptj:offline").workload.num_beams == 1
