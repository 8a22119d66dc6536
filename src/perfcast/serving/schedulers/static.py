"""``static``: request-level batching (FasterTransformer-style).

When the replica is idle it takes up to ``max_num_seqs`` waiting requests (FCFS,
KV reserved for their full length), prefills them together and decodes them in
lock-step until the longest is done; finished requests keep their slot (the
batch is padded) and nothing new joins until the whole batch completes.
"""

from __future__ import annotations

from perfcast.serving.kv import KVCache
from perfcast.serving.request import Request
from perfcast.serving.schedulers.base import Batch, ReplicaScheduler, SchedulerLimits
from perfcast.serving.schedulers.registry import SCHEDULERS

__all__ = ["StaticScheduler"]


@SCHEDULERS.register("static")
class StaticScheduler(ReplicaScheduler):
    """One batch at a time, padded to its longest request."""

    name = "static"
    reserve_full_length = True
    steady_decode = False  # padded rows: finished members stay in the batch

    def _prefill_fits_budget(self, req: Request) -> bool:
        return True

    def __init__(self, kv: KVCache, limits: SchedulerLimits) -> None:
        super().__init__(kv, limits)
        self._finished = 0  # finished requests still holding their rows
        self._padded_context = 0  # their tokens (prompt + output), read by every decode iteration

    def finish(self, req: Request) -> None:
        """A finished request keeps its slot until the whole batch is done."""
        self._finished += 1
        self._padded_context += (req.prompt_tokens + req.generated) * req.num_beams
        if self._finished == len(self.running):
            for r in self.running:
                self.kv.free(r.id)
            self.running.clear()
            self.running_rows = 0
            self._finished = self._padded_context = 0

    def decode_rows(self) -> list[Request]:
        """Every row of the batch, the finished (padded) ones included."""
        return list(self.running)

    def schedule(self) -> Batch | None:
        batch = Batch()
        if not self.running:
            while self.waiting and self._has_seat(self.waiting[0]):
                req = self.waiting[0]
                if not self._can_admit(req):
                    break
                self.waiting.popleft()
                self._admit(req)
                batch.prefill.append((req, req.remaining_prefill))
            return batch if batch else None
        if self.prefilling:  # pragma: no cover - prefills run in the first iteration
            batch.prefill = [(r, r.remaining_prefill) for r in self.prefilling]
        batch.num_decode = self.running_rows  # padded: finished members still occupy their rows (each beam)
        batch.decode_context_tokens = self.decoding.context_tokens + self._padded_context
        return batch
