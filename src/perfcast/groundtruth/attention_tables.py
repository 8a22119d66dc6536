"""VIDUR's attention-kernel table (``vidur/legacy/compute/a100/attention_*.csv.gz``): read and predict.

Rows time one FlashAttention call over a paged KV cache (FP16, one GPU's
heads at the row's tensor-parallel degree): prefill rows attend
``prefill_chunk_size`` new tokens of one sequence to ``kv_cache_size`` cached
tokens plus themselves (causal); decode rows attend one new token of each of
``batch_size`` sequences to ``kv_cache_size`` cached tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from perfcast.catalog.hardware import load_hardware
from perfcast.coefficients.kernel import Coefficients
from perfcast.dtypes import DType
from perfcast.groundtruth.files import read_rows
from perfcast.kernel.predict import price_ops
from perfcast.workload.graph import Graph
from perfcast.workload.types import Op

__all__ = ["AttentionRows", "attention_op", "load_attention_rows", "predict_attention_rows"]


@dataclass
class AttentionRows:
    """Prefill/decode flags, shapes and measured kernel medians (seconds)."""

    gpu: np.ndarray
    prefill: np.ndarray
    batch: np.ndarray
    chunk: np.ndarray
    kv: np.ndarray
    heads: np.ndarray  # (q heads, kv heads, head dim) per GPU
    measured_s: np.ndarray

    def __len__(self) -> int:
        return int(self.kv.size)

    def subset(self, mask: np.ndarray) -> AttentionRows:
        """Rows where ``mask`` is true."""
        return AttentionRows(self.gpu[mask], self.prefill[mask], self.batch[mask], self.chunk[mask], self.kv[mask],
                             self.heads[mask], self.measured_s[mask])


def _flag(v: str) -> bool:
    return str(v).strip().lower() in ("true", "1")


def row_geometry(row: dict[str, str]) -> tuple[bool, int, int, int, tuple[int, int, int]]:
    """(prefill, batch, chunk, kv, (q heads, kv heads, head dim)) of one table row."""
    tp = int(float(row["num_tensor_parallel_workers"]))
    q = int(float(row["n_q_head"]))
    kvh = int(float(row["n_kv_head"]))
    hd = int(float(row["n_embd"])) // q
    return (_flag(row["is_prefill"]), int(float(row["batch_size"])), int(float(row["prefill_chunk_size"])),
            int(float(row["kv_cache_size"])), (q // tp, max(1, kvh // tp), hd))


def load_attention_rows(path: Path) -> AttentionRows:
    """Read the table (prefill rows keep attn_prefill, decode rows attn_decode)."""
    cols: dict[str, list] = {k: [] for k in ("gpu", "prefill", "batch", "chunk", "kv", "heads", "meas")}
    gpu = path.parent.name
    for row in read_rows(path):
        pre, b, c, kv, heads = row_geometry(row)
        key = "time_stats.attn_prefill.median" if pre else "time_stats.attn_decode.median"
        v = row.get(key, "")
        cols["gpu"].append(row.get("gpu_id") or gpu)
        cols["prefill"].append(pre)
        cols["batch"].append(b)
        cols["chunk"].append(c)
        cols["kv"].append(kv)
        cols["heads"].append(heads)
        cols["meas"].append(float(v) * 1e-3 if v not in ("", None) else np.nan)
    return AttentionRows(np.array(cols["gpu"]), np.array(cols["prefill"]), np.array(cols["batch"]),
                         np.array(cols["chunk"]), np.array(cols["kv"]), np.array(cols["heads"]),
                         np.array(cols["meas"]))


def attention_op(prefill: bool, batch: int, chunk: int, kv: int, heads: tuple[int, int, int]) -> Op:
    """The fused attention op of one row (FP16)."""
    g = Graph(DType.FP16)
    q, kvh, hd = heads
    if prefill:
        return g.attention("attn_prefill", 1, q, kvh, chunk, kv + chunk, hd, causal=True)
    return g.attention("attn_decode", batch, q, kvh, 1, kv, hd, causal=True)


def predict_attention_rows(rows: AttentionRows, coeffs: Coefficients, gpu: str = "a100-pcie-80gb") -> np.ndarray:
    """Predicted kernel seconds of every row."""
    ops = [attention_op(bool(p), int(b), int(c), int(k), tuple(h))
           for p, b, c, k, h in zip(rows.prefill, rows.batch, rows.chunk, rows.kv, rows.heads, strict=True)]
    return np.array([t.time_s for t in price_ops(ops, load_hardware(gpu), coeffs)])
