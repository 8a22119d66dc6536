"""``lightllm``: LightLLM's router: admit only what can finish without eviction.

Like ``vllm`` it runs prefill batches first and decode batches otherwise, on a
paged KV cache that grows token by token; but a request is admitted only when
the projected peak of every admitted request (each one's prompt plus all of its
output) still fits the cache, so it never preempts. LightLLM estimates output
lengths; the simulator knows them, so this is the policy with perfect estimates.
"""

from __future__ import annotations

from perfcast.serving.kv import KVCache
from perfcast.serving.request import Request
from perfcast.serving.schedulers.base import Batch, ReplicaScheduler, SchedulerLimits
from perfcast.serving.schedulers.registry import SCHEDULERS

__all__ = ["LightLLMScheduler"]


@SCHEDULERS.register("lightllm")
class LightLLMScheduler(ReplicaScheduler):
    """Prefill-first batching with admission by projected KV peak."""

    name = "lightllm"

    def __init__(self, kv: KVCache, limits: SchedulerLimits) -> None:
        super().__init__(kv, limits)
        self._projected = 0  # the running requests' projected peak KV blocks, summed

    def _peak_blocks(self, req: Request) -> int:
        return self.kv.beam_blocks_for(req.prompt_tokens + req.output_tokens, req.num_beams, req.prompt_tokens)

    def _run(self, req: Request) -> None:
        super()._run(req)
        self._projected += self._peak_blocks(req)

    def finish(self, req: Request) -> None:
        super().finish(req)
        self._projected -= self._peak_blocks(req)

    def _preempt(self, victim: Request) -> int:
        self._projected -= self._peak_blocks(victim)
        return super()._preempt(victim)

    def schedule(self) -> Batch | None:
        batch = Batch()
        projected = self._projected
        tokens = 0
        while self.waiting and self._has_seat(self.waiting[0]):
            req = self.waiting[0]
            n = req.remaining_prefill
            peak = self._peak_blocks(req)
            if (tokens + n > self.limits.max_num_batched_tokens or projected + peak > self.kv.num_blocks
                    or not self._can_admit(req)):
                break
            self.waiting.popleft()
            self._admit(req)
            if req.remaining_prefill:
                batch.prefill.append((req, req.remaining_prefill))
            tokens += req.remaining_prefill
            projected += peak
        if batch.prefill:
            return batch
        self._reserve_decode_step(batch)
        return self._close(batch)
