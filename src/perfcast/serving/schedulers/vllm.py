"""``vllm``: vLLM's default scheduler (before chunked prefill): prefills first, then decodes.

Each iteration is either a prefill batch or a decode batch. Waiting requests
are admitted FCFS while the sequence cap, the token budget
(``max_num_batched_tokens``) and the KV cache (above the watermark) allow, and
their whole prompts run as one prefill batch; only when nothing can be
admitted do the running requests decode one token each. A decode that finds
no free KV slot preempts the newest running request (recompute, or swap when
asked). Swapped requests come back before new ones are admitted.
"""

from __future__ import annotations

from perfcast.serving.schedulers.base import Batch, ReplicaScheduler
from perfcast.serving.schedulers.registry import SCHEDULERS

__all__ = ["VLLMScheduler"]


@SCHEDULERS.register("vllm")
class VLLMScheduler(ReplicaScheduler):
    """Prefill-prioritizing continuous batching."""

    name = "vllm"

    def schedule(self) -> Batch | None:
        batch = Batch()
        if self.swapped:
            self._swap_in(batch)
        if not self.swapped:
            tokens = 0
            while self.waiting and self._has_seat(self.waiting[0]):
                req = self.waiting[0]
                n = req.remaining_prefill
                if tokens + n > self.limits.max_num_batched_tokens or not self._can_admit(req):
                    break
                self.waiting.popleft()
                self._admit(req)
                n = req.remaining_prefill
                if n:  # a request whose KV arrived from a prefill pool decodes right away
                    batch.prefill.append((req, n))
                tokens += n
            if batch.prefill:
                return batch
        self._reserve_decode_step(batch)
        return self._close(batch)
