"""Run-wide counts of a simulation: iterations, GPU time and the KV cache's use weighted by time."""

from __future__ import annotations

from perfcast.serving.kv import KVCache
from perfcast.serving.result import IterationEvent

__all__ = ["RunTally"]


class RunTally:
    """Sums over every engine's iterations (s, fractions); ``events`` keeps each iteration when asked."""

    __slots__ = ("events", "gpu_time_s", "iterations", "kv_frag_sum", "kv_max_frac", "kv_time_s", "kv_util_sum")

    def __init__(self) -> None:
        self.iterations = 0
        self.gpu_time_s = 0.0  # iteration time on its own, summed (what another model sharing the GPUs sees)
        self.kv_time_s = 0.0  # time the KV use below is weighted over
        self.kv_util_sum = 0.0  # KV blocks in use (fraction) x time
        self.kv_frag_sum = 0.0  # unused slots of used blocks (fraction) x time
        self.kv_max_frac = 0.0
        self.events: list[IterationEvent] = []

    def account(self, kv: KVCache, span_s: float, gpu_s: float, k: int) -> None:
        """``k`` iterations lasting ``span_s`` seconds (``gpu_s`` of GPU time on their own) of an engine whose
        cache is ``kv``: count them, and weigh its KV use (as it is now) by their span."""
        util, frag = kv.fill_fracs()
        self.kv_util_sum += util * span_s
        self.kv_frag_sum += frag * span_s
        self.kv_time_s += span_s
        if util > self.kv_max_frac:
            self.kv_max_frac = util
        self.gpu_time_s += gpu_s
        self.iterations += k

    @property
    def kv_utilization_mean_frac(self) -> float:
        """Time-weighted mean of the KV blocks in use."""
        return self.kv_util_sum / self.kv_time_s if self.kv_time_s else 0.0

    @property
    def kv_fragmentation_mean_frac(self) -> float:
        """Time-weighted mean of the unused slots of used blocks."""
        return self.kv_frag_sum / self.kv_time_s if self.kv_time_s else 0.0
