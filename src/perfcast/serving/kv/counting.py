"""The block manager that counts blocks: :class:`~perfcast.serving.kv.paged.BlockManager`'s answers without
prefix caching in O(1) per call, a decode group grown in O(block_size), and beam search.

See :mod:`perfcast.serving.kv` for the semantics it follows (vLLM's).
"""

from __future__ import annotations

from collections.abc import Sequence

from perfcast.serving.kv.base import KVCacheError, PagedCache

__all__ = ["CountingBlockManager"]


class CountingBlockManager(PagedCache):
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
