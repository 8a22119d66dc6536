"""``orca``: Orca (OSDI'22): iteration-level scheduling without paged KV.

Every iteration runs all admitted requests together: whole prompts for the new
ones, one token for the others. Orca predates PagedAttention, so admission
reserves KV for a request's full length (prompt + output) and nothing is ever
preempted; the reservation is what limits its batch.
"""

from __future__ import annotations

from perfcast.serving.schedulers.base import Batch, ReplicaScheduler
from perfcast.serving.schedulers.registry import SCHEDULERS

__all__ = ["OrcaScheduler"]


@SCHEDULERS.register("orca")
class OrcaScheduler(ReplicaScheduler):
    """Mixed prefill + decode iterations over full-length KV reservations."""

    name = "orca"
    reserve_full_length = True

    def schedule(self) -> Batch | None:
        batch = Batch()
        tokens = 0
        for req in self.running:
            if req.in_prefill:
                batch.prefill.append((req, req.remaining_prefill))
                tokens += req.remaining_prefill
            else:
                batch.decode.append(req)
                tokens += 1
        while self.waiting and len(self.running) < self.limits.max_num_seqs:
            req = self.waiting[0]
            n = req.remaining_prefill
            if (tokens + n > self.limits.max_num_batched_tokens and batch) or not self._can_admit(req):
                break
            self.waiting.popleft()
            self._admit(req)
            batch.prefill.append((req, req.remaining_prefill))
            tokens += req.remaining_prefill
        return batch if batch else None
