"""Few-sample adaptation, leave-one-GPU-out: ``perfcast validate --adapt-samples K`` on end-to-end tables.

For each GPU of the table, ``K`` of its rows are the samples: the GPU's corrections are fitted to them
(:mod:`perfcast.validate.adapt`) and its other rows are predicted with them; only those other rows are scored.
No other GPU's rows are used, and nothing is fitted on the scored rows. The corrections start from the kernel
coefficients fitted without the GPU's kernel rows (:meth:`~perfcast.coefficients.kernel.Coefficients.without`).

Which ``K`` rows. The reported figure takes them evenly spread over the GPU's rows in table order (which is by
model, then mode, fusion and batch size): indices ``round(linspace(0, n - 1, K))``. So the figure is not one
lucky pick, the caption adds ``draws`` random choices of ``K`` rows per GPU (``numpy.random.default_rng(seed)``,
one generator for the whole table, GPUs in sorted order) with the mean and the worst MAPE over them. A GPU with
``K`` rows or fewer cannot keep ``K`` samples and still have a row to score: each of its rows is predicted from
the other ``n - 1`` (leave-one-row-out), and the caption says so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from perfcast.coefficients.bundle import Calibration
from perfcast.groundtruth.tables import predict_table
from perfcast.validate.adapt import Samples, adapting, fit_samples, read_samples, row_devices
from perfcast.validate.metrics import ErrorSummary, summarize

__all__ = ["ADAPT_DRAWS", "ADAPT_SEED", "AdaptedScores", "adapt_logo", "spread_pick"]

ADAPT_DRAWS = 20  # random sample choices per GPU besides the spread one
ADAPT_SEED = 0


@dataclass(frozen=True)
class AdaptedScores:
    """The scored rows of a table adapted leave-one-GPU-out: the target, the errors overall and per GPU, a note
    (the sample choice and the random draws' mean/worst MAPE per GPU), and each scored row's GPU label,
    measured and predicted values."""

    kind: str
    target: str
    overall: ErrorSummary
    groups: list[tuple[str, ErrorSummary]]
    note: str
    labels: np.ndarray
    measured: np.ndarray
    predicted: np.ndarray


def spread_pick(n: int, k: int) -> list[int]:
    """``k`` of ``n`` row indices evenly spread over them (the first and the last included when k >= 2)."""
    return sorted({int(round(x)) for x in np.linspace(0, n - 1, k)})


class _Gpu:
    """One GPU's rows of the table and how to score a choice of samples among them."""

    def __init__(self, table: Samples, rows: list[int], device: str, cal: Calibration) -> None:
        self.table, self.rows, self.device, self.cal = table, rows, device, cal
        self.target = table.fitted_target

    def predict(self, picked: list[int]) -> tuple[list[int], np.ndarray, np.ndarray, np.ndarray]:
        """Fit to the rows at ``picked`` (positions in this GPU's rows); the other rows' table indices and their
        predictions, low and high bounds."""
        chosen = set(picked)
        samples = Samples(self.table.kind, self.table.header, [self.table.rows[self.rows[i]] for i in picked])
        devices = fit_samples(samples, self.cal, devices=[self.device] * len(picked))
        rest = [self.rows[i] for i in range(len(self.rows)) if i not in chosen]
        with adapting(devices):
            p = predict_table(self.table.kind, [self.table.rows[i] for i in rest], self.cal)
        return rest, p.pred[self.target], p.low[self.target], p.high[self.target]

    def measured(self, idx: list[int]) -> np.ndarray:
        return np.array([float(self.table.rows[i].get(self.target) or "nan") for i in idx])

    def mape(self, picked: list[int]) -> float:
        rest, pred, _, _ = self.predict(picked)
        return summarize(self.measured(rest), pred).mape


def adapt_logo(path: Path, cal: Calibration, *, samples: int, draws: int = ADAPT_DRAWS, seed: int = ADAPT_SEED,
               log: Callable[[str], None] = lambda _m: None) -> AdaptedScores:
    """The table's GPUs each adapted to ``samples`` of their rows and scored on the rest (see the module
    docstring)."""
    table = read_samples(path)
    per_row = row_devices(table, cal)
    n_rows = len(table.rows)
    pred, low, high = (np.full(n_rows, np.nan) for _ in range(3))
    scored = np.zeros(n_rows, dtype=bool)
    labels = np.array([r.get("device") or r.get("gpu_id") or "" for r in table.rows], dtype=object)
    rng = np.random.default_rng(seed)
    captions: list[str] = []
    groups: list[tuple[str, ErrorSummary]] = []
    for device in sorted({d for d in per_row if d is not None}):
        idx = [i for i, d in enumerate(per_row) if d == device]
        # the datasheet start is the kernel fit its own rows did not move, as for a device perfcast never saw
        gpu = _Gpu(table, idx, device, cal.with_kernel(cal.kernel.without(device)))
        label = str(labels[idx[0]]) or device
        log(f"adapting {label} to {samples} of its {len(idx)} rows")
        n = len(idx)
        if n > samples:
            rest, p, lo, hi = gpu.predict(spread_pick(n, samples))
            pred[rest], low[rest], high[rest], scored[rest] = p, lo, hi, True
            mapes = [gpu.mape(sorted(rng.choice(n, samples, replace=False).tolist())) for _ in range(draws)]
            captions.append(f"{label} {100 * np.mean(mapes):.1f}/{100 * np.max(mapes):.1f}%")
        elif n >= 2:
            for out in range(n):  # leave-one-row-out: n - 1 samples each
                rest, p, lo, hi = gpu.predict([i for i in range(n) if i != out])
                pred[rest], low[rest], high[rest], scored[rest] = p, lo, hi, True
            captions.append(f"{label}: {n} rows, each predicted from the other {n - 1}")
        else:
            captions.append(f"{label}: one row, nothing to score")
            continue
        sel = np.array(idx)[scored[idx]]
        groups.append((label, summarize(gpu.measured(sel.tolist()), pred[sel], low[sel], high[sel])))
    target = table.fitted_target
    sel = np.flatnonzero(scored)
    measured = np.array([float(table.rows[i].get(target) or "nan") for i in sel])
    overall = (summarize(measured, pred[sel], low[sel], high[sel]) if sel.size else
               ErrorSummary(0, 0, float("nan"), float("nan"), float("nan"), float("nan"), float("nan")))
    note = (f"each GPU adapted to {samples} of its own rows (evenly spread in table order) and scored on the "
            f"others; {draws} random draws of {samples} rows per GPU (seed {seed}), mean/worst MAPE: "
            + "; ".join(captions))
    return AdaptedScores(table.kind.name, target, overall, sorted(groups), note, labels[sel], measured, pred[sel])
