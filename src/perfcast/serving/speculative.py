"""Speculative decoding: a draft model proposes ``k`` tokens per sequence, the target verifies them at once.

A decode step costs ``k`` draft decode iterations and one target iteration that verifies ``k + 1`` tokens per
sequence (a prefill-shaped batch over each sequence's context). Each proposed token is accepted with
probability ``a`` until the first rejection, and the target adds its own token, so a sequence advances by its
accepted tokens plus one. The draws come from a generator seeded from the workload's seed (``seed + 2``), so
runs repeat. A sequence proposes no more tokens than it has left, nor more than its KV cache has room for
(the lookahead slots are reserved against the free blocks as the batch is formed).
"""

from __future__ import annotations

import numpy as np

from perfcast.serving.clock import IterationClock
from perfcast.serving.decoding import DecodeSet
from perfcast.serving.iteration import IterationModel
from perfcast.serving.request import Request
from perfcast.serving.schedulers import ReplicaScheduler

__all__ = ["Speculator"]


class Speculator:
    """The draft model's proposals and their acceptance, for every engine of a run."""

    def __init__(self, draft: IterationModel, clock: IterationClock, *, num_tokens: int, acceptance_rate: float,
                 seed: int, num_engines: int) -> None:
        self.draft = draft
        self.clock = clock
        self.num_tokens = num_tokens  # k: tokens the draft proposes per step
        self.acceptance_rate = acceptance_rate
        self._rng = np.random.default_rng(seed + 2)
        self._lookahead: list[list[tuple[Request, int]]] = [[] for _ in range(num_engines)]  # per engine: rows
        self.steps = 0  # decode steps with speculation, over the run
        self.tokens = 0  # tokens they emitted

    @property
    def tokens_per_step(self) -> float:
        """Mean tokens a sequence emitted per speculative step (0 before any)."""
        return self.tokens / self.steps if self.steps else 0.0

    def step_s(self, e: int, sched: ReplicaScheduler) -> float:
        """Reserve the lookahead KV slots of engine ``e``'s decode batch and return its step's time (s, one
        stage): the draft's iterations and the target's verification."""
        kv = sched.kv
        rows = sched.decode_rows()
        contexts = [r.prompt_tokens + sched.generated(r) for r in rows]
        ks = []
        room = kv.num_available_blocks  # lookahead slots are reserved against it cumulatively
        for req, c in zip(rows, contexts, strict=True):
            k = min(self.num_tokens, req.output_tokens - (c - req.prompt_tokens) - 1)
            need = kv.append_need(req.id, k) if k > 0 else 0
            if k > 0 and need <= room:
                room -= need
                ks.append(k)
            else:
                ks.append(0)
        self._lookahead[e] = list(zip(rows, ks, strict=True))
        b = len(rows)
        ctx = sum(contexts)
        kmax = max(ks) if ks else 0
        draft_s = self.clock.draft_s(self.draft, b, ctx, kmax)
        q = sum(k + 1 for k in ks)
        pairs = sum((k + 1) * (c + k) for c, k in zip(contexts, ks, strict=True))
        verify_s = self.clock.stage_s(q, float(pairs), ctx + q, b, 0, 0, q)
        return draft_s + verify_s

    def skip(self, e: int) -> None:
        """Engine ``e``'s batch runs without speculation (it prefills)."""
        self._lookahead[e] = []

    def accept(self, e: int, sched: ReplicaScheduler, dec: DecodeSet) -> None:
        """The target verified engine ``e``'s proposals: each row keeps its accepted draft tokens (their KV slots
        were reserved) on top of the decode step's own token."""
        rate = self.acceptance_rate
        for req, look in self._lookahead[e]:
            if look:
                # accepted draft tokens: consecutive successes, each with the acceptance rate
                draws = self._rng.random(look)
                extra = int(np.argmin(draws < rate)) if (draws >= rate).any() else look
                if extra:
                    sched.kv.append(req.id, extra)
                    dec.bump(req, extra)
                self.steps += 1
                self.tokens += extra + 1
