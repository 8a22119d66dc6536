"""Workload IR: typed operators with shapes, FLOPs and bytes moved.

A workload is a flat tuple of :class:`Op` values in execution order. Each op
carries a ``count`` (how many times it runs per step, e.g. once per layer), so
the IR of an 80-layer model is as long as that of a 1-layer one and the cost of
predicting it does not grow with depth.

Shapes follow one convention per kind (``dims``):

- ``gemm``: ``(batch, m, k, n)``: ``batch`` independent ``(m x k) @ (k x n)``
  products; ``k`` is the reduction. Linear layers have batch 1, ``m`` = tokens.
- ``vector``: ``(rows, cols)``: an elementwise op over ``rows*cols`` elements, or
  a row-wise reduction (softmax, norms) of ``rows`` rows of ``cols``.
- ``attention``: ``(batch, heads, kv_heads, q_len, kv_len, head_dim, causal)``:
  a fused attention kernel (FlashAttention / SDPA).
- ``conv``: ``(batch, in_ch, out_ch, kernel, in_hw, stride, padding, groups)``.
- ``pool``: ``(batch, channels, in_hw, kernel, stride)``.
- ``embedding``: ``(tokens, dim, vocab)``.
- ``ssm_scan``: ``(batch, q_len, heads, head_dim, state, groups, chunk)``: a Mamba selective scan (Mamba-1:
  d_inner heads of width 1, one group, chunk 0 = sequential) or Mamba-2 SSD (chunked), or a Gated DeltaNet's
  delta rule (``version`` meta ``gated_delta``: heads = value heads, head_dim = value head width, state = key
  head width, groups = key heads); ``meta`` carries ``state_bytes`` (the recurrent state of one sequence) and
  ``matmul_flops`` (the part that runs as matrix products, SSD's and the delta rule's chunked contractions).
- ``comm``: ``(bytes, group_size)``.

FLOPs count one multiply-add as 2 FLOPs. Bytes are DRAM traffic assuming each
operand is read once and each result written once (caches are the kernel
layer's business).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum

from perfcast.dtypes import DType

__all__ = ["Mode", "Op", "OpKind", "Phase", "Workload"]


class OpKind(StrEnum):
    """Cost class of an op: which kernel model prices it."""

    GEMM = "gemm"
    VECTOR = "vector"
    ATTENTION = "attention"
    CONV = "conv"
    POOL = "pool"
    EMBEDDING = "embedding"
    COMM = "comm"
    HOST = "host"
    SSM_SCAN = "ssm_scan"


class Phase(StrEnum):
    """Which part of a step an op belongs to."""

    FORWARD = "fwd"
    BACKWARD = "bwd"
    OPTIMIZER = "opt"


class Mode(StrEnum):
    """What a workload computes."""

    INFERENCE = "inference"
    TRAINING = "training"
    PREFILL = "prefill"
    DECODE = "decode"


@dataclass(frozen=True, slots=True)
class Op:
    """One operator instance (repeated ``count`` times per step).

    ``op`` names the operator (``linear``, ``bmm``, ``add``, ``gelu``, ``softmax``,
    ``layernorm``, ``copy``, ``dropout``...). ``chain`` groups consecutive
    pointwise ops that a compiler would fuse into one kernel; ``fused_bytes`` is
    what this op still moves inside such a fused kernel (its reads of tensors
    produced outside the chain and its writes of tensors consumed outside it).
    ``weight_bytes`` is the part of ``bytes_read`` that is parameters (for
    sharding and memory). ``tp_split`` says how tensor parallelism shards the op:
    ``column`` (output features), ``row`` (reduction), ``heads`` (per head),
    ``none`` (replicated) or ``vocab``.
    """

    name: str
    op: str
    kind: OpKind
    dims: tuple[int, ...]
    dtype: DType
    flops: float
    bytes_read: float
    bytes_written: float
    count: int = 1
    phase: Phase = Phase.FORWARD
    group: str = ""
    chain: str | None = None
    fused_bytes: float | None = None
    weight_bytes: float = 0.0
    tp_split: str = "none"
    params: int = 0
    meta: tuple[tuple[str, object], ...] = field(default=())

    @property
    def bytes(self) -> float:
        """Bytes moved by one instance (read + written)."""
        return self.bytes_read + self.bytes_written

    @property
    def total_flops(self) -> float:
        """FLOPs of all ``count`` instances."""
        return self.flops * self.count

    def with_(self, **changes: object) -> Op:
        """A copy with some fields changed."""
        return replace(self, **changes)  # type: ignore[arg-type]

    def get(self, key: str, default: object = None) -> object:
        """A value from ``meta``."""
        for k, v in self.meta:
            if k == key:
                return v
        return default


@dataclass(frozen=True, slots=True)
class Workload:
    """The ops of one step of one model, with what produced them."""

    model_id: str
    mode: Mode
    batch_size: int
    seq_len: int
    dtype: DType
    ops: tuple[Op, ...]
    kv_len: int = 0
    tp: int = 1
    quantization: str = "none"  # the weight quantization the ops carry, in words (workload.quantization)

    @property
    def flops(self) -> float:
        """Total FLOPs of the step."""
        return sum(o.flops * o.count for o in self.ops)

    @property
    def bytes(self) -> float:
        """Total bytes moved by the step (unfused)."""
        return sum(o.bytes * o.count for o in self.ops)

    def phase(self, phase: Phase) -> tuple[Op, ...]:
        """The ops of one phase."""
        return tuple(o for o in self.ops if o.phase is phase)

    @property
    def num_kernels(self) -> int:
        """Kernel launches of the step (unfused), counting repeats."""
        return sum(o.count for o in self.ops if o.kind is not OpKind.HOST)
