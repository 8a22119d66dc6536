"""A small builder that turns model code into IR ops.

Model builders call ``g.linear(...)``, ``g.pointwise(...)`` and friends in the
order the framework launches kernels; the builder fills in FLOPs and bytes from
the shapes, and applies the current scope's repeat count (layers) and group.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager

from perfcast.dtypes import DType
from perfcast.workload.types import Op, OpKind, Phase

__all__ = ["POINTWISE_FLOPS", "Graph", "attention_cost", "causal_pairs", "reachable_keys"]

# FLOPs per output element of common pointwise ops (multiply-add = 2); used for
# reporting only: these kernels are priced by the bytes they move.
POINTWISE_FLOPS: dict[str, float] = {
    "add": 1, "sub": 1, "mul": 1, "div": 1, "addu": 1, "mulu": 1, "divu": 1, "subu": 1,
    "pow": 2, "powu": 2, "rsqrt": 2, "sqrt": 2, "exp": 4, "tanh": 6, "relu": 1, "gelu": 12,
    "silu": 5, "sigmoid": 4, "where": 1, "max": 1, "masked_fill": 1, "copy": 0, "cast": 0,
    "dropout": 2, "mean": 1, "sum": 1, "fill": 0, "silu_mul": 6, "gelu_mul": 13, "rope": 6,
    "relu2": 2, "cat": 0, "scale": 1, "adam": 12, "sgd": 2, "cross_entropy": 6,
}


def causal_pairs(q_len: int, kv_len: int, window: int | None = None, chunk: int | None = None) -> float:
    """(query, key) pairs of causal attention: the last ``q_len`` of ``kv_len`` positions, each seeing
    the keys up to itself (at most ``window`` of them; with ``chunk``, Llama-4's chunked attention, only the keys
    of its own ``chunk``-token block)."""

    def upto(n: int) -> float:  # sum over positions 1..n of the keys each one sees
        if chunk:
            full, rest = divmod(n, chunk)
            return full * chunk * (chunk + 1) / 2.0 + rest * (rest + 1) / 2.0
        if window is None or n <= window:
            return n * (n + 1) / 2.0
        return window * (window + 1) / 2.0 + (n - window) * float(window)

    return upto(kv_len) - upto(kv_len - q_len)


def reachable_keys(q_len: int, kv_len: int, window: int | None = None, chunk: int | None = None) -> tuple[int, int]:
    """Keys one query can reach at most, and the keys the last ``q_len`` queries of a ``kv_len`` context touch
    together (what a fused kernel reads): all of them, the last ``window`` + ``q_len`` - 1, or (``chunk``) those
    from the start of the first query's chunk."""
    if chunk:
        start = ((kv_len - q_len) // chunk) * chunk
        return min(kv_len, chunk), kv_len - start
    if window:
        return min(kv_len, window), min(kv_len, window + q_len - 1)
    return kv_len, kv_len


def attention_cost(batch: int, heads: int, kv_heads: int, q_len: int, kv_len: int, head_dim: int, v_head_dim: int,
                   *, causal: bool = True, window: int | None = None, esize: float = 2.0,
                   kv_esize: float | None = None, chunk: int | None = None) -> tuple[float, float, float]:
    """FLOPs, DRAM bytes read and bytes written of a fused attention kernel (scores stay on chip).

    ``q_len`` new queries are the last positions of a ``kv_len``-token context; K and V are read
    once per sequence (``kv_esize`` bytes per element, default ``esize``), Q read and O written once.
    ``window`` / ``chunk``: sliding-window or chunked attention (:func:`causal_pairs`).
    """
    keys, touched = reachable_keys(q_len, kv_len, window, chunk)
    if causal and (q_len > 1 or chunk):
        pairs = causal_pairs(q_len, max(kv_len, q_len), window, chunk)
    else:
        pairs = float(q_len * keys)
    flops = 2.0 * batch * heads * pairs * (head_dim + v_head_dim)
    kve = esize if kv_esize is None else kv_esize
    read = batch * (heads * q_len * head_dim * esize + kv_heads * touched * (head_dim + v_head_dim) * kve)
    written = batch * heads * q_len * v_head_dim * esize
    return flops, read, written


class Graph:
    """Collects ops in launch order.

    ``dtype`` is the activation/weight format; ``training`` switches on ops that
    only run in training (dropout).
    """

    def __init__(self, dtype: DType, *, training: bool = False, phase: Phase = Phase.FORWARD) -> None:
        self.dtype = dtype
        self.training = training
        self.phase = phase
        self.ops: list[Op] = []
        self._count = 1
        self._prefix = ""
        self._group = ""
        self._split = "none"
        self._chains = itertools.count()

    # -- scoping -----------------------------------------------------------------
    @contextmanager
    def scope(self, prefix: str, *, count: int = 1, group: str | None = None) -> Iterator[None]:
        """Ops added inside run ``count`` times more, under ``prefix.`` and ``group``."""
        saved = (self._count, self._prefix, self._group)
        self._count *= count
        self._prefix = f"{self._prefix}{prefix}." if prefix else self._prefix
        if group is not None:
            self._group = group
        try:
            yield
        finally:
            self._count, self._prefix, self._group = saved

    @contextmanager
    def split(self, tp_split: str) -> Iterator[None]:
        """Vector ops added inside shard with tensor parallelism as ``tp_split`` (``heads``/``column``)."""
        saved = self._split
        self._split = tp_split
        try:
            yield
        finally:
            self._split = saved

    def new_chain(self, label: str) -> str:
        """A fresh chain id for a run of pointwise ops a compiler would fuse."""
        return f"{self._prefix}{label}#{next(self._chains)}"

    @property
    def esize(self) -> float:
        """Bytes per element of the graph's dtype."""
        return self.dtype.bytes

    def _add(self, op: Op) -> Op:
        self.ops.append(op)
        return op

    def add_op(self, name: str, op: str, kind: OpKind, dims: tuple[int, ...], *, flops: float, read: float,
               written: float, **kw: object) -> Op:
        """An op whose FLOPs and bytes the caller computed (a kind with no helper here, e.g. ``ssm_scan``)."""
        return self._op(name, op, kind, dims, flops, read, written, **kw)

    def _op(self, name: str, op: str, kind: OpKind, dims: tuple[int, ...], flops: float, read: float,
            written: float, **kw: object) -> Op:
        return self._add(
            Op(
                name=f"{self._prefix}{name}",
                op=op,
                kind=kind,
                dims=tuple(int(d) for d in dims),
                dtype=kw.pop("dtype", self.dtype),  # type: ignore[arg-type]
                flops=float(flops),
                bytes_read=float(read),
                bytes_written=float(written),
                count=self._count,
                phase=self.phase,
                group=str(kw.pop("group", self._group)),
                **kw,  # type: ignore[arg-type]
            )
        )

    # -- matrix ops --------------------------------------------------------------
    def linear(self, name: str, tokens: int, in_features: int, out_features: int, *, bias: bool = True,
               tp_split: str = "column", frozen: bool = False, weight_dtype: DType | None = None,
               tied: bool = False, weight_layout: str = "out_in") -> Op:
        """``y = x @ W^T (+ b)`` for ``tokens`` rows: a GEMM ``(1, tokens, in, out)``.

        ``tied``: ``W`` is another op's parameter (an LM head tied to the token embedding); its
        gradient is still computed, but only the bias counts as this op's parameters.
        ``weight_layout``: ``out_in`` (``nn.Linear``) or ``in_out`` (GPT-2's ``Conv1D``, ``addmm(x, W)``), which
        a CPU BLAS runs at a different speed.
        """
        if weight_layout not in ("out_in", "in_out"):
            raise ValueError(f"weight_layout must be out_in or in_out, not {weight_layout!r}")
        e = self.esize
        we = (weight_dtype or self.dtype).bytes
        weight = in_features * out_features * we + (out_features * e if bias else 0)
        params = (0 if tied else in_features * out_features) + (out_features if bias else 0)
        return self._op(
            name, "linear", OpKind.GEMM, (1, tokens, in_features, out_features),
            flops=2.0 * tokens * in_features * out_features + (tokens * out_features if bias else 0),
            read=tokens * in_features * e + weight,
            written=tokens * out_features * e,
            weight_bytes=weight, tp_split=tp_split, params=0 if frozen else params,
            meta=(("bias", bias), ("frozen", frozen), ("weight_dtype", (weight_dtype or self.dtype).value),
                  ("tied", tied), ("weight_layout", weight_layout)),
        )

    def bmm(self, name: str, batch: int, m: int, k: int, n: int, *, tp_split: str = "heads") -> Op:
        """A batched product of two activations ``(batch, m, k) @ (batch, k, n)``."""
        e = self.esize
        return self._op(
            name, "bmm", OpKind.GEMM, (batch, m, k, n),
            flops=2.0 * batch * m * k * n,
            read=batch * (m * k + k * n) * e,
            written=batch * m * n * e,
            tp_split=tp_split,
        )

    def attention(self, name: str, batch: int, heads: int, kv_heads: int, q_len: int, kv_len: int,
                  head_dim: int, *, causal: bool = True, v_head_dim: int | None = None,
                  window: int | None = None, chunk: int | None = None) -> Op:
        """A fused attention kernel (FlashAttention-style): scores never reach DRAM.

        ``q_len`` new queries are the last positions of a ``kv_len``-token context; with a
        sliding ``window`` each query sees at most ``window`` keys, with ``chunk`` (chunked attention)
        the keys of its own chunk (the op's ``kv_len`` dim is then the keys one query can reach).
        """
        vd = v_head_dim or head_dim
        keys, _ = reachable_keys(q_len, kv_len, window, chunk)
        flops, read, written = attention_cost(batch, heads, kv_heads, q_len, kv_len, head_dim, vd,
                                              causal=causal, window=window, esize=self.esize, chunk=chunk)
        meta: tuple[tuple[str, object], ...] = (("v_head_dim", vd), ("training", self.training))
        if window:
            meta += (("window", int(window)),)
        if chunk:
            meta += (("chunk", int(chunk)),)
        return self._op(
            name, "attention", OpKind.ATTENTION, (batch, heads, kv_heads, q_len, keys, head_dim, int(causal)),
            flops=flops, read=read, written=written, tp_split="heads", meta=meta,
        )

    # -- vector ops ----------------------------------------------------------------
    def pointwise(self, name: str, op: str, numel: int, *, inputs: int = 1, outputs: int = 1,
                  extra_read_bytes: float = 0.0, chain: str | None = None, fused_bytes: float | None = None,
                  rows: int | None = None, dtype: DType | None = None, tp_split: str | None = None,
                  out_dtype: DType | None = None, params: int = 0) -> Op:
        """An elementwise op over ``numel`` elements with ``inputs`` full-size inputs.

        ``extra_read_bytes`` covers small broadcast operands (a mask row, a bias); ``params`` counts
        a broadcast operand that is a trainable parameter (a norm weight written in Python).
        """
        e = (dtype or self.dtype).bytes
        oe = (out_dtype or dtype or self.dtype).bytes
        read = numel * inputs * e + extra_read_bytes
        written = numel * outputs * oe
        cols = numel // rows if rows else numel
        return self._op(
            name, op, OpKind.VECTOR, (rows or 1, cols),
            flops=POINTWISE_FLOPS.get(op, 1) * numel,
            read=read, written=written, chain=chain,
            fused_bytes=fused_bytes, dtype=dtype or self.dtype, tp_split=tp_split or self._split, params=params,
            meta=(("inputs", inputs), ("outputs", outputs)),
        )

    def reduction(self, name: str, op: str, rows: int, cols: int, *, inputs: int = 1, out_cols: int | None = None,
                  chain: str | None = None, fused_bytes: float | None = None, dtype: DType | None = None,
                  params: int = 0, tp_split: str | None = None) -> Op:
        """A row-wise op over ``rows`` rows of ``cols`` (softmax, layernorm, rmsnorm, sum).

        Output is ``rows x out_cols`` (default ``cols``, i.e. same shape as the input).
        """
        e = (dtype or self.dtype).bytes
        oc = cols if out_cols is None else out_cols
        flops_per = POINTWISE_FLOPS.get(op, 5)
        return self._op(
            name, op, OpKind.VECTOR, (rows, cols),
            flops=flops_per * rows * cols,
            read=rows * cols * inputs * e + params * e, written=rows * oc * e,
            chain=chain, fused_bytes=fused_bytes, dtype=dtype or self.dtype, params=params,
            tp_split=tp_split or self._split, meta=(("inputs", inputs), ("outputs", 1), ("reduce", True)),
        )

    def norm(self, name: str, kind: str, rows: int, cols: int, *, affine: bool = True, bias: bool = True) -> Op:
        """A fused normalization kernel (``layernorm`` or ``rmsnorm``) over the last dim."""
        params = (cols * (2 if bias and kind == "layernorm" else 1)) if affine else 0
        return self.reduction(name, kind, rows, cols, params=params)

    def copy(self, name: str, numel: int, *, chain: str | None = None, fused_bytes: float | None = None,
             dtype: DType | None = None, out_dtype: DType | None = None) -> Op:
        """A layout copy (``contiguous``, reshape of a strided view, dtype cast)."""
        return self.pointwise(name, "copy", numel, chain=chain, fused_bytes=fused_bytes, dtype=dtype,
                              out_dtype=out_dtype)

    def dropout(self, name: str, numel: int, *, chain: str | None = None, first_in_chain: bool = False) -> Op | None:
        """Dropout: a kernel in training (writes the output and a 1-byte mask), nothing in eval.

        Inside a fused chain it still writes its mask; it reads its input only
        when it starts the chain, and its output is consumed inside the chain.
        """
        if not self.training:
            return None
        e = self.esize
        fused = numel * 1.0 + (numel * e if first_in_chain else 0.0)
        return self._op(
            name, "dropout", OpKind.VECTOR, (1, numel),
            flops=2.0 * numel, read=numel * e, written=numel * (e + 1),
            chain=chain, fused_bytes=fused if chain else None, tp_split=self._split,
            meta=(("inputs", 1), ("outputs", 2)),
        )

    def embedding(self, name: str, tokens: int, dim: int, vocab: int, *, tp_split: str = "vocab") -> Op:
        """A row gather from a ``vocab x dim`` table for ``tokens`` ids."""
        e = self.esize
        return self._op(
            name, "embedding", OpKind.EMBEDDING, (tokens, dim, vocab),
            flops=0.0, read=tokens * dim * e + tokens * 8, written=tokens * dim * e,
            weight_bytes=vocab * dim * e, params=vocab * dim, tp_split=tp_split,
        )

    def conv2d(self, name: str, batch: int, in_ch: int, out_ch: int, kernel: int, in_hw: int, *,
               stride: int = 1, padding: int = 0, groups: int = 1, bias: bool = False) -> Op:
        """A 2-D convolution on square NCHW inputs."""
        e = self.esize
        out_hw = (in_hw + 2 * padding - kernel) // stride + 1
        macs = batch * out_ch * out_hw * out_hw * (in_ch // groups) * kernel * kernel
        weight = out_ch * (in_ch // groups) * kernel * kernel
        return self._op(
            name, "conv2d", OpKind.CONV, (batch, in_ch, out_ch, kernel, in_hw, stride, padding, groups),
            flops=2.0 * macs,
            read=(batch * in_ch * in_hw * in_hw + weight) * e,
            written=batch * out_ch * out_hw * out_hw * e,
            weight_bytes=weight * e, params=weight + (out_ch if bias else 0),
        )

    def pool(self, name: str, op: str, batch: int, channels: int, in_hw: int, kernel: int, stride: int,
             padding: int = 0) -> Op:
        """Max or average pooling (``op`` = ``maxpool`` / ``avgpool``) on square inputs."""
        e = self.esize
        out_hw = (in_hw + 2 * padding - kernel) // stride + 1
        return self._op(
            name, op, OpKind.POOL, (batch, channels, in_hw, kernel, stride),
            flops=float(batch * channels * out_hw * out_hw * kernel * kernel),
            read=batch * channels * in_hw * in_hw * e,
            written=batch * channels * out_hw * out_hw * e,
        )

    def host(self, name: str, op: str, *, syncs: int = 1) -> Op:
        """A host-side step that stalls the GPU queue (``nonzero``, ``.item()``)."""
        return self._op(name, op, OpKind.HOST, (syncs,), flops=0.0, read=0.0, written=0.0)
