"""The serving simulator: conservation of requests and tokens, determinism, each policy's shape, memory."""

from __future__ import annotations

import numpy as np
import pytest

from perfcast.errors import ConfigError, UnknownNameError, UnsupportedError
from perfcast.results.serialize import to_json
from perfcast.serving import IterationModel, PrefillChunk, ServingConfig, WorkloadConfig, simulate_serving
from perfcast.serving.timeline import serving_trace

BASE = dict(model="llama-2-7b", hardware="a100-sxm-80gb", max_num_seqs=128)


def _cfg(scheduler: str = "vllm", *, n: int = 60, qps: float | None = 2.0, trace: str | None = "arxiv_summarization",
         **kw: object) -> ServingConfig:
    load = {"num_requests": n, "qps": qps, "trace": trace, "seed": 42}
    load.update({k: kw.pop(k) for k in list(kw) if k in WorkloadConfig.model_fields})
    work = WorkloadConfig(**load)  # type: ignore[arg-type]
    return ServingConfig(**(BASE | {"scheduler": scheduler, "workload": work} | kw))  # type: ignore[arg-type]


def _assert_conserved(res) -> None:  # type: ignore[no-untyped-def]
    done = np.array([s == "completed" for s in res.status])
    assert all(s == "completed" or s.startswith("rejected: ") for s in res.status)
    np.testing.assert_array_equal(res.generated_tokens[done], res.output_tokens[done])
    assert np.all(res.first_token_s[done] >= res.arrival_s[done])
    assert np.all(res.finish_s[done] >= res.first_token_s[done])
    assert 0.0 <= res.kv_utilization_mean_frac <= res.kv_utilization_max_frac <= 1.0


@pytest.mark.parametrize("scheduler", ["vllm", "sarathi", "sglang", "orca", "lightllm", "static"])
def test_every_request_completes_with_all_its_tokens(scheduler: str) -> None:
    res = simulate_serving(_cfg(scheduler))
    _assert_conserved(res)
    assert res.metrics.requests_completed == 60
    assert res.metrics.ttft_s.p50 > 0 and res.metrics.tpot_s.p50 > 0


def test_same_seed_is_bit_identical_and_another_seed_is_not() -> None:
    a, b = simulate_serving(_cfg()), simulate_serving(_cfg())
    for name in ("arrival_s", "first_token_s", "finish_s"):
        assert np.array_equal(getattr(a, name), getattr(b, name))
    assert to_json(a) == to_json(b)
    c = simulate_serving(_cfg(seed=7))
    assert not np.array_equal(a.finish_s, c.finish_s)


def test_vllm_iterations_are_prefill_or_decode_and_sarathi_respects_its_chunk() -> None:
    v = simulate_serving(_cfg("vllm"), keep_events=True)
    assert all(not (e.prefill_tokens and e.decode_seqs) for e in v.events)
    s = simulate_serving(_cfg("sarathi", chunk_size=256), keep_events=True)
    assert all(e.prefill_tokens + e.decode_seqs <= 256 for e in s.events)
    assert any(e.prefill_tokens and e.decode_seqs for e in s.events)  # mixed batches


def test_chunked_prefill_flag_runs_the_sarathi_policy() -> None:
    a = simulate_serving(_cfg("vllm", enable_chunked_prefill=True, chunk_size=512))
    b = simulate_serving(_cfg("sarathi", chunk_size=512))
    assert np.array_equal(a.finish_s, b.finish_s)


def test_chunking_lowers_the_decode_tail_under_long_prompts() -> None:
    v = simulate_serving(_cfg("vllm", n=120))
    s = simulate_serving(_cfg("sarathi", n=120, chunk_size=512))
    assert s.metrics.tpot_s.p99 < v.metrics.tpot_s.p99


def test_static_batching_waits_for_the_whole_batch() -> None:
    st = simulate_serving(_cfg("static", n=40))
    cont = simulate_serving(_cfg("vllm", n=40))
    assert st.metrics.ttft_s.p90 > cont.metrics.ttft_s.p90
    _assert_conserved(st)


@pytest.mark.parametrize("mode", ["recompute", "swap"])
def test_memory_pressure_preempts_and_still_completes(mode: str) -> None:
    cfg = _cfg("vllm", n=80, qps=8.0, gpu_memory_utilization=0.25, preemption_mode=mode)
    res = simulate_serving(cfg)
    _assert_conserved(res)
    assert res.preemptions > 0
    assert res.metrics.requests_completed + sum(s.startswith("rejected") for s in res.status) == 80


def test_full_length_reservation_never_preempts() -> None:
    for scheduler in ("orca", "lightllm"):
        res = simulate_serving(_cfg(scheduler, n=80, qps=8.0, gpu_memory_utilization=0.25))
        assert res.preemptions == 0
        _assert_conserved(res)


def test_requests_that_can_never_fit_are_rejected_with_a_reason() -> None:
    # a KV cache of ~1,400 tokens: the trace's long prompts can never be admitted, the short ones can
    res = simulate_serving(_cfg("vllm", n=100, gpu_memory_utilization=0.17, max_num_batched_tokens=8192,
                                trace="splitwise_code"))
    rejected = [s for s in res.status if s != "completed"]
    assert rejected and res.metrics.requests_completed > 0
    assert all(s.startswith("rejected: ") and ("KV blocks" in s or "KV cache" in s or "context length" in s)
               for s in rejected)
    # every refusal is counted under its reason
    assert sum(res.rejection_counts.values()) == len(rejected) == to_json(res)["requests_rejected"]
    assert any("KV blocks than the replica has" in r for r in res.rejection_counts)
    # a request whose context outgrew the cache after a recompute preemption is rejected, not left waiting
    # (it used to block the queue behind it)
    assert any("preemption" in s for s in rejected)


def test_requests_longer_than_the_context_are_rejected_not_truncated() -> None:
    res = simulate_serving(_cfg(n=60, max_model_len=2048))  # arxiv_summarization: long and short prompts
    asked = res.prompt_tokens + res.output_tokens  # the trace's lengths, not cut to the limit
    long = asked > 2048
    assert long.any() and (~long).any()
    reason = "prompt + output tokens exceed the maximum context length (2048 tokens)"
    for i in range(60):
        if long[i]:  # vLLM's 400 message, with the request's own figures
            assert res.status[i] == (
                f"rejected: {reason}: This model's maximum context length is 2048 tokens. However, you requested "
                f"{asked[i]} tokens ({res.prompt_tokens[i]} in the messages, {res.output_tokens[i]} in the completion)")
        else:
            assert res.status[i] == "completed"
    assert res.rejection_counts == {reason: int(long.sum())}
    assert to_json(res)["rejection_reasons"] == [{"reason": reason, "requests": int(long.sum())}]
    # latencies and throughput are over the served requests only
    assert res.metrics.requests_completed == int((~long).sum()) and res.metrics.requests_total == 60
    served = ~long
    assert res.metrics.ttft_s.max == pytest.approx(float(np.max(res.first_token_s[served] - res.arrival_s[served])))


def test_every_request_rejected_is_one_line_error_and_a_limit_above_the_context_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"no request can be served: all 20 were rejected \(20 prompt \+ output "
                                          r"tokens exceed the maximum context length \(4096 tokens\)\); the first: "
                                          r"This model's maximum context length is 4096 tokens. However, you "
                                          r"requested 4500 tokens \(3000 in the messages, 1500 in the completion\)"):
        simulate_serving(_cfg(n=20, trace=None, prompt_tokens=3000, output_tokens=1500))
    with pytest.raises(ConfigError, match="max_model_len 8192 is above llama-2-7b's maximum context length of 4096 "
                                          "tokens; use max_model_len <= 4096"):
        simulate_serving(_cfg(max_model_len=8192))
    # a deployment known to run longer says so (vLLM's VLLM_ALLOW_LONG_MAX_MODEL_LEN): served, not cut
    long = simulate_serving(_cfg(n=5, trace=None, prompt_tokens=6000, output_tokens=100, max_model_len=8192,
                                 allow_long_max_model_len=True))
    assert long.metrics.requests_completed == 5 and long.prompt_tokens.tolist() == [6000] * 5




def test_a_kv_budget_too_small_for_any_request_is_an_error() -> None:
    with pytest.raises(ConfigError, match="no request can be served: .*KV blocks"):
        simulate_serving(_cfg("vllm", n=5, trace=None, prompt_tokens=4000, output_tokens=50,
                              gpu_memory_utilization=0.17, max_num_batched_tokens=8192))


def test_shared_prefixes_hit_the_prefix_cache() -> None:
    kw = dict(n=80, trace=None, prompt_tokens=2000, output_tokens=64, shared_prefix_tokens=1600)
    cached = simulate_serving(_cfg("vllm", enable_prefix_caching=True, **kw))
    plain = simulate_serving(_cfg("vllm", **kw))
    assert cached.prefix_hit_frac > 0.5 and plain.prefix_hit_frac == 0.0
    assert cached.metrics.ttft_s.mean < plain.metrics.ttft_s.mean


def test_replicas_split_the_load() -> None:
    one = simulate_serving(_cfg("vllm", n=120, qps=6.0))
    two = simulate_serving(_cfg("vllm", n=120, qps=6.0, num_replicas=2, router="least_outstanding"))
    assert set(two.replica.tolist()) == {0, 1}
    assert two.metrics.e2e_s.mean < one.metrics.e2e_s.mean


def test_pipeline_stages_run_as_virtual_engines() -> None:
    res = simulate_serving(_cfg("vllm", n=40, pipeline_parallel_size=2))
    _assert_conserved(res)
    assert res.weight_bytes_per_gpu < simulate_serving(_cfg("vllm", n=5)).weight_bytes_per_gpu


def test_a_decode_micro_batch_leaves_the_pipeline_after_the_prefill_ahead_of_it(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # two requests at once on two virtual engines: a short prompt that then decodes, and a long prompt whose
    # prefill is in the shared stages while the first one's decodes start
    trace = tmp_path / "two.csv"
    trace.write_text("prompt_tokens,output_tokens\n16,200\n3000,4\n")
    res = simulate_serving(_cfg("vllm", n=2, qps=None, trace=str(trace), pipeline_parallel_size=2), keep_events=True)
    _assert_conserved(res)
    prefill = next(ev for ev in res.events if ev.prefill_tokens == 3000)
    prefill_end = prefill.start_s + prefill.duration_s
    decodes = [ev for ev in res.events if ev.engine != prefill.engine and ev.decode_seqs and not ev.prefill_tokens]
    behind = [ev for ev in decodes if prefill.start_s <= ev.start_s < prefill_end]
    after = [ev.duration_s for ev in decodes if ev.start_s >= prefill_end + 0.1]
    assert behind and after
    # through the shared stages it waits for the prefill: it ends a stage after it, not at its own pace
    for ev in behind:
        assert ev.start_s + ev.duration_s >= prefill_end + 0.4 * min(after)
    assert max(ev.duration_s for ev in behind) > 5 * max(after)


def test_timeline_has_a_slice_per_iteration() -> None:
    res = simulate_serving(_cfg("sarathi", n=20), keep_events=True)
    tr = serving_trace(res)
    slices = [e for e in tr["traceEvents"] if e.get("cat") == "iteration"]
    assert len(slices) == res.iterations and all(e["dur"] > 0 for e in slices)


def test_bad_deployments_are_one_line_errors() -> None:
    with pytest.raises(ConfigError, match="GiB of weights per GPU"):
        simulate_serving(ServingConfig(model="llama-2-70b", hardware="a100-sxm-80gb"))
    with pytest.raises(UnknownNameError, match="valid: "):
        simulate_serving(_cfg("fcfs"))
    with pytest.raises(ConfigError, match="request lengths"):
        simulate_serving(_cfg(trace=None))


# -- the iteration model ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def llama() -> IterationModel:
    return IterationModel("llama-2-7b", "a100-sxm-80gb")


def test_iteration_time_grows_with_tokens_and_context(llama: IterationModel) -> None:
    t = [llama.breakdown([PrefillChunk(n, n)]).time_s for n in (128, 512, 2048, 8192)]
    assert all(a < b for a, b in zip(t, t[1:], strict=False))
    d = [llama.breakdown(num_decode=32, decode_context_tokens=32 * c).attention_decode_s for c in (256, 1024, 4096)]
    assert all(a < b for a, b in zip(d, d[1:], strict=False))


def test_decode_reads_the_weights_once_per_iteration(llama: IterationModel) -> None:
    one = llama.breakdown(num_decode=1, decode_context_tokens=128)
    # a single-token decode streams every weight once: time ~ weights / bandwidth, within the kernel model's spread
    floor = llama.weight_bytes / llama.hw.memory_bandwidth_Bps
    assert floor < one.linear_s + one.lm_head_s < 2.0 * floor


def test_tensor_parallelism_and_quantization_speed_up_decode() -> None:
    base = IterationModel("llama-2-13b", "a100-sxm-80gb")
    tp2 = IterationModel("llama-2-13b", "a100-sxm-80gb", tp=2)
    w4 = IterationModel("llama-2-13b", "a100-sxm-80gb", quantization="w4a16")
    kw = dict(num_decode=16, decode_context_tokens=16 * 512)
    assert tp2.breakdown(**kw).linear_s < base.breakdown(**kw).linear_s
    assert tp2.breakdown(**kw).tp_comm_s > 0 == base.breakdown(**kw).tp_comm_s
    assert w4.breakdown(**kw).linear_s < 0.6 * base.breakdown(**kw).linear_s
    assert w4.weight_bytes < 0.35 * base.weight_bytes
    fp8_kv = IterationModel("llama-2-13b", "a100-sxm-80gb", kv_dtype=base.dtype.__class__("fp8"))
    assert fp8_kv.kv_bytes_per_token == pytest.approx(base.kv_bytes_per_token / 2)


def test_speculative_decoding_emits_the_expected_tokens_per_step() -> None:
    kw = dict(trace=None, prompt_tokens=512, output_tokens=256, n=60, qps=1.0, model="llama-3.1-8b",
              hardware="h100-sxm-80gb")
    plain = simulate_serving(_cfg("vllm", **kw))
    spec = simulate_serving(_cfg("vllm", speculative_model="llama-3.2-1b", num_speculative_tokens=2,
                                 spec_acceptance_rate=0.7, **kw))
    _assert_conserved(spec)
    expected = (1 - 0.7**3) / (1 - 0.7)  # accepted drafts until the first rejection, plus the target's token
    assert spec.spec_tokens_per_step == pytest.approx(expected, rel=0.05)
    assert spec.metrics.tpot_s.p50 < plain.metrics.tpot_s.p50
    with pytest.raises(ConfigError, match="--speculative-model"):
        simulate_serving(_cfg("vllm", num_speculative_tokens=2, **kw))


@pytest.mark.parametrize("scheduler", ["vllm", "sarathi", "orca"])
def test_disaggregated_prefill_hands_requests_to_the_decode_pool(scheduler: str) -> None:
    kw = dict(n=80, qps=6.0, num_replicas=2, model="llama-3.1-8b", hardware="h100-sxm-80gb")
    dis = simulate_serving(_cfg(scheduler, num_prefill_replicas=1, **kw), audit=True)
    _assert_conserved(dis)
    assert dis.metrics.requests_completed == 80
    multi = dis.output_tokens > 1
    assert set(dis.replica[multi].tolist()) == {1}  # every request with a second token decoded in the decode pool
    slow = simulate_serving(_cfg(scheduler, num_prefill_replicas=1, kv_transfer_bandwidth_Bps=1e8, **kw))
    assert slow.metrics.e2e_s.mean > dis.metrics.e2e_s.mean  # a slow link delays every hand-over
    with pytest.raises(ConfigError, match="--num-prefill-replicas"):
        simulate_serving(_cfg(scheduler, num_prefill_replicas=2, **kw))


def test_images_add_tokens_and_vision_encoder_time() -> None:
    kw = dict(trace=None, prompt_tokens=200, output_tokens=64, n=30, qps=1.0, model="llava-1.5-7b")
    text = simulate_serving(_cfg("vllm", **kw))
    image = simulate_serving(_cfg("vllm", images_per_request=1, **kw), audit=True)
    _assert_conserved(image)
    assert int(image.prompt_tokens[0]) == 200 + 576  # CLIP ViT-L/14-336: 24 x 24 patches
    assert image.metrics.ttft_s.p50 > text.metrics.ttft_s.p50
    with pytest.raises(ConfigError, match="no vision tower"):
        simulate_serving(_cfg("vllm", images_per_request=1, **(kw | {"model": "llama-2-7b"})))


def test_an_engine_that_prepares_images_on_its_own_cpu_holds_the_gpus_idle_per_image() -> None:
    """vLLM 0.5's engine process fetches, decodes and processes each image in the iteration that starts the
    request: its ``image_overhead_s`` per image is CPU time (the GPUs idle), in the TTFT and the idle energy."""
    from perfcast.coefficients.bundle import resolve_calibration

    cal = resolve_calibration(None)
    engines = cal.serving.engines

    def with_image_s(seconds: float):  # type: ignore[no-untyped-def]
        eng = engines["vllm-0.5"].model_copy(update={"image_overhead_s": seconds})
        return cal.with_serving(cal.serving.model_copy(update={"engines": {**engines, "vllm-0.5": eng}}))

    kw = dict(trace=None, prompt_tokens=200, output_tokens=32, qps=2.0, model="llava-1.5-7b", engine="vllm-0.5",
              images_per_request=1)
    # one request: the same iterations, the first one longer by the image's CPU time
    one0 = simulate_serving(_cfg("vllm", n=1, **kw), calibration=with_image_s(0.0))
    one1 = simulate_serving(_cfg("vllm", n=1, **kw), calibration=with_image_s(0.05))
    assert one1.energy_counts.cpu_s - one0.energy_counts.cpu_s == pytest.approx(0.05)
    assert one1.metrics.ttft_s.p50 - one0.metrics.ttft_s.p50 == pytest.approx(0.05)
    assert one1.energy().idle_energy_J > one0.energy().idle_energy_J
    assert one1.energy().busy_energy_J == pytest.approx(one0.energy().busy_energy_J)  # the GPUs ran nothing more
    # many: every request's image is prepared once, in the CPU part of the iteration that starts it
    many = simulate_serving(_cfg("vllm", n=20, **kw), calibration=with_image_s(0.05), audit=True, explain=True)
    _assert_conserved(many)
    assert int(many.preemptions_per_request.sum()) == 0
    assert many.energy_counts.cpu_s >= 20 * 0.05


@pytest.mark.parametrize(("model", "tokens"), [("qwen2.5-vl-7b", 256), ("mistral-small-3.1-24b", 272),
                                               ("llava-next-llama3-8b", 2928)])
def test_todays_vision_towers_add_their_image_tokens(model: str, tokens: int) -> None:
    """One image of the priced size (448 px; LLaVA-NeXT 672 px as 5 tiles) joins each prompt."""
    kw = dict(trace=None, prompt_tokens=200, output_tokens=16, n=6, qps=1.0, model=model)
    image = simulate_serving(_cfg("vllm", images_per_request=1, **kw), audit=True)
    _assert_conserved(image)
    assert int(image.prompt_tokens[0]) == 200 + tokens
    assert image.metrics.ttft_s.p50 > simulate_serving(_cfg("vllm", **kw)).metrics.ttft_s.p50


def test_serving_refuses_an_encoder_decoder() -> None:
    with pytest.raises(UnsupportedError, match="cross-attention KV cache"):
        simulate_serving(_cfg("vllm", trace=None, prompt_tokens=200, output_tokens=16, n=4, model="flan-t5-xl"))


def test_retrieval_runs_before_the_engine_and_counts_in_ttft() -> None:
    kw = dict(trace=None, prompt_tokens=200, output_tokens=64, n=30, qps=1.0)
    plain = simulate_serving(_cfg("vllm", **kw))
    rag = simulate_serving(_cfg("vllm", retrieval_latency_s=0.2, retrieved_tokens=1000, **kw), audit=True)
    _assert_conserved(rag)
    assert int(rag.prompt_tokens[0]) == 1200
    # light load: TTFT is the retrieval plus a prefill, not a queue behind decode stretches
    assert 0.2 < rag.metrics.ttft_s.p50 < 0.2 + 4 * plain.metrics.ttft_s.p50 + 0.1
    jitter = simulate_serving(_cfg("vllm", retrieval_latency_s=0.2, retrieval_latency_cv=1.0, **kw))
    assert jitter.metrics.ttft_s.p99 > rag.metrics.ttft_s.p99


@pytest.mark.parametrize("qps", [None, 3.0])
@pytest.mark.parametrize("concurrency", [1, 5])
def test_closed_loop_keeps_at_most_concurrency_requests_outstanding(concurrency: int, qps: float | None) -> None:
    cfg = ServingConfig(model="llama-2-7b", hardware="a100-sxm-80gb", workload=WorkloadConfig(
        num_requests=60, prompt_tokens=300, output_tokens=40, qps=qps, concurrency=concurrency, seed=3))
    res = simulate_serving(cfg)
    assert res.metrics.requests_completed == 60
    sent, done = res.arrival_s, res.finish_s
    assert np.all(np.diff(sent) >= 0)
    for t in sent:  # when a request is sent, the ones sent before and not yet finished are fewer than the limit
        assert int(((sent < t) & (done > t)).sum()) < concurrency
    if concurrency == 1 and qps is None:  # one client: each request is sent as the previous one finishes
        assert np.allclose(sent[1:], done[:-1])
    if qps is None:  # all at once, open loop: a queue of 60 builds; the clients keep it at most 5 deep
        open_loop = simulate_serving(cfg.model_copy(update={"workload": cfg.workload.model_copy(
            update={"concurrency": None})}))
        assert res.metrics.ttft_s.mean < open_loop.metrics.ttft_s.mean


@pytest.mark.parametrize("scheduler", ["vllm", "sarathi", "orca", "lightllm"])
def test_decode_stretches_match_running_every_iteration(scheduler: str) -> None:
    # keep_events runs iteration by iteration; otherwise decode-only stretches run in one step each, through
    # members' finishes when nothing else can join, and the decode set advances as a whole
    cfg = _cfg(scheduler, n=80, qps=1.0, trace="splitwise_conv")
    fast, slow = simulate_serving(cfg, audit=True), simulate_serving(cfg, keep_events=True)
    assert fast.iterations == slow.iterations == len(slow.events)
    assert np.array_equal(fast.generated_tokens, slow.generated_tokens)
    for name in ("first_token_s", "finish_s"):
        np.testing.assert_allclose(getattr(fast, name), getattr(slow, name), rtol=1e-9)
