"""Memory per GPU of a training step, and the out-of-memory verdict.

Parts (bytes, on the most loaded GPU — the first pipeline stage, which holds
the most micro-batches in flight, or the last when the LM head dominates):

- weights: the stage's parameters after tensor/expert sharding (and ZeRO-3 /
  FSDP sharding over data-parallel ranks, plus the gathered layers in flight);
- gradients: one per trainable parameter, in the dtype gradients are reduced in
  (Megatron's FP32 gradient buffer by default; sharded from ZeRO-2 on);
- optimizer states: Adam keeps an FP32 master copy and two FP32 moments
  (12 bytes per trainable parameter; sharded from ZeRO-1 on), SGD only the master;
- activations: what autograd saves per layer per micro-batch (from the
  workload's ops; full recompute keeps only each layer's input) times the
  layers on the stage times the micro-batches in flight (1F1B: up to ``pp``;
  interleaved 1F1B: Megatron's warm-up depth; GPipe: all). Selective recompute
  (Megatron's core attention) keeps what FlashAttention keeps anyway, so it
  saves no memory here; checked against Megatron-LM's theoretical memory
  formulas (``tests/unit/system/test_megatron_memory.py``);
- communication buffers (DDP buckets, NCCL channels), the CUDA context, and a
  fragmentation allowance of the caching allocator.
"""

from __future__ import annotations

# one set of framework-overhead figures for predict and train (their assumptions: perfcast.compose.memory)
from perfcast.compose.memory import COMM_BUFFER_BYTES, CUDA_CONTEXT_BYTES, FRAGMENTATION_FRAC
from perfcast.compose.types import MemoryBreakdown

__all__ = ["COMM_BUFFER_BYTES", "CUDA_CONTEXT_BYTES", "FRAGMENTATION_FRAC", "MemoryBreakdown", "training_memory"]


def training_memory(*, weights: float, gradients: float, optimizer: float, activations: float, capacity: float,
                    comm_buffers: float = COMM_BUFFER_BYTES) -> MemoryBreakdown:
    """A training step's breakdown (module docstring): the tensors' bytes with the CUDA context and the
    allocator's fragmentation allowance that :mod:`perfcast.compose.memory` states."""
    return MemoryBreakdown.build(weights=weights, gradients=gradients, optimizer=optimizer, activations=activations,
                                 capacity=capacity, comm_buffers=comm_buffers, context=CUDA_CONTEXT_BYTES,
                                 fragmentation_frac=FRAGMENTATION_FRAC)
