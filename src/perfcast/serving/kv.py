"""Paged KV-cache block manager for one serving replica, with vLLM's semantics.

The model follows vLLM's PagedAttention design (Kwon et al., "Efficient Memory Management for Large
Language Model Serving with PagedAttention", SOSP 2023) as implemented by its block managers (the v0
``BlockSpaceManager`` for the watermark and swapping, and the v1 ``KVCacheManager`` / "Automatic Prefix
Caching" design document for prefix caching). It is a description of behaviour, not a port of the code.

Blocks
    GPU memory for the KV cache is ``num_blocks`` blocks of ``block_size`` token slots. A sequence
    holding ``n`` tokens owns exactly ``ceil(n / block_size)`` blocks; only its last block may be
    partly filled (that unfilled tail is the internal fragmentation PagedAttention leaves).
    Every GPU block is in exactly one of three states, so ``used + free + cached == num_blocks``:

    * used: referenced by at least one live (GPU-resident) sequence, with a reference count;
    * free: empty, on the free list;
    * cached: refcount 0 but holding a full block whose prefix hash is known; kept resident so a
      later request with the same prefix can reuse it, and evicted least-recently-freed first only
      when a new block is needed and the free list is empty.

    Cached blocks are as good as free for admission: "available" below means free + cached.

Admission and the watermark
    ``can_allocate`` admits a new prompt only if, after taking the blocks it needs, at least
    ``watermark_blocks = int(watermark_frac * num_blocks)`` blocks remain available (vLLM keeps this
    headroom so running sequences can still grow without immediate preemption). ``allocate`` itself
    does not apply the watermark; it only refuses (``KVCacheError``) when the blocks physically do not
    exist, so a scheduler must call ``can_allocate`` first. ``can_ever_allocate`` tells a prompt that
    could never be admitted even on an empty cache (vLLM's ``AllocStatus.NEVER``) apart from one that
    must wait. Growing a running sequence (``can_append``/``append``) and ``can_swap_out`` ignore the
    watermark; ``can_swap_in`` applies it, as vLLM does.

Prefix caching (``enable_prefix_caching=True``)
    The caller gives each prompt the hashes of its full blocks (``prefix_block_hashes`` builds them
    for a shared-system-prompt workload). A block hash covers the whole prefix up to and including
    that block (hashes are chained), so equal hashes mean equal prefixes and equal KV content.

    * Lookup walks the prompt's hashes from the first block and stops at the first miss. Each hit
      block is shared (its reference count goes up) instead of allocated; a hit on a cached
      (refcount-0) block moves it back to used, so it still consumes an available block.
    * Hits are whole blocks, and at most ``num_tokens - 1`` tokens are served from the cache: when
      every block of a block-aligned prompt hits, the last one is recomputed into a new block, so
      at least one token is always computed (it produces the first output token's logits).
    * Newly allocated prompt blocks that carry a hash are registered in the cache at allocation
      time (vLLM v1 likewise caches a full block as soon as it is scheduled for computation), so a
      request admitted in the same iteration can already share them. A hash already cached by
      another block is not registered twice; such a block is private and freed normally.
    * Blocks grown by ``append`` (decode tokens, or prompt blocks without a hash) are never cached.
    * ``free`` releases a sequence's blocks last block first; a block whose refcount drops to 0 goes
      to the cached LRU list if it carries a hash, else straight to the free list. Releasing tail
      blocks first makes them the first evicted, which keeps shared prefixes longest.
    * Counters ``prefix_query_tokens`` (prompt tokens passed to ``allocate``) and
      ``prefix_hit_tokens`` (tokens served from the cache) give the hit rate, as vLLM reports it.

Preemption
    Swapping moves a whole sequence: ``swap_out`` copies each of its blocks into a CPU block (shared
    prefix blocks are copied too, one CPU block per sequence, as vLLM does) and drops its GPU
    references; ``swap_in`` brings it back, re-sharing blocks whose hash is still cached on the GPU.
    Both return the number of blocks transferred (the sequence's block count), for a PCIe-time model.
    Recompute preemption is ``free`` followed later by a fresh ``allocate`` by the caller.

The decode group
    The sequences that decode grow by one token per decode iteration together. A caller adds each to
    the group (``add_to_group``; it leaves when freed or swapped out), asks how far the whole group can
    grow (``max_group_growth``) and grows it (``grow_group``). ``BlockManager`` names blocks and grows
    members one by one; ``CountingBlockManager`` grows the group in O(block_size) without touching the
    members: it keeps each member's tokens relative to a group clock and counts members by their
    position within a block, since a member takes a new block exactly when its last one is full.

Beam search (``CountingBlockManager`` only)
    A request decoding ``b`` beams is one sequence id holding ``b`` beams of ``num_tokens`` tokens each
    (prompt plus that beam's generated tokens): the prompt's full blocks are shared, and every beam owns
    the rest, ``b * ceil(num_tokens / block_size) - (b - 1) * (prompt_tokens // block_size)`` blocks in all.
    vLLM's beams share the prompt's partial last block until each beam's first write copies it
    (copy-on-write); here every beam holds its copy from admission on (counted simply: at most ``b - 1``
    blocks early, during the prompt's own iterations). With ``b = 1`` this is ``ceil(num_tokens / block_size)``.
    Growing the request by a token grows every beam, so it takes ``b`` blocks whenever its last one is full,
    and the decode group counts rows (beams), not sequences. The manager that names blocks (prefix caching)
    does not model beams.

Sequence ids are the caller's ints. Every call costs O(blocks touched) with plain ints, lists and dicts;
``check_invariants`` is the O(total blocks) audit the tests use.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence
from typing import NoReturn

from perfcast.errors import ConfigError, PerfcastError

__all__ = ["BlockManager", "CountingBlockManager", "KVCacheError", "kv_cache_capacity", "prefix_block_hashes"]

_GiB = 2.0**30  # bytes; this module imports only perfcast.errors, so the constant is local


class KVCacheError(PerfcastError):
    """A KV block request the cache cannot honour (over-allocation, duplicate or unknown sequence id)."""


class _Seq:
    """One sequence's view of the cache: its GPU block table, or the number of CPU blocks it was swapped to."""

    __slots__ = ("block_ids", "hashes", "num_cpu_blocks", "num_tokens", "on_gpu")

    def __init__(self, num_tokens: int, hashes: list[int]) -> None:
        self.num_tokens = num_tokens
        self.hashes = hashes  # prefix hashes of the prompt's leading full blocks (positional)
        self.block_ids: list[int] = []
        self.on_gpu = True
        self.num_cpu_blocks = 0


class _PagedCache:
    """What both managers share: the cache's shape, its argument checks and the block arithmetic."""

    def __init__(self, num_blocks: int, block_size: int, watermark_frac: float, num_cpu_blocks: int) -> None:
        if isinstance(num_blocks, bool) or not isinstance(num_blocks, int) or num_blocks < 1:
            raise ConfigError(f"num_blocks={num_blocks!r} must be an int >= 1")
        if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
            raise ConfigError(f"block_size={block_size!r} must be an int >= 1")
        if not 0.0 <= watermark_frac < 1.0:
            raise ConfigError(f"watermark_frac={watermark_frac!r} must be in [0, 1)")
        if isinstance(num_cpu_blocks, bool) or not isinstance(num_cpu_blocks, int) or num_cpu_blocks < 0:
            raise ConfigError(f"num_cpu_blocks={num_cpu_blocks!r} must be an int >= 0")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.watermark_frac = float(watermark_frac)
        self.watermark_blocks = int(watermark_frac * num_blocks)
        self.num_cpu_blocks = num_cpu_blocks
        self.prefix_hit_tokens = 0
        self.prefix_query_tokens = 0

    def num_blocks_for(self, num_tokens: int) -> int:
        """ceil(num_tokens / block_size)."""
        return -(-num_tokens // self.block_size)

    def beam_blocks_for(self, num_tokens: int, beams: int = 1, prompt_tokens: int = 0) -> int:
        """Blocks of a request of ``beams`` beams holding ``num_tokens`` tokens each, whose first
        ``prompt_tokens`` are the shared prompt (its full blocks held once; see the module docstring)."""
        blocks = -(-num_tokens // self.block_size)
        if beams == 1:
            return blocks
        return blocks * beams - (beams - 1) * (prompt_tokens // self.block_size)

    def can_ever_allocate(self, num_tokens: int, beams: int = 1, prompt_tokens: int = 0) -> bool:
        """Whether a prompt of ``num_tokens`` (``beams`` beams over ``prompt_tokens`` shared tokens) fits under
        the watermark on an empty cache (else it never will)."""
        return self.num_blocks - self.beam_blocks_for(num_tokens, beams, prompt_tokens) >= self.watermark_blocks

    @property
    def num_available_blocks(self) -> int:  # pragma: no cover - each manager counts its own
        """Blocks a new allocation or a growing sequence can take (no watermark)."""
        raise NotImplementedError

    def append_need(self, seq_id: int, num_new_tokens: int) -> int:  # pragma: no cover - each manager's own
        """New blocks ``seq_id`` takes to grow by ``num_new_tokens`` (0 when its last block has room)."""
        raise NotImplementedError

    def can_append(self, seq_id: int, num_new_tokens: int = 1) -> bool:
        """Whether ``seq_id`` can grow by ``num_new_tokens`` (no watermark; cached prefix blocks may be evicted)."""
        return self.append_need(seq_id, num_new_tokens) <= self.num_available_blocks

    def decode_fits(self, num_seqs: int) -> bool:
        """Whether ``num_seqs`` sequences (beams count one each) can each take one more token even if each
        needs a new block."""
        return num_seqs <= self.num_available_blocks


class BlockManager(_PagedCache):
    """Allocates, grows, frees, shares and swaps paged KV blocks for the sequences of one replica.

    See the module docstring for the semantics (watermark, prefix-cache hits, eviction, swapping).
    """

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        watermark_frac: float = 0.01,
        num_cpu_blocks: int = 0,
        enable_prefix_caching: bool = False,
    ) -> None:
        super().__init__(num_blocks, block_size, watermark_frac, num_cpu_blocks)
        self.enable_prefix_caching = bool(enable_prefix_caching)

        # pop() from the end; reversed so that block 0 is handed out first (purely cosmetic)
        self._free: list[int] = list(range(num_blocks - 1, -1, -1))
        self._refcount: list[int] = [0] * num_blocks
        self._block_hash: list[int | None] = [None] * num_blocks
        self._hash_to_block: dict[int, int] = {}  # registered hash -> the block holding it (used or cached)
        self._evictable: OrderedDict[int, None] = OrderedDict()  # cached refcount-0 blocks, LRU first
        self._seqs: dict[int, _Seq] = {}
        self._group: dict[int, None] = {}  # the decode group (ordered set of sequence ids)
        self._num_used = 0  # blocks with refcount > 0
        self._num_unfilled_slots = 0  # sum over GPU sequences of (blocks * block_size - tokens)
        self._num_cpu_used = 0

    # -- introspection ------------------------------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        """Empty GPU blocks on the free list (cached blocks are counted separately)."""
        return len(self._free)

    @property
    def num_used_blocks(self) -> int:
        """GPU blocks referenced by at least one live sequence (a shared block counts once)."""
        return self._num_used

    @property
    def num_cached_blocks(self) -> int:
        """Evictable prefix-cache blocks: refcount 0, content kept, reclaimable on demand."""
        return len(self._evictable)

    @property
    def num_available_blocks(self) -> int:
        """Blocks a new allocation can take: free + cached."""
        return len(self._free) + len(self._evictable)

    @property
    def num_swapped_out_blocks(self) -> int:
        """CPU blocks holding swapped-out sequences."""
        return self._num_cpu_used

    @property
    def utilization_frac(self) -> float:
        """Used GPU blocks / num_blocks."""
        return self._num_used / self.num_blocks

    @property
    def fragmentation_frac(self) -> float:
        """Allocated but unfilled token slots / allocated slots over used blocks (0 when nothing is used).

        Only a sequence's last block can be partly filled, and shared (hashed) blocks are always full, so
        this is the physical internal fragmentation of the used blocks.
        """
        if self._num_used == 0:
            return 0.0
        return self._num_unfilled_slots / (self._num_used * self.block_size)

    def fill_fracs(self) -> tuple[float, float]:
        """``(utilization_frac, fragmentation_frac)`` in one call (the engine weighs both every iteration)."""
        return self.utilization_frac, self.fragmentation_frac

    @property
    def num_seqs(self) -> int:
        """Sequences known to the cache (on GPU or swapped out)."""
        return len(self._seqs)

    def __contains__(self, seq_id: object) -> bool:
        return seq_id in self._seqs

    def seq_num_tokens(self, seq_id: int) -> int:
        """Tokens held for ``seq_id`` (on GPU or swapped out)."""
        return self._get(seq_id).num_tokens

    def seq_num_blocks(self, seq_id: int) -> int:
        """Blocks held for ``seq_id``: its GPU block table (shared blocks included) or its CPU blocks."""
        seq = self._get(seq_id)
        return len(seq.block_ids) if seq.on_gpu else seq.num_cpu_blocks

    def is_swapped_out(self, seq_id: int) -> bool:
        """Whether ``seq_id`` currently lives in CPU swap space."""
        return not self._get(seq_id).on_gpu

    # -- admission ---------------------------------------------------------------------------------------------
    def can_allocate(self, seq_id: int, num_tokens: int, prefix_hashes: Sequence[int] | None = None,
                     beams: int = 1, prompt_tokens: int = 0) -> bool:
        """Whether admitting a prompt of ``num_tokens`` leaves at least ``watermark_blocks`` available
        (one beam only: ``beams`` > 1 raises ``KVCacheError``).

        Prefix-cache hits on blocks used by live sequences cost nothing; hits on cached (refcount-0) blocks
        cost one available block each, like a fresh block.
        """
        self._check_new(seq_id, num_tokens, prefix_hashes, beams)
        num_hit_blocks, num_evictable_hits = self._lookup(num_tokens, prefix_hashes)
        num_required = self.num_blocks_for(num_tokens) - num_hit_blocks + num_evictable_hits
        return self.num_available_blocks - num_required >= self.watermark_blocks

    def allocate(self, seq_id: int, num_tokens: int, prefix_hashes: Sequence[int] | None = None,
                 beams: int = 1, prompt_tokens: int = 0) -> int:
        """Reserve blocks for a prompt of ``num_tokens``; return the prompt tokens served from the prefix cache
        (one beam only, as :meth:`can_allocate`).

        The hit is a whole number of blocks and at most ``num_tokens - 1``. Does not apply the watermark
        (call ``can_allocate`` first); raises ``KVCacheError`` when the blocks do not exist.
        """
        self._check_new(seq_id, num_tokens, prefix_hashes, beams)
        num_hit_blocks, num_evictable_hits = self._lookup(num_tokens, prefix_hashes)
        num_total = self.num_blocks_for(num_tokens)
        num_required = num_total - num_hit_blocks + num_evictable_hits
        if num_required > self.num_available_blocks:
            raise KVCacheError(
                f"cannot allocate {num_required} KV blocks for sequence {seq_id} ({num_tokens} tokens): "
                f"only {self.num_available_blocks} of {self.num_blocks} available"
            )
        hashes: list[int] = list(prefix_hashes) if (prefix_hashes and self.enable_prefix_caching) else []
        seq = _Seq(num_tokens, hashes)
        blocks = seq.block_ids
        refcount = self._refcount
        for i in range(num_hit_blocks):  # claim hits before allocating, so eviction cannot take them
            block = self._hash_to_block[hashes[i]]
            if refcount[block] == 0:
                del self._evictable[block]
                self._num_used += 1
            refcount[block] += 1
            blocks.append(block)
        num_hashes = len(hashes)
        for i in range(num_hit_blocks, num_total):
            block = self._take_block()
            if i < num_hashes:
                h = hashes[i]
                if h not in self._hash_to_block:
                    self._hash_to_block[h] = block
                    self._block_hash[block] = h
            blocks.append(block)
        self._seqs[seq_id] = seq
        self._num_unfilled_slots += num_total * self.block_size - num_tokens
        hit_tokens = num_hit_blocks * self.block_size
        self.prefix_hit_tokens += hit_tokens
        self.prefix_query_tokens += num_tokens
        return hit_tokens

    # -- growth ------------------------------------------------------------------------------------------------
    def append_need(self, seq_id: int, num_new_tokens: int) -> int:
        """New blocks ``seq_id`` takes to grow by ``num_new_tokens`` (0 when its last block has room)."""
        seq = self._get_on_gpu(seq_id)
        return max(0, -(-(seq.num_tokens + num_new_tokens) // self.block_size) - len(seq.block_ids))

    def append(self, seq_id: int, num_new_tokens: int = 1) -> None:
        """Grow ``seq_id`` by ``num_new_tokens``, taking a new block only when a block boundary is crossed."""
        seq = self._get_on_gpu(seq_id)
        if num_new_tokens < 0:
            raise KVCacheError(f"num_new_tokens={num_new_tokens} for sequence {seq_id} must be >= 0")
        new_total = seq.num_tokens + num_new_tokens
        blocks = seq.block_ids
        need = -(-new_total // self.block_size) - len(blocks)
        if need > 0:
            if need > len(self._free) + len(self._evictable):
                raise KVCacheError(
                    f"cannot append {num_new_tokens} tokens to sequence {seq_id}: needs {need} more KV blocks, "
                    f"only {len(self._free) + len(self._evictable)} available"
                )
            for _ in range(need):
                blocks.append(self._take_block())
            self._num_unfilled_slots += need * self.block_size - num_new_tokens
        else:
            self._num_unfilled_slots -= num_new_tokens
        seq.num_tokens = new_total

    # -- the decode group --------------------------------------------------------------------------------------
    def add_to_group(self, seq_id: int) -> None:
        """``seq_id`` (on the GPU) joins the decode group: the sequences :meth:`grow_group` grows together. It
        leaves when it is freed or swapped out."""
        self._get_on_gpu(seq_id)
        self._group[seq_id] = None

    def grow_group(self, num_new_tokens: int) -> None:
        """``append(seq, num_new_tokens)`` for every sequence of the decode group (check :meth:`max_group_growth`
        first); named blocks are taken one sequence at a time, O(group)."""
        for sid in self._group:
            self.append(sid, num_new_tokens)

    def max_group_growth(self, limit: int) -> int:
        """The most tokens ``j <= limit`` every sequence of the decode group can grow by at once without running
        out of free and cached blocks."""
        if not self._group:
            return max(0, limit)
        if limit <= 0:
            return 0
        bs = self.block_size
        have = len(self._free) + len(self._evictable)
        if have >= len(self._group) * (-(-limit // bs) + 1):  # even the worst case fits
            return limit
        state = [(self._seqs[s].num_tokens, len(self._seqs[s].block_ids)) for s in self._group]
        return _max_uniform(state, have, limit, bs)

    # -- release -----------------------------------------------------------------------------------------------
    def free(self, seq_id: int) -> None:
        """Release ``seq_id`` (on GPU or swapped out). Hashed blocks whose refcount drops to 0 stay cached."""
        seq = self._get(seq_id)
        if seq.on_gpu:
            self._release_gpu(seq)
            self._group.pop(seq_id, None)
        else:
            self._num_cpu_used -= seq.num_cpu_blocks
        del self._seqs[seq_id]

    # -- swapping ----------------------------------------------------------------------------------------------
    def can_swap_out(self, seq_id: int) -> bool:
        """Whether the CPU swap space has room for all of ``seq_id``'s blocks."""
        seq = self._get_on_gpu(seq_id)
        return len(seq.block_ids) <= self.num_cpu_blocks - self._num_cpu_used

    def swap_out(self, seq_id: int) -> int:
        """Move ``seq_id``'s blocks to CPU swap space; return the number of blocks moved."""
        seq = self._get_on_gpu(seq_id)
        num_moved = len(seq.block_ids)
        if num_moved > self.num_cpu_blocks - self._num_cpu_used:
            raise KVCacheError(
                f"cannot swap out sequence {seq_id}: needs {num_moved} CPU blocks, "
                f"only {self.num_cpu_blocks - self._num_cpu_used} of {self.num_cpu_blocks} free"
            )
        self._release_gpu(seq)
        self._group.pop(seq_id, None)
        seq.on_gpu = False
        seq.num_cpu_blocks = num_moved
        self._num_cpu_used += num_moved
        return num_moved

    def can_swap_in(self, seq_id: int) -> bool:
        """Whether swapping ``seq_id`` back in leaves at least ``watermark_blocks`` available."""
        seq = self._get_swapped(seq_id)
        return self.num_available_blocks - self._swap_in_cost(seq) >= self.watermark_blocks

    def swap_in(self, seq_id: int) -> int:
        """Bring ``seq_id`` back to GPU blocks (re-sharing still-cached prefix blocks); return blocks moved."""
        seq = self._get_swapped(seq_id)
        cost = self._swap_in_cost(seq)
        if cost > self.num_available_blocks:
            raise KVCacheError(
                f"cannot swap in sequence {seq_id}: needs {cost} KV blocks, only {self.num_available_blocks} available"
            )
        num_blocks = seq.num_cpu_blocks
        blocks: list[int] = [-1] * num_blocks
        refcount = self._refcount
        hashes = seq.hashes
        num_hashed = min(len(hashes), num_blocks)
        for i in range(num_hashed):  # first claim cached hits, so the fresh allocations cannot evict them
            block = self._hash_to_block.get(hashes[i])
            if block is not None:
                if refcount[block] == 0:
                    del self._evictable[block]
                    self._num_used += 1
                refcount[block] += 1
                blocks[i] = block
        for i in range(num_blocks):
            if blocks[i] < 0:
                block = self._take_block()
                if i < num_hashed and hashes[i] not in self._hash_to_block:
                    self._hash_to_block[hashes[i]] = block
                    self._block_hash[block] = hashes[i]
                blocks[i] = block
        seq.block_ids = blocks
        seq.on_gpu = True
        seq.num_cpu_blocks = 0
        self._num_cpu_used -= num_blocks
        self._num_unfilled_slots += num_blocks * self.block_size - seq.num_tokens
        return num_blocks

    # -- audit -------------------------------------------------------------------------------------------------
    def check_invariants(self) -> None:
        """Recompute the whole state from the sequences and raise ``AssertionError`` on any inconsistency."""

        def fail(message: str) -> NoReturn:
            raise AssertionError(f"KV block manager invariant broken: {message}")

        n = self.num_blocks
        refs = [0] * n
        owners: dict[int, list[tuple[int, int]]] = {}  # block -> [(seq_id, position)]
        unfilled = 0
        cpu_used = 0
        for seq_id, seq in self._seqs.items():
            expected = self.num_blocks_for(seq.num_tokens)
            if seq.num_tokens < 1:
                fail(f"sequence {seq_id} holds {seq.num_tokens} tokens")
            if seq.on_gpu:
                if seq.num_cpu_blocks != 0:
                    fail(f"sequence {seq_id} is on GPU but holds {seq.num_cpu_blocks} CPU blocks")
                if len(seq.block_ids) != expected:
                    fail(f"sequence {seq_id}: {len(seq.block_ids)} blocks for {seq.num_tokens} tokens, "
                         f"expected {expected}")
                if len(set(seq.block_ids)) != len(seq.block_ids):
                    fail(f"sequence {seq_id} references a block twice")
                for pos, block in enumerate(seq.block_ids):
                    if not 0 <= block < n:
                        fail(f"sequence {seq_id} references block {block} outside [0, {n})")
                    refs[block] += 1
                    owners.setdefault(block, []).append((seq_id, pos))
                unfilled += expected * self.block_size - seq.num_tokens
            else:
                if seq.block_ids:
                    fail(f"swapped-out sequence {seq_id} still holds GPU blocks")
                if seq.num_cpu_blocks != expected:
                    fail(f"swapped-out sequence {seq_id}: {seq.num_cpu_blocks} CPU blocks for "
                         f"{seq.num_tokens} tokens, expected {expected}")
                cpu_used += seq.num_cpu_blocks
        if refs != self._refcount:
            fail("reference counts disagree with the sequences' block tables")
        if any(r < 0 for r in self._refcount):
            fail("negative reference count")
        used = sum(1 for r in refs if r > 0)
        if used != self._num_used:
            fail(f"used counter {self._num_used} != {used} referenced blocks")
        if unfilled != self._num_unfilled_slots:
            fail(f"unfilled-slot counter {self._num_unfilled_slots} != {unfilled}")
        if cpu_used != self._num_cpu_used or cpu_used > self.num_cpu_blocks:
            fail(f"CPU blocks used {self._num_cpu_used} (recomputed {cpu_used}) of {self.num_cpu_blocks}")
        free_set = set(self._free)
        if len(free_set) != len(self._free):
            fail("a block is on the free list twice")
        cached_set = set(self._evictable)
        if free_set & cached_set:
            fail("a block is both free and cached")
        for block in free_set:
            if refs[block] != 0 or self._block_hash[block] is not None:
                fail(f"free block {block} is referenced or still hashed")
        for block in cached_set:
            if refs[block] != 0 or self._block_hash[block] is None:
                fail(f"cached block {block} is referenced or has no hash")
        if used + len(free_set) + len(cached_set) != n:
            fail(f"used {used} + free {len(free_set)} + cached {len(cached_set)} != num_blocks {n}")
        if cached_set and not self.enable_prefix_caching:
            fail("cached blocks without prefix caching")
        if any(sid not in self._seqs or not self._seqs[sid].on_gpu for sid in self._group):
            fail("a decode-group member is not a live sequence on the GPU")
        for h, block in self._hash_to_block.items():
            if self._block_hash[block] != h:
                fail(f"hash table points hash {h} at block {block} holding {self._block_hash[block]}")
        if sum(1 for h in self._block_hash if h is not None) != len(self._hash_to_block):
            fail("a block carries a hash the hash table does not know")
        for block, who in owners.items():
            if len(who) > 1:  # sharing is only legal through the prefix cache, at the same position
                shared_hash = self._block_hash[block]
                if shared_hash is None:
                    fail(f"block {block} is shared by sequences {[s for s, _ in who]} without a prefix hash")
                for seq_id, pos in who:
                    hashes = self._seqs[seq_id].hashes
                    if pos >= len(hashes) or hashes[pos] != shared_hash:
                        fail(f"block {block} is shared by sequence {seq_id} at position {pos} with another prefix")

    # -- internals ---------------------------------------------------------------------------------------------
    def _get(self, seq_id: int) -> _Seq:
        seq = self._seqs.get(seq_id)
        if seq is None:
            raise KVCacheError(f"unknown sequence id {seq_id} in the KV cache")
        return seq

    def _get_on_gpu(self, seq_id: int) -> _Seq:
        seq = self._get(seq_id)
        if not seq.on_gpu:
            raise KVCacheError(f"sequence {seq_id} is swapped out; swap it in first")
        return seq

    def _get_swapped(self, seq_id: int) -> _Seq:
        seq = self._get(seq_id)
        if seq.on_gpu:
            raise KVCacheError(f"sequence {seq_id} is not swapped out")
        return seq

    def _check_new(self, seq_id: int, num_tokens: int, prefix_hashes: Sequence[int] | None, beams: int = 1) -> None:
        if beams != 1:
            raise KVCacheError(f"sequence {seq_id}: {beams} beams; the block manager that names blocks (prefix "
                               "caching) holds one beam per sequence")
        if seq_id in self._seqs:
            raise KVCacheError(f"sequence id {seq_id} already holds KV blocks; free it before allocating again")
        if num_tokens < 1:
            raise KVCacheError(f"sequence {seq_id}: num_tokens={num_tokens} must be >= 1")
        if prefix_hashes and len(prefix_hashes) > num_tokens // self.block_size:
            raise KVCacheError(
                f"sequence {seq_id}: {len(prefix_hashes)} prefix hashes for {num_tokens} tokens; at most "
                f"{num_tokens // self.block_size} full blocks of {self.block_size} tokens can be hashed"
            )

    def _lookup(self, num_tokens: int, prefix_hashes: Sequence[int] | None) -> tuple[int, int]:
        """(hit blocks, of which cached refcount-0) for a new prompt: leading hits, capped at num_tokens - 1."""
        if not prefix_hashes or not self.enable_prefix_caching:
            return 0, 0
        table = self._hash_to_block
        refcount = self._refcount
        max_hits = (num_tokens - 1) // self.block_size
        num_hits = 0
        num_evictable = 0
        for h in prefix_hashes:
            if num_hits >= max_hits:
                break
            block = table.get(h)
            if block is None:
                break
            num_hits += 1
            if refcount[block] == 0:
                num_evictable += 1
        return num_hits, num_evictable

    def _swap_in_cost(self, seq: _Seq) -> int:
        """Available blocks a swap-in consumes: fresh blocks plus re-used cached (refcount-0) blocks."""
        hashes = seq.hashes
        num_blocks = seq.num_cpu_blocks
        num_shared_live = 0
        if hashes:
            table = self._hash_to_block
            refcount = self._refcount
            for i in range(min(len(hashes), num_blocks)):
                block = table.get(hashes[i])
                if block is not None and refcount[block] > 0:
                    num_shared_live += 1
        return num_blocks - num_shared_live

    def _take_block(self) -> int:
        """A fresh block with refcount 1: from the free list, else by evicting the least recently freed cached block."""
        if self._free:
            block = self._free.pop()
        else:
            block, _ = self._evictable.popitem(last=False)  # KeyError here is a bug: callers check availability
            evicted_hash = self._block_hash[block]
            if evicted_hash is not None:
                del self._hash_to_block[evicted_hash]
                self._block_hash[block] = None
        self._refcount[block] = 1
        self._num_used += 1
        return block

    def _release_gpu(self, seq: _Seq) -> None:
        """Drop ``seq``'s GPU references, last block first (so its tail is evicted before its prefix)."""
        refcount = self._refcount
        block_hash = self._block_hash
        blocks = seq.block_ids
        for i in range(len(blocks) - 1, -1, -1):
            block = blocks[i]
            r = refcount[block] - 1
            refcount[block] = r
            if r == 0:
                self._num_used -= 1
                if block_hash[block] is not None:
                    self._evictable[block] = None  # appended as most recently used
                else:
                    self._free.append(block)
        self._num_unfilled_slots -= len(blocks) * self.block_size - seq.num_tokens
        seq.block_ids = []


class CountingBlockManager(_PagedCache):
    """:class:`BlockManager`'s decisions without prefix caching, made by counting blocks instead of naming them.

    Without prefix caching no block is shared, so which physical block a sequence holds never matters: a
    sequence is its token count, its block count and where it lives, and every call is O(1) (allocating a
    4,000-token prompt does not take 250 blocks one by one). Same API, same answers, same counters as a
    ``BlockManager(..., enable_prefix_caching=False)``; the simulator uses it whenever caching is off.
    """

    enable_prefix_caching = False

    def __init__(self, num_blocks: int, block_size: int, watermark_frac: float = 0.01,
                 num_cpu_blocks: int = 0) -> None:
        super().__init__(num_blocks, block_size, watermark_frac, num_cpu_blocks)
        self._free = num_blocks
        # seq id -> [tokens (per beam), blocks, 1 on GPU / 0 swapped out, beams, shared blocks held once less
        # than beams times: (beams - 1) * full prompt blocks]; blocks = beams * ceil(tokens / bs) - shared
        self._seqs: dict[int, list[int]] = {}
        self._num_unfilled_slots = 0
        self._num_cpu_used = 0
        # the decode group grows lazily: a member's entry in _seqs is brought up to date when it is read
        self._group: dict[int, int] = {}  # member id -> its tokens minus the group clock
        self._group_clock = 0  # tokens every member has grown by since the group began
        self._group_phase = [0] * block_size  # member rows (beams) by (tokens - clock) mod block_size
        self._group_rows = 0  # the members' beams, summed

    # -- introspection (as BlockManager) ------------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        """Empty GPU blocks."""
        return self._free

    @property
    def num_used_blocks(self) -> int:
        """GPU blocks held by live sequences."""
        return self.num_blocks - self._free

    @property
    def num_cached_blocks(self) -> int:
        """Always 0: nothing is cached without prefix caching."""
        return 0

    @property
    def num_available_blocks(self) -> int:
        """Blocks a new allocation can take."""
        return self._free

    @property
    def num_swapped_out_blocks(self) -> int:
        """CPU blocks holding swapped-out sequences."""
        return self._num_cpu_used

    @property
    def utilization_frac(self) -> float:
        """Used GPU blocks / num_blocks."""
        return self.fill_fracs()[0]

    @property
    def fragmentation_frac(self) -> float:
        """Allocated but unfilled token slots / allocated slots (0 when nothing is used)."""
        return self.fill_fracs()[1]

    def fill_fracs(self) -> tuple[float, float]:
        """``(utilization_frac, fragmentation_frac)`` in one call (the engine weighs both every iteration)."""
        used = self.num_blocks - self._free
        return used / self.num_blocks, self._num_unfilled_slots / (used * self.block_size) if used else 0.0

    @property
    def num_seqs(self) -> int:
        """Sequences known to the cache."""
        return len(self._seqs)

    def __contains__(self, seq_id: object) -> bool:
        return seq_id in self._seqs

    def _seq(self, seq_id: int, *, on_gpu: bool | None = None) -> list[int]:
        seq = self._seqs.get(seq_id)
        if seq is None:
            raise KVCacheError(f"unknown sequence id {seq_id} in the KV cache")
        base = self._group.get(seq_id)
        if base is not None:  # a decode-group member: its tokens are the group clock past its base
            t = base + self._group_clock
            seq[0] = t
            seq[1] = -(-t // self.block_size) * seq[3] - seq[4]
        if on_gpu is True and not seq[2]:
            raise KVCacheError(f"sequence {seq_id} is swapped out; swap it in first")
        if on_gpu is False and seq[2]:
            raise KVCacheError(f"sequence {seq_id} is not swapped out")
        return seq

    def seq_num_tokens(self, seq_id: int) -> int:
        """Tokens held for ``seq_id``."""
        return self._seq(seq_id)[0]

    def seq_num_blocks(self, seq_id: int) -> int:
        """Blocks held for ``seq_id`` (GPU or CPU)."""
        return self._seq(seq_id)[1]

    def is_swapped_out(self, seq_id: int) -> bool:
        """Whether ``seq_id`` lives in CPU swap space."""
        return not self._seq(seq_id)[2]

    # -- admission and growth -----------------------------------------------------------------------------------
    def can_allocate(self, seq_id: int, num_tokens: int, prefix_hashes: Sequence[int] | None = None,
                     beams: int = 1, prompt_tokens: int = 0) -> bool:
        """Whether admitting ``num_tokens`` (per beam, of ``beams`` beams sharing ``prompt_tokens``) leaves at
        least ``watermark_blocks`` free (hashes are ignored)."""
        if seq_id in self._seqs:
            raise KVCacheError(f"sequence {seq_id} is already in the KV cache")
        return self._free - self.beam_blocks_for(num_tokens, beams, prompt_tokens) >= self.watermark_blocks

    def allocate(self, seq_id: int, num_tokens: int, prefix_hashes: Sequence[int] | None = None,
                 beams: int = 1, prompt_tokens: int = 0) -> int:
        """Reserve blocks for a prompt of ``num_tokens`` (per beam: ``beams`` beams share the full blocks of the
        first ``prompt_tokens``); returns 0 (no prefix cache)."""
        if seq_id in self._seqs:
            raise KVCacheError(f"sequence {seq_id} is already in the KV cache")
        if num_tokens < 1 or beams < 1 or prompt_tokens > num_tokens:
            raise KVCacheError(f"num_tokens={num_tokens} for sequence {seq_id} must be >= 1 and >= prompt_tokens "
                               f"{prompt_tokens}, beams={beams} >= 1")
        shared = (beams - 1) * (prompt_tokens // self.block_size) if beams > 1 else 0
        blocks = -(-num_tokens // self.block_size) * beams - shared
        if blocks > self._free:
            raise KVCacheError(f"cannot allocate {blocks} KV blocks for sequence {seq_id} ({num_tokens} tokens): "
                               f"only {self._free} of {self.num_blocks} available")
        self._free -= blocks
        self._seqs[seq_id] = [num_tokens, blocks, 1, beams, shared]
        self._num_unfilled_slots += blocks * self.block_size - (num_tokens * beams - shared * self.block_size)
        self.prefix_query_tokens += num_tokens
        return 0

    def append_need(self, seq_id: int, num_new_tokens: int) -> int:
        """New blocks ``seq_id`` takes to grow by ``num_new_tokens`` (0 when its last block has room)."""
        t, b, _, beams, shared = self._seq(seq_id, on_gpu=True)
        return max(0, -(-(t + num_new_tokens) // self.block_size) * beams - shared - b)

    def append(self, seq_id: int, num_new_tokens: int = 1) -> None:
        """Grow ``seq_id`` by ``num_new_tokens``."""
        seq = self._seq(seq_id, on_gpu=True)
        if num_new_tokens < 0:
            raise KVCacheError(f"num_new_tokens={num_new_tokens} for sequence {seq_id} must be >= 0")
        total = seq[0] + num_new_tokens
        beams = seq[3]
        need = -(-total // self.block_size) * beams - seq[4] - seq[1]
        if need > 0:
            if need > self._free:
                raise KVCacheError(f"cannot append {num_new_tokens} tokens to sequence {seq_id}: needs {need} more "
                                   f"KV blocks, only {self._free} available")
            self._free -= need
            seq[1] += need
            self._num_unfilled_slots += need * self.block_size - num_new_tokens * beams
        else:
            self._num_unfilled_slots -= num_new_tokens * beams
        seq[0] = total
        if seq_id in self._group:  # a member grown on its own moves ahead of the group by as many tokens
            self._leave_group(seq_id)
            self._join_group(seq_id, total)

    # -- the decode group (lazy) ---------------------------------------------------------------------------------
    def add_to_group(self, seq_id: int) -> None:
        """``seq_id`` (on the GPU) joins the decode group: the sequences :meth:`grow_group` grows together. It
        leaves when it is freed or swapped out."""
        if seq_id not in self._group:
            self._join_group(seq_id, self._seq(seq_id, on_gpu=True)[0])

    def grow_group(self, num_new_tokens: int) -> None:
        """``append(seq, num_new_tokens)`` for every sequence of the decode group, in O(block_size): the members'
        own entries catch up when read (check :meth:`max_group_growth` first)."""
        n = self._group_rows
        if num_new_tokens <= 0 or not n:
            return
        if num_new_tokens == 1:  # one decode step: the members whose last block is full open one
            taken = self._group_phase[-self._group_clock % self.block_size]
        else:
            taken = self._group_blocks(num_new_tokens)
        if taken > self._free:
            raise KVCacheError(f"cannot grow the {n} decoding sequences by {num_new_tokens} tokens: needs {taken} "
                               f"KV blocks, only {self._free} available")
        self._free -= taken
        self._num_unfilled_slots += taken * self.block_size - n * num_new_tokens
        self._group_clock += num_new_tokens

    def max_group_growth(self, limit: int) -> int:
        """The most tokens ``j <= limit`` every sequence of the decode group can grow by at once, in O(block_size):
        each full cycle of ``block_size`` tokens takes one block per member, the last partial cycle is counted
        step by step. A member of ``b`` beams counts ``b`` rows."""
        n = self._group_rows
        if not n:
            return max(0, limit)
        if limit <= 0:
            return 0
        bs = self.block_size
        have = self._free
        if have >= n * (-(-limit // bs) + 1):  # even the worst case fits
            return limit
        cycles = min(limit // bs, have // n)
        j = cycles * bs
        used = cycles * n
        clock = self._group_clock
        phase = self._group_phase
        while j < limit:
            need = phase[-(clock + j) % bs]
            if used + need > have:
                break
            used += need
            j += 1
        return j

    def _group_blocks(self, steps: int) -> int:
        """Blocks the decode group takes to grow by ``steps`` tokens: a member opens a block on every step that
        finds its last block full, once per ``block_size`` steps at a step set by its phase."""
        bs = self.block_size
        cycles, rest = divmod(steps, bs)
        taken = cycles * self._group_rows
        clock = self._group_clock
        phase = self._group_phase
        for j in range(rest):
            taken += phase[-(clock + j) % bs]
        return taken

    def _join_group(self, seq_id: int, tokens: int) -> None:
        base = tokens - self._group_clock
        self._group[seq_id] = base
        beams = self._seqs[seq_id][3]
        self._group_phase[base % self.block_size] += beams
        self._group_rows += beams

    def _leave_group(self, seq_id: int) -> None:
        """Drop a member (its entry is up to date: every caller read it through ``_seq`` first)."""
        base = self._group.pop(seq_id, None)
        if base is not None:
            beams = self._seqs[seq_id][3]
            self._group_phase[base % self.block_size] -= beams
            self._group_rows -= beams

    # -- release and swapping -----------------------------------------------------------------------------------
    def free(self, seq_id: int) -> None:
        """Release ``seq_id`` (on GPU or swapped out)."""
        t, b, on_gpu, beams, shared = self._seq(seq_id)
        self._leave_group(seq_id)
        if on_gpu:
            self._free += b
            self._num_unfilled_slots -= b * self.block_size - (t * beams - shared * self.block_size)
        else:
            self._num_cpu_used -= b
        del self._seqs[seq_id]

    def can_swap_out(self, seq_id: int) -> bool:
        """Whether the CPU swap space has room for ``seq_id``'s blocks."""
        return self._seq(seq_id, on_gpu=True)[1] <= self.num_cpu_blocks - self._num_cpu_used

    def swap_out(self, seq_id: int) -> int:
        """Move ``seq_id``'s blocks to CPU swap space; returns the blocks moved."""
        seq = self._seq(seq_id, on_gpu=True)
        t, b, _, beams, shared = seq
        if b > self.num_cpu_blocks - self._num_cpu_used:
            raise KVCacheError(f"cannot swap out sequence {seq_id}: needs {b} CPU blocks, "
                               f"only {self.num_cpu_blocks - self._num_cpu_used} of {self.num_cpu_blocks} free")
        self._leave_group(seq_id)
        self._free += b
        self._num_unfilled_slots -= b * self.block_size - (t * beams - shared * self.block_size)
        self._num_cpu_used += b
        seq[2] = 0
        return b

    def can_swap_in(self, seq_id: int) -> bool:
        """Whether swapping ``seq_id`` in leaves at least ``watermark_blocks`` free."""
        return self._free - self._seq(seq_id, on_gpu=False)[1] >= self.watermark_blocks

    def swap_in(self, seq_id: int) -> int:
        """Bring ``seq_id`` back to GPU blocks; returns the blocks moved."""
        seq = self._seq(seq_id, on_gpu=False)
        t, b, _, beams, shared = seq
        if b > self._free:
            raise KVCacheError(f"cannot swap in sequence {seq_id}: needs {b} KV blocks, only {self._free} available")
        self._free -= b
        self._num_cpu_used -= b
        self._num_unfilled_slots += b * self.block_size - (t * beams - shared * self.block_size)
        seq[2] = 1
        return b

    def check_invariants(self) -> None:
        """Raise AssertionError when the counts disagree (tests)."""
        for sid in self._group:
            if not self._seq(sid)[2]:
                raise AssertionError(f"decode-group member {sid} is swapped out")
        if sum(self._group_phase) != self._group_rows or self._group_rows != sum(
                self._seqs[sid][3] for sid in self._group):
            raise AssertionError("decode-group phase counts disagree with its members")
        gpu = [s for s in self._seqs.values() if s[2]]
        cpu = [s for s in self._seqs.values() if not s[2]]
        if sum(s[1] for s in gpu) + self._free != self.num_blocks:
            raise AssertionError("used + free blocks != num_blocks")
        if sum(s[1] for s in cpu) != self._num_cpu_used or self._num_cpu_used > self.num_cpu_blocks:
            raise AssertionError("CPU block count wrong or over capacity")
        if any(s[1] != self.beam_blocks_for(s[0], s[3], 0) - s[4] for s in self._seqs.values()):
            raise AssertionError("a sequence's blocks do not cover its tokens exactly")
        if self._num_unfilled_slots != sum(s[1] * self.block_size - (s[0] * s[3] - s[4] * self.block_size)
                                           for s in gpu):
            raise AssertionError("unfilled slot count wrong")


def _max_uniform(state: list[tuple[int, int]], have: int, limit: int, block_size: int) -> int:
    """The most tokens ``j <= limit`` that sequences of (tokens, blocks) ``state`` can each grow by with ``have``
    blocks to spare (bisection: the blocks needed grow with ``j``)."""

    def need(j: int) -> int:
        return sum(max(0, -(-(t + j) // block_size) - b) for t, b in state)

    if need(limit) <= have:
        return limit
    lo, hi = 0, limit  # need(lo) <= have < need(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if need(mid) <= have:
            lo = mid
        else:
            hi = mid
    return lo


def prefix_block_hashes(
    prefix_id: int, shared_prefix_tokens: int, prompt_tokens: int, block_size: int, unique_id: int
) -> list[int]:
    """Chained hashes of a prompt's full blocks when requests share a system prompt.

    The first ``shared_prefix_tokens`` tokens of every request with the same ``prefix_id`` are identical;
    the rest of the prompt is unique to ``unique_id`` (use the request id). Block ``i`` covers tokens
    ``[i * block_size, (i + 1) * block_size)``; it hashes only shared content if it lies wholly inside the
    shared prefix, and every hash chains the previous one, so a block after the first unique token never
    matches another request's. Returns ``prompt_tokens // block_size`` ints (the partial last block has no hash).
    Hashes are Python's deterministic tuple-of-int hashes, stable within and across runs.
    """
    for name, value in (("shared_prefix_tokens", shared_prefix_tokens), ("prompt_tokens", prompt_tokens)):
        if value < 0:
            raise ConfigError(f"{name}={value} must be >= 0")
    if block_size < 1:
        raise ConfigError(f"block_size={block_size} must be >= 1")
    out: list[int] = []
    prev = 0
    for i in range(prompt_tokens // block_size):
        if (i + 1) * block_size <= shared_prefix_tokens:
            prev = hash((prev, 0, prefix_id, i))
        else:
            prev = hash((prev, 1, prefix_id, unique_id, i))
        out.append(prev)
    return out


def kv_cache_capacity(
    *,
    gpu_memory_bytes: float,
    gpu_memory_utilization_frac: float,
    weight_bytes: float,
    activation_peak_bytes: float,
    kv_bytes_per_token: float,
    block_size: int,
) -> int:
    """GPU KV blocks vLLM would allocate: floor((memory * utilization - weights - activations) / block bytes).

    ``kv_bytes_per_token`` is the per-GPU KV footprint of one token over all layers (K and V). Raises a
    one-line ``ConfigError`` ("model does not fit ...", needed vs available in GiB) when not even one block fits.
    """
    if not gpu_memory_bytes > 0:
        raise ConfigError(f"gpu_memory_bytes={gpu_memory_bytes} must be > 0")
    if not 0.0 < gpu_memory_utilization_frac <= 1.0:
        raise ConfigError(f"gpu_memory_utilization_frac={gpu_memory_utilization_frac} must be in (0, 1]")
    if not weight_bytes >= 0 or not activation_peak_bytes >= 0:
        raise ConfigError(
            f"weight_bytes={weight_bytes} and activation_peak_bytes={activation_peak_bytes} must be >= 0"
        )
    if not kv_bytes_per_token > 0 or not math.isfinite(kv_bytes_per_token):
        raise ConfigError(f"kv_bytes_per_token={kv_bytes_per_token} must be a finite number > 0")
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ConfigError(f"block_size={block_size!r} must be an int >= 1")
    available_bytes = gpu_memory_bytes * gpu_memory_utilization_frac
    block_bytes = kv_bytes_per_token * block_size
    kv_budget_bytes = available_bytes - weight_bytes - activation_peak_bytes
    num_blocks = int(kv_budget_bytes // block_bytes) if kv_budget_bytes > 0 else 0
    if num_blocks <= 0:
        needed_bytes = weight_bytes + activation_peak_bytes + block_bytes
        raise ConfigError(
            f"model does not fit: needs {needed_bytes / _GiB:.2f} GiB (weights {weight_bytes / _GiB:.2f} + "
            f"activations {activation_peak_bytes / _GiB:.2f} + one KV block {block_bytes / _GiB:.4f}) but only "
            f"{available_bytes / _GiB:.2f} GiB is available ({gpu_memory_utilization_frac:g} of "
            f"{gpu_memory_bytes / _GiB:.2f} GiB); use more tensor parallelism, a smaller dtype, a bigger GPU or a "
            "higher gpu_memory_utilization")
    return num_blocks
