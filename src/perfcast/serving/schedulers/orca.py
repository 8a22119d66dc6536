"""``orca``: Orca (OSDI'22): iteration-level scheduling without paged KV.

Every iteration runs all admitted requests together: whole prompts for the new
ones, one token for the others. Orca predates PagedAttention, so admission
reserves KV for a request's full length (prompt + output) and nothing is ever
preempted; the reservation is what limits its batch. A prompt longer than the
token budget runs in budget-sized chunks (TensorRT-LLM's chunked context, whose
in-flight batching with GUARANTEED_NO_EVICT this policy also describes).
"""

from __future__ import annotations

from perfcast.serving.request import Request
from perfcast.serving.schedulers.base import Batch, ReplicaScheduler
from perfcast.serving.schedulers.registry import SCHEDULERS

__all__ = ["OrcaScheduler"]


@SCHEDULERS.register("orca")
class OrcaScheduler(ReplicaScheduler):
    """Mixed prefill + decode iterations over full-length KV reservations."""

    name = "orca"
    reserve_full_length = True

    def _prefill_fits_budget(self, req: Request) -> bool:
        return True  # long prompts run in chunks

    def schedule(self) -> Batch | None:
        batch = Batch()
        budget = self.limits.max_num_batched_tokens
        tokens = len(self.decoding)  # every decoding sequence (beam) runs one token
        for req in self.prefilling:
            if tokens >= budget:
                break
            n = min(req.remaining_prefill, budget - tokens)
            batch.prefill.append((req, n))
            tokens += n
        while self.waiting and self._has_seat(self.waiting[0]) and tokens < budget:
            req = self.waiting[0]
            if not self._can_admit(req):
                break
            self.waiting.popleft()
            self._admit(req)
            n = min(req.remaining_prefill, budget - tokens)
            if n:
                batch.prefill.append((req, n))
            else:  # its KV arrived from a prefill pool: it joined the decode set (one token per beam)
                n = req.num_beams
            tokens += n
        return self._close(batch)
