"""Property tests of the serving simulator over random deployments and loads (hypothesis).

Invariants (one beam and beam search): every request completes or is reported with its reason; a completed
request emitted exactly the tokens it asked for; KV blocks in use never exceed the cache (audited after every
iteration); the same seed gives bit-identical output.
"""

from __future__ import annotations

import os

import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from perfcast.errors import ConfigError
from perfcast.serving import ServingConfig, ServingResult, WorkloadConfig, simulate_serving

_DEEP = int(os.environ.get("PERFCAST_FUZZ_EXAMPLES", "0"))  # e.g. 2000: random examples instead of fixed ones

CONFIGS = st.fixed_dictionaries({
    "scheduler": st.sampled_from(["vllm", "sarathi", "orca", "lightllm", "static"]),
    "gpu_memory_utilization": st.sampled_from([0.2, 0.3, 0.9]),
    "preemption_mode": st.sampled_from(["recompute", "swap"]),
    "chunk_size": st.sampled_from([64, 256, 1024]),
    "max_num_seqs": st.integers(1, 64),
    "block_size": st.sampled_from([1, 16, 32]),
    "enable_prefix_caching": st.booleans(),
    "num_replicas": st.integers(1, 2),
    "num_speculative_tokens": st.sampled_from([0, 0, 3]),
    "num_prefill_replicas": st.sampled_from([0, 0, 1]),
})
LOADS = st.fixed_dictionaries({
    "num_requests": st.integers(1, 25),
    "qps": st.sampled_from([None, 0.5, 4.0, 50.0]),
    "seed": st.integers(0, 2**16),
    "prompt_tokens": st.integers(1, 3000),
    "output_tokens": st.integers(1, 300),
    "shared_prefix_tokens": st.sampled_from([0, 512]),
    "retrieval_latency_s": st.sampled_from([0.0, 0.0, 0.3]),
    "concurrency": st.sampled_from([None, None, 1, 3]),
})


def _run(c: dict, w: dict, **kw: bool) -> ServingResult | None:
    """The simulation, or None when the deployment is refused with the one-line "does not fit" error."""
    draft = "llama-3.2-1b" if c["num_speculative_tokens"] else None
    if c["num_prefill_replicas"] and (c["num_replicas"] < 2 or c["scheduler"] == "static"):
        c = c | {"num_prefill_replicas": 0}
    if c["scheduler"] != "sarathi":  # the chunk is sarathi's budget (ServingConfig refuses it elsewhere)
        c = c | {"chunk_size": ServingConfig.model_fields["chunk_size"].default}
    cfg = ServingConfig(model="llama-3.1-8b", hardware="a100-sxm-80gb", speculative_model=draft,
                        workload=WorkloadConfig(**w), **c)
    try:
        return simulate_serving(cfg, **kw)
    except ConfigError as exc:
        assert "does not fit" in str(exc) and "\n" not in str(exc)
        return None


@settings(max_examples=_DEEP or 30, deadline=None, suppress_health_check=[HealthCheck.too_slow],
          derandomize=not _DEEP, database=None)
@given(CONFIGS, LOADS)
def test_requests_and_tokens_are_conserved_and_kv_stays_within_capacity(c: dict, w: dict) -> None:
    res = _run(c, w, audit=True)
    assume(res is not None)
    assert res is not None
    done = np.array([s == "completed" for s in res.status])
    assert all(s == "completed" or (s.startswith("rejected: ") and len(s) > len("rejected: ")) for s in res.status)
    np.testing.assert_array_equal(res.generated_tokens[done], res.output_tokens[done])
    assert res.metrics.requests_completed == int(done.sum())
    assert res.kv_utilization_max_frac <= 1.0


@settings(max_examples=_DEEP or 10, deadline=None, suppress_health_check=[HealthCheck.too_slow],
          derandomize=not _DEEP, database=None)
@given(CONFIGS, LOADS)
def test_same_seed_same_output(c: dict, w: dict) -> None:
    a, b = _run(c, w), _run(c, w)
    assume(a is not None)
    assert a is not None and b is not None
    assert np.array_equal(a.first_token_s, b.first_token_s, equal_nan=True)
    assert np.array_equal(a.finish_s, b.finish_s, equal_nan=True)
    assert a.status == b.status and a.preemptions == b.preemptions


@settings(max_examples=_DEEP or 20, deadline=None, suppress_health_check=[HealthCheck.too_slow],
          derandomize=not _DEEP, database=None)
@given(CONFIGS, LOADS, st.sampled_from([2, 3, 4]))
def test_beam_search_conserves_requests_and_tokens_and_kv_stays_within_capacity(c: dict, w: dict,
                                                                                beams: int) -> None:
    # beams are not modelled with prefix caching or speculation (a one-line error); max_num_seqs counts beams
    c = c | {"enable_prefix_caching": False, "num_speculative_tokens": 0,
             "max_num_seqs": max(c["max_num_seqs"], beams)}
    res = _run(c, w | {"num_beams": beams}, audit=True)  # audit: KV blocks in use, decode rows and their context
    assume(res is not None)
    assert res is not None
    done = np.array([s == "completed" for s in res.status])
    assert all(s == "completed" or (s.startswith("rejected: ") and len(s) > len("rejected: ")) for s in res.status)
    np.testing.assert_array_equal(res.generated_tokens[done], res.output_tokens[done])
    assert res.kv_utilization_max_frac <= 1.0
