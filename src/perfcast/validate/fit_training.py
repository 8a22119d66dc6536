"""Fit the training-run coefficients on ``published/training.csv``, and measure transfer leave-one-GPU-out.

Each row contributes one residual: the log ratio of predicted to published
throughput, in whichever quantity the row publishes (TFLOP/s per GPU, tokens/s
per GPU, HFU or MFU: all are inverse step times under one plan). Rows whose
plan the source did not publish are left out (see
:mod:`perfcast.groundtruth.training_tables`), and so are rows whose FP8 recipe
perfcast does not model (torchao's row-wise scaling, which ran slower than BF16
in torchtitan's December 2024 table): fitting the per-tensor FP8 efficiency on
them would bias it. Rows of a source whose conventions perfcast does not read
yet are left out of the fit as well (:func:`fit_deferred`). ``perfcast
validate`` still predicts and reports every one of them.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from perfcast.catalog.models import ModelConfig
from perfcast.coefficients.bundle import Calibration
from perfcast.coefficients.training import TRAINING_SCHEMA_VERSION, TrainingCoefficients
from perfcast.errors import PerfcastError
from perfcast.groundtruth.training_tables import (
    cluster_for_gpu,
    counts_recompute,
    model_for_row,
    plan_for_row,
    predict_row,
)
from perfcast.system.cluster import Cluster
from perfcast.system.plan import ParallelPlan
from perfcast.system.training import TrainingResult, simulate_training
from perfcast.validate.optimize import fit_least_squares

__all__ = ["TrainingCase", "fit_deferred", "fit_training", "fp8_recipe_unmodeled", "logo_training", "training_cases"]

# the quantity a row is judged on, in order of preference: tokens/s carries no FLOP-counting convention
_TARGETS = ("tokens_per_s_per_gpu", "step_time_s", "tflops_per_gpu", "hfu", "mfu")
_PARAMS = ("compute_efficiency", "kernel_gap_s", "fp8_gemm_efficiency", "overlap_interference",
           "attention_time_scale")
_KINDS = ("log", "log", "logit", "logit", "log")  # FP8 realises at most its 2x rate
_X0 = (0.9, 2e-6, 0.9, 0.2, 1.0)


def fp8_recipe_unmodeled(row: dict[str, str]) -> bool:
    """Whether the row trains FP8 with a scaling recipe perfcast does not model (row-wise scales)."""
    return "rowwise" in (row.get("note") or "").replace("-", "").lower()


def fit_deferred(row: dict[str, str]) -> bool:
    """Whether the row comes from a source the training model does not read yet, so it is not fitted on.

    Megatron-Bridge's performance summary (NeMo containers 25.09-26.08) names its
    own conventions: expert parallelism, ``DDP`` vs ``FSDP N`` (Megatron-FSDP),
    ``fp8-cs`` current scaling, token-drop vs dropless routing. Until the row
    reader and the MoE training model take them (issue 17; the reader now prices
    ``fp8-cs`` as the current-scaling recipe), fitting on these rows would pull
    the dense coefficients towards what is not modelled.
    """
    return "Megatron-Bridge" in (row.get("framework") or "")


@dataclass(frozen=True)
class TrainingCase:
    """One published row ready to predict: model, cluster, plan and the measured quantity."""

    index: int
    gpu_id: str
    model: ModelConfig
    cluster: Cluster
    plan: ParallelPlan
    target: str
    measured: float
    recompute_counted: bool = False  # the source's TFLOP/s count the recomputed forward


def _value(res: TrainingResult, target: str, *, recompute_counted: bool = False) -> float:
    if target == "tflops_per_gpu" and recompute_counted:
        return res.hfu_tflops_per_gpu
    return float(getattr(res, target))


def training_cases(path: Path) -> list[TrainingCase]:
    """The rows of a training table whose run perfcast can rebuild."""
    with path.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    cases = []
    for i, row in enumerate(rows):
        target = next((t for t in _TARGETS if (row.get(t) or "").strip()), None)
        if target is None or fp8_recipe_unmodeled(row) or fit_deferred(row):
            continue
        try:
            measured = float(row[target])
            cluster = cluster_for_gpu(row["gpu_id"])
            plan = plan_for_row(row, cluster.gpus_per_node)
            cfg = model_for_row(row, plan.seq_len)
        except (PerfcastError, ValueError, KeyError):
            continue
        if not math.isfinite(measured) or measured <= 0:
            continue
        try:
            # the plan the row is predicted with: with the least recompute that fits when its source did not
            # publish it (:func:`perfcast.groundtruth.training_tables.predict_row`; memory needs no coefficients)
            plan = predict_row(row).plan
        except PerfcastError:
            continue  # a run perfcast cannot rebuild (e.g. longer than a learned position table)
        cases.append(TrainingCase(i, row["gpu_id"], cfg, cluster, plan, target, measured, counts_recompute(row)))
    return cases


def _coefficients(x: Sequence[float] | np.ndarray, fitted_on: str) -> TrainingCoefficients:
    return TrainingCoefficients(
        schema_version=TRAINING_SCHEMA_VERSION, produced_by="perfcast fit --stages training",
        fitted_on={"all": fitted_on}, **dict(zip(_PARAMS, (float(v) for v in x), strict=True)),
    )


def _residuals(cases: Sequence[TrainingCase], cal: Calibration) -> np.ndarray:
    out = np.empty(len(cases))
    for j, c in enumerate(cases):
        try:
            res = simulate_training(c.model, c.cluster, c.plan, calibration=cal)
            value = _value(res, c.target, recompute_counted=c.recompute_counted)
            out[j] = math.log(value / c.measured) if c.target != "step_time_s" else math.log(c.measured / value)
        except PerfcastError:
            out[j] = 0.0
    return out


def fit_training(cases: Sequence[TrainingCase], cal: Calibration, *, label: str = "") -> TrainingCoefficients:
    """Least-squares fit of the training coefficients on ``cases`` (log-ratio residuals), the other parts
    those of ``cal``."""
    where = label or f"{len(cases)} rows of published/training.csv"

    def residuals(x: np.ndarray) -> np.ndarray:
        return _residuals(cases, cal.with_training(_coefficients(x, where)))

    x, _ = fit_least_squares(residuals, _X0, _KINDS, iterations=25)
    return _coefficients(x, where)


def logo_training(cases: Sequence[TrainingCase], cal: Calibration) -> dict[str, np.ndarray]:
    """Leave-one-GPU-out: per held-out GPU, the log errors of its rows under coefficients fitted on the others."""
    out: dict[str, np.ndarray] = {}
    for gpu in sorted({c.gpu_id for c in cases}):
        train = [c for c in cases if c.gpu_id != gpu]
        test = [c for c in cases if c.gpu_id == gpu]
        tc = fit_training(train, cal, label=f"{len(train)} rows, {gpu} held out")
        out[gpu] = _residuals(test, cal.with_training(tc))
    return out
