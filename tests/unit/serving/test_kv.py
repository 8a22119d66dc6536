"""Unit tests of ``perfcast.serving.kv``: paged KV blocks, watermark, swapping, prefix caching, capacity."""

from __future__ import annotations

import pytest

from perfcast.errors import ConfigError, PerfcastError
from perfcast.serving.kv import BlockManager, KVCacheError, kv_cache_capacity, prefix_block_hashes

GiB = 2**30
BS = 16


def manager(num_blocks: int = 10, **kwargs: object) -> BlockManager:
    kwargs.setdefault("watermark_frac", 0.0)
    return BlockManager(num_blocks, BS, **kwargs)  # type: ignore[arg-type]


# -- allocation and growth ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("num_tokens", "num_blocks"), [(1, 1), (15, 1), (16, 1), (17, 2), (32, 2), (33, 3)])
def test_allocate_takes_ceil_tokens_over_block_size(num_tokens: int, num_blocks: int) -> None:
    bm = manager()
    assert bm.allocate(0, num_tokens) == 0
    assert bm.seq_num_blocks(0) == num_blocks
    assert bm.seq_num_tokens(0) == num_tokens
    assert bm.num_used_blocks == num_blocks
    assert bm.num_free_blocks == 10 - num_blocks
    bm.check_invariants()


def test_append_takes_a_block_only_when_crossing_a_boundary() -> None:
    bm = manager()
    bm.allocate(7, 15)
    bm.append(7)  # 16 tokens: still one block
    assert (bm.seq_num_tokens(7), bm.seq_num_blocks(7)) == (16, 1)
    bm.append(7)  # 17: crosses into a second block
    assert (bm.seq_num_tokens(7), bm.seq_num_blocks(7)) == (17, 2)
    for _ in range(15):
        bm.append(7)
    assert (bm.seq_num_tokens(7), bm.seq_num_blocks(7)) == (32, 2)
    bm.append(7, 33)  # several tokens at once (e.g. a chunk or speculative tokens): 65 tokens -> 5 blocks
    assert (bm.seq_num_tokens(7), bm.seq_num_blocks(7)) == (65, 5)
    bm.append(7, 0)
    assert bm.seq_num_blocks(7) == 5
    assert bm.num_used_blocks == 5
    bm.check_invariants()


def test_append_refuses_when_no_block_is_left() -> None:
    bm = manager(num_blocks=2)
    bm.allocate(0, 32)
    assert bm.can_append(0, 0)
    assert not bm.can_append(0)
    with pytest.raises(KVCacheError, match="cannot append 1 tokens to sequence 0"):
        bm.append(0)
    assert bm.seq_num_tokens(0) == 32  # nothing changed
    bm.check_invariants()


def test_append_ignores_the_watermark() -> None:
    bm = BlockManager(10, BS, watermark_frac=0.5)
    bm.allocate(0, 16 * 5)  # 5 blocks free, watermark is 5
    assert bm.can_append(0, 16 * 5)
    bm.append(0, 16 * 5)
    assert bm.num_free_blocks == 0
    bm.check_invariants()


def test_free_returns_every_block() -> None:
    bm = manager()
    bm.allocate(1, 40)
    bm.allocate(2, 17)
    assert bm.num_free_blocks == 10 - 3 - 2
    bm.free(1)
    assert bm.num_free_blocks == 10 - 2
    assert 1 not in bm and 2 in bm
    bm.free(2)
    assert (bm.num_free_blocks, bm.num_used_blocks, bm.num_cached_blocks) == (10, 0, 0)
    bm.check_invariants()


def test_ids_must_be_new_for_allocate_and_known_otherwise() -> None:
    bm = manager()
    bm.allocate(3, 10)
    with pytest.raises(KVCacheError, match="sequence id 3 already holds KV blocks"):
        bm.allocate(3, 10)
    with pytest.raises(KVCacheError, match="already holds"):
        bm.can_allocate(3, 10)
    for call in (bm.free, bm.append, bm.seq_num_tokens, bm.swap_out, bm.swap_in):
        with pytest.raises(KVCacheError, match="unknown sequence id 4"):
            call(4)
    with pytest.raises(KVCacheError, match="must be >= 1"):
        bm.allocate(5, 0)
    with pytest.raises(KVCacheError, match="must be >= 0"):
        bm.append(3, -1)
    assert issubclass(KVCacheError, PerfcastError)


def test_over_allocation_raises_a_clear_error() -> None:
    bm = manager(num_blocks=4)
    bm.allocate(0, 48)
    with pytest.raises(KVCacheError, match=r"cannot allocate 2 KV blocks for sequence 1 \(17 tokens\): only 1 of 4"):
        bm.allocate(1, 17)
    assert 1 not in bm
    bm.check_invariants()


# -- watermark ------------------------------------------------------------------------------------------------------
def test_watermark_refuses_admission_that_would_eat_the_headroom() -> None:
    bm = BlockManager(100, BS, watermark_frac=0.1)  # 10 blocks of headroom
    assert bm.watermark_blocks == 10
    assert bm.can_allocate(0, 90 * BS)
    assert not bm.can_allocate(0, 90 * BS + 1)  # 91 blocks would leave 9
    assert bm.can_ever_allocate(90 * BS) and not bm.can_ever_allocate(90 * BS + 1)
    bm.allocate(0, 50 * BS)
    assert bm.can_allocate(1, 40 * BS)
    assert not bm.can_allocate(1, 40 * BS + 1)
    assert bm.can_ever_allocate(40 * BS + 1)  # would fit on an empty cache: wait, not never
    # allocate itself does not apply the policy, only physical capacity
    bm.allocate(1, 45 * BS)
    assert bm.num_free_blocks == 5
    bm.check_invariants()


def test_default_watermark_is_one_percent() -> None:
    bm = BlockManager(1000, BS)
    assert bm.watermark_blocks == 10
    assert bm.can_allocate(0, 990 * BS) and not bm.can_allocate(0, 991 * BS)


@pytest.mark.parametrize("kwargs", [
    {"num_blocks": 0, "block_size": 16}, {"num_blocks": 8, "block_size": 0},
    {"num_blocks": 8, "block_size": 16, "watermark_frac": 1.0},
    {"num_blocks": 8, "block_size": 16, "watermark_frac": -0.1},
    {"num_blocks": 8, "block_size": 16, "num_cpu_blocks": -1}, {"num_blocks": 8.0, "block_size": 16},
])
def test_bad_construction_is_a_config_error(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        BlockManager(**kwargs)  # type: ignore[arg-type]


# -- swapping -------------------------------------------------------------------------------------------------------
def test_swap_out_and_in_round_trip() -> None:
    bm = manager(num_blocks=10, num_cpu_blocks=4)
    bm.allocate(0, 40)  # 3 blocks
    bm.allocate(1, 16)
    assert bm.can_swap_out(0)
    assert bm.swap_out(0) == 3
    assert bm.is_swapped_out(0)
    assert (bm.num_swapped_out_blocks, bm.num_used_blocks, bm.num_free_blocks) == (3, 1, 9)
    assert (bm.seq_num_tokens(0), bm.seq_num_blocks(0)) == (40, 3)
    bm.check_invariants()
    with pytest.raises(KVCacheError, match="swapped out"):
        bm.append(0)
    with pytest.raises(KVCacheError, match="swapped out"):
        bm.can_swap_out(0)
    with pytest.raises(KVCacheError, match="not swapped out"):
        bm.swap_in(1)
    assert bm.can_swap_in(0)
    assert bm.swap_in(0) == 3
    assert not bm.is_swapped_out(0)
    assert (bm.num_swapped_out_blocks, bm.num_used_blocks, bm.num_free_blocks) == (0, 4, 6)
    assert (bm.seq_num_tokens(0), bm.seq_num_blocks(0)) == (40, 3)
    bm.append(0, 9)  # 49 tokens -> 4 blocks, the sequence keeps growing where it stopped
    assert bm.seq_num_blocks(0) == 4
    bm.check_invariants()


def test_swap_out_needs_cpu_space() -> None:
    bm = manager(num_blocks=10, num_cpu_blocks=2)
    bm.allocate(0, 33)  # 3 blocks
    assert not bm.can_swap_out(0)
    with pytest.raises(KVCacheError, match="needs 3 CPU blocks, only 2 of 2 free"):
        bm.swap_out(0)
    assert not bm.is_swapped_out(0) and bm.num_used_blocks == 3
    bm.allocate(1, 20)  # 2 blocks fit exactly
    assert bm.swap_out(1) == 2
    assert bm.num_swapped_out_blocks == 2 and not bm.can_swap_out(0)
    bm.check_invariants()


def test_no_swap_space_by_default() -> None:
    bm = manager()
    bm.allocate(0, 1)
    assert not bm.can_swap_out(0)
    with pytest.raises(KVCacheError, match="only 0 of 0 free"):
        bm.swap_out(0)


def test_swap_in_needs_gpu_space_and_respects_the_watermark() -> None:
    bm = BlockManager(10, BS, watermark_frac=0.2, num_cpu_blocks=10)  # watermark 2 blocks
    bm.allocate(0, 64)  # 4 blocks
    bm.swap_out(0)
    bm.allocate(1, 16 * 5)  # 5 left available: swapping 4 back in would leave 1 < 2
    assert not bm.can_swap_in(0)
    bm.allocate(2, 16 * 3)  # 2 left: physically impossible
    with pytest.raises(KVCacheError, match="cannot swap in sequence 0: needs 4 KV blocks, only 2 available"):
        bm.swap_in(0)
    bm.free(1)
    assert bm.can_swap_in(0)
    bm.swap_in(0)
    bm.check_invariants()


def test_freeing_a_swapped_sequence_releases_cpu_blocks() -> None:
    bm = manager(num_cpu_blocks=5)
    bm.allocate(0, 70)  # 5 blocks
    bm.swap_out(0)
    assert bm.num_swapped_out_blocks == 5
    bm.free(0)
    assert bm.num_swapped_out_blocks == 0 and bm.num_free_blocks == 10 and 0 not in bm
    bm.check_invariants()


# -- prefix caching -------------------------------------------------------------------------------------------------
def caching(num_blocks: int = 20, **kwargs: object) -> BlockManager:
    return manager(num_blocks, enable_prefix_caching=True, **kwargs)


def test_prefix_block_hashes_share_only_whole_shared_blocks() -> None:
    a = prefix_block_hashes(1, 40, 100, BS, unique_id=10)
    b = prefix_block_hashes(1, 40, 70, BS, unique_id=11)
    c = prefix_block_hashes(2, 40, 100, BS, unique_id=10)
    assert len(a) == 100 // BS and len(b) == 70 // BS
    assert a[:2] == b[:2]  # 40 shared tokens = 2 whole blocks + 8 tokens of a third
    assert a[2] != b[2] and a[3] != b[3]
    assert not set(a) & set(c)  # another system prompt shares nothing
    assert prefix_block_hashes(1, 40, 100, BS, unique_id=10) == a  # deterministic
    assert prefix_block_hashes(1, 0, 100, BS, 10)[0] != prefix_block_hashes(1, 0, 100, BS, 11)[0]
    assert prefix_block_hashes(1, 40, 15, BS, 1) == []
    with pytest.raises(ConfigError, match="prompt_tokens=-1"):
        prefix_block_hashes(1, 0, -1, BS, 0)


def test_second_request_with_the_same_prefix_reuses_blocks() -> None:
    bm = caching()
    h0 = prefix_block_hashes(7, 64, 100, BS, unique_id=0)  # 4 shared blocks, 6 full blocks, 7 total
    h1 = prefix_block_hashes(7, 64, 90, BS, unique_id=1)
    assert bm.allocate(0, 100, h0) == 0  # cold cache
    assert bm.num_used_blocks == 7
    assert bm.can_allocate(1, 90, h1)
    assert bm.allocate(1, 90, h1) == 64  # 4 whole blocks served from the cache
    assert bm.seq_num_blocks(1) == 6  # the block table still covers every token
    assert bm.num_used_blocks == 7 + 6 - 4  # shared blocks counted once
    assert (bm.prefix_hit_tokens, bm.prefix_query_tokens) == (64, 190)
    bm.check_invariants()


def test_hits_are_whole_blocks_even_when_the_shared_prefix_is_not_aligned() -> None:
    bm = caching()
    bm.allocate(0, 100, prefix_block_hashes(3, 50, 100, BS, 0))
    assert bm.allocate(1, 100, prefix_block_hashes(3, 50, 100, BS, 1)) == 48  # 3 blocks, not 50 tokens


def test_a_hit_never_covers_the_whole_prompt() -> None:
    bm = caching()
    h = prefix_block_hashes(1, 64, 64, BS, 0)  # block-aligned prompt that is entirely shared
    bm.allocate(0, 64, h)
    assert bm.allocate(1, 64, h) == 48  # the last block is recomputed: at least one token computed
    assert bm.num_used_blocks == 4 + 1  # into a private block
    bm.free(0)
    bm.free(1)
    bm.check_invariants()
    assert bm.num_cached_blocks == 4 and bm.num_free_blocks == 16  # the private duplicate is not cached
    assert bm.allocate(2, 65, h) == 64  # with one more token the whole cached prefix counts
    assert bm.allocate(3, 1, []) == 0
    bm.check_invariants()


def test_can_allocate_counts_hits_as_needing_no_new_blocks() -> None:
    bm = caching(num_blocks=10)
    h = prefix_block_hashes(1, 96, 128, BS, 0)  # 6 shared blocks of 8
    bm.allocate(0, 128, h)  # 8 blocks, 2 free
    h1 = prefix_block_hashes(1, 96, 128, BS, 1)
    assert bm.can_allocate(1, 128, h1)  # needs 8 - 6 = 2 new blocks
    assert not bm.can_allocate(1, 128, prefix_block_hashes(2, 96, 128, BS, 1))  # another prefix needs 8
    assert not bm.can_allocate(1, 128)  # no hashes: no hit
    assert bm.allocate(1, 128, h1) == 96
    assert bm.num_free_blocks == 0 and bm.num_used_blocks == 10
    bm.check_invariants()


def test_caching_disabled_ignores_hashes() -> None:
    bm = manager()
    h = prefix_block_hashes(1, 64, 64, BS, 0)
    bm.allocate(0, 64, h)
    assert bm.allocate(1, 64, h) == 0
    assert bm.num_used_blocks == 8
    bm.free(0)
    assert bm.num_cached_blocks == 0 and bm.num_free_blocks == 6
    assert bm.prefix_hit_tokens == 0 and bm.prefix_query_tokens == 128


def test_too_many_hashes_is_an_error() -> None:
    bm = caching()
    with pytest.raises(KVCacheError, match="3 prefix hashes for 47 tokens; at most 2 full blocks"):
        bm.allocate(0, 47, [1, 2, 3])


def test_freed_prefix_blocks_stay_cached_and_hit_again() -> None:
    bm = caching()
    bm.allocate(0, 100, prefix_block_hashes(5, 64, 100, BS, 0))
    bm.free(0)
    # 6 full hashed blocks stay cached (4 shared + 2 unique full), the partial 7th block is freed
    assert (bm.num_used_blocks, bm.num_cached_blocks, bm.num_free_blocks) == (0, 6, 14)
    bm.check_invariants()
    assert bm.allocate(1, 80, prefix_block_hashes(5, 64, 80, BS, 1)) == 64
    assert (bm.num_used_blocks, bm.num_cached_blocks) == (5, 2)  # 4 revived + 1 new; 2 unique still cached
    bm.check_invariants()


def test_cached_blocks_are_evicted_lru_and_only_when_needed() -> None:
    bm = caching(num_blocks=12)
    ha = prefix_block_hashes(1, 48, 48, BS, 0)  # 3 blocks
    hb = prefix_block_hashes(2, 48, 48, BS, 0)
    bm.allocate(0, 48, ha)
    bm.allocate(1, 48, hb)
    bm.free(0)  # a freed first: least recently used
    bm.free(1)
    assert (bm.num_cached_blocks, bm.num_free_blocks) == (6, 6)
    bm.allocate(2, 96)  # 6 blocks: the free list suffices, nothing evicted
    assert (bm.num_cached_blocks, bm.num_free_blocks) == (6, 0)
    bm.allocate(3, 16)  # must evict one block: a's last block (tail first, oldest prefix first)
    assert bm.num_cached_blocks == 5
    bm.free(2)  # room again, so the lookups below evict nothing more
    assert bm.allocate(4, 49, ha) == 32  # a's first two blocks still hit, its third was evicted
    assert bm.allocate(5, 49, hb) == 48  # b intact
    bm.check_invariants()


def test_evicting_the_whole_cache_when_memory_runs_out() -> None:
    bm = caching(num_blocks=4)
    h = prefix_block_hashes(1, 64, 64, BS, 0)
    bm.allocate(0, 64, h)
    bm.free(0)
    assert bm.num_cached_blocks == 4 and bm.num_free_blocks == 0
    assert bm.can_allocate(1, 64) and bm.num_available_blocks == 4
    bm.allocate(1, 64)
    assert bm.num_cached_blocks == 0
    bm.free(1)
    assert bm.allocate(2, 64, h) == 0  # everything evicted: cold again
    bm.check_invariants()


def test_evictable_hits_cost_an_available_block() -> None:
    bm = BlockManager(10, BS, watermark_frac=0.0, enable_prefix_caching=True)
    h = prefix_block_hashes(1, 64, 64, BS, 0)
    bm.allocate(0, 64, h)
    bm.free(0)  # 4 cached, 6 free
    bm.allocate(1, 16 * 5)  # 1 free + 4 cached available
    assert bm.num_available_blocks == 5
    # 65 tokens: 4 hits (all cached, each re-taken) + 1 new = 5 available blocks consumed
    assert bm.can_allocate(2, 65, h)
    assert not bm.can_allocate(2, 65 + 16, h)
    assert bm.allocate(2, 65, h) == 64
    assert bm.num_available_blocks == 0
    bm.check_invariants()


def test_swap_keeps_shared_blocks_for_others_and_reshares_on_swap_in() -> None:
    bm = caching(num_blocks=20, num_cpu_blocks=10)
    bm.allocate(0, 80, prefix_block_hashes(1, 64, 80, BS, 0))  # 5 blocks
    bm.allocate(1, 80, prefix_block_hashes(1, 64, 80, BS, 1))  # 4 shared + 1
    assert bm.num_used_blocks == 6
    assert bm.swap_out(1) == 5  # every block is copied, shared ones included
    assert bm.num_used_blocks == 5 and bm.num_swapped_out_blocks == 5
    assert bm.num_cached_blocks == 1  # seq 1's own full hashed block stays cached on the GPU
    bm.check_invariants()
    assert bm.swap_in(1) == 5
    assert bm.num_used_blocks == 6  # shared prefix and cached block re-shared, nothing duplicated
    assert bm.num_cached_blocks == 0
    bm.check_invariants()
    bm.free(0)
    bm.free(1)
    assert bm.num_used_blocks == 0 and bm.num_cached_blocks + bm.num_free_blocks == 20
    bm.check_invariants()


def test_swap_in_counts_cached_hits_as_taking_blocks() -> None:
    bm = caching(num_blocks=10, num_cpu_blocks=10)
    h = prefix_block_hashes(1, 64, 64, BS, 0)
    bm.allocate(0, 64, h)
    bm.swap_out(0)  # its 4 hashed blocks stay cached on the GPU
    assert (bm.num_cached_blocks, bm.num_free_blocks) == (4, 6)
    bm.allocate(1, 16 * 7)  # takes the 6 free blocks and evicts seq 0's tail block
    assert (bm.num_cached_blocks, bm.num_free_blocks) == (3, 0)
    assert not bm.can_swap_in(0)  # 3 cached hits + 1 fresh block = 4 > 3 available
    with pytest.raises(KVCacheError, match="needs 4 KV blocks, only 3 available"):
        bm.swap_in(0)
    bm.free(1)
    assert bm.can_swap_in(0)
    assert bm.swap_in(0) == 4
    assert (bm.num_used_blocks, bm.num_cached_blocks, bm.num_free_blocks) == (4, 0, 6)
    bm.check_invariants()


def test_check_invariants_catches_corruption() -> None:
    bm = caching()
    bm.allocate(0, 40, prefix_block_hashes(1, 32, 40, BS, 0))
    bm.check_invariants()
    bm._refcount[bm._seqs[0].block_ids[0]] += 1  # a reference nobody holds
    with pytest.raises(AssertionError, match="reference counts"):
        bm.check_invariants()
    bm._refcount[bm._seqs[0].block_ids[0]] -= 1
    bm._free.append(bm._free[-1])  # a block on the free list twice
    with pytest.raises(AssertionError, match="invariant broken"):
        bm.check_invariants()


# -- utilization and fragmentation ----------------------------------------------------------------------------------
def test_utilization_and_fragmentation_on_a_hand_built_case() -> None:
    bm = manager(num_blocks=10)
    assert bm.utilization_frac == 0.0 and bm.fragmentation_frac == 0.0
    bm.allocate(0, 20)  # 2 blocks, 12 slots unfilled
    bm.allocate(1, 16)  # 1 block, full
    assert bm.utilization_frac == pytest.approx(0.3)
    assert bm.fragmentation_frac == pytest.approx(12 / 48)
    bm.append(1)  # 17 tokens: a second block with 15 unfilled slots
    assert bm.utilization_frac == pytest.approx(0.4)
    assert bm.fragmentation_frac == pytest.approx((12 + 15) / 64)
    bm.append(0, 12)  # seq 0 fills its last block exactly
    assert bm.fragmentation_frac == pytest.approx(15 / 64)
    bm.free(1)
    assert bm.utilization_frac == pytest.approx(0.2) and bm.fragmentation_frac == 0.0


def test_fragmentation_counts_a_shared_block_once() -> None:
    bm = caching(num_blocks=10)
    bm.allocate(0, 40, prefix_block_hashes(1, 32, 40, BS, 0))  # 2 shared + 1 partial (8 unfilled)
    bm.allocate(1, 36, prefix_block_hashes(1, 32, 36, BS, 1))  # 2 shared + 1 partial (12 unfilled)
    assert bm.num_used_blocks == 4
    assert bm.fragmentation_frac == pytest.approx((8 + 12) / (4 * BS))


# -- capacity -------------------------------------------------------------------------------------------------------
def test_kv_cache_capacity_llama_2_7b_on_80_gib() -> None:
    # llama-2-7b fp16: 2 (K, V) * 32 layers * 4096 hidden * 2 bytes = 512 KiB per token; 16 tokens = 8 MiB per block
    kv_bytes_per_token = 2 * 32 * 4096 * 2
    num_blocks = kv_cache_capacity(gpu_memory_bytes=80 * GiB, gpu_memory_utilization_frac=0.875,
                                   weight_bytes=13 * GiB, activation_peak_bytes=1 * GiB,
                                   kv_bytes_per_token=kv_bytes_per_token, block_size=16)
    assert num_blocks == (70 - 14) * 1024 // 8 == 7168
    # floor, not round: 8 MiB - 1 byte short of another block
    assert kv_cache_capacity(gpu_memory_bytes=80 * GiB, gpu_memory_utilization_frac=1.0,
                             weight_bytes=80 * GiB - 8 * 2**20 * 3 + 1, activation_peak_bytes=0,
                             kv_bytes_per_token=kv_bytes_per_token, block_size=16) == 2
    assert kv_cache_capacity(gpu_memory_bytes=80 * GiB, gpu_memory_utilization_frac=0.9, weight_bytes=13 * GiB,
                             activation_peak_bytes=1 * GiB, kv_bytes_per_token=kv_bytes_per_token,
                             block_size=16) == 58 * 1024 // 8


def test_kv_cache_capacity_model_does_not_fit_message() -> None:
    with pytest.raises(ConfigError) as info:
        kv_cache_capacity(gpu_memory_bytes=80 * GiB, gpu_memory_utilization_frac=0.9, weight_bytes=130 * GiB,
                          activation_peak_bytes=2 * GiB, kv_bytes_per_token=2**20, block_size=16)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("model does not fit")
    assert "needs 132.02 GiB" in message and "72.00 GiB is available" in message
    assert "weights 130.00" in message and "activations 2.00" in message
    assert "tensor parallelism" in message  # what to do, on the same line


def test_kv_cache_capacity_not_even_one_block() -> None:
    with pytest.raises(ConfigError, match="model does not fit"):  # 1 MiB left, 16 MiB block
        kv_cache_capacity(gpu_memory_bytes=GiB, gpu_memory_utilization_frac=1.0, weight_bytes=GiB - 2**20,
                          activation_peak_bytes=0, kv_bytes_per_token=2**20, block_size=16)


@pytest.mark.parametrize(("field", "value"), [
    ("gpu_memory_bytes", 0.0), ("gpu_memory_utilization_frac", 0.0), ("gpu_memory_utilization_frac", 1.5),
    ("weight_bytes", -1.0), ("kv_bytes_per_token", 0.0), ("block_size", 0),
])
def test_kv_cache_capacity_rejects_bad_inputs(field: str, value: float) -> None:
    kwargs: dict[str, float] = {"gpu_memory_bytes": 80 * GiB, "gpu_memory_utilization_frac": 0.9,
                                "weight_bytes": GiB, "activation_peak_bytes": 0.0, "kv_bytes_per_token": 2**19,
                                "block_size": 16}
    kwargs[field] = value
    with pytest.raises(ConfigError, match=field):
        kv_cache_capacity(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", range(12))
def test_counting_manager_makes_the_same_decisions_as_the_block_manager(seed: int) -> None:
    import random

    from perfcast.serving.kv import CountingBlockManager

    rng = random.Random(seed)
    bs = rng.choice([1, 8, 16])
    named = BlockManager(200, bs, watermark_frac=0.05, num_cpu_blocks=80)
    counted = CountingBlockManager(200, bs, watermark_frac=0.05, num_cpu_blocks=80)
    live: list[int] = []
    swapped: list[int] = []
    next_id = 0
    for _ in range(1500):
        op = rng.choice(["allocate", "append", "append", "join", "join", "grow", "grow", "free", "swap_out", "swap_in"])
        if op == "allocate":
            tokens = rng.randint(1, 400)
            ok = named.can_allocate(next_id, tokens)
            assert ok == counted.can_allocate(next_id, tokens)
            if ok:
                assert named.allocate(next_id, tokens) == counted.allocate(next_id, tokens) == 0
                live.append(next_id)
            next_id += 1
        elif op == "append" and live:
            sid, n = rng.choice(live), rng.randint(1, 40)
            ok = named.can_append(sid, n)
            assert ok == counted.can_append(sid, n)
            if ok:
                named.append(sid, n)
                counted.append(sid, n)
        elif op == "join" and live:
            sid = rng.choice(live)
            named.add_to_group(sid)
            counted.add_to_group(sid)
        elif op == "grow" and live:
            limit = rng.randint(0, 60)
            j = named.max_group_growth(limit)
            assert j == counted.max_group_growth(limit)
            step = rng.randint(0, j)
            named.grow_group(step)
            counted.grow_group(step)
        elif op == "free" and (live or swapped):
            pool = live if live and (not swapped or rng.random() < 0.7) else swapped
            sid = pool.pop(rng.randrange(len(pool)))
            named.free(sid)
            counted.free(sid)
        elif op == "swap_out" and live:
            sid = rng.choice(live)
            ok = named.can_swap_out(sid)
            assert ok == counted.can_swap_out(sid)
            if ok:
                assert named.swap_out(sid) == counted.swap_out(sid)
                live.remove(sid)
                swapped.append(sid)
        elif op == "swap_in" and swapped:
            sid = rng.choice(swapped)
            ok = named.can_swap_in(sid)
            assert ok == counted.can_swap_in(sid)
            if ok:
                assert named.swap_in(sid) == counted.swap_in(sid)
                swapped.remove(sid)
                live.append(sid)
        assert (named.num_free_blocks, named.num_used_blocks, named.num_swapped_out_blocks) == (
            counted.num_free_blocks, counted.num_used_blocks, counted.num_swapped_out_blocks)
        assert named.fragmentation_frac == pytest.approx(counted.fragmentation_frac)
        for sid in live:
            assert named.seq_num_tokens(sid) == counted.seq_num_tokens(sid)
            assert named.seq_num_blocks(sid) == counted.seq_num_blocks(sid)
        counted.check_invariants()
