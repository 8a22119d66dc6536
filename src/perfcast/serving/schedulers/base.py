"""What every replica scheduler shares: the queues, admission into the KV cache, preemption.

A scheduler owns one replica's (or one pipeline virtual engine's) queues:
``waiting`` (arrived, not admitted, FCFS; preempted requests return to its
front), ``running`` (admitted; their KV is resident), ``swapped`` (preempted
to CPU memory). Each call to :meth:`ReplicaScheduler.schedule` forms the next
iteration's :class:`Batch`; the engine runs it and reports emitted tokens back
through :meth:`ReplicaScheduler.finish`. Policies differ only in which
requests they admit and how they fill the token budget.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import ClassVar

from perfcast.serving.kv import BlockManager
from perfcast.serving.request import Request

__all__ = ["Batch", "ReplicaScheduler", "SchedulerLimits"]


@dataclass(frozen=True)
class SchedulerLimits:
    """The engine knobs a policy obeys (vLLM names)."""

    max_num_seqs: int
    max_num_batched_tokens: int
    chunk_size: int
    max_model_len: int
    preemption_mode: str = "recompute"


@dataclass(slots=True)
class Batch:
    """One iteration: prefill chunks ``(request, new tokens)`` and one decode token per ``decode`` request.

    ``decode_ids`` are the ids of ``decode`` when they were reserved in one pass. ``decode_pending`` marks
    a decode-only batch whose one KV slot per sequence is known to fit but not yet taken: the engine takes
    it, together with any further identical iterations it runs in one step (:meth:`ReplicaScheduler.commit`).
    """

    prefill: list[tuple[Request, int]] = field(default_factory=list)
    decode: list[Request] = field(default_factory=list)
    swapped_blocks: int = 0  # KV blocks moved between GPU and CPU memory before the iteration
    decode_ids: list[int] = field(default_factory=list)
    decode_pending: bool = False
    decode_context_tokens: int = -1  # tokens the decoding sequences hold, this iteration's included (-1: unknown)

    @property
    def num_tokens(self) -> int:
        """Tokens the iteration computes."""
        return sum(n for _, n in self.prefill) + len(self.decode)

    def __bool__(self) -> bool:
        return bool(self.prefill or self.decode)


class ReplicaScheduler:
    """Base policy: FCFS admission into a paged KV cache, newest-first preemption (vLLM's rules)."""

    name: ClassVar[str] = ""
    reserve_full_length: ClassVar[bool] = False  # admission reserves KV for prompt + output (no paging)
    # a decode-only batch it forms repeats unchanged until a request finishes or arrives (the engine may
    # then run those iterations in one step); false for policies that change batches on their own
    steady_decode: ClassVar[bool] = True
    pads_finished: ClassVar[bool] = False  # finished requests stay in the decode batch (padded rows)

    def __init__(self, kv: BlockManager, limits: SchedulerLimits) -> None:
        self.kv = kv
        self.limits = limits
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.swapped: deque[Request] = deque()
        self.preemptions = 0
        self.rejected: list[tuple[Request, str]] = []

    # -- queue events -------------------------------------------------------------------------
    def add(self, req: Request) -> None:
        """An arriving request (rejected with a reason when it can never be served)."""
        need = req.prompt_tokens + (req.output_tokens if self.reserve_full_length else 0)
        if req.prompt_tokens + req.output_tokens > self.limits.max_model_len:
            self.rejected.append((req, f"prompt + output tokens ({req.prompt_tokens} + {req.output_tokens}) exceed "
                                       f"max_model_len {self.limits.max_model_len}"))
        elif not self.kv.can_ever_allocate(need):
            self.rejected.append((req, f"its {need} tokens need more KV blocks than the replica has "
                                       f"({self.kv.num_blocks} blocks of {self.kv.block_size})"))
        elif not self._prefill_fits_budget(req):
            self.rejected.append((req, f"its prompt ({req.prompt_tokens} tokens) exceeds max_num_batched_tokens "
                                       f"{self.limits.max_num_batched_tokens} and prefill is not chunked"))
        else:
            self.waiting.append(req)

    def _prefill_fits_budget(self, req: Request) -> bool:
        return req.prompt_tokens <= self.limits.max_num_batched_tokens

    def finish(self, req: Request) -> None:
        """A request emitted its last token: release its KV blocks."""
        self.running.remove(req)
        self.kv.free(req.id)

    @property
    def num_outstanding(self) -> int:
        """Requests this scheduler holds (waiting, running or swapped)."""
        return len(self.waiting) + len(self.running) + len(self.swapped)

    # -- admission and preemption -------------------------------------------------------------
    def _kv_tokens(self, req: Request) -> int:
        return req.prefill_target + (req.output_tokens - req.generated if self.reserve_full_length else 0)

    def _can_admit(self, req: Request) -> bool:
        return self.kv.can_allocate(req.id, self._kv_tokens(req), req.prefix_hashes)

    def _admit(self, req: Request) -> None:
        hit = self.kv.allocate(req.id, self._kv_tokens(req), req.prefix_hashes)
        if req.computed_tokens == 0:
            hit = min(hit, req.prefill_target - 1)
            req.computed_tokens = hit
            req.prefix_hit_tokens += hit
        self.running.append(req)

    def _preempt(self, victim: Request) -> int:
        """Preempt ``victim`` (swap to CPU when asked and possible, else recompute); returns blocks swapped."""
        self.running.remove(victim)
        self.preemptions += 1
        victim.preemptions += 1
        if self.limits.preemption_mode == "swap" and self.kv.can_swap_out(victim.id):
            moved = self.kv.swap_out(victim.id)
            victim.swapped = True
            self.swapped.append(victim)
            return moved
        self.kv.free(victim.id)
        # recompute: the prompt and every token generated so far are prefilled again
        victim.prefill_target = victim.prompt_tokens + victim.generated
        victim.computed_tokens = 0
        need = self._kv_tokens(victim)
        if self.kv.can_ever_allocate(need):
            self.waiting.appendleft(victim)
        else:  # its context outgrew the whole cache: it could never be admitted again
            self.rejected.append((victim, f"after {victim.preemptions} preemption(s) its {need} tokens need more "
                                          f"KV blocks than the replica has ({self.kv.num_blocks} blocks of "
                                          f"{self.kv.block_size})"))
        return 0

    def _reserve_decode_slots(self, batch: Batch, candidates: list[Request], *, last: bool = False) -> None:
        """Append one KV slot per decoding request, preempting the newest running requests when full.

        ``last``: nothing else joins this batch, so when every slot fits they are left for the engine to
        take (``decode_pending``), once for however many identical iterations it runs.
        """
        if not candidates:
            return
        ids = [r.id for r in candidates]
        if last and not batch.decode and self.kv.decode_fits(len(ids)):  # even one new block each fits
            batch.decode = candidates
            batch.decode_ids = ids
            batch.decode_pending = True
            return
        total = self.kv.append_decode(ids)
        if total >= 0:  # the common case: room for everyone
            if batch.decode:
                batch.decode.extend(candidates)
                batch.decode_ids = []  # stale now: the engine lists them again
                batch.decode_context_tokens = -1
            else:
                batch.decode = candidates
                batch.decode_ids = ids
                batch.decode_context_tokens = total  # a decoding sequence's cache holds its whole context
            return
        batch.decode_ids = []
        batch.decode_context_tokens = -1
        gone: set[int] = set()
        for req in candidates:
            if req.id in gone:
                continue
            while not self.kv.can_append(req.id):
                victim = self.running[-1]
                gone.add(victim.id)
                batch.swapped_blocks += self._preempt(victim)
                if victim is req:
                    break
            if req.id in gone:
                continue
            self.kv.append(req.id)
            batch.decode.append(req)

    def commit(self, batch: Batch) -> None:
        """Take the KV slots of a ``decode_pending`` batch run for one iteration."""
        if batch.decode_pending:
            batch.decode_pending = False
            self.kv.append_uniform(batch.decode_ids, 1)

    def _swap_in(self, batch: Batch) -> None:
        while self.swapped and len(self.running) < self.limits.max_num_seqs:
            req = self.swapped[0]
            if not self.kv.can_swap_in(req.id):
                break
            self.swapped.popleft()
            batch.swapped_blocks += self.kv.swap_in(req.id)
            req.swapped = False
            self.running.append(req)

    def schedule(self) -> Batch | None:  # pragma: no cover - every policy overrides it
        """The next iteration's batch, or None when there is nothing to run."""
        raise NotImplementedError
