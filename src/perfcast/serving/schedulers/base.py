"""What every replica scheduler shares: the queues, admission into the KV cache, preemption.

A scheduler owns one replica's (or one pipeline virtual engine's) queues:
``waiting`` (arrived, not admitted, FCFS; preempted requests return to its
front), ``running`` (admitted; their KV is resident), ``swapped`` (preempted
to CPU memory). The running requests are split, in running order, into
``prefilling`` (prompts in flight) and ``decoding`` (a
:class:`~perfcast.serving.decoding.DecodeSet`: every member decodes in every
decode iteration, so the set is advanced as a whole, and a paged cache grows its
members as one group, :meth:`~perfcast.serving.kv.KVCache.grow_group`).
Each call to :meth:`ReplicaScheduler.schedule` forms the next iteration's
:class:`Batch`; the engine runs it, advances the decode set, and reports
finished prompts and requests back through :meth:`ReplicaScheduler.prefilled`
and :meth:`ReplicaScheduler.finish`. Policies differ only in which requests
they admit and how they fill the token budget.

Beam search: a request of ``b`` beams is ``b`` sequences of the decode batch (rows) and of ``max_num_seqs``
(``running_rows``), as engines count them, and holds its KV as the block manager describes (prompt once,
``b`` copies of the generated tokens). A recompute preemption prefills its prompt and generated tokens
again as one sequence (the beams' own tails are not priced a second time), while its KV comes back as
``b`` beams.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import ClassVar

from perfcast.serving.decoding import DecodeSet
from perfcast.serving.kv import KVCache
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
    """One iteration: prefill chunks ``(request, new tokens)`` and one decode token for each of ``num_decode``
    sequences (the scheduler's decode set; a static batch adds its finished, padded rows), which hold
    ``decode_context_tokens`` cached tokens in total."""

    prefill: list[tuple[Request, int]] = field(default_factory=list)
    num_decode: int = 0
    decode_context_tokens: int = 0
    swapped_blocks: int = 0  # KV blocks moved between GPU and CPU memory before the iteration

    @property
    def num_tokens(self) -> int:
        """Tokens the iteration computes."""
        return sum(n for _, n in self.prefill) + self.num_decode

    def __bool__(self) -> bool:
        return bool(self.prefill or self.num_decode)


class ReplicaScheduler:
    """Base policy: FCFS admission into a paged KV cache, newest-first preemption (vLLM's rules)."""

    name: ClassVar[str] = ""
    reserve_full_length: ClassVar[bool] = False  # admission reserves KV for prompt + output (no paging)
    # a decode-only batch it forms repeats unchanged until a request finishes or arrives (the engine may
    # then run those iterations in one step); false for policies that change batches on their own
    steady_decode: ClassVar[bool] = True

    def __init__(self, kv: KVCache, limits: SchedulerLimits) -> None:
        self.kv = kv
        self.limits = limits
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.prefilling: list[Request] = []  # running requests whose prompt is in flight, in running order
        self.decoding = DecodeSet()  # running requests that decode
        self.swapped: deque[Request] = deque()
        self.running_rows = 0  # sequences of the running requests (their beams, summed)
        self._run_seq = 0
        self.preemptions = 0
        # requests refused, each with its reason (the same words for every request refused for it, so runs can
        # count them) and the request's own figures (vLLM's 400 message for an over-long one)
        self.rejected: list[tuple[Request, str, str]] = []

    # -- queue events -------------------------------------------------------------------------
    def add(self, req: Request) -> None:
        """An arriving request (rejected with a reason when it can never be served)."""
        need = req.prompt_tokens + (req.output_tokens if self.reserve_full_length else 0)
        asked = req.prompt_tokens + req.output_tokens
        limit = self.limits.max_model_len
        if asked > limit:  # vLLM's OpenAI server answers 400 with these words
            self.rejected.append((req, f"prompt + output tokens exceed the maximum context length ({limit} tokens)",
                                  f"This model's maximum context length is {limit} tokens. However, you requested "
                                  f"{asked} tokens ({req.prompt_tokens} in the messages, {req.output_tokens} in the "
                                  "completion)"))
        elif req.num_beams > self.limits.max_num_seqs:
            self.rejected.append((req, f"its beams exceed max_num_seqs {self.limits.max_num_seqs}",
                                  f"{req.num_beams} beams"))
        elif not self.kv.can_ever_allocate(need, req.num_beams, req.prompt_tokens):
            self.rejected.append((req, f"it needs more KV blocks than the replica has ({self.kv.num_blocks} blocks "
                                       f"of {self.kv.block_size} tokens)", f"{need} tokens"))
        elif not self._prefill_fits_budget(req):
            self.rejected.append((req, f"its prompt exceeds max_num_batched_tokens "
                                       f"{self.limits.max_num_batched_tokens} and prefill is not chunked",
                                  f"{req.prompt_tokens}-token prompt"))
        else:
            self.waiting.append(req)

    def _prefill_fits_budget(self, req: Request) -> bool:
        return req.prompt_tokens <= self.limits.max_num_batched_tokens

    def finish(self, req: Request) -> None:
        """A request emitted its last token (or its prompt went to a decode pool): release its KV blocks."""
        self.running.remove(req)
        self.running_rows -= req.num_beams
        if req.decode_set is self.decoding:
            self.decoding.remove(req)
        self.kv.free(req.id)

    def prefilled(self, req: Request, *, decodes: bool) -> None:
        """``req``'s prompt is in (it emitted a token): it leaves the prompts in flight and, when ``decodes``
        (tokens remain and it stays on this replica), decodes from the next iteration."""
        self.prefilling.remove(req)
        if decodes:
            self._start_decoding(req)

    def generated(self, req: Request) -> int:
        """Output tokens running request ``req`` has emitted."""
        return self.decoding.generated(req) if req.decode_set is self.decoding else req.generated

    def decode_rows(self) -> list[Request]:
        """The requests of a decode batch in running order (O(running): for speculative decoding, which
        treats each row on its own)."""
        dec = self.decoding
        return [r for r in self.running if r.decode_set is dec]

    @property
    def num_outstanding(self) -> int:
        """Requests this scheduler holds (waiting, running or swapped)."""
        return len(self.waiting) + len(self.running) + len(self.swapped)

    # -- admission and preemption -------------------------------------------------------------
    def _kv_tokens(self, req: Request) -> int:
        return req.prefill_target + (req.output_tokens - req.generated if self.reserve_full_length else 0)

    def _has_seat(self, req: Request) -> bool:
        """Whether ``req``'s sequences (its beams) fit under ``max_num_seqs`` with the running ones."""
        return self.running_rows + req.num_beams <= self.limits.max_num_seqs

    def _can_admit(self, req: Request) -> bool:
        return self.kv.can_allocate(req.id, self._kv_tokens(req), req.prefix_hashes, req.num_beams,
                                    req.prompt_tokens)

    def _admit(self, req: Request) -> None:
        hit = self.kv.allocate(req.id, self._kv_tokens(req), req.prefix_hashes, req.num_beams, req.prompt_tokens)
        if req.computed_tokens == 0:
            hit = min(hit, req.prefill_target - 1)
            req.computed_tokens = hit
            req.prefix_hit_tokens += hit
        self._run(req)

    def _run(self, req: Request) -> None:
        """``req`` joins the end of the running list, and the prompts in flight or the decode set."""
        self.running.append(req)
        self.running_rows += req.num_beams
        req.run_seq = self._run_seq
        self._run_seq += 1
        if req.computed_tokens < req.prefill_target:
            self.prefilling.append(req)
        else:  # its KV arrived from a prefill pool, or it was swapped in while decoding
            self._start_decoding(req)

    def _start_decoding(self, req: Request) -> None:
        self.decoding.add(req)
        if not self.reserve_full_length:  # its KV grows with the decode group
            self.kv.add_to_group(req.id)

    def _preempt(self, victim: Request) -> int:
        """Preempt ``victim`` (swap to CPU when asked and possible, else recompute); returns blocks swapped."""
        self.running.remove(victim)
        self.running_rows -= victim.num_beams
        if victim.decode_set is self.decoding:
            self.decoding.remove(victim)
        else:
            self.prefilling.remove(victim)
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
        if self.kv.can_ever_allocate(need, victim.num_beams, victim.prompt_tokens):
            self.waiting.appendleft(victim)
        else:  # its context outgrew the whole cache: it could never be admitted again
            self.rejected.append((victim, f"preempted, it outgrew the KV cache ({self.kv.num_blocks} blocks of "
                                          f"{self.kv.block_size} tokens)",
                                  f"{need} tokens after {victim.preemptions} preemption(s)"))
        return 0

    def _reserve_decode_step(self, batch: Batch) -> None:
        """One KV slot per decoding sequence (each beam) for the coming iteration, preempting the newest running
        requests when the cache is full (vLLM's rule)."""
        dec = self.decoding
        rows = len(dec)
        if not rows:
            return
        if self.kv.decode_fits(rows):  # the common case: even a new block each fits, O(1)
            self.kv.grow_group(1)
            return
        # the cache is (nearly) full: slot by slot in running order, preempting from the end
        for req in [r for r in self.running if r.decode_set is dec]:
            if req.decode_set is dec:  # not preempted earlier in this pass
                self._reserve_slot(batch, req)

    def _reserve_slot(self, batch: Batch, req: Request) -> None:
        """One KV slot for decoding request ``req``, preempting the newest running requests until it fits
        (``req`` itself, when it is the newest)."""
        while not self.kv.can_append(req.id):
            victim = self.running[-1]
            batch.swapped_blocks += self._preempt(victim)
            if victim is req:
                return
        self.kv.append(req.id)

    def decode_batch(self) -> Batch | None:
        """What :meth:`schedule` forms when nothing waits, is swapped out or is prefilling (and every decoding
        request's KV slot fits): the decode set with one KV slot each; None when it is empty."""
        batch = Batch()
        if not self.reserve_full_length:
            self._reserve_decode_step(batch)
        return self._close(batch)

    def continue_decoding(self, batch: Batch) -> bool:
        """:meth:`decode_batch` in place, for an engine that knows every decoding request's next KV slot fits
        (it checked ``kv.decode_fits``) and that nothing else could join: the decode-only ``batch`` becomes
        the next iteration's; False when the decode set is empty."""
        if not self.reserve_full_length:
            self.kv.grow_group(1)  # the fast path of _reserve_decode_step
        batch.num_decode, batch.decode_context_tokens = self.decoding.totals()
        return batch.num_decode > 0

    def _close(self, batch: Batch) -> Batch | None:
        """The batch with the decode set in it (every member decodes), or None when there is nothing to run."""
        batch.num_decode, batch.decode_context_tokens = self.decoding.totals()
        return batch if batch.num_decode or batch.prefill else None

    def _fill_chunks(self, batch: Batch, budget: int, *, decode_arrivals: bool) -> None:
        """Fill ``budget`` tokens of ``batch`` with prompt chunks (chunked-prefill policies): the prompts in flight
        first, oldest first, then new admissions FCFS while a seat, the KV cache and the budget allow (none while
        requests are swapped out). An admission whose KV arrived from a prefill pool has nothing to prefill: with
        ``decode_arrivals`` it decodes in this iteration (its beams count against the budget), else it waits for
        the next decode batch."""
        for req in self.prefilling:
            if budget <= 0:
                break
            n = min(budget, req.prefill_target - req.computed_tokens)
            batch.prefill.append((req, n))
            budget -= n
        while budget > 0 and self.waiting and not self.swapped and self._has_seat(self.waiting[0]):
            req = self.waiting[0]
            if not self._can_admit(req):
                break
            self.waiting.popleft()
            self._admit(req)
            n = min(budget, req.remaining_prefill)
            if n:
                batch.prefill.append((req, n))
            elif decode_arrivals:
                self._reserve_slot(batch, req)
                n = req.num_beams
            budget -= n

    def _swap_in(self, batch: Batch) -> None:
        while self.swapped and self._has_seat(self.swapped[0]):
            req = self.swapped[0]
            if not self.kv.can_swap_in(req.id):
                break
            self.swapped.popleft()
            batch.swapped_blocks += self.kv.swap_in(req.id)
            req.swapped = False
            self._run(req)

    def schedule(self) -> Batch | None:  # pragma: no cover - every policy overrides it
        """The next iteration's batch, or None when there is nothing to run."""
        raise NotImplementedError
