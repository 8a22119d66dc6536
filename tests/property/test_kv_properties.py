"""Property: random allocate/append/free/swap programs never break the KV block manager's invariants.

Hypothesis generates short programs over a small cache (with and without prefix caching, with and without
swap space) and a seeded random walk runs long programs on many seeds. After every operation
``check_invariants()`` holds (used + free + cached == num_blocks, refcounts match the block tables, every
sequence covers its tokens exactly, CPU use within its capacity), the ``can_*`` answers agree with what the
operations do, prefix hits are whole blocks below the prompt length, and freeing everything gives every
block back.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfcast.serving.kv import BlockManager, KVCacheError, prefix_block_hashes

_DEEP = int(os.environ.get("PERFCAST_FUZZ_EXAMPLES", "0"))
SETTINGS = settings(max_examples=_DEEP or 150, deadline=None, suppress_health_check=[HealthCheck.too_slow],
                    derandomize=not _DEEP, database=None)

OPS = ("allocate", "append", "free", "swap_out", "swap_in", "recompute")


class Driver:
    """Applies operations to a BlockManager, checking it against a shadow of the live sequences."""

    def __init__(self, bm: BlockManager, num_prefixes: int) -> None:
        self.bm = bm
        self.num_prefixes = num_prefixes
        self.next_id = 0
        self.tokens: dict[int, int] = {}  # shadow: seq id -> tokens
        self.swapped: set[int] = set()
        self.prompt: dict[int, tuple[int, int, int]] = {}  # seq id -> (prefix_id, shared tokens, prompt tokens)

    def hashes(self, seq_id: int, num_tokens: int) -> list[int]:
        prefix_id, shared, prompt = self.prompt[seq_id]
        h = prefix_block_hashes(prefix_id, shared, prompt, self.bm.block_size, unique_id=seq_id)
        return h[: num_tokens // self.bm.block_size]

    def allocate(self, seq_id: int, num_tokens: int) -> None:
        bm = self.bm
        hashes = self.hashes(seq_id, num_tokens)
        ok = bm.can_allocate(seq_id, num_tokens, hashes)
        available = bm.num_available_blocks
        try:
            hit = bm.allocate(seq_id, num_tokens, hashes)
        except KVCacheError:
            assert not ok, "can_allocate said yes but allocate refused"
            assert seq_id not in bm
            return
        self.tokens[seq_id] = num_tokens
        assert hit % bm.block_size == 0 and 0 <= hit <= num_tokens - 1
        if not bm.enable_prefix_caching:
            assert hit == 0
        assert bm.num_available_blocks <= available
        if ok:
            assert bm.num_available_blocks >= bm.watermark_blocks

    def step(self, op: str, pick: int, size: int) -> None:
        bm = self.bm
        live = sorted(self.tokens)
        target = live[pick % len(live)] if live else None
        if op == "allocate" or target is None:
            seq_id = self.next_id
            self.next_id += 1
            prompt = 1 + size
            shared = (pick * 7) % (prompt + 1)
            self.prompt[seq_id] = (pick % self.num_prefixes, shared, prompt)
            self.allocate(seq_id, prompt)
        elif op == "append":
            n = 1 + size % 20 if pick % 3 else 1
            if target in self.swapped:
                with pytest.raises(KVCacheError):
                    bm.append(target, n)
            elif bm.can_append(target, n):
                bm.append(target, n)
                self.tokens[target] += n
            else:
                with pytest.raises(KVCacheError):
                    bm.append(target, n)
        elif op == "free":
            bm.free(target)
            del self.tokens[target]
            self.swapped.discard(target)
        elif op == "swap_out":
            if target in self.swapped:
                return
            if bm.can_swap_out(target):
                assert bm.swap_out(target) == bm.seq_num_blocks(target)
                self.swapped.add(target)
            else:
                with pytest.raises(KVCacheError):
                    bm.swap_out(target)
        elif op == "swap_in":
            if target not in self.swapped:
                return
            if bm.can_swap_in(target):
                assert bm.swap_in(target) == bm.seq_num_blocks(target)
                self.swapped.discard(target)
                assert bm.num_available_blocks >= bm.watermark_blocks
            else:
                try:
                    bm.swap_in(target)  # may still fit physically, below the watermark
                    self.swapped.discard(target)
                except KVCacheError:
                    assert target in self.swapped
        elif op == "recompute":  # preempt by recomputation: free, then re-admit prompt + generated tokens
            num_tokens = self.tokens.pop(target)
            bm.free(target)
            self.swapped.discard(target)
            self.allocate(target, num_tokens)
        self.check()

    def check(self) -> None:
        bm = self.bm
        bm.check_invariants()
        assert bm.num_used_blocks + bm.num_free_blocks + bm.num_cached_blocks == bm.num_blocks
        assert 0 <= bm.num_used_blocks <= bm.num_blocks
        assert 0 <= bm.num_swapped_out_blocks <= bm.num_cpu_blocks
        assert 0.0 <= bm.utilization_frac <= 1.0 and 0.0 <= bm.fragmentation_frac < 1.0
        assert bm.num_seqs == len(self.tokens)
        for seq_id, n in self.tokens.items():
            assert bm.seq_num_tokens(seq_id) == n
            assert bm.seq_num_blocks(seq_id) == -(-n // bm.block_size)
            assert bm.is_swapped_out(seq_id) == (seq_id in self.swapped)
        if not bm.enable_prefix_caching:
            assert bm.num_cached_blocks == 0
            gpu_blocks = sum(bm.seq_num_blocks(s) for s in self.tokens if s not in self.swapped)
            assert bm.num_used_blocks == gpu_blocks  # nothing shared without the prefix cache
        assert 0 <= bm.prefix_hit_tokens <= bm.prefix_query_tokens

    def drain(self) -> None:
        for seq_id in list(self.tokens):
            self.bm.free(seq_id)
            del self.tokens[seq_id]
        self.swapped.clear()
        self.check()
        bm = self.bm
        assert bm.num_used_blocks == 0 and bm.num_swapped_out_blocks == 0 and bm.num_seqs == 0
        assert bm.num_free_blocks + bm.num_cached_blocks == bm.num_blocks
        if not bm.enable_prefix_caching:
            assert bm.num_free_blocks == bm.num_blocks


configs = st.fixed_dictionaries({
    "num_blocks": st.integers(1, 48),
    "block_size": st.sampled_from([1, 2, 4, 16]),
    "watermark_frac": st.sampled_from([0.0, 0.01, 0.1, 0.3]),
    "num_cpu_blocks": st.integers(0, 32),
    "enable_prefix_caching": st.booleans(),
})
programs = st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 1000), st.integers(0, 120)), max_size=60)


@SETTINGS
@given(config=configs, program=programs, num_prefixes=st.integers(1, 3))
def test_random_programs_keep_the_invariants(config: dict[str, object], program: list[tuple[str, int, int]],
                                             num_prefixes: int) -> None:
    driver = Driver(BlockManager(**config), num_prefixes)  # type: ignore[arg-type]
    for op, pick, size in program:
        driver.step(op, pick, size)
    driver.drain()


@SETTINGS
@given(program=programs)
def test_prefix_caching_never_uses_more_blocks(program: list[tuple[str, int, int]]) -> None:
    """The same admissions with the prefix cache use at most as many blocks as without it."""
    plain = BlockManager(4096, 4, watermark_frac=0.0)
    cached = BlockManager(4096, 4, watermark_frac=0.0, enable_prefix_caching=True)
    for seq_id, (_, pick, size) in enumerate(program):
        hashes = prefix_block_hashes(pick % 2, (pick * 7) % (size + 2), size + 1, 4, seq_id)
        plain.allocate(seq_id, size + 1, hashes)
        hit = cached.allocate(seq_id, size + 1, hashes)
        assert cached.seq_num_blocks(seq_id) == plain.seq_num_blocks(seq_id)
        assert hit % 4 == 0 and hit <= size
        # nothing is freed, so every hit block is still shared: sharing saves exactly the hit blocks
        assert cached.num_used_blocks == plain.num_used_blocks - cached.prefix_hit_tokens // 4
    cached.check_invariants()


@pytest.mark.parametrize("caching", [False, True], ids=["plain", "prefix-caching"])
@pytest.mark.parametrize("seed", range(12))
def test_long_seeded_random_walk(seed: int, caching: bool) -> None:
    rng = np.random.default_rng(seed)
    bm = BlockManager(int(rng.integers(8, 200)), int(rng.choice([1, 8, 16])),
                      watermark_frac=float(rng.choice([0.0, 0.01, 0.05])), num_cpu_blocks=int(rng.integers(0, 64)),
                      enable_prefix_caching=caching)
    driver = Driver(bm, num_prefixes=int(rng.integers(1, 4)))
    weights = np.array([0.3, 0.4, 0.12, 0.06, 0.06, 0.06])
    for _ in range(1500):
        op = OPS[int(rng.choice(len(OPS), p=weights))]
        driver.step(op, int(rng.integers(0, 10_000)), int(rng.integers(0, 300)))
    driver.drain()
    if caching:
        assert bm.prefix_hit_tokens > 0


def test_same_program_same_state() -> None:
    def run() -> tuple[int, int, int, int, float]:
        rng = np.random.default_rng(7)
        bm = BlockManager(64, 16, enable_prefix_caching=True, num_cpu_blocks=16)
        driver = Driver(bm, num_prefixes=2)
        for _ in range(500):
            driver.step(OPS[int(rng.integers(0, len(OPS)))], int(rng.integers(0, 1000)), int(rng.integers(0, 200)))
        return (bm.num_used_blocks, bm.num_cached_blocks, bm.prefix_hit_tokens, bm.num_swapped_out_blocks,
                bm.fragmentation_frac)

    assert run() == run()
