"""The block manager of a model with sliding-window, chunked-local or state-space (Mamba) layers: vLLM v1's
hybrid KV cache manager, counted.

The pool (:mod:`perfcast.serving.kv.layout`) holds blocks of one size; a sequence of ``t`` tokens holds

* per full-attention group ``cdiv(t, block_size)`` blocks;
* per local group (sliding window ``W`` or chunked local attention of chunk ``C``) the blocks its window can
  still see. vLLM (``SlidingWindowManager`` / ``ChunkedLocalAttentionManager.remove_skipped_blocks``) frees, when
  it schedules a step of a sequence with ``n0`` computed tokens, every block before
  ``released(n0)`` = ``(n0 - W + 1) // block_size`` (sliding; the first token the next query still sees is
  ``n0 - W + 1``) or ``(n0 // C) x C // block_size`` (chunked: the current chunk's first token), then allocates
  the new tokens' blocks. A step growing a sequence from ``n0`` to ``n`` tokens therefore holds
  ``cdiv(n, block_size) - released(n0)`` blocks: a whole prompt at admission (``n0 = 0``), and in decode at
  most ``cdiv(W - 1 + 1, block_size) + 1`` blocks, the bound of vLLM's ``SlidingWindowSpec.max_memory_usage_bytes``
  (``cdiv(min(W - 1 + max_num_batched_tokens, max_model_len), block_size) + 1`` pages, the +1 for a window
  that does not start on a block boundary). Freed blocks return to the pool;
* per Mamba group one block (its state), taken at admission and returned when it finishes or is preempted.

A sequence joining the decode group is settled to its decode form ``cdiv(t, bs) - released(t - 1)``; the
group then grows in O(1) per step without touching its members: members open blocks at a step fixed by their
tokens modulo ``block_size`` (as :class:`~perfcast.serving.kv.counting.CountingBlockManager` counts them), and
release local blocks at a step fixed by their tokens modulo ``block_size`` (sliding, once past the window) or
``C`` (chunked). Prefix caching and beam search are not modelled here (refused).
"""

from __future__ import annotations

from collections.abc import Sequence

from perfcast.errors import ConfigError
from perfcast.serving.kv.base import KVCacheError, PagedCache

__all__ = ["HybridBlockManager"]


class HybridBlockManager(PagedCache):
    """Counting block manager for ``full_groups`` full-attention groups, ``local_groups`` sliding (``local_kind
    = "sliding"``, window ``local_window`` tokens) or chunked (chunk ``local_window`` tokens) groups and
    ``state_groups`` Mamba groups per sequence (module docstring); the :class:`KVCache` protocol, one beam."""

    enable_prefix_caching = False

    def __init__(self, num_blocks: int, block_size: int, watermark_frac: float = 0.01, num_cpu_blocks: int = 0, *,
                 full_groups: int = 1, local_groups: int = 0, local_kind: str | None = None,
                 local_window: int | None = None, state_groups: int = 0) -> None:
        super().__init__(num_blocks, block_size, watermark_frac, num_cpu_blocks)
        if min(full_groups, local_groups, state_groups) < 0 or full_groups + local_groups + state_groups < 1:
            raise ConfigError("a hybrid KV cache needs at least one group, none negative")
        if local_groups and (local_kind not in ("sliding", "chunked") or not local_window or local_window < 1):
            raise ConfigError(f"local groups need a sliding or chunked window, got {local_kind!r} {local_window!r}")
        if local_groups and local_kind == "chunked" and local_window % block_size:  # type: ignore[operator]
            raise ConfigError(f"chunked attention of {local_window} tokens is not a multiple of the block size "
                              f"{block_size}")
        self.full_groups, self.local_groups, self.state_groups = full_groups, local_groups, state_groups
        self.local_kind = local_kind if local_groups else None
        self.local_window = int(local_window or 0)
        self._token_groups = full_groups + local_groups  # groups that open a block when a sequence crosses one
        sliding = self.local_kind == "sliding"
        self._period = block_size if sliding else max(1, self.local_window)  # local release phase
        self._release = 1 if sliding else self.local_window // block_size  # blocks a member releases at its phase
        self._offset = self.local_window - 1 if sliding else 0  # releases when (tokens - offset) % period == 0
        self._active_from = self.local_window if sliding else 1  # ... once tokens >= this
        self._free = num_blocks
        self._seqs: dict[int, list[int]] = {}  # id -> [tokens, blocks, 1 on GPU / 0 swapped, local blocks held]
        self._num_unfilled_slots = 0
        self._num_cpu_used = 0
        self._group: dict[int, int] = {}  # member -> tokens minus the group clock
        self._clock = 0
        self._open_phase = [0] * block_size  # members by base mod block_size
        self._rel_phase = [0] * self._period  # active local members by base mod period
        self._pending: dict[int, dict[int, int]] = {}  # activation clock -> {base mod period: members}

    # -- block arithmetic ---------------------------------------------------------------------------------------
    def _released(self, n0: int) -> int:
        """Local blocks before the first one the next query of a sequence with ``n0`` computed tokens sees."""
        if self.local_kind == "sliding":
            return max(0, (n0 - self.local_window + 1) // self.block_size)
        if self.local_kind == "chunked":
            return (n0 // self.local_window) * self.local_window // self.block_size
        return 0

    def _blocks(self, tokens: int, local: int) -> int:
        return self.full_groups * -(-tokens // self.block_size) + self.local_groups * local + self.state_groups

    def beam_blocks_for(self, num_tokens: int, beams: int = 1, prompt_tokens: int = 0) -> int:
        """Blocks a sequence takes when ``num_tokens`` are allocated at once (admission): every token's block
        in every attention group (the local ones free theirs from the next step) and its states."""
        return self._token_groups * -(-num_tokens // self.block_size) + self.state_groups

    def decode_fits(self, num_seqs: int) -> bool:
        """Whether ``num_seqs`` sequences can each take one more token even if each opens a block per group."""
        return num_seqs * self._token_groups <= self._free

    # -- introspection ------------------------------------------------------------------------------------------
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
        """Always 0: no prefix caching."""
        return 0

    @property
    def num_available_blocks(self) -> int:
        """Blocks a new allocation can take."""
        return self._free

    @property
    def num_swapped_out_blocks(self) -> int:
        """CPU blocks holding swapped-out sequences."""
        return self._num_cpu_used

    def fill_fracs(self) -> tuple[float, float]:
        """(blocks in use, unfilled token slots of the attention blocks in use) as fractions of the cache."""
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
        if base is not None:  # a decode-group member: settled at base + clock tokens
            t = base + self._clock
            seq[0] = t
            blocks = -(-t // self.block_size)
            local = blocks - self._released(t - 1) if self.local_groups else 0
            seq[3] = local
            seq[1] = self.full_groups * blocks + self.local_groups * local + self.state_groups
        if on_gpu is True and not seq[2]:
            raise KVCacheError(f"sequence {seq_id} is swapped out; swap it in first")
        if on_gpu is False and seq[2]:
            raise KVCacheError(f"sequence {seq_id} is not swapped out")
        return seq

    def seq_num_tokens(self, seq_id: int) -> int:
        """Tokens held for ``seq_id``."""
        return self._seq(seq_id)[0]

    def seq_num_blocks(self, seq_id: int) -> int:
        """Blocks held for ``seq_id`` (GPU or CPU), every group."""
        return self._seq(seq_id)[1]

    def is_swapped_out(self, seq_id: int) -> bool:
        """Whether ``seq_id`` lives in CPU swap space."""
        return not self._seq(seq_id)[2]

    # -- admission and growth -----------------------------------------------------------------------------------
    def _check_new(self, seq_id: int, num_tokens: int, beams: int) -> None:
        if seq_id in self._seqs:
            raise KVCacheError(f"sequence {seq_id} is already in the KV cache")
        if beams != 1:
            raise KVCacheError(f"sequence {seq_id}: {beams} beams; the hybrid KV cache holds one beam per sequence")
        if num_tokens < 1:
            raise KVCacheError(f"sequence {seq_id}: num_tokens={num_tokens} must be >= 1")

    def can_allocate(self, seq_id: int, num_tokens: int, prefix_hashes: Sequence[int] | None = None,
                     beams: int = 1, prompt_tokens: int = 0) -> bool:
        """Whether admitting ``num_tokens`` leaves at least ``watermark_blocks`` free (hashes are ignored)."""
        self._check_new(seq_id, num_tokens, beams)
        return self._free - self.beam_blocks_for(num_tokens) >= self.watermark_blocks

    def allocate(self, seq_id: int, num_tokens: int, prefix_hashes: Sequence[int] | None = None,
                 beams: int = 1, prompt_tokens: int = 0) -> int:
        """Reserve every group's blocks for a prompt of ``num_tokens``; returns 0 (no prefix cache)."""
        self._check_new(seq_id, num_tokens, beams)
        blocks = self.beam_blocks_for(num_tokens)
        if blocks > self._free:
            raise KVCacheError(f"cannot allocate {blocks} KV blocks for sequence {seq_id} ({num_tokens} tokens): "
                               f"only {self._free} of {self.num_blocks} available")
        self._free -= blocks
        local = -(-num_tokens // self.block_size) if self.local_groups else 0
        self._seqs[seq_id] = [num_tokens, blocks, 1, local]
        self._num_unfilled_slots += self._token_groups * (-(-num_tokens // self.block_size) * self.block_size
                                                          - num_tokens)
        self.prefix_query_tokens += num_tokens
        return 0

    def _grown(self, seq: list[int], num_new_tokens: int) -> tuple[int, int]:
        """(blocks, local blocks) of ``seq`` after a step adding ``num_new_tokens``: the local blocks out of the
        window of its computed tokens freed first, then the new tokens' blocks taken."""
        t0 = seq[0]
        total = t0 + num_new_tokens
        local = -(-total // self.block_size) - self._released(t0) if self.local_groups else 0
        return self._blocks(total, local), local

    def _one_step(self, t: int) -> int:
        """Net blocks a settled sequence of ``t`` tokens takes growing by one token (the decode group's step)."""
        delta = self._token_groups if t % self.block_size == 0 else 0
        if self.local_groups and t >= self._active_from and (t - self._offset) % self._period == 0:
            delta -= self.local_groups * self._release
        return delta

    def append_need(self, seq_id: int, num_new_tokens: int) -> int:
        """Blocks ``seq_id`` takes, net of those it frees, to grow by ``num_new_tokens`` (0 when none)."""
        base = self._group.get(seq_id)
        if base is not None and num_new_tokens == 1:  # a member's step (the scheduler's slot-by-slot path)
            return max(0, self._one_step(base + self._clock))
        seq = self._seq(seq_id, on_gpu=True)
        return max(0, self._grown(seq, num_new_tokens)[0] - seq[1])

    def append(self, seq_id: int, num_new_tokens: int = 1) -> None:
        """Grow ``seq_id`` by ``num_new_tokens`` (a member grown on its own leaves and rejoins the group)."""
        base = self._group.get(seq_id)
        if base is not None and num_new_tokens == 1:
            self._step_member(seq_id, base)
            return
        seq = self._seq(seq_id, on_gpu=True)
        if num_new_tokens < 0:
            raise KVCacheError(f"num_new_tokens={num_new_tokens} for sequence {seq_id} must be >= 0")
        blocks, local = self._grown(seq, num_new_tokens)
        need = blocks - seq[1]
        if need > self._free:
            raise KVCacheError(f"cannot append {num_new_tokens} tokens to sequence {seq_id}: needs {need} more KV "
                               f"blocks, only {self._free} available")
        member = seq_id in self._group
        if member:
            self._leave_group(seq_id)
        bs = self.block_size
        t0, total = seq[0], seq[0] + num_new_tokens
        self._num_unfilled_slots += self._token_groups * ((-(-total // bs) - -(-t0 // bs)) * bs - num_new_tokens)
        self._free -= need
        seq[0], seq[1], seq[3] = total, blocks, local
        if member:
            self._join_group(seq_id, seq)

    def _step_member(self, seq_id: int, base: int) -> None:
        """One token for decode-group member ``seq_id`` alone: it moves one step ahead of the group (its base
        grows by one), settled as the group's members are."""
        t = base + self._clock
        need = self._one_step(t)
        if need > self._free:
            raise KVCacheError(f"cannot append 1 token to sequence {seq_id}: needs {need} more KV blocks, only "
                               f"{self._free} available")
        self._free -= need
        bs = self.block_size
        self._num_unfilled_slots += self._token_groups * ((bs if t % bs == 0 else 0) - 1)
        self._open_phase[base % bs] -= 1
        self._open_phase[(base + 1) % bs] += 1
        self._group[seq_id] = base + 1
        if self.local_groups:
            period, clock = self._period, self._clock
            start = self._active_from - base
            if clock >= start:
                self._rel_phase[base % period] -= 1
            else:
                pending = self._pending[start]
                pending[base % period] -= 1
                if not pending[base % period]:
                    del pending[base % period]
                    if not pending:
                        del self._pending[start]
            start -= 1
            if clock >= start:
                self._rel_phase[(base + 1) % period] += 1
            else:
                pending = self._pending.setdefault(start, {})
                pending[(base + 1) % period] = pending.get((base + 1) % period, 0) + 1

    # -- the decode group ---------------------------------------------------------------------------------------
    def add_to_group(self, seq_id: int) -> None:
        """``seq_id`` (on the GPU) joins the decode group, settled: the local blocks its next query cannot see
        go back to the pool."""
        if seq_id not in self._group:
            self._join_group(seq_id, self._seq(seq_id, on_gpu=True))

    def _join_group(self, seq_id: int, seq: list[int]) -> None:
        t = seq[0]
        if self.local_groups:
            settled = -(-t // self.block_size) - self._released(t - 1)
            blocks = self._blocks(t, settled)
            self._free += seq[1] - blocks
            seq[1], seq[3] = blocks, settled
        base = t - self._clock
        self._group[seq_id] = base
        self._open_phase[base % self.block_size] += 1
        if self.local_groups:
            key = base % self._period
            start = self._active_from - base  # the clock from which it releases
            if self._clock >= start:
                self._rel_phase[key] += 1
            else:
                pending = self._pending.setdefault(start, {})
                pending[key] = pending.get(key, 0) + 1

    def _leave_group(self, seq_id: int) -> None:
        """Drop a member (its entry is up to date: every caller read it through ``_seq`` first)."""
        base = self._group.pop(seq_id, None)
        if base is None:
            return
        self._open_phase[base % self.block_size] -= 1
        if self.local_groups:
            key = base % self._period
            start = self._active_from - base
            if self._clock >= start:
                self._rel_phase[key] -= 1
            else:
                pending = self._pending[start]
                pending[key] -= 1
                if not pending[key]:
                    del pending[key]
                    if not pending:
                        del self._pending[start]

    def _step(self, clock: int, extra: dict[int, int] | None = None) -> int:
        """Net blocks the group takes on the step at ``clock`` (members with ``base + clock`` tokens grow by one);
        ``extra``: members activated by earlier simulated steps (not yet in the release phases)."""
        bs = self.block_size
        delta = self._token_groups * self._open_phase[-clock % bs]
        if self.local_groups:
            key = (self._offset - clock) % self._period
            rel = self._rel_phase[key] + (extra.get(key, 0) if extra else 0)
            delta -= self.local_groups * self._release * rel
        return delta

    def grow_group(self, num_new_tokens: int) -> None:
        """``append(seq, num_new_tokens)`` for every member of the decode group, one step at a time in O(1) each
        (check :meth:`max_group_growth` first)."""
        n = len(self._group)
        if num_new_tokens <= 0 or not n:
            return
        taken = 0
        opened = 0
        for _ in range(num_new_tokens):
            clock = self._clock
            step = self._step(clock)
            if taken + step > self._free:
                raise KVCacheError(f"cannot grow the {n} decoding sequences: needs {taken + step} KV blocks, only "
                                   f"{self._free} available")
            taken += step
            opened += self._open_phase[-clock % self.block_size]
            self._clock = clock + 1
            if self.local_groups:  # members that release from the new clock on
                woke = self._pending.pop(clock + 1, None)
                if woke:
                    for key, count in woke.items():
                        self._rel_phase[key] += count
        self._free -= taken
        self._num_unfilled_slots += self._token_groups * (opened * self.block_size - n * num_new_tokens)

    def max_group_growth(self, limit: int) -> int:
        """The most tokens ``j <= limit`` every member can grow by, step by step, never short of free blocks."""
        n = len(self._group)
        if not n:
            return max(0, limit)
        if limit <= 0:
            return 0
        have = self._free
        if have >= n * self._token_groups * (-(-limit // self.block_size) + 1):  # even with no release it fits
            return limit
        extra: dict[int, int] = {}
        used = 0
        for j in range(limit):
            clock = self._clock + j
            if self.local_groups and j:  # members that start releasing on this step
                for key, count in self._pending.get(clock, {}).items():
                    extra[key] = extra.get(key, 0) + count
            used += self._step(clock, extra)
            if used > have:
                return j
        return limit

    # -- release and swapping -----------------------------------------------------------------------------------
    def free(self, seq_id: int) -> None:
        """Release ``seq_id`` (on GPU or swapped out): every group's blocks, its states included."""
        t, b, on_gpu, _ = self._seq(seq_id)
        self._leave_group(seq_id)
        if on_gpu:
            self._free += b
            self._num_unfilled_slots -= self._token_groups * (-(-t // self.block_size) * self.block_size - t)
        else:
            self._num_cpu_used -= b
        del self._seqs[seq_id]

    def can_swap_out(self, seq_id: int) -> bool:
        """Whether the CPU swap space has room for ``seq_id``'s blocks."""
        return self._seq(seq_id, on_gpu=True)[1] <= self.num_cpu_blocks - self._num_cpu_used

    def swap_out(self, seq_id: int) -> int:
        """Move ``seq_id``'s blocks (states included) to CPU swap space; returns the blocks moved."""
        seq = self._seq(seq_id, on_gpu=True)
        t, b = seq[0], seq[1]
        if b > self.num_cpu_blocks - self._num_cpu_used:
            raise KVCacheError(f"cannot swap out sequence {seq_id}: needs {b} CPU blocks, "
                               f"only {self.num_cpu_blocks - self._num_cpu_used} of {self.num_cpu_blocks} free")
        self._leave_group(seq_id)
        self._free += b
        self._num_unfilled_slots -= self._token_groups * (-(-t // self.block_size) * self.block_size - t)
        self._num_cpu_used += b
        seq[2] = 0
        return b

    def can_swap_in(self, seq_id: int) -> bool:
        """Whether swapping ``seq_id`` in leaves at least ``watermark_blocks`` free."""
        return self._free - self._seq(seq_id, on_gpu=False)[1] >= self.watermark_blocks

    def swap_in(self, seq_id: int) -> int:
        """Bring ``seq_id`` back to GPU blocks; returns the blocks moved."""
        seq = self._seq(seq_id, on_gpu=False)
        t, b = seq[0], seq[1]
        if b > self._free:
            raise KVCacheError(f"cannot swap in sequence {seq_id}: needs {b} KV blocks, only {self._free} available")
        self._free -= b
        self._num_cpu_used -= b
        self._num_unfilled_slots += self._token_groups * (-(-t // self.block_size) * self.block_size - t)
        seq[2] = 1
        return b

    # -- audit --------------------------------------------------------------------------------------------------
    def check_invariants(self) -> None:
        """Recount every group's blocks from the sequences and the decode group's phases; AssertionError when a
        counter disagrees (tests)."""
        bs = self.block_size
        open_phase = [0] * bs
        rel_phase = [0] * self._period
        pending: dict[int, dict[int, int]] = {}
        for sid, base in self._group.items():
            seq = self._seq(sid)
            if not seq[2]:
                raise AssertionError(f"decode-group member {sid} is swapped out")
            open_phase[base % bs] += 1
            if self.local_groups:
                start = self._active_from - base
                if self._clock >= start:
                    rel_phase[base % self._period] += 1
                else:
                    pending.setdefault(start, {}).setdefault(base % self._period, 0)
                    pending[start][base % self._period] += 1
        if open_phase != self._open_phase or rel_phase != self._rel_phase or pending != self._pending:
            raise AssertionError("decode-group phase counts disagree with its members")
        used = cpu = unfilled = 0
        for sid, (t, b, on_gpu, local) in self._seqs.items():
            if t < 1:
                raise AssertionError(f"sequence {sid} holds {t} tokens")
            blocks = -(-t // bs)
            if self.local_groups and not blocks - self._released(t - 1) <= local <= blocks:
                raise AssertionError(f"sequence {sid}: {local} local blocks for {t} tokens (window "
                                     f"{self.local_window}: {blocks - self._released(t - 1)} to {blocks})")
            if not self.local_groups and local:
                raise AssertionError(f"sequence {sid} holds local blocks without local layers")
            if b != self._blocks(t, local):
                raise AssertionError(f"sequence {sid}: {b} blocks, its groups hold {self._blocks(t, local)}")
            if on_gpu:
                used += b
                unfilled += self._token_groups * (blocks * bs - t)
            else:
                cpu += b
        if used + self._free != self.num_blocks or self._free < 0:
            raise AssertionError(f"used {used} + free {self._free} blocks != num_blocks {self.num_blocks}")
        if cpu != self._num_cpu_used or cpu > self.num_cpu_blocks:
            raise AssertionError("CPU block count wrong or over capacity")
        if unfilled != self._num_unfilled_slots:
            raise AssertionError(f"unfilled slot counter {self._num_unfilled_slots} != {unfilled}")
