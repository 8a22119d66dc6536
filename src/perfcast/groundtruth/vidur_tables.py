"""VIDUR's per-operator tables (``vidur/compute/<gpu>/<model>/mlp.csv``): read and predict.

Each row is one transformer block of a model, sharded for tensor parallelism
``num_tensor_parallel_workers``, run over ``num_tokens`` tokens in FP16 with
Sarathi-Serve's fused kernels; each ``time_stats.<op>.median`` is that
operator's GPU kernel time in ms (CUPTI, no host time). perfcast builds the same
operators in engine style and prices them with the kernel layer.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from perfcast.catalog.hardware import load_hardware
from perfcast.catalog.models import ModelConfig, load_model
from perfcast.coefficients.kernel import Coefficients
from perfcast.dtypes import DType
from perfcast.groundtruth.files import read_rows
from perfcast.kernel.predict import price_ops
from perfcast.workload.graph import Graph
from perfcast.workload.types import Op

__all__ = ["VIDUR_OPS", "VidurRows", "block_ops", "load_vidur_rows", "predict_vidur_rows", "rows_ops"]

VIDUR_OPS = ("emb", "input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj",
             "post_attention_layernorm", "mlp_up_proj", "mlp_act", "mlp_down_proj", "add")


@dataclass
class VidurRows:
    """Key columns and measured per-op medians (seconds; NaN where absent) of VIDUR compute rows."""

    gpu: np.ndarray
    model: np.ndarray
    tokens: np.ndarray
    tp: np.ndarray
    shape: np.ndarray  # n_head, n_kv_head, n_embd, n_expanded_embd, vocab_size, use_gated_mlp
    measured_s: np.ndarray  # (rows, len(VIDUR_OPS))

    def subset(self, mask: np.ndarray) -> VidurRows:
        """Rows where ``mask`` is true."""
        return VidurRows(self.gpu[mask], self.model[mask], self.tokens[mask], self.tp[mask], self.shape[mask],
                         self.measured_s[mask])

    def __len__(self) -> int:
        return int(self.tokens.size)


def load_vidur_rows(paths: list[Path]) -> VidurRows:
    """Read one or more VIDUR ``mlp.csv[.gz]`` tables."""
    gpu, model, tokens, tp, shape, meas = [], [], [], [], [], []
    for path in paths:
        for row in read_rows(path):
            gpu.append(row["gpu_id"])
            model.append(row["model_id"])
            tokens.append(int(float(row["num_tokens"])))
            tp.append(int(float(row["num_tensor_parallel_workers"])))
            shape.append([float(row["n_head"]), float(row["n_kv_head"]), float(row["n_embd"]),
                          float(row["n_expanded_embd"]), float(row["vocab_size"]),
                          1.0 if str(row["use_gated_mlp"]).lower() == "true" else 0.0])
            vals = []
            for op in VIDUR_OPS:
                v = row.get(f"time_stats.{op}.median", "")
                vals.append(float(v) * 1e-3 if v not in ("", None) else np.nan)
            meas.append(vals)
    return VidurRows(np.array(gpu), np.array(model), np.array(tokens), np.array(tp),
                     np.array(shape, dtype=float), np.array(meas, dtype=float))


@lru_cache(maxsize=64)
def _model(model_id: str) -> ModelConfig:
    return load_model(model_id)


def block_ops(model_id: str, tokens: int, tp: int, shape: np.ndarray) -> list[Op]:
    """The ten operators of one sharded block, in VIDUR's order, as IR ops (FP16, engine style)."""
    cfg = _model(model_id)
    n_head, n_kv, n_embd, n_ff, vocab, gated = (int(x) for x in shape)
    hd = n_embd // n_head
    q = n_head // tp
    kv = max(1, n_kv // tp)
    ff = n_ff // tp
    norm = "rmsnorm" if cfg.norm == "rmsnorm" else "layernorm"
    g = Graph(DType.FP16)
    g.embedding("emb", tokens, n_embd, vocab // tp)
    g.norm("input_layernorm", norm, tokens, n_embd)
    g.linear("attn_pre_proj", tokens, n_embd, (q + 2 * kv) * hd, bias=cfg.qkv_bias)
    rotary = getattr(cfg, "rotary_frac", 1.0) or 1.0
    g.pointwise("attn_rope", "rope", int(tokens * (q + kv) * hd * rotary))
    g.linear("attn_post_proj", tokens, q * hd, n_embd, bias=cfg.out_bias)
    g.norm("post_attention_layernorm", norm, tokens, n_embd)
    g.linear("mlp_up_proj", tokens, n_embd, (2 if gated else 1) * ff, bias=cfg.mlp_bias)
    if gated:
        g.pointwise("mlp_act", "silu_mul", tokens * ff, inputs=2)
    else:
        g.pointwise("mlp_act", "gelu", tokens * ff)
    g.linear("mlp_down_proj", tokens, ff, n_embd, bias=cfg.mlp_bias)
    g.pointwise("add", "add", tokens * n_embd, inputs=2)
    return g.ops


def rows_ops(rows: VidurRows) -> dict[str, tuple[np.ndarray, list[Op]]]:
    """Per GPU: the row indices and their operators (built once; they do not depend on coefficients)."""
    out: dict[str, tuple[np.ndarray, list[Op]]] = {}
    for gpu in np.unique(rows.gpu):
        sel = np.flatnonzero(rows.gpu == gpu)
        ops: list[Op] = []
        for i in sel:
            ops.extend(block_ops(str(rows.model[i]), int(rows.tokens[i]), int(rows.tp[i]), rows.shape[i]))
        out[str(gpu)] = (sel, ops)
    return out


def predict_vidur_rows(rows: VidurRows, coeffs: Coefficients,
                       prepared: dict[str, tuple[np.ndarray, list[Op]]] | None = None) -> np.ndarray:
    """Predicted per-op kernel times (seconds), shape (rows, len(VIDUR_OPS))."""
    out = np.full((len(rows), len(VIDUR_OPS)), np.nan)
    for gpu, (sel, ops) in (prepared or rows_ops(rows)).items():
        times = np.array([k.time_s for k in price_ops(ops, load_hardware(gpu), coeffs)])
        out[sel] = times.reshape(len(sel), len(VIDUR_OPS))
    return out
