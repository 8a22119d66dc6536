"""The decoding requests of one scheduler, advanced together in O(1) per decode iteration.

Every decode iteration gives each decoding request one more output token (speculative decoding adds a
request's accepted draft tokens on top). Instead of walking the batch to bump each counter, a
:class:`DecodeSet` counts the decode steps it has taken and keeps each member relative to that count: a
member that joined at step ``s`` with ``g`` tokens has ``g + steps - s`` now. A stretch of ``k`` identical
iterations is then one addition; what the engine needs about the batch comes from running totals:

- ``len(decode_set)``: the batch's decoding sequences (rows: a beam-search request with ``b`` beams is ``b``
  sequences, each reading the shared prompt and its own generated tokens);
- :attr:`DecodeSet.context_tokens`: the tokens they hold (prompt plus generated, per row), summed;
- :meth:`DecodeSet.steps_to_finish`: iterations until the first member emits its last token (a heap of the
  step at which each member finishes, ties in running order);
- :meth:`DecodeSet.pop_finished`: the members that are done, in running order, with ``generated`` written back.

A member's ``Request.generated`` is written back when it leaves (:meth:`DecodeSet.remove`); while it is a
member, read :meth:`DecodeSet.generated`.
"""

from __future__ import annotations

import heapq

from perfcast.serving.request import Request

__all__ = ["DecodeSet"]


class DecodeSet:
    """The requests of one scheduler's running list that decode (their prompt is in, output tokens remain)."""

    __slots__ = ("_base_context", "_count", "_heap", "steps")

    def __init__(self) -> None:
        self.steps = 0  # decode steps taken since the set began (each gave every member one token)
        self._count = 0  # rows: the members' beams, summed
        self._base_context = 0  # sum over rows of prompt + generated - decode_step (tokens at step 0)
        self._heap: list[tuple[int, int, Request]] = []  # (step it finishes at, run_seq, request); stale entries
        # (members that left or moved) are skipped when they reach the top

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    @property
    def context_tokens(self) -> int:
        """Tokens the rows hold in total (prompt plus generated each, every beam counting the shared prompt):
        the cached tokens their next decode iteration reads."""
        return self.totals()[1]

    def totals(self) -> tuple[int, int]:
        """``(len(self), self.context_tokens)`` in one call (what each decode batch reads)."""
        count = self._count
        return count, self._base_context + count * self.steps

    def generated(self, req: Request) -> int:
        """Output tokens ``req`` (a member) has emitted."""
        return req.generated + self.steps - req.decode_step

    def add(self, req: Request) -> None:
        """``req`` starts decoding (it is in the running list, its prompt is in, and tokens remain)."""
        req.decode_set = self
        req.decode_step = self.steps
        b = req.num_beams
        self._count += b
        self._base_context += (req.prompt_tokens + req.generated - self.steps) * b
        heapq.heappush(self._heap, (self._finish_step(req), req.run_seq, req))

    def remove(self, req: Request) -> None:
        """``req`` leaves (preempted, finished or handed over); its ``generated`` is brought up to date."""
        req.generated += self.steps - req.decode_step
        req.decode_step = self.steps
        req.decode_set = None
        b = req.num_beams
        self._count -= b
        self._base_context -= (req.prompt_tokens + req.generated - self.steps) * b

    def advance(self, steps: int) -> None:
        """Every member emitted ``steps`` more tokens (each of its beams grew by as many)."""
        self.steps += steps

    def bump(self, req: Request, tokens: int) -> None:
        """Member ``req`` emitted ``tokens`` more than the others (accepted draft tokens)."""
        if tokens:
            req.generated += tokens
            self._base_context += tokens * req.num_beams
            heapq.heappush(self._heap, (self._finish_step(req), req.run_seq, req))

    def steps_to_finish(self) -> int:
        """Decode steps until the first member has emitted all its tokens (a large number when empty)."""
        return self._first_finish() - self.steps

    def pop_finished(self) -> list[Request]:
        """Remove and return the members that have emitted every token, in running order."""
        heap = self._heap
        if not heap or heap[0][0] > self.steps:  # every entry, stale or not, finishes later: none is done
            return []
        done: list[Request] = []
        while self._first_finish() <= self.steps:
            req = heapq.heappop(self._heap)[2]
            self.remove(req)
            done.append(req)
        return done

    def _finish_step(self, req: Request) -> int:
        return req.decode_step + req.output_tokens - req.generated

    def _first_finish(self) -> int:
        """The step at which the first member finishes (a large number when empty); stale heap entries (members
        that left, or got ahead by a bump) are dropped on the way."""
        heap = self._heap
        while heap:
            step, seq, req = heap[0]
            if req.decode_set is self and seq == req.run_seq and step == (
                    req.decode_step + req.output_tokens - req.generated):
                return step
            heapq.heappop(heap)
        return 1 << 62
