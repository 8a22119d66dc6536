"""``perfcast fit``: fit the kernel-model coefficients on the visible kernel tables.

What each stage fits, and on which rows (only rows whose ``split`` is
``train``; test rows and every end-to-end row are left for validation):

- vector: streaming efficiency per memory kind, op factors, row overhead,
  host dispatch and the kernel floor, on ``neusight/kernels_vector`` train rows;
- gemm: the power model (energy per FLOP, process exponent, static share per
  memory kind), the FP32 GEMM efficiency terms, the GEMM host dispatch and the
  burst time constant, on ``neusight/kernels_gemm`` train rows;
- conv: implicit-GEMM efficiency and the Winograd speedup on
  ``neusight/kernels_conv`` train rows;
- tensor: tensor-core GEMM and power terms on the VIDUR per-op tables
  (``vidur/compute``), which have no split: every GPU there is fitted, and
  ``perfcast validate`` reports them leave-one-GPU-out.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from perfcast.kernel.coefficients import Coefficients, load_coefficients
from perfcast.validate.groundtruth import find_groundtruth
from perfcast.validate.kernel_tables import KernelRows, load_kernel_rows, predict_kernel_rows
from perfcast.validate.optimize import fit_least_squares

__all__ = ["FitStage", "fit_coefficients", "set_path"]


def set_path(raw: dict[str, Any], dotted: str, value: float) -> None:
    """Set ``raw[a][b][c] = value`` for ``dotted = "a.b.c"``."""
    keys = dotted.split(".")
    node = raw
    for k in keys[:-1]:
        node = node[k]
    node[keys[-1]] = float(value)


def get_path(raw: dict[str, Any], dotted: str) -> float:
    node: Any = raw
    for k in dotted.split("."):
        node = node[k]
    return float(node)


_SOFT_L1_SCALE = 0.15


@dataclass(frozen=True)
class FitStage:
    """One group of coefficients fitted together on one set of rows."""

    name: str
    params: tuple[tuple[str, str], ...]  # (dotted path, transform: log | logit | none)
    description: str


VECTOR_STAGE = FitStage(
    "vector",
    (
        ("vector.memory_efficiency.hbm", "logit"), ("vector.memory_efficiency.gddr", "logit"),
        ("vector.op_factor.softmax", "log"), ("vector.op_factor.layernorm", "log"),
        ("vector.op_factor.powu", "log"), ("vector.op_factor.pow", "log"),
        ("vector.row_overhead_elems", "log"),
        ("launch.dispatch_s.vector", "log"), ("launch.kernel_min_s", "log"),
    ),
    "neusight/kernels_vector.csv.gz split=train",
)
GEMM_STAGE = FitStage(
    "gemm",
    (
        ("power.energy_pJ_per_flop_7nm.simt", "log"),
        ("power.static_frac.hbm", "logit"), ("power.static_frac.gddr", "logit"),
        ("gemm.paths.simt.max_efficiency", "logit"), ("gemm.paths.simt.k_overhead", "log"),
        ("gemm.paths.simt.tile_ai0", "log"), ("gemm.memory_efficiency", "logit"),
        ("launch.dispatch_s.bmm", "log"), ("launch.dispatch_s.linear", "log"),
        ("measurement.burst_tau_s", "log"),
    ),
    "neusight/kernels_gemm.csv.gz split=train",
)
CONV_STAGE = FitStage(
    "conv",
    (("conv.efficiency", "log"), ("conv.winograd_speedup", "log")),
    "neusight/kernels_conv.csv.gz split=train",
)


def _fit_stage(stage: FitStage, base: Coefficients, rows: KernelRows,
               log: Callable[[str], None]) -> Coefficients:
    raw = base.model_dump(mode="json")
    names = [p for p, _ in stage.params]
    kinds = [k for _, k in stage.params]
    x0 = [get_path(raw, p) for p in names]
    measured = rows.latency_s
    # kernels that matter for whole-model time are the long ones; short calls are dominated by the
    # host dispatch of whatever machine ran the benchmark, so they weigh less
    weight = np.sqrt(np.clip(measured / 2e-4, 0.05, 1.0))

    def make(x: np.ndarray) -> Coefficients:
        r = copy.deepcopy(raw)
        for p, v in zip(names, x, strict=True):
            set_path(r, p, v)
        return Coefficients.model_validate(r)

    def residuals(x: np.ndarray) -> np.ndarray:
        r = weight * np.log(predict_kernel_rows(rows, make(x)) / measured) / _SOFT_L1_SCALE
        # soft-L1 loss: quadratic near zero, linear in the tails (a few pathological kernels,
        # e.g. K > 50k on Pascal, must not drag the global coefficients)
        return _SOFT_L1_SCALE * np.sign(r) * np.sqrt(2.0 * (np.sqrt(1.0 + r * r) - 1.0))

    x, mse = fit_least_squares(residuals, x0, kinds)
    log(f"fit {stage.name}: {len(rows)} rows, rms log error {np.sqrt(mse):.3f}")
    for p, v in zip(names, x, strict=True):
        log(f"  {p} = {v:.6g}")
    return make(x)


def _sample(rows: KernelRows, per_group: int, seed: int) -> KernelRows:
    """At most ``per_group`` rows per (device, op), reproducibly."""
    rng = np.random.default_rng(seed)
    keep = np.zeros(len(rows), dtype=bool)
    keys = np.char.add(rows.device.astype(str), rows.op.astype(str))
    for key in np.unique(keys):
        idx = np.flatnonzero(keys == key)
        if idx.size > per_group:
            idx = rng.choice(idx, per_group, replace=False)
        keep[idx] = True
    return rows.subset(keep)


def fit_coefficients(groundtruth: Path | None = None, *, base: Coefficients | None = None,
                     stages: Sequence[str] = ("vector", "gemm", "conv"), per_group: int = 1500, seed: int = 0,
                     log: Callable[[str], None] = print) -> Coefficients:
    """Fit the requested stages in order; returns the new coefficients."""
    root = groundtruth or find_groundtruth()
    assert root is not None
    co = base or load_coefficients()
    fitted_on = dict(co.fitted_on)
    fitted_on.pop("all", None)
    tables = {"vector": ("kernels_vector", VECTOR_STAGE), "gemm": ("kernels_gemm", GEMM_STAGE),
              "conv": ("kernels_conv", CONV_STAGE)}
    for name in stages:
        fname, stage = tables[name]
        rows = load_kernel_rows(root / "neusight" / f"{fname}.csv.gz", name)
        rows = rows.subset((rows.split == "train") & np.isfinite(rows.latency_s))
        rows = _sample(rows, per_group, seed)
        co = _fit_stage(stage, co, rows, log)
        fitted_on[name] = f"{stage.description} ({len(rows)} rows sampled, seed {seed})"
    raw = co.model_dump(mode="json")
    raw["fitted_on"] = fitted_on
    raw["produced_by"] = "perfcast fit --stages " + ",".join(stages)
    return Coefficients.model_validate(raw)
