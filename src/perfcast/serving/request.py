"""A request's state as the simulator moves it: waiting, prefilling, decoding, finished."""

from __future__ import annotations

import math

__all__ = ["Request"]


class Request:
    """One request (mutable simulation state; ids belong to the simulation that made them).

    ``prompt_tokens`` are the tokens to prefill; after a recompute preemption the
    generated tokens join them (``prefill_target``) and are prefilled again.
    ``computed_tokens`` counts the tokens of ``prefill_target`` whose KV is in the cache
    (prefix-cache hits included): it stops at ``prefill_target``, since a decoding
    request's context is ``prompt_tokens + generated``; ``generated`` counts output
    tokens emitted. While the request is in a scheduler's
    :class:`~perfcast.serving.decoding.DecodeSet`, ``generated`` is its count when it joined
    (at the set's step ``decode_step``) and ``DecodeSet.generated`` gives the current one;
    ``run_seq`` orders the requests of one running list (admission order, swap-ins last).
    ``num_beams`` (beam search) is the rows it decodes per iteration: each beam is a sequence over the
    shared prompt, and ``generated`` counts output steps (the returned sequence's tokens), not rows.
    """

    __slots__ = ("arrival_s", "computed_tokens", "decode_set", "decode_step", "finish_s", "first_token_s",
                 "generated", "id", "num_beams", "output_tokens", "preemptions", "prefill_target", "prefix_hashes",
                 "prefix_hit_tokens", "prompt_tokens", "replica", "run_seq", "scheduled_s", "swapped")

    def __init__(self, rid: int, arrival_s: float, prompt_tokens: int, output_tokens: int,
                 num_beams: int = 1) -> None:
        self.id = rid
        self.num_beams = num_beams
        self.arrival_s = arrival_s
        self.prompt_tokens = prompt_tokens
        self.output_tokens = output_tokens
        self.prefill_target = prompt_tokens
        self.computed_tokens = 0
        self.generated = 0
        self.first_token_s = math.nan
        self.finish_s = math.nan
        self.scheduled_s = math.nan
        self.preemptions = 0
        self.prefix_hashes: list[int] | None = None
        self.prefix_hit_tokens = 0
        self.replica = -1
        self.swapped = False
        self.run_seq = -1
        self.decode_set: object | None = None  # the DecodeSet it is a member of
        self.decode_step = 0

    @property
    def in_prefill(self) -> bool:
        """Whether prompt tokens remain to be computed."""
        return self.computed_tokens < self.prefill_target

    @property
    def remaining_prefill(self) -> int:
        """Prompt tokens not yet computed."""
        return self.prefill_target - self.computed_tokens

    @property
    def context_tokens(self) -> int:
        """Tokens the sequence holds (prompt and generated)."""
        return self.prompt_tokens + self.generated

    def __repr__(self) -> str:
        return (f"Request(id={self.id}, prompt={self.prompt_tokens}, output={self.output_tokens}, "
                f"computed={self.computed_tokens}, generated={self.generated})")
