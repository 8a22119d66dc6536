"""Fit the training-run coefficients on ``published/training.csv``, and measure transfer leave-one-GPU-out.

Each row contributes one residual: the log ratio of predicted to published
throughput, in whichever quantity the row publishes (TFLOP/s per GPU, tokens/s
per GPU, HFU or MFU: all are inverse step times under one plan). Rows whose
plan the source did not publish are left out (see
:mod:`perfcast.groundtruth.training_tables`), and so are rows whose FP8 recipe
perfcast does not model (torchao's row-wise scaling, which ran slower than BF16
in torchtitan's December 2024 table): fitting the per-tensor FP8 efficiency on
them would bias it. Megatron-Bridge's rows are left out of the fit as well, a
source held out to test transfer (:func:`fit_deferred`). ``perfcast validate``
still predicts and reports every one of them, and groups the
leave-one-GPU-out errors by source too.

Each coefficient is held to a prior (a penalty on its distance from it), so a
fold whose rows cannot pin a coefficient down leaves it near what is known
instead of wherever the optimizer wanders: the FP8 GEMM efficiency's prior is
measured (:func:`fp8_prior`, from ``published/gemm.csv``), the others are
the starting values ``_X0``.
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
from perfcast.groundtruth.gpus import row_gpu_id
from perfcast.groundtruth.training_tables import (
    cluster_for_gpu,
    model_for_row,
    plan_for_row,
    predict_row,
    row_tflops,
)
from perfcast.system.cluster import Cluster
from perfcast.system.plan import ParallelPlan
from perfcast.system.training import TrainingResult, simulate_training
from perfcast.validate.mamf import mamf_efficiencies
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

    Megatron-Bridge's performance summary (NeMo containers 25.09-26.08, DGX-H100)
    is kept out of the fit as a source the coefficients never saw: its rows are
    the only MoE training runs (Qwen3, GPT-OSS, Nemotron 3 Nano), and with its
    conventions read (expert parallelism and Megatron's expert folding, ``DDP``
    vs ``FSDP N``, ``fp8-cs``, causal model FLOPs) they test how the model
    carries to MoE recipes. Fitting on them moved leave-one-GPU-out error by
    less than 0.1 point (2026-11-28) and tripled the fit's time.
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
    row: dict[str, str] | None = None  # the published row (its source's FLOP-counting convention)


def _value(res: TrainingResult, target: str, row: dict[str, str] | None = None) -> float:
    if target == "tflops_per_gpu" and row is not None:
        return row_tflops(row, res)
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
            cluster = cluster_for_gpu(row_gpu_id(row))
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
        cases.append(TrainingCase(i, row["gpu_id"], cfg, cluster, plan, target, measured, row))
    return cases


def _coefficients(x: Sequence[float] | np.ndarray, fitted_on: str, priors: str = "") -> TrainingCoefficients:
    notes = {"all": fitted_on} | ({"priors": priors} if priors else {})
    return TrainingCoefficients(
        schema_version=TRAINING_SCHEMA_VERSION, produced_by="perfcast fit --stages training",
        fitted_on=notes, **dict(zip(_PARAMS, (float(v) for v in x), strict=True)),
    )


def _residuals(cases: Sequence[TrainingCase], cal: Calibration) -> np.ndarray:
    out = np.empty(len(cases))
    for j, c in enumerate(cases):
        try:
            res = simulate_training(c.model, c.cluster, c.plan, calibration=cal)
            value = _value(res, c.target, c.row)
            out[j] = math.log(value / c.measured) if c.target != "step_time_s" else math.log(c.measured / value)
        except PerfcastError:
            out[j] = 0.0
    return out


def fp8_prior(groundtruth: Path | None = None) -> tuple[float, str]:
    """The prior of ``fp8_gemm_efficiency`` and where it comes from: the median, over the GPUs
    ``published/gemm.csv`` measures in both FP8 and BF16 (MAMF, the best shape of a brute-force search), of
    the FP8 efficiency over the BF16 efficiency (each measured TFLOP/s over that datapath's peak): how much
    less of its peak the FP8 datapath sustains than the BF16 one the kernel model was fitted on."""
    eff = mamf_efficiencies(groundtruth)
    if not eff:
        return _X0[2], "default 0.9: published/gemm.csv not found"
    ratios = {g: eff[(g, "fp8")] / eff[(g, "bf16")] for g, k in eff if k == "fp8" and (g, "bf16") in eff}
    if not ratios:
        return _X0[2], "default 0.9: published/gemm.csv has no GPU measured in both FP8 and BF16"
    value = float(np.median(list(ratios.values())))
    return value, (f"prior {value:.3f}: median FP8/BF16 MAMF efficiency ratio of published/gemm.csv over "
                   f"{', '.join(sorted(ratios))}")


# each coefficient's prior and its weight: the prior's residual (in the fitted coordinate, log or logit) times
# weight x 0.1, so a unit deviation costs as much as ``weight**2`` rows off by 10%. The FP8 efficiency's prior
# comes from the GEMM measurements (:func:`fp8_prior`) and is held firmly: a fold with few FP8 rows (the H100
# fold keeps only torchtitan's eight long-context ones) must not drag it far from what the GEMMs sustain. The
# others are held loosely to _X0 (the kernel model's own rate, 2 us between kernels, a fifth of a hidden
# collective slowing the compute under it, the attention kernels' priors), so that a fold whose rows cannot
# tell a coefficient apart leaves it near its prior instead of anywhere the optimizer wanders.
_PRIOR_WEIGHTS = (0.5, 0.5, 4.0, 2.0, 0.5)


def _prior_residuals(x: np.ndarray, priors: Sequence[float]) -> np.ndarray:
    out = np.empty(len(_PARAMS))
    for i, (v, p, kind, w) in enumerate(zip(x, priors, _KINDS, _PRIOR_WEIGHTS, strict=True)):
        if kind == "logit":
            out[i] = math.log(v / (1.0 - v)) - math.log(p / (1.0 - p))
        else:
            out[i] = math.log(v / p)
        out[i] *= 0.1 * w
    return out


def fit_training(cases: Sequence[TrainingCase], cal: Calibration, *, label: str = "",
                 fp8_efficiency_prior: float | None = None) -> TrainingCoefficients:
    """Least-squares fit of the training coefficients on ``cases`` (log-ratio residuals, plus each
    coefficient's prior), the other parts those of ``cal``; ``fp8_efficiency_prior``: the prior of
    ``fp8_gemm_efficiency`` (:func:`fp8_prior` when None)."""
    where = label or f"{len(cases)} rows of published/training.csv"
    priors = list(_X0)
    fp8, source = fp8_prior() if fp8_efficiency_prior is None else (fp8_efficiency_prior, "given")
    priors[2] = fp8
    said = (f"each coefficient held to a prior (weights {', '.join(f'{w:g}' for w in _PRIOR_WEIGHTS)} in "
            f"the order {', '.join(_PARAMS)}): fp8_gemm_efficiency {source}; the others "
            f"{', '.join(f'{p}={v:g}' for p, v in zip(_PARAMS, _X0, strict=True) if p != 'fp8_gemm_efficiency')}")

    def residuals(x: np.ndarray) -> np.ndarray:
        rows = _residuals(cases, cal.with_training(_coefficients(x, where)))
        return np.concatenate([rows, _prior_residuals(x, priors)])

    x, _ = fit_least_squares(residuals, _X0, _KINDS, iterations=25)
    return _coefficients(x, where, said)


def logo_training(cases: Sequence[TrainingCase], cal: Calibration) -> dict[str, np.ndarray]:
    """Leave-one-GPU-out: per held-out GPU, the log errors of its rows under coefficients fitted on the others."""
    out: dict[str, np.ndarray] = {}
    for gpu in sorted({c.gpu_id for c in cases}):
        train = [c for c in cases if c.gpu_id != gpu]
        test = [c for c in cases if c.gpu_id == gpu]
        tc = fit_training(train, cal, label=f"{len(train)} rows, {gpu} held out")
        out[gpu] = _residuals(test, cal.with_training(tc))
    return out
