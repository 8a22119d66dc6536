"""``sglang``: SGLang's scheduler: chunked prefill batches run on their own, decodes wait for them.

SGLang's event loop (``Scheduler.get_next_batch_to_run``) first tries to form a new prefill batch; when one
forms it runs alone, and only when no prompt can start does the running batch decode one token each
(prefills and decodes are not mixed unless ``--enable-mixed-chunk``). A prefill batch takes the prompt
being chunked first, then admits waiting requests FCFS while the token budget (``--chunked-prefill-size``:
``chunk_size`` here) and the KV cache allow; a prompt longer than the budget's rest is chunked and goes on in
the next prefill batch. Unlike vLLM's pre-chunking scheduler (``vllm``) every prompt fits; unlike
``sarathi`` a decode never shares an iteration with a prompt, so a long prompt stalls the decodes for its
chunks (SGLang's TPOT tail), while TTFT sees the whole budget.
"""

from __future__ import annotations

from perfcast.serving.request import Request
from perfcast.serving.schedulers.base import Batch, ReplicaScheduler
from perfcast.serving.schedulers.registry import SCHEDULERS

__all__ = ["SGLangScheduler"]


@SCHEDULERS.register("sglang")
class SGLangScheduler(ReplicaScheduler):
    """Prefill-first continuous batching with chunked, unmixed prefill batches."""

    name = "sglang"

    def _prefill_fits_budget(self, req: Request) -> bool:
        return True  # prompts are chunked to the budget

    def schedule(self) -> Batch | None:
        batch = Batch()
        if self.swapped:
            self._swap_in(batch)
        if not self.swapped:  # a prefill batch of its own: KV arriving from a prefill pool waits for the decodes
            self._fill_chunks(batch, self.limits.chunk_size, decode_arrivals=False)
            if batch.prefill:
                return batch
        self._reserve_decode_step(batch)
        return self._close(batch)
