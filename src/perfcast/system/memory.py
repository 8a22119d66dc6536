"""Memory per GPU of a training step, and the out-of-memory verdict.

Parts (bytes, on the most loaded GPU — the first pipeline stage, which holds
the most micro-batches in flight, or the last when the LM head dominates):

- weights: the stage's parameters after tensor/expert sharding (and ZeRO-3 /
  FSDP sharding over data-parallel ranks, plus the gathered layers in flight);
- gradients: one per trainable parameter (sharded from ZeRO-2 on);
- optimizer states: Adam keeps an FP32 master copy and two FP32 moments
  (12 bytes per trainable parameter; sharded from ZeRO-1 on), SGD only the master;
- activations: what autograd saves per layer per micro-batch (from the
  workload's ops; full recompute keeps only each layer's input) times the
  layers on the stage times the micro-batches in flight (1F1B: up to ``pp``;
  GPipe: all);
- communication buffers (DDP buckets, NCCL channels), the CUDA context, and a
  fragmentation allowance of the caching allocator.
"""

from __future__ import annotations

from dataclasses import dataclass

# one set of framework-overhead figures for predict and train (their assumptions: perfcast.compose.memory)
from perfcast.compose.memory import COMM_BUFFER_BYTES, CUDA_CONTEXT_BYTES, FRAGMENTATION_FRAC

__all__ = ["COMM_BUFFER_BYTES", "CUDA_CONTEXT_BYTES", "FRAGMENTATION_FRAC", "MemoryBreakdown"]


@dataclass(frozen=True, slots=True)
class MemoryBreakdown:
    """Bytes per GPU by part; ``capacity_bytes`` is the device memory."""

    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    comm_buffers_bytes: float
    context_bytes: float
    fragmentation_bytes: float
    capacity_bytes: float

    @property
    def total_bytes(self) -> float:
        """Everything a GPU must hold at the peak of the step."""
        return (self.weights_bytes + self.gradients_bytes + self.optimizer_bytes + self.activations_bytes
                + self.comm_buffers_bytes + self.context_bytes + self.fragmentation_bytes)

    @property
    def fits(self) -> bool:
        """Whether the step fits in the device memory."""
        return self.total_bytes <= self.capacity_bytes

    def as_dict(self) -> dict[str, float]:
        """JSON-ready parts with unit-bearing keys."""
        return {
            "weights_bytes": self.weights_bytes, "gradients_bytes": self.gradients_bytes,
            "optimizer_bytes": self.optimizer_bytes, "activations_bytes": self.activations_bytes,
            "comm_buffers_bytes": self.comm_buffers_bytes, "context_bytes": self.context_bytes,
            "fragmentation_bytes": self.fragmentation_bytes, "total_bytes": self.total_bytes,
            "capacity_bytes": self.capacity_bytes,
        }

    @classmethod
    def build(cls, *, weights: float, gradients: float, optimizer: float, activations: float,
              capacity: float, comm_buffers: float = COMM_BUFFER_BYTES) -> MemoryBreakdown:
        """Add the context and the fragmentation allowance to the tensors' bytes."""
        tensors = weights + gradients + optimizer + activations + comm_buffers
        return cls(weights, gradients, optimizer, activations, comm_buffers, CUDA_CONTEXT_BYTES,
                   FRAGMENTATION_FRAC * tensors, capacity)
