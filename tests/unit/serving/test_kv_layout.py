"""The serving cache per layer type against vLLM's KV cache spec formulas (v1 hybrid KV cache manager).

Every expected number is derived here from the model's published Hugging Face config.json values (written out in
each test) and vLLM's formulas:

* FullAttentionSpec page / block_size = 2 x num_kv_heads_per_gpu x head_size x dtype bytes (per token, layer);
* MLAAttentionSpec: (kv_lora_rank + qk_rope_head_dim) x dtype bytes, one latent;
* SlidingWindowSpec.max_memory_usage_bytes: (cdiv(min(sliding_window - 1 + max_num_batched_tokens,
  max_model_len), block_size) + 1) pages;
* MambaStateShapeCalculator: Mamba-1 conv (d_inner/tp, d_conv - 1), ssm (d_inner/tp, d_state); Mamba-2 conv
  (d_conv - 1, (d_inner + 2 x n_groups x d_state)/tp), ssm (n_heads/tp, head_dim, d_state).
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from perfcast.catalog.models import load_model
from perfcast.dtypes import DType
from perfcast.errors import UnsupportedError
from perfcast.serving import ServingConfig, WorkloadConfig, simulate_serving
from perfcast.serving.deployment import serving_memory
from perfcast.serving.iteration import IterationModel
from perfcast.serving.kv.hybrid import HybridBlockManager
from perfcast.serving.kv.layout import kv_layout

BF16 = 2  # bytes


def _layout(model: str, tp: int = 1, block_size: int = 16):  # type: ignore[no-untyped-def]
    return kv_layout(load_model(model), tp=tp, kv_dtype=DType.BF16, dtype=DType.BF16, block_size=block_size)


# -- bytes per layer type ---------------------------------------------------------------------------------------

def test_full_attention_llama_3_1_8b() -> None:
    # config.json: num_hidden_layers 32, num_attention_heads 32, num_key_value_heads 8, hidden_size 4096
    layers, kv_heads, head_size = 32, 8, 4096 // 32
    for tp, per_gpu in ((1, 8), (2, 4), (8, 1), (16, 1)):  # past tp = 8 every GPU holds a replica of one head
        lay = _layout("llama-3.1-8b", tp)
        assert lay.plain and lay.full_layers == layers
        assert lay.attention_bytes_per_token_layer == 2 * per_gpu * head_size * BF16
        assert lay.kv_bytes_per_token == 2 * per_gpu * head_size * BF16 * layers
        if tp <= 8:  # one node
            model = IterationModel("llama-3.1-8b", "h100-sxm-80gb", tp=tp, max_tokens=64, max_seqs=8)
            assert model.kv_bytes_per_token == 2 * max(1, kv_heads // tp) * head_size * BF16 * layers


def test_mla_deepseek_v3_caches_one_latent_whole_on_every_gpu() -> None:
    # config.json: num_hidden_layers 61, kv_lora_rank 512, qk_rope_head_dim 64
    for tp in (1, 8):
        lay = _layout("deepseek-v3", tp)
        assert lay.plain
        assert lay.attention_bytes_per_token_layer == (512 + 64) * BF16
        assert lay.kv_bytes_per_token == (512 + 64) * BF16 * 61


def test_sliding_window_mistral_7b_every_layer() -> None:
    # config.json (v0.1): num_hidden_layers 32, num_key_value_heads 8, head_dim 128, sliding_window 4096
    lay = _layout("mistral-7b")
    assert not lay.plain and lay.local_kind == "sliding" and lay.local_window == 4096
    assert (lay.full_layers, lay.local_layers, lay.group_layers, lay.local_groups, lay.full_groups) == (0, 32, 32, 1, 0)
    page = 16 * 2 * 8 * 128 * BF16
    assert lay.block_bytes == 32 * page
    # decode (one token scheduled): at most cdiv(4096 - 1 + 1, 16) + 1 blocks (SlidingWindowSpec)
    bound = math.ceil((4096 - 1 + 1) / 16) + 1
    kv = HybridBlockManager(2000, 16, 0.0, full_groups=0, local_groups=1, local_kind="sliding", local_window=4096)
    kv.allocate(1, 100)
    kv.add_to_group(1)
    most = 0
    for _ in range(12000):
        kv.grow_group(1)
        most = max(most, kv.num_used_blocks)
    assert most == bound == 257
    kv.check_invariants()
    kv.free(1)  # preemption by recompute (or finish) returns every block
    assert kv.num_free_blocks == 2000


def test_gemma_2_9b_alternates_sliding_and_full_layers() -> None:
    # config.json: num_hidden_layers 42 (even layers sliding), num_key_value_heads 8, head_dim 256,
    # sliding_window 4096
    lay = _layout("gemma-2-9b")
    assert (lay.full_layers, lay.local_layers) == (21, 21)
    assert lay.attention_bytes_per_token_layer == 2 * 8 * 256 * BF16
    assert (lay.group_layers, lay.full_groups, lay.local_groups) == (21, 1, 1)
    assert lay.block_bytes == 21 * 16 * 2 * 8 * 256 * BF16
    # a sequence of 10,000 decoded tokens: all its full-attention blocks, its window's sliding blocks
    kv = HybridBlockManager(10_000, 16, 0.0, full_groups=1, local_groups=1, local_kind="sliding", local_window=4096)
    kv.allocate(7, 1)
    kv.add_to_group(7)
    kv.grow_group(9_999)
    assert kv.seq_num_tokens(7) == 10_000
    assert kv.seq_num_blocks(7) == math.ceil(10_000 / 16) + (math.ceil(10_000 / 16) - (10_000 - 4096) // 16)
    kv.check_invariants()


def test_gpt_oss_20b_128_token_windows() -> None:
    # config.json: num_hidden_layers 24 (sliding and full alternate), num_key_value_heads 8, head_dim 64,
    # sliding_window 128
    lay = _layout("gpt-oss-20b")
    assert (lay.full_layers, lay.local_layers, lay.local_window) == (12, 12, 128)
    assert lay.attention_bytes_per_token_layer == 2 * 8 * 64 * BF16
    assert lay.block_bytes == 12 * 16 * 2 * 8 * 64 * BF16
    kv = HybridBlockManager(10_000, 16, 0.0, full_groups=1, local_groups=1, local_kind="sliding", local_window=128)
    kv.allocate(1, 3000)  # a whole prompt is allocated at once (n0 = 0) ...
    assert kv.seq_num_blocks(1) == 2 * math.ceil(3000 / 16)
    kv.add_to_group(1)  # ... and its window's blocks alone stay once it decodes
    kv.grow_group(1)
    assert kv.seq_num_blocks(1) == math.ceil(3001 / 16) + math.ceil(3001 / 16) - (3001 - 128) // 16
    assert kv.seq_num_blocks(1) - math.ceil(3001 / 16) <= math.ceil((128 - 1 + 1) / 16) + 1


def test_mamba_1_state_mamba_2_8b() -> None:
    # config.json: n_layer 64, d_model 2560, expand 2 (d_inner 5120), d_state 16, d_conv 4
    layers, inner, n, k = 64, 2 * 2560, 16, 4
    ssm = load_model("mamba-2.8b").ssm
    assert ssm is not None
    assert ssm.cache_state_elements() == ((k - 1) * inner, inner * n)
    assert ssm.cache_state_elements(2) == ((k - 1) * inner // 2, inner // 2 * n)
    lay = _layout("mamba-2.8b")
    assert lay.state_layers == layers and lay.attention_bytes_per_token_layer == 0
    assert lay.state_bytes_per_layer == ((k - 1) * inner + inner * n) * BF16
    assert lay.state_bytes_per_seq == layers * ((k - 1) * inner + inner * n) * BF16
    assert (lay.group_layers, lay.state_groups) == (64, 1)  # one block per sequence: its whole state
    fp32_ssm = kv_layout(load_model("mamba-2.8b"), dtype=DType.BF16, state_dtype=DType.FP32)
    assert fp32_ssm.state_bytes_per_layer == (k - 1) * inner * BF16 + inner * n * 4  # mamba_ssm_cache_dtype


def test_mamba_2_state_mamba_codestral_7b() -> None:
    # config.json: num_hidden_layers 64, hidden_size 4096, expand 2, num_heads 128, head_dim 64, n_groups 8,
    # state_size 128, conv_kernel 4
    inner, heads, p, groups, n, k = 8192, 128, 64, 8, 128, 4
    ssm = load_model("mamba-codestral-7b").ssm
    assert ssm is not None
    conv_dim = inner + 2 * groups * n
    assert ssm.cache_state_elements() == ((k - 1) * conv_dim, heads * p * n)
    assert ssm.cache_state_elements(2) == ((k - 1) * conv_dim // 2, heads // 2 * p * n)
    # tp = 16 does not divide the 8 groups: vLLM replicates them to 16 (extra_groups_for_head_shards)
    assert ssm.cache_state_elements(16) == ((k - 1) * (inner + 2 * 16 * n) // 16, heads // 16 * p * n)
    lay = _layout("mamba-codestral-7b")
    assert lay.state_bytes_per_seq == 64 * ((k - 1) * conv_dim + heads * p * n) * BF16


def test_jamba_pools_attention_and_mamba_in_one_page_size() -> None:
    # config.json: num_hidden_layers 32, attn_layer_period 8, attn_layer_offset 4 (4 attention layers),
    # num_key_value_heads 8, hidden_size 4096, 32 heads (head 128), mamba_expand 2, mamba_d_state 16,
    # mamba_d_conv 4
    inner, n, k = 2 * 4096, 16, 4
    attn_per_token = 2 * 8 * 128 * BF16
    mamba_page = ((k - 1) * inner + inner * n) * BF16
    lay = _layout("jamba-v0.1")
    assert (lay.full_layers, lay.state_layers) == (4, 28)
    assert lay.state_bytes_per_layer == mamba_page and lay.attention_bytes_per_token_layer == attn_per_token
    # HybridAttentionMambaModelConfig: attention block = 16 x cdiv(mamba page, 16 x attention page per token)
    block = 16 * math.ceil(mamba_page / (16 * attn_per_token))
    assert lay.block_size == block == 80
    assert lay.page_bytes == block * attn_per_token >= mamba_page
    # groups of the fewest layers (4): 1 attention group, 7 Mamba groups; a block is 4 layers' pages
    assert (lay.group_layers, lay.full_groups, lay.state_groups) == (4, 1, 7)
    assert lay.block_bytes == 4 * block * attn_per_token


def test_a_mixer_without_a_state_formula_is_refused() -> None:
    cfg = load_model("jamba-v0.1")
    assert cfg.ssm is not None
    odd = cfg.model_copy(update={"ssm": cfg.ssm.model_copy(update={"layer_mixers": ("linear_attention",)
                                                                   + cfg.ssm.layer_mixers[1:]})})
    with pytest.raises(UnsupportedError, match="no per-sequence state formula for 'linear_attention'"):
        kv_layout(odd)


# -- the memory breakdown and runs -------------------------------------------------------------------------------

WORK = WorkloadConfig(num_requests=40, qps=8.0, prompt_tokens=1000, output_tokens=200)


def _cfg(model: str, **kw: object) -> ServingConfig:
    return ServingConfig(**({"model": model, "hardware": "a100-sxm-80gb", "workload": WORK, "dtype": "bf16"} | kw))  # type: ignore[arg-type]


def test_mamba_2_8b_serves_with_its_state_in_the_memory_breakdown() -> None:
    m = serving_memory(_cfg("mamba-2.8b", max_model_len=4096))
    state = 64 * (3 * 5120 + 5120 * 16) * BF16  # d_conv - 1 = 3, d_inner 5120, d_state 16, 64 layers
    assert m.fits and m.state_bytes_per_seq == state and m.kv_bytes_per_token == 0
    assert m.kv_blocks == int((m.usable_bytes - m.weights_bytes - m.activations_peak_bytes) // state)
    assert m.kv_cache_bytes == m.kv_blocks * state
    res = simulate_serving(_cfg("mamba-2.8b", max_model_len=4096), audit=True)
    assert np.isfinite(res.finish_s).sum() == WORK.num_requests and res.preemptions == 0


def test_jamba_serves_at_tp_2_with_state_and_kv() -> None:
    cfg = _cfg("jamba-v0.1", tensor_parallel_size=2, max_model_len=8192)
    m = serving_memory(cfg)
    state = 28 * (3 * 8192 // 2 + 8192 // 2 * 16) * BF16  # 28 Mamba layers, d_inner split over 2 GPUs
    assert m.fits and m.state_bytes_per_seq == state
    assert m.kv_bytes_per_token == 4 * 2 * (8 // 2) * 128 * BF16
    assert m.block_size == 16 * math.ceil(state / 28 / (16 * 2 * 4 * 128 * BF16))
    res = simulate_serving(cfg, audit=True)
    assert np.isfinite(res.finish_s).sum() == WORK.num_requests


def test_prefix_caching_is_refused_where_not_modelled() -> None:
    with pytest.raises(UnsupportedError, match="vLLM disables it for Mamba models"):
        simulate_serving(_cfg("mamba-2.8b", max_model_len=4096, enable_prefix_caching=True))
    with pytest.raises(UnsupportedError, match="prefix caching with chunked attention layers is not modelled"):
        simulate_serving(_cfg("llama-4-scout", tensor_parallel_size=8, hardware="h100-sxm-80gb",
                              max_model_len=16384, enable_prefix_caching=True))


def test_sliding_layers_fit_sequences_full_layers_would_not() -> None:
    # 16 long sequences at once: all their tokens' blocks (full attention) exceed the cache, their windows' do not
    work = WorkloadConfig(num_requests=16, qps=1000.0, prompt_tokens=500, output_tokens=6000)
    cfg = _cfg("mistral-7b", workload=work, gpu_memory_utilization=0.3, max_model_len=8192)
    m = serving_memory(cfg)
    full_need = 16 * math.ceil(6500 / 16)
    window_need = 16 * (math.ceil((4096 - 1 + 1) / 16) + 1)
    assert window_need <= m.kv_blocks < full_need
    res = simulate_serving(cfg, audit=True)
    assert np.isfinite(res.finish_s).sum() == 16 and res.preemptions == 0


# -- the counting manager against a sequence-by-sequence reference -----------------------------------------------

class _Reference:
    """vLLM's rule sequence by sequence: allocate holds the whole prompt; a step from n0 computed tokens frees the
    local blocks before released(n0), then takes the new tokens' blocks; joining the decode group settles."""

    def __init__(self, full: int, local: int, kind: str, window: int, state: int, bs: int) -> None:
        self.full, self.local, self.kind, self.window, self.state, self.bs = full, local, kind, window, state, bs
        self.seqs: dict[int, list[int]] = {}  # id -> [tokens, local blocks]

    def released(self, n0: int) -> int:
        if self.kind == "sliding":
            return max(0, (n0 - self.window + 1) // self.bs)
        return (n0 // self.window) * self.window // self.bs

    def blocks(self, t: int, loc: int) -> int:
        return self.full * -(-t // self.bs) + self.local * loc + self.state

    def used(self) -> int:
        return sum(self.blocks(t, loc) for t, loc in self.seqs.values())

    def step(self, sid: int, k: int) -> None:
        t, _ = self.seqs[sid]
        self.seqs[sid] = [t + k, -(-(t + k) // self.bs) - self.released(t)]

    def settle(self, sid: int) -> None:
        t, _ = self.seqs[sid]
        self.seqs[sid] = [t, -(-t // self.bs) - self.released(t - 1)]


@pytest.mark.parametrize("kind,window,full,state", [("sliding", 64, 1, 0), ("sliding", 37, 0, 0),
                                                     ("chunked", 32, 3, 0), ("sliding", 20, 1, 2)])
def test_hybrid_manager_matches_the_reference(kind: str, window: int, full: int, state: int) -> None:
    rng = random.Random(window)
    bs, n = 8, 400
    kv = HybridBlockManager(n, bs, 0.0, 10_000, full_groups=full, local_groups=1, local_kind=kind,
                            local_window=window, state_groups=state)
    ref = _Reference(full, 1, kind, window, state, bs)
    group: list[int] = []
    next_id = 0
    for _ in range(600):
        action = rng.random()
        if action < 0.25:
            tokens = rng.randint(1, 90)
            if kv.can_allocate(next_id, tokens):
                kv.allocate(next_id, tokens)
                ref.seqs[next_id] = [tokens, -(-tokens // bs)]
                kv.add_to_group(next_id)
                ref.settle(next_id)
                group.append(next_id)
            next_id += 1
        elif action < 0.35 and group:
            sid = group.pop(rng.randrange(len(group)))
            kv.free(sid)
            del ref.seqs[sid]
        elif action < 0.45 and group:
            sid = rng.choice(group)
            k = rng.choice((1, 1, rng.randint(2, 20)))  # one token: the scheduler's slot-by-slot path
            if kv.can_append(sid, k):
                kv.append(sid, k)
                ref.step(sid, k)
                ref.settle(sid)
        else:
            limit = rng.randint(1, 40)
            j = kv.max_group_growth(limit)
            # the reference: the most steps whose running total never exceeds the free blocks
            free, used, best = n - ref.used(), 0, limit
            probe = _Reference(full, 1, kind, window, state, bs)
            probe.seqs = {s: list(v) for s, v in ref.seqs.items()}
            for step in range(limit):
                before = probe.used()
                for sid in group:
                    probe.step(sid, 1)
                used += probe.used() - before
                if used > free:
                    best = step
                    break
            assert j == best
            kv.grow_group(j)
            for _ in range(j):
                for sid in group:
                    ref.step(sid, 1)
        assert kv.num_used_blocks == ref.used()
        for sid in group:
            assert kv.seq_num_blocks(sid) == ref.blocks(*ref.seqs[sid])
        kv.check_invariants()
    for sid in list(group):
        kv.swap_out(sid)
        kv.check_invariants()
        kv.swap_in(sid)
        kv.free(sid)
    assert kv.num_free_blocks == n
    kv.check_invariants()


# -- prefix caching with sliding-window groups (named blocks) -----------------------------------------------------

def test_sliding_groups_hit_the_cached_prefix_within_the_window() -> None:
    from perfcast.serving.kv.hybrid_prefix import HybridPrefixBlockManager

    bs, window = 8, 64
    keep = math.ceil((window - 1) / bs)  # vLLM's sliding_window_contiguous_blocks
    kv = HybridPrefixBlockManager(200, bs, 0.0, full_groups=1, local_groups=1, local_window=window)
    shared = list(range(1000, 1025))  # 25 full blocks of a shared 200-token prefix
    assert kv.allocate(1, 200, shared) == 0
    kv.add_to_group(1)  # settled: the sliding group keeps the blocks from (200 - 1 - 64 + 1) // 8 on
    first = (200 - 1 - window + 1) // bs
    assert kv.seq_num_blocks(1) == 25 + (25 - first)
    assert kv.num_cached_blocks == first  # the dropped sliding blocks keep their hashes
    # a prompt with the same prefix and 40 tokens of its own hits all 25 blocks: the full group's every block,
    # the sliding group's last `keep` before the hit (held by sequence 1)
    hit = kv.allocate(2, 240, [*shared, 1, 2, 3, 4, 5])
    assert hit == 200
    assert kv.seq_num_blocks(2) == 30 + keep + (30 - 25)
    kv.check_invariants()
    kv.free(1)
    kv.free(2)
    kv.check_invariants()
    assert kv.num_used_blocks == 0 and kv.num_available_blocks == 200
    # every sliding block of the prefix is cached again: a new request hits it whole, claiming cached blocks
    before = kv.num_available_blocks
    assert kv.allocate(3, 201, shared) == 200
    assert before - kv.num_available_blocks == 26 + keep + 1  # 25 + keep hits (all cached) and one new each
    kv.check_invariants()


def test_all_sliding_prefix_cache_runs_and_audits() -> None:
    # Mistral (every layer sliding) with a shared system prompt: hits counted, the audit holds every iteration
    work = WorkloadConfig(num_requests=40, qps=20.0, prompt_tokens=1500, output_tokens=100,
                          shared_prefix_tokens=1024, num_prefixes=2)
    res = simulate_serving(_cfg("mistral-7b", workload=work, max_model_len=8192, enable_prefix_caching=True),
                           audit=True)
    assert np.isfinite(res.finish_s).sum() == 40
    res2 = simulate_serving(_cfg("gemma-2-9b", workload=work, max_model_len=8192, enable_prefix_caching=True,
                                 gpu_memory_utilization=0.5), audit=True)
    assert np.isfinite(res2.finish_s).sum() == 40
    for r in (res, res2):
        assert r.prefix_hit_frac > 0.5  # 1,024 of 1,500 prompt tokens shared by 20 requests each


@pytest.mark.parametrize("full", [0, 1, 2])
def test_hybrid_prefix_manager_random_operations_keep_its_invariants(full: int) -> None:
    from perfcast.serving.kv.hybrid_prefix import HybridPrefixBlockManager

    rng = random.Random(full)
    bs = 4
    kv = HybridPrefixBlockManager(120, bs, 0.0, full_groups=full, local_groups=1, local_window=10)
    live: list[int] = []
    for sid in range(400):
        if rng.random() < 0.4 and live:
            kv.free(live.pop(rng.randrange(len(live))))
        tokens = rng.randint(1, 40)
        prefix = rng.randrange(3)
        hashes = [hash((prefix, i)) if i < 6 else hash((sid, i)) for i in range(tokens // bs)]
        if kv.can_allocate(sid, tokens, hashes):
            kv.allocate(sid, tokens, hashes)
            kv.add_to_group(sid)
            live.append(sid)
        j = kv.max_group_growth(rng.randint(1, 12))
        kv.grow_group(j)
        kv.check_invariants()
        assert kv.num_used_blocks <= kv.num_blocks
    for sid in live:
        kv.free(sid)
    kv.check_invariants()
    assert kv.num_used_blocks == 0


@pytest.mark.parametrize("model,tp,layers,conv,ssm", [("mamba-2.8b", 1, 64, 3 * 5120, 5120 * 16),
                                                      ("jamba-v0.1", 2, 28, 3 * 8192 // 2, 8192 // 2 * 16)])
def test_serve_cli_reports_the_mamba_state(model: str, tp: int, layers: int, conv: int, ssm: int) -> None:
    import json

    from typer.testing import CliRunner

    from perfcast.cli import app

    res = CliRunner().invoke(app, ["serve", "-m", model, "-H", "a100-sxm-80gb", "--tp", str(tp), "--dtype", "bf16",
                                   "--num-requests", "20", "--qps", "4", "--prompt-tokens", "600", "--output-tokens",
                                   "50", "--max-model-len", "4096", "--json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert d["memory_state_bytes_per_seq"] == layers * (conv + ssm) * BF16
    assert d["memory_kv_cache_bytes"] > 0 and d["requests_completed"] == 20


def test_disaggregated_mamba_is_refused() -> None:
    with pytest.raises(UnsupportedError, match="disaggregated serving of a model with state-space"):
        simulate_serving(_cfg("jamba-v0.1", tensor_parallel_size=2, max_model_len=8192, num_replicas=2,
                              num_prefill_replicas=1))


def test_mamba_iterations_price_the_state_traffic_and_no_attention() -> None:
    model = IterationModel("mamba-2.8b", "a100-sxm-80gb", dtype=DType.BF16, max_tokens=512, max_seqs=64)
    assert model.attention_layers_per_stage == 0
    short = model.breakdown(num_decode=32, decode_context_tokens=32 * 100)
    long = model.breakdown(num_decode=32, decode_context_tokens=32 * 100_000)
    assert short == long and short.attention_decode_s == 0  # a recurrent step does not read a context
    # one decode step reads and writes every sequence's conv + SSM state of every layer: at least that traffic
    # at the GPU's peak bandwidth
    state = 64 * (3 * 5120 + 5120 * 16) * BF16
    step = model.decode_terms(32)
    assert model._scan_d_l[32] >= 2 * 32 * state / model.hw.memory_bandwidth_Bps
    assert step[0] == pytest.approx(model._linear_l[32] + model._scan_d_l[32])
    # prefill scans more tokens for longer
    assert model._scan_p_l[512] > model._scan_p_l[64] > 0
    jamba = IterationModel("jamba-v0.1", "a100-sxm-80gb", tp=2, max_tokens=64, max_seqs=8)
    assert jamba.attention_layers_per_stage == 4  # attn_layer_period 8 of 32 layers


def test_jamba_preempts_by_recompute_and_frees_its_states() -> None:
    # a small cache: sequences grow until the newest are preempted; the audit recounts every group's blocks
    work = WorkloadConfig(num_requests=60, qps=200.0, prompt_tokens=1500, output_tokens=2500)  # 4,000 tokens
    cfg = _cfg("jamba-v0.1", workload=work, tensor_parallel_size=2, max_model_len=8192,
               gpu_memory_utilization=0.62)
    m = serving_memory(cfg)
    assert m.layout is not None
    per_seq = math.ceil(4000 / m.block_size) + 7  # the attention group's blocks and 7 Mamba groups' states
    assert m.kv_blocks < 60 * per_seq
    res = simulate_serving(cfg, audit=True)
    assert res.preemptions > 0 and np.isfinite(res.finish_s).sum() == 60


def test_nemotron_h_caches_attention_and_mamba_state_and_qwen3_next_is_refused() -> None:
    """Nemotron Nano 9B v2: 4 attention layers cache K/V per token, 27 Mamba-2 layers a state per sequence
    (conv (k-1) x (heads x head_dim + 2 groups x state) + SSM heads x head_dim x state, bf16), its MLP-only layers
    nothing; Qwen3-Next's Gated DeltaNet layers have no serving model yet and are refused in one line."""
    cfg = load_model("nemotron-nano-9b-v2")
    ssm = cfg.ssm
    assert ssm is not None
    lay = kv_layout(cfg)
    mamba = sum(m == "ssm" for m in ssm.layer_mixers)
    attention = sum(m == "attention" for m in ssm.layer_mixers)
    inner = ssm.num_heads * ssm.head_dim
    per_layer = (ssm.conv_kernel - 1) * (inner + 2 * ssm.n_groups * ssm.state_size) + inner * ssm.state_size
    assert lay.state_bytes_per_seq == mamba * per_layer * 2
    assert lay.kv_bytes_per_token == attention * 2 * cfg.num_kv_heads * cfg.head_dim * 2
    with pytest.raises(UnsupportedError, match="Gated DeltaNet"):
        kv_layout(load_model("qwen3-next-80b-a3b"))


def test_windowed_layers_read_at_most_their_window_in_decode_and_prefill() -> None:
    """Sliding-window layers (Gemma 2: every other layer, 4096 tokens) attend over at most the window: a decode of
    32 sequences at 16000 cached tokens each costs its full layers at 16000 and its sliding layers at 4096; the
    closed form the event loop steps (decode_times) agrees with priced(); below the window nothing changes."""
    from perfcast.serving.iteration import IterationModel

    gemma = IterationModel("gemma-2-9b", "h100-sxm-80gb")
    cfg = load_model("gemma-2-9b")
    as_full = IterationModel(cfg.model_copy(update={"attention_layer_types": ("full",) * cfg.num_layers}),
                             "h100-sxm-80gb")
    assert gemma.local_window == 4096
    n, long_ctx, short_ctx = 32, 32 * 16000, 32 * 2000
    long_w, long_f = gemma.priced(0, 0.0, 0, 0, n, long_ctx, n), as_full.priced(0, 0.0, 0, 0, n, long_ctx, n)
    assert long_w[2] < 0.75 * long_f[2]  # decode attention: half the layers read a quarter of the context
    assert long_w[9] == pytest.approx(long_f[9] * (0.5 + 0.5 * 4096 / 16000))  # decode FLOPs
    short_w, short_f = gemma.priced(0, 0.0, 0, 0, n, short_ctx, n), as_full.priced(0, 0.0, 0, 0, n, short_ctx, n)
    assert short_w[2] == pytest.approx(short_f[2])
    for ctx in (short_ctx, long_ctx):
        p = gemma.priced(0, 0.0, 0, 0, n, ctx, n)
        assert float(gemma.decode_times(n, np.array([ctx]))[0]) == pytest.approx(sum(p[:6]), rel=1e-9)
    # a 2048-token prefill chunk after 14000 cached tokens: its sliding layers see at most 4096 keys per query
    q, past = 2048, 14000
    pairs = q * past + q * (q + 1) / 2
    pre_w, pre_f = gemma.priced(q, pairs, past, 1, 0, 0, 1), as_full.priced(q, pairs, past, 1, 0, 0, 1)
    assert pre_w[7] == pytest.approx(pre_f[7] * (0.5 + 0.5 * q * 4096 / pairs))
