"""Tensor parallelism (Megatron column/row split) as a transformation of an op list.

Each op says how it shards (``tp_split``): ``column`` splits output features
(QKV, MLP up), ``row`` splits the reduction (attention out, MLP down) and
leaves a partial sum that an all-reduce completes, ``heads`` splits per
attention head, ``vocab`` splits the vocabulary (embedding, LM head), ``none``
is replicated. Elementwise ops between a column and a row GEMM inherit the
split of the tensor they touch (``column``/``heads``) and shrink with it.
The transform returns the per-GPU ops plus the all-reduce ``comm`` ops.
"""

from __future__ import annotations

from perfcast.catalog.models import ModelConfig
from perfcast.errors import ConfigError
from perfcast.workload.types import Op, OpKind, Phase

__all__ = ["check_tp", "shard_tp"]


def check_tp(cfg: ModelConfig, tp: int) -> None:
    """Raise ConfigError unless ``tp`` divides the model's attention heads (and KV heads or is a multiple)."""
    if tp < 1:
        raise ConfigError(f"tensor-parallel degree must be >= 1 (got {tp})")
    heads = cfg.num_heads
    # degrees to suggest (computed up to 4096 GPUs only: a malformed config may have 10**12 heads)
    valid = [d for d in range(1, min(heads, 4096) + 1) if heads % d == 0]
    if heads % tp:
        raise ConfigError(
            f"tp={tp} must divide num_attention_heads={heads} ({cfg.id}); use tp in {{{', '.join(map(str, valid))}}}"
        )
    kv = cfg.num_kv_heads
    if kv % tp and tp % kv:
        raise ConfigError(
            f"tp={tp} must divide num_key_value_heads={kv} or be a multiple of it ({cfg.id}); "
            f"use tp in {{{', '.join(str(d) for d in valid if kv % d == 0 or d % kv == 0)}}}"
        )


def _div(x: int, tp: int) -> int:
    return max(1, -(-x // tp))


def shard_tp(ops: tuple[Op, ...] | list[Op], tp: int) -> list[Op]:
    """Per-GPU ops of a ``tp``-way tensor-parallel run, with all-reduces after row-split GEMMs."""
    if tp == 1:
        return list(ops)
    out: list[Op] = []
    for op in ops:
        new = _shard(op, tp)
        out.append(new)
        if op.kind is OpKind.GEMM and op.tp_split == "row" and op.op != "bmm":
            b, m, _, n = op.dims
            size = b * m * n * op.dtype.bytes
            out.append(_comm(op, "all_reduce", size, tp))
        elif op.kind is OpKind.EMBEDDING and op.tp_split == "vocab" and op.phase is Phase.FORWARD:
            tokens, dim, _ = op.dims
            out.append(_comm(op, "all_reduce", tokens * dim * op.dtype.bytes, tp))
    return out


def _comm(op: Op, kind: str, size: float, tp: int) -> Op:
    return Op(name=f"{op.name}.{kind}", op=kind, kind=OpKind.COMM, dims=(int(size), tp), dtype=op.dtype,
              flops=0.0, bytes_read=float(size), bytes_written=0.0, count=op.count, phase=op.phase, group=op.group)


def _shard(op: Op, tp: int) -> Op:
    split = op.tp_split
    if split == "none" or op.kind in (OpKind.COMM, OpKind.HOST):
        return op
    f = 1.0 / tp
    if op.kind is OpKind.GEMM:
        b, m, k, n = op.dims
        if op.op == "bmm":  # attention products shard by head (the batch dim)
            dims = (_div(b, tp), m, k, n)
        elif split == "row":
            dims = (b, m, _div(k, tp), n)
        elif split == "out_rows":
            dims = (b, _div(m, tp), k, n)
        else:  # column, vocab
            dims = (b, m, k, _div(n, tp))
        scale = (dims[0] * dims[1] * dims[2] * dims[3]) / max(1, b * m * k * n)
        return op.with_(dims=dims, flops=op.flops * scale, bytes_read=op.bytes_read * scale,
                        bytes_written=op.bytes_written * (dims[0] * dims[1] * dims[3]) / max(1, b * m * n),
                        weight_bytes=op.weight_bytes * f, params=int(op.params * f))
    if op.kind is OpKind.ATTENTION:
        b, h, kvh, q, kv, d, causal = op.dims
        return op.with_(dims=(b, _div(h, tp), _div(kvh, tp), q, kv, d, causal), flops=op.flops * f,
                        bytes_read=op.bytes_read * f, bytes_written=op.bytes_written * f)
    if op.kind is OpKind.EMBEDDING:
        tokens, dim, vocab = op.dims
        return op.with_(dims=(tokens, dim, _div(vocab, tp)), weight_bytes=op.weight_bytes * f,
                        params=int(op.params * f))
    if op.kind is OpKind.SSM_SCAN:
        return _shard_scan(op, tp)
    rows, cols = op.dims
    vdims = (_div(rows, tp), cols) if rows > 1 else (rows, _div(cols, tp))
    return op.with_(dims=vdims, flops=op.flops * f, bytes_read=op.bytes_read * f, bytes_written=op.bytes_written * f,
                    fused_bytes=None if op.fused_bytes is None else op.fused_bytes * f, params=int(op.params * f))


_SCAN_PER_HEAD_META = ("matmul_flops", "output_flops", "state_bytes")  # scan meta that splits with the heads


def _shard_scan(op: Op, tp: int) -> Op:
    """A scan split by heads (Megatron's Mamba mixer: each GPU holds d_inner / tp channels and n_groups / tp groups
    of B and C; Mamba-1's one group is replicated), its FLOPs, bytes and per-head meta with them."""
    b, s, heads, head_dim, state, groups, chunk = op.dims
    f = 1.0 / tp
    meta = tuple((k, float(v) * f if k in _SCAN_PER_HEAD_META else v) for k, v in op.meta)  # type: ignore[arg-type]
    return op.with_(dims=(b, s, _div(heads, tp), head_dim, state, _div(groups, tp), chunk), flops=op.flops * f,
                    bytes_read=op.bytes_read * f, bytes_written=op.bytes_written * f, params=int(op.params * f),
                    meta=meta)
