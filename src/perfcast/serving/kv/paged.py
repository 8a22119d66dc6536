"""The block manager that names blocks: prefix caching (shared, cached and evicted blocks) and swapping.

See :mod:`perfcast.serving.kv` for the semantics it follows (vLLM's).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import NoReturn

from perfcast.serving.kv.base import KVCacheError, PagedCache, max_uniform_growth

__all__ = ["BlockManager"]


class _Seq:
    """One sequence's view of the cache: its GPU block table, or the number of CPU blocks it was swapped to."""

    __slots__ = ("block_ids", "hashes", "num_cpu_blocks", "num_tokens", "on_gpu")

    def __init__(self, num_tokens: int, hashes: list[int]) -> None:
        self.num_tokens = num_tokens
        self.hashes = hashes  # prefix hashes of the prompt's leading full blocks (positional)
        self.block_ids: list[int] = []
        self.on_gpu = True
        self.num_cpu_blocks = 0


class BlockManager(PagedCache):
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
        return max_uniform_growth(state, have, limit, bs)

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
        refs, owners, unfilled, cpu_used = self._recount_sequences()
        self._check_counters(refs, unfilled, cpu_used)
        self._check_free_and_cached(refs)
        self._check_sharing(owners)

    def _recount_sequences(self) -> tuple[list[int], dict[int, list[tuple[int, int]]], int, int]:
        """Each sequence's blocks checked against its tokens: the reference count of every block, each block's
        owners (sequence id, position), the unfilled slots and the CPU blocks in use."""
        n = self.num_blocks
        refs = [0] * n
        owners: dict[int, list[tuple[int, int]]] = {}  # block -> [(seq_id, position)]
        unfilled = 0
        cpu_used = 0
        for seq_id, seq in self._seqs.items():
            expected = self.num_blocks_for(seq.num_tokens)
            if seq.num_tokens < 1:
                _fail(f"sequence {seq_id} holds {seq.num_tokens} tokens")
            if seq.on_gpu:
                if seq.num_cpu_blocks != 0:
                    _fail(f"sequence {seq_id} is on GPU but holds {seq.num_cpu_blocks} CPU blocks")
                if len(seq.block_ids) != expected:
                    _fail(f"sequence {seq_id}: {len(seq.block_ids)} blocks for {seq.num_tokens} tokens, "
                          f"expected {expected}")
                if len(set(seq.block_ids)) != len(seq.block_ids):
                    _fail(f"sequence {seq_id} references a block twice")
                for pos, block in enumerate(seq.block_ids):
                    if not 0 <= block < n:
                        _fail(f"sequence {seq_id} references block {block} outside [0, {n})")
                    refs[block] += 1
                    owners.setdefault(block, []).append((seq_id, pos))
                unfilled += expected * self.block_size - seq.num_tokens
            else:
                if seq.block_ids:
                    _fail(f"swapped-out sequence {seq_id} still holds GPU blocks")
                if seq.num_cpu_blocks != expected:
                    _fail(f"swapped-out sequence {seq_id}: {seq.num_cpu_blocks} CPU blocks for "
                          f"{seq.num_tokens} tokens, expected {expected}")
                cpu_used += seq.num_cpu_blocks
        return refs, owners, unfilled, cpu_used

    def _check_counters(self, refs: list[int], unfilled: int, cpu_used: int) -> None:
        """The running counters equal what the sequences recount."""
        if refs != self._refcount:
            _fail("reference counts disagree with the sequences' block tables")
        if any(r < 0 for r in self._refcount):
            _fail("negative reference count")
        used = sum(1 for r in refs if r > 0)
        if used != self._num_used:
            _fail(f"used counter {self._num_used} != {used} referenced blocks")
        if unfilled != self._num_unfilled_slots:
            _fail(f"unfilled-slot counter {self._num_unfilled_slots} != {unfilled}")
        if cpu_used != self._num_cpu_used or cpu_used > self.num_cpu_blocks:
            _fail(f"CPU blocks used {self._num_cpu_used} (recomputed {cpu_used}) of {self.num_cpu_blocks}")

    def _check_free_and_cached(self, refs: list[int]) -> None:
        """Every block is used, free or cached, exactly one of them; hashes and the hash table agree."""
        n = self.num_blocks
        used = sum(1 for r in refs if r > 0)
        free_set = set(self._free)
        if len(free_set) != len(self._free):
            _fail("a block is on the free list twice")
        cached_set = set(self._evictable)
        if free_set & cached_set:
            _fail("a block is both free and cached")
        for block in free_set:
            if refs[block] != 0 or self._block_hash[block] is not None:
                _fail(f"free block {block} is referenced or still hashed")
        for block in cached_set:
            if refs[block] != 0 or self._block_hash[block] is None:
                _fail(f"cached block {block} is referenced or has no hash")
        if used + len(free_set) + len(cached_set) != n:
            _fail(f"used {used} + free {len(free_set)} + cached {len(cached_set)} != num_blocks {n}")
        if cached_set and not self.enable_prefix_caching:
            _fail("cached blocks without prefix caching")
        if any(sid not in self._seqs or not self._seqs[sid].on_gpu for sid in self._group):
            _fail("a decode-group member is not a live sequence on the GPU")
        for h, block in self._hash_to_block.items():
            if self._block_hash[block] != h:
                _fail(f"hash table points hash {h} at block {block} holding {self._block_hash[block]}")
        if sum(1 for h in self._block_hash if h is not None) != len(self._hash_to_block):
            _fail("a block carries a hash the hash table does not know")

    def _check_sharing(self, owners: dict[int, list[tuple[int, int]]]) -> None:
        """A block is shared only through the prefix cache, at the same position of the same prefix."""
        for block, who in owners.items():
            if len(who) > 1:
                shared_hash = self._block_hash[block]
                if shared_hash is None:
                    _fail(f"block {block} is shared by sequences {[s for s, _ in who]} without a prefix hash")
                for seq_id, pos in who:
                    hashes = self._seqs[seq_id].hashes
                    if pos >= len(hashes) or hashes[pos] != shared_hash:
                        _fail(f"block {block} is shared by sequence {seq_id} at position {pos} with another "
                              "prefix")

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


def _fail(message: str) -> NoReturn:
    """An audit found the block manager's state inconsistent."""
    raise AssertionError(f"KV block manager invariant broken: {message}")
