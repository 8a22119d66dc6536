"""Prefix caching for a model with sliding-window layers beside (or instead of) full-attention ones: vLLM v1's
hybrid KV cache manager with named blocks.

Each KV cache group (:mod:`perfcast.serving.kv.layout`) has its own block table per sequence, drawn from one
pool; a block caches the prefix hash of its tokens for its group (vLLM's block pool keys cached blocks by
hash and group). Block ``i`` of a prompt carries the prompt's ``i``-th chained hash in every group.

Hits (vLLM's ``HybridKVCacheCoordinator.find_longest_cache_hit``, as recalled): the full-attention groups hit
the longest run of leading cached blocks; within it, a sliding group (``SlidingWindowManager``) needs only the
``cdiv(sliding_window - 1, block_size)`` blocks before the hit point -- scanning from the right for the last run
of that many cached blocks, or a shorter run that starts at block 0 -- and holds nothing before them (vLLM's
null blocks). The hit is the end of that run, the same for every group, and at most ``num_tokens - 1`` tokens.

Otherwise the sliding groups follow :mod:`perfcast.serving.kv.hybrid`: a step from ``n0`` computed tokens drops
the blocks before ``(n0 - sliding_window + 1) // block_size``; a dropped block whose count falls to 0 stays
cached (its hash kept, evicted least recently freed first) when it carries one, as vLLM keeps freed blocks'
hashes, so a later prompt can still hit it. Blocks grown by decode are never cached. Preemption is by
recompute only (vLLM v1 does not swap): :meth:`can_swap_out` is always False. One beam per sequence.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import NoReturn

from perfcast.errors import ConfigError
from perfcast.serving.kv.base import KVCacheError, PagedCache

__all__ = ["HybridPrefixBlockManager"]

_NULL = -1  # a sliding group's entry for a block it no longer holds (vLLM's null block)


class _Seq:
    __slots__ = ("first", "hashes", "num_tokens", "tables")

    def __init__(self, num_tokens: int, hashes: list[int], groups: int) -> None:
        self.num_tokens = num_tokens
        self.hashes = hashes
        self.tables: list[list[int]] = [[] for _ in range(groups)]
        self.first = 0  # the sliding groups' first block still held (those before it are dropped)


class HybridPrefixBlockManager(PagedCache):
    """Named blocks for ``full_groups`` full-attention and ``local_groups`` sliding-window groups (window
    ``local_window`` tokens) with prefix caching (module docstring); the :class:`KVCache` protocol."""

    enable_prefix_caching = True

    def __init__(self, num_blocks: int, block_size: int, watermark_frac: float = 0.01, num_cpu_blocks: int = 0, *,
                 full_groups: int = 1, local_groups: int = 1, local_window: int = 1) -> None:
        super().__init__(num_blocks, block_size, watermark_frac, num_cpu_blocks)
        if full_groups < 0 or local_groups < 1 or local_window < 1:
            raise ConfigError("a sliding-window prefix cache needs a sliding group and a window of >= 1 token")
        self.full_groups, self.local_groups, self.local_window = full_groups, local_groups, local_window
        self._ngroups = full_groups + local_groups  # groups 0 .. full_groups - 1 are full attention
        self._keep = -(-(local_window - 1) // block_size)  # sliding_window_contiguous_blocks
        self._free: list[int] = list(range(num_blocks - 1, -1, -1))
        self._refcount = [0] * num_blocks
        self._block_key: list[tuple[int, int] | None] = [None] * num_blocks  # (group, hash) a cached block holds
        self._key_to_block: dict[tuple[int, int], int] = {}
        self._evictable: OrderedDict[int, None] = OrderedDict()
        self._seqs: dict[int, _Seq] = {}
        self._group: dict[int, None] = {}
        self._num_used = 0
        self._num_unfilled_slots = 0

    # -- introspection ------------------------------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        """Empty blocks on the free list."""
        return len(self._free)

    @property
    def num_used_blocks(self) -> int:
        """Blocks referenced by a live sequence (a shared block counts once)."""
        return self._num_used

    @property
    def num_cached_blocks(self) -> int:
        """Evictable prefix-cache blocks."""
        return len(self._evictable)

    @property
    def num_available_blocks(self) -> int:
        """Free + cached blocks."""
        return len(self._free) + len(self._evictable)

    def fill_fracs(self) -> tuple[float, float]:
        """(blocks in use, unfilled token slots of the attention blocks in use) as fractions of the cache."""
        used = self._num_used
        return used / self.num_blocks, self._num_unfilled_slots / (used * self.block_size) if used else 0.0

    @property
    def num_seqs(self) -> int:
        """Sequences known to the cache."""
        return len(self._seqs)

    def __contains__(self, seq_id: object) -> bool:
        return seq_id in self._seqs

    def seq_num_tokens(self, seq_id: int) -> int:
        """Tokens held for ``seq_id``."""
        return self._get(seq_id).num_tokens

    def seq_num_blocks(self, seq_id: int) -> int:
        """Blocks ``seq_id`` references, every group (shared ones included)."""
        return sum(b != _NULL for table in self._get(seq_id).tables for b in table)

    def beam_blocks_for(self, num_tokens: int, beams: int = 1, prompt_tokens: int = 0) -> int:
        """Blocks a prompt of ``num_tokens`` takes at admission without hits: every group's blocks."""
        return self._ngroups * -(-num_tokens // self.block_size)

    def decode_fits(self, num_seqs: int) -> bool:
        """Whether ``num_seqs`` sequences can each take one more token even if each opens a block per group."""
        return num_seqs * self._ngroups <= self.num_available_blocks

    def _released(self, n0: int) -> int:
        return max(0, (n0 - self.local_window + 1) // self.block_size)

    # -- admission ----------------------------------------------------------------------------------------------
    def _check_new(self, seq_id: int, num_tokens: int, prefix_hashes: Sequence[int] | None, beams: int) -> None:
        if beams != 1:
            raise KVCacheError(f"sequence {seq_id}: {beams} beams; the hybrid prefix cache holds one beam")
        if seq_id in self._seqs:
            raise KVCacheError(f"sequence id {seq_id} already holds KV blocks; free it before allocating again")
        if num_tokens < 1:
            raise KVCacheError(f"sequence {seq_id}: num_tokens={num_tokens} must be >= 1")
        if prefix_hashes and len(prefix_hashes) > num_tokens // self.block_size:
            raise KVCacheError(f"sequence {seq_id}: {len(prefix_hashes)} prefix hashes for {num_tokens} tokens; at "
                               f"most {num_tokens // self.block_size} full blocks can be hashed")

    def _lookup(self, num_tokens: int, hashes: Sequence[int] | None) -> tuple[int, int]:
        """(hit blocks, of which cached refcount-0 blocks every group claims) for a new prompt."""
        if not hashes:
            return 0, 0
        table = self._key_to_block
        top = min(len(hashes), (num_tokens - 1) // self.block_size)
        full = 0
        while full < top and all((g, hashes[full]) in table for g in range(self.full_groups)):
            full += 1
        hit = run = 0
        for i in range(full - 1, -1, -1):  # the last run of `keep` cached blocks, or a shorter one from block 0
            if all((g, hashes[i]) in table for g in range(self.full_groups, self._ngroups)):
                run += 1
                if run >= self._keep or i == 0:
                    hit = i + run
                    break
            else:
                run = 0
        evictable = 0
        refcount = self._refcount
        for g in range(self._ngroups):
            start = 0 if g < self.full_groups else max(0, hit - self._keep)
            evictable += sum(refcount[table[(g, hashes[i])]] == 0 for i in range(start, hit))
        return hit, evictable

    def _required(self, num_tokens: int, hit: int, evictable: int) -> int:
        return self._ngroups * (-(-num_tokens // self.block_size) - hit) + evictable

    def can_allocate(self, seq_id: int, num_tokens: int, prefix_hashes: Sequence[int] | None = None,
                     beams: int = 1, prompt_tokens: int = 0) -> bool:
        """Whether admitting the prompt leaves at least ``watermark_blocks`` available (hits on live blocks are
        free, on cached ones cost an available block each)."""
        self._check_new(seq_id, num_tokens, prefix_hashes, beams)
        hit, evictable = self._lookup(num_tokens, prefix_hashes)
        return self.num_available_blocks - self._required(num_tokens, hit, evictable) >= self.watermark_blocks

    def allocate(self, seq_id: int, num_tokens: int, prefix_hashes: Sequence[int] | None = None,
                 beams: int = 1, prompt_tokens: int = 0) -> int:
        """Admit a prompt: claim its hits, take every group's remaining blocks; returns the tokens hit."""
        self._check_new(seq_id, num_tokens, prefix_hashes, beams)
        hashes = list(prefix_hashes or ())
        hit, evictable = self._lookup(num_tokens, hashes)
        need = self._required(num_tokens, hit, evictable)
        if need > self.num_available_blocks:
            raise KVCacheError(f"cannot allocate {need} KV blocks for sequence {seq_id} ({num_tokens} tokens): only "
                               f"{self.num_available_blocks} of {self.num_blocks} available")
        seq = _Seq(num_tokens, hashes, self._ngroups)
        total = -(-num_tokens // self.block_size)
        for g, blocks in enumerate(seq.tables):  # claim every hit before taking a block (no evicting them)
            start = 0 if g < self.full_groups else max(0, hit - self._keep)
            blocks.extend([_NULL] * start)
            for i in range(start, hit):
                blocks.append(self._claim(self._key_to_block[(g, hashes[i])]))
        seq.first = max(0, hit - self._keep) if self.local_groups else 0
        for g, blocks in enumerate(seq.tables):
            for i in range(hit, total):
                block = self._take_block()
                if i < len(hashes) and (g, hashes[i]) not in self._key_to_block:
                    self._key_to_block[(g, hashes[i])] = block
                    self._block_key[block] = (g, hashes[i])
                blocks.append(block)
        self._seqs[seq_id] = seq
        self._num_unfilled_slots += self._ngroups * (total * self.block_size - num_tokens)
        self.prefix_hit_tokens += hit * self.block_size
        self.prefix_query_tokens += num_tokens
        return hit * self.block_size

    # -- growth -------------------------------------------------------------------------------------------------
    def _dropping(self, seq: _Seq, below: int) -> list[int]:
        """Blocks ``seq``'s sliding groups still hold before block ``below``."""
        return [b for table in seq.tables[self.full_groups:] for b in table[seq.first:below]]

    def _net_need(self, seq: _Seq, n0_release: int, total: int) -> int:
        """Available blocks ``seq`` consumes growing to ``total`` tokens after dropping its sliding blocks before
        ``released(n0_release)`` (a dropped block counts only when no other sequence holds it)."""
        new = self._ngroups * (-(-total // self.block_size) - -(-seq.num_tokens // self.block_size))
        freed = sum(self._refcount[b] == 1 for b in self._dropping(seq, self._released(n0_release)))
        return new - freed

    def append_need(self, seq_id: int, num_new_tokens: int) -> int:
        """Blocks ``seq_id`` takes, net of the sliding blocks it drops, to grow by ``num_new_tokens``."""
        seq = self._get(seq_id)
        return max(0, self._net_need(seq, seq.num_tokens, seq.num_tokens + num_new_tokens))

    def append(self, seq_id: int, num_new_tokens: int = 1) -> None:
        """Grow ``seq_id`` by ``num_new_tokens``: drop the sliding blocks out of its window, then take the new
        tokens' blocks in every group (never cached)."""
        seq = self._get(seq_id)
        if num_new_tokens < 0:
            raise KVCacheError(f"num_new_tokens={num_new_tokens} for sequence {seq_id} must be >= 0")
        need = self._net_need(seq, seq.num_tokens, seq.num_tokens + num_new_tokens)
        if need > self.num_available_blocks:
            raise KVCacheError(f"cannot append {num_new_tokens} tokens to sequence {seq_id}: needs {need} more KV "
                               f"blocks, only {self.num_available_blocks} available")
        self._drop(seq, self._released(seq.num_tokens))
        self._grow(seq, num_new_tokens)

    def _grow(self, seq: _Seq, num_new_tokens: int) -> None:
        bs = self.block_size
        t0, total = seq.num_tokens, seq.num_tokens + num_new_tokens
        new = -(-total // bs) - -(-t0 // bs)
        for blocks in seq.tables:
            for _ in range(new):
                blocks.append(self._take_block())
        self._num_unfilled_slots += self._ngroups * (new * bs - num_new_tokens)
        seq.num_tokens = total

    def _drop(self, seq: _Seq, below: int) -> None:
        """Release ``seq``'s sliding blocks before block ``below`` (vLLM's ``remove_skipped_blocks``)."""
        below = min(below, -(-seq.num_tokens // self.block_size))
        if below <= seq.first:
            return
        for table in seq.tables[self.full_groups:]:
            for i in range(below - 1, seq.first - 1, -1):
                self._release(table[i])
                table[i] = _NULL
        seq.first = below

    # -- the decode group ---------------------------------------------------------------------------------------
    def add_to_group(self, seq_id: int) -> None:
        """``seq_id`` joins the decode group, settled: its sliding blocks its next query cannot see dropped."""
        seq = self._get(seq_id)
        self._drop(seq, self._released(seq.num_tokens - 1))
        self._group[seq_id] = None

    def grow_group(self, num_new_tokens: int) -> None:
        """Every member grows by ``num_new_tokens`` one step at a time (check :meth:`max_group_growth` first)."""
        seqs = [self._seqs[s] for s in self._group]
        for _ in range(max(0, num_new_tokens)):  # each step: every member's drops, then every member's new blocks
            for seq in seqs:
                self._drop(seq, self._released(seq.num_tokens))
            need = self._ngroups * sum(seq.num_tokens % self.block_size == 0 for seq in seqs)
            if need > self.num_available_blocks:
                raise KVCacheError(f"cannot grow the {len(seqs)} decoding sequences: needs {need} KV blocks, only "
                                   f"{self.num_available_blocks} available")
            for seq in seqs:
                self._grow(seq, 1)

    def max_group_growth(self, limit: int) -> int:
        """The most tokens ``j <= limit`` every member can grow by, step by step, never short of blocks."""
        if not self._group:
            return max(0, limit)
        if limit <= 0:
            return 0
        have = self.num_available_blocks
        if have >= len(self._group) * self._ngroups * (-(-limit // self.block_size) + 1):
            return limit
        seqs = [self._seqs[s] for s in self._group]
        for j in range(1, limit + 1):  # after j steps a member holds its settled blocks at t + j tokens
            if sum(self._net_need(s, s.num_tokens + j - 1, s.num_tokens + j) for s in seqs) > have:
                return j - 1
        return limit

    # -- release ------------------------------------------------------------------------------------------------
    def free(self, seq_id: int) -> None:
        """Release every group's blocks of ``seq_id``, last block first (hashed ones stay cached)."""
        seq = self._get(seq_id)
        total = -(-seq.num_tokens // self.block_size)
        for i in range(total - 1, -1, -1):
            for table in seq.tables:
                if table[i] != _NULL:
                    self._release(table[i])
        self._num_unfilled_slots -= self._ngroups * (total * self.block_size - seq.num_tokens)
        self._group.pop(seq_id, None)
        del self._seqs[seq_id]

    def can_swap_out(self, seq_id: int) -> bool:
        """Always False: preemption is by recompute (vLLM v1)."""
        self._get(seq_id)
        return False

    def swap_out(self, seq_id: int) -> int:
        """Refused: preemption is by recompute (vLLM v1)."""
        raise KVCacheError(f"sequence {seq_id}: the hybrid prefix cache preempts by recompute only")

    def can_swap_in(self, seq_id: int) -> bool:
        """Always False: nothing is swapped out."""
        return False

    def swap_in(self, seq_id: int) -> int:
        """Refused: nothing is swapped out."""
        raise KVCacheError(f"sequence {seq_id}: the hybrid prefix cache preempts by recompute only")

    # -- audit --------------------------------------------------------------------------------------------------
    def check_invariants(self) -> None:
        """Recount references from every group's tables; AssertionError on any inconsistency."""
        n, bs = self.num_blocks, self.block_size
        refs = [0] * n
        owners: dict[int, list[tuple[int, int, int]]] = {}  # block -> [(seq, group, position)]
        unfilled = 0
        for sid, seq in self._seqs.items():
            total = -(-seq.num_tokens // bs)
            keep_from = self._released(seq.num_tokens - 1)
            if seq.first > keep_from:
                _fail(f"sequence {sid} dropped sliding blocks up to {seq.first}, its window sees {keep_from} on")
            for g, table in enumerate(seq.tables):
                if len(table) != total:
                    _fail(f"sequence {sid} group {g}: {len(table)} entries for {seq.num_tokens} tokens")
                for i, b in enumerate(table):
                    if (b == _NULL) != (g >= self.full_groups and i < seq.first):
                        _fail(f"sequence {sid} group {g} block {i}: dropped {b == _NULL}, first held {seq.first}")
                    if b == _NULL:
                        if g < self.full_groups or i >= keep_from:
                            _fail(f"sequence {sid} group {g} dropped block {i}, which its window still sees")
                        continue
                    refs[b] += 1
                    owners.setdefault(b, []).append((sid, g, i))
            unfilled += self._ngroups * (total * bs - seq.num_tokens)
        if refs != self._refcount:
            _fail("reference counts disagree with the block tables")
        used = sum(r > 0 for r in refs)
        if used != self._num_used or unfilled != self._num_unfilled_slots:
            _fail(f"used {self._num_used} (recounted {used}) or unfilled {self._num_unfilled_slots} (recounted "
                  f"{unfilled}) counters wrong")
        free, cached = set(self._free), set(self._evictable)
        if len(free) != len(self._free) or free & cached or used + len(free) + len(cached) != n:
            _fail(f"used {used} + free {len(free)} + cached {len(cached)} != num_blocks {n}, or a block twice")
        if any(refs[b] or self._block_key[b] is not None for b in free):
            _fail("a free block is referenced or still hashed")
        if any(refs[b] or self._block_key[b] is None for b in cached):
            _fail("a cached block is referenced or carries no hash")
        for key, b in self._key_to_block.items():
            if self._block_key[b] != key:
                _fail(f"hash table points {key} at block {b} holding {self._block_key[b]}")
        if sum(k is not None for k in self._block_key) != len(self._key_to_block):
            _fail("a block carries a hash the table does not know")
        for b, who in owners.items():
            if len(who) > 1:
                held = self._block_key[b]
                for sid, g, i in who:
                    hashes = self._seqs[sid].hashes
                    if held is None or held[0] != g or i >= len(hashes) or hashes[i] != held[1]:
                        _fail(f"block {b} is shared by sequence {sid} (group {g}, position {i}) with another prefix")

    # -- internals ----------------------------------------------------------------------------------------------
    def _get(self, seq_id: int) -> _Seq:
        seq = self._seqs.get(seq_id)
        if seq is None:
            raise KVCacheError(f"unknown sequence id {seq_id} in the KV cache")
        return seq

    def _claim(self, block: int) -> int:
        if self._refcount[block] == 0:
            del self._evictable[block]
            self._num_used += 1
        self._refcount[block] += 1
        return block

    def _take_block(self) -> int:
        if self._free:
            block = self._free.pop()
        else:
            block, _ = self._evictable.popitem(last=False)  # callers checked availability
            key = self._block_key[block]
            if key is not None:
                del self._key_to_block[key]
                self._block_key[block] = None
        self._refcount[block] = 1
        self._num_used += 1
        return block

    def _release(self, block: int) -> None:
        r = self._refcount[block] - 1
        self._refcount[block] = r
        if r == 0:
            self._num_used -= 1
            if self._block_key[block] is not None:
                self._evictable[block] = None
            else:
                self._free.append(block)


def _fail(message: str) -> NoReturn:
    raise AssertionError(f"hybrid prefix cache invariant broken: {message}")
