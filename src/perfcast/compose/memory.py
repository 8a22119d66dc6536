"""Memory one GPU holds at the peak of a predicted step: what ``predict``'s out-of-memory verdict checks.

Everything is read from the step's ops (after sharding), so a quantized or sharded weight counts at the
size it is stored at. Parts (bytes per GPU):

- weights: each parameter tensor once (``Op.weight_bytes``; norms by their ``params``). A tied LM head
  adds nothing (its matrix is the embedding table). An MoE layer holds all its experts although a step
  runs only the routed ones: expert weights count once per expert of every MoE layer (the number of
  experts is the width of the layer's router);
- KV cache (prefill and decode): the K/V each layer writes (``kv_cache_write``) for every cached token
  of every sequence, ``batch x context``;
- activations: inference keeps little beyond the op running, so the peak is the largest op's activation
  inputs and outputs (attention in prefill/decode reads K/V from the cache, counted above). Training adds
  what autograd saves for the backward, by the rule training plans use
  (:class:`perfcast.workload.backward.SavedActivations`);
- gradients (training): one per trainable parameter, in the training dtype;
- optimizer states (training): :func:`perfcast.workload.backward.optimizer_state_bytes_per_param`;
- framework overhead: the CUDA context with the cuBLAS/cuDNN workspaces (:data:`CUDA_CONTEXT_BYTES`),
  the caching allocator's fragmentation (:data:`FRAGMENTATION_FRAC` of the tensors) and, on more than
  one GPU, NCCL's buffers (:data:`COMM_BUFFER_BYTES`). These are assumed typical values, not fitted:
  the CUDA context of a PyTorch process takes roughly 0.3-1 GiB depending on the GPU and the CUDA
  version (lazy module loading, CUDA 11.7+, is the low end); PyTorch's CUDA-semantics notes describe
  the caching allocator's reserved-but-unallocated memory; NCCL allocates its channel buffers
  (``NCCL_BUFFSIZE``, 4 MiB per channel and peer by default) at communicator creation. ``train`` uses
  the same three figures (:mod:`perfcast.system.memory`).

With pipeline parallelism the most loaded stage holds ``ceil(layers / pp)`` layers plus every op that
does not repeat (embedding and head: conservative), the K/V of all its micro-batches, and in training
the saved activations of ``min(micro-batches, pp)`` micro-batches (1F1B).
"""

from __future__ import annotations

from collections.abc import Sequence

from perfcast.catalog.hardware import Hardware
from perfcast.compose.types import MemoryBreakdown
from perfcast.digest import content_digest, content_key
from perfcast.workload.backward import SavedActivations, optimizer_state_bytes_per_param
from perfcast.workload.types import Mode, Op, OpKind, Phase, Workload

__all__ = ["COMM_BUFFER_BYTES", "CUDA_CONTEXT_BYTES", "FRAGMENTATION_FRAC", "step_memory"]

CUDA_CONTEXT_BYTES = 0.75 * 2**30  # CUDA context, cuBLAS/cuDNN workspaces (typical, per process)
FRAGMENTATION_FRAC = 0.05  # caching-allocator fragmentation, as a share of the tensors it holds
COMM_BUFFER_BYTES = 0.5 * 2**30  # NCCL channel buffers and DDP gradient buckets (typical)


def _experts_per_scope(ops: Sequence[Op]) -> dict[str, int]:
    """MoE scope (``moe_layers.mlp``) -> experts per layer x MoE layers, from each router's gate GEMM."""
    out: dict[str, int] = {}
    for op in ops:
        if op.kind is OpKind.GEMM and op.name.endswith(".router.gate"):
            out[op.name.removesuffix(".router.gate")] = op.dims[3] * op.count
    return out


def _resident(op: Op, experts: dict[str, int]) -> float:
    """How many copies of this op's weights a GPU stores: ``count``, or every expert of an MoE layer."""
    scope, sep, _ = op.name.partition(".experts.")
    if sep and scope in experts:
        return float(experts[scope])
    return float(op.count)


def _weight_bytes(op: Op) -> float:
    if op.get("tied", False):
        return 0.0  # the embedding table's matrix
    if op.weight_bytes:
        return op.weight_bytes
    return float(op.params * op.dtype.bytes) if op.kind is OpKind.VECTOR else 0.0


def _working_set(op: Op, kv_cache: bool) -> float:
    """Activation bytes one instance reads and writes (its weights and, with a KV cache, its cached K/V aside)."""
    if op.kind is OpKind.ATTENTION and kv_cache:
        return 2.0 * op.bytes_written  # the queries in, the output out; K/V are the cache
    return max(0.0, op.bytes_read - op.weight_bytes) + op.bytes_written


# step_memory per workload content (or the given op list itself) and the step's other inputs: a warm predict of the
# same request (the workload builder returns the same workload) does not walk the ops again
_MEMO: dict[tuple[object, ...], MemoryBreakdown] = {}


def step_memory(w: Workload, hw: Hardware, *, ops: Sequence[Op] | None = None, gpus: int = 1,
                layer_frac: float = 1.0, microbatches: int = 1, in_flight: float = 1.0) -> MemoryBreakdown:
    """One GPU's memory at the peak of a step of ``w`` (see the module docstring).

    ``ops``: the GPU's ops when they differ from ``w.ops`` (tensor-parallel shards). ``gpus``: GPUs of the
    step (NCCL buffers above one). Pipeline stages: ``layer_frac`` of every repeated op (``count > 1``),
    ``microbatches`` whose K/V the stage caches and ``in_flight`` micro-batches whose saved activations it
    holds (training).
    """
    # the workload's key is hashed once per workload object; a sharded op list is keyed by its ops (hashed)
    which: object = content_key(w) if ops is None or ops is w.ops else tuple(ops)
    ops = w.ops if ops is None else ops
    key = (which, w.mode, w.seq_len, w.dtype, content_digest(hw), gpus, layer_frac, microbatches, in_flight)
    hit = _MEMO.get(key)
    if hit is not None:
        return hit
    memory = _step_memory(w, hw, ops, gpus=gpus, layer_frac=layer_frac, microbatches=microbatches,
                          in_flight=in_flight)
    if len(_MEMO) > 1024:
        _MEMO.clear()
    _MEMO[key] = memory
    return memory


def _step_memory(w: Workload, hw: Hardware, ops: Sequence[Op], *, gpus: int, layer_frac: float, microbatches: int,
                 in_flight: float) -> MemoryBreakdown:
    forward = [o for o in ops if o.phase is Phase.FORWARD and o.kind not in (OpKind.COMM, OpKind.HOST)]
    experts = _experts_per_scope(forward)
    kv_mode = w.mode in (Mode.PREFILL, Mode.DECODE)
    training = w.mode is Mode.TRAINING

    def share(op: Op) -> float:
        return layer_frac if op.count > 1 else 1.0

    weights = sum(_weight_bytes(o) * _resident(o, experts) * share(o) for o in forward)
    kv = 0.0
    if kv_mode:
        cached_per_written = w.seq_len if w.mode is Mode.DECODE else 1  # decode writes one token of the context
        kv = sum(o.bytes_written * o.count * share(o) for o in forward if o.name.endswith("kv_cache_write"))
        kv *= cached_per_written * microbatches
    peak = max((_working_set(o, kv_mode) for o in forward), default=0.0)
    activations = peak
    grads = optimizer = 0.0
    if training:
        kept = SavedActivations()
        saved = sum(kept.add(o) * o.count * share(o) for o in forward)
        activations += saved * in_flight
        trainable = sum(o.params * _resident(o, experts) * share(o) for o in forward)
        grads = trainable * w.dtype.bytes
        opt = next((o.op for o in ops if o.phase is Phase.OPTIMIZER), "none")
        optimizer = trainable * optimizer_state_bytes_per_param(opt, w.dtype)
    comm = COMM_BUFFER_BYTES if gpus > 1 else 0.0
    return MemoryBreakdown.build(weights=weights, kv_cache=kv, gradients=grads, optimizer=optimizer,
                                 activations=activations, comm_buffers=comm, context=CUDA_CONTEXT_BYTES,
                                 fragmentation_frac=FRAGMENTATION_FRAC, capacity=hw.memory_bytes)
