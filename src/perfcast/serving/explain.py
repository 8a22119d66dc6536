"""Where a serving run's time went: its iterations' time by part, summed over the run (``serve --explain``).

The parts are :class:`~perfcast.serving.iteration.IterationBreakdown`'s (vidur's split of a batch's time)
plus what the engine adds around an iteration: the vision tower of multimodal prompts, the draft model of
speculative decoding and the KV blocks swapped over PCIe. Every part is GPU time of one engine on its own
(through every pipeline stage), summed over every engine's iterations, in seconds: the model parts add up to
the run's ``gpu_time_s``, and ``total_s`` adds the swap transfers, which hold the engine but not its GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

__all__ = ["TimeBreakdown"]


@dataclass(frozen=True)
class TimeBreakdown:
    """Seconds of a run's iterations by part, summed over every engine (see the module docstring)."""

    linear_s: float  # token-parallel GEMMs, norms, activations, embeddings, KV-cache writes
    attention_prefill_s: float  # prefill attention over the prompts' chunks (and speculative verification)
    attention_decode_s: float  # decode attention reading the cached tokens
    lm_head_s: float  # the LM head over the sequences that sample
    communication_s: float  # tensor-parallel all-reduces (MoE all-gathers and reduce-scatters under attention DP)
    cpu_overhead_s: float  # the engine's own work per iteration: scheduling, input preparation, sampling
    vision_encoder_s: float = 0.0  # multimodal prompts: the vision tower and projector
    draft_model_s: float = 0.0  # speculative decoding: the draft model's decode iterations
    kv_swap_s: float = 0.0  # swap preemption: KV blocks moved between GPU and host memory

    JSON_EXTRA: ClassVar[tuple[str, ...]] = ("total_s",)  # to_json: every part, then their sum

    @property
    def total_s(self) -> float:
        """Every part summed (s)."""
        return (self.linear_s + self.attention_prefill_s + self.attention_decode_s + self.lm_head_s
                + self.communication_s + self.cpu_overhead_s + self.vision_encoder_s + self.draft_model_s
                + self.kv_swap_s)
