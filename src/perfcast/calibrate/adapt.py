"""Fit one device's corrections to a few of its own measurements: ridge-regularized Gauss-Newton on log errors.

The unknowns are the logs of the :class:`~perfcast.catalog.corrections.DeviceCorrections` multipliers,
``theta = log(multiplier)``. Each has a log-normal prior centred on the datasheet (multiplier 1, theta 0) with a
standard deviation of :data:`PRIOR_SIGMA_LOG`; a measurement's log error left once the multipliers are right is
taken as :data:`NOISE_SIGMA_LOG`. The fit minimizes the MAP objective

    sum_i w_i * (log pred_i(theta) - log measured_i)^2  +  RIDGE * sum_j theta_j^2,
    RIDGE = (NOISE_SIGMA_LOG / PRIOR_SIGMA_LOG)^2 = 0.04,

where the weights ``w_i`` make every sampled run count once whatever number of measured columns it fills. With
five samples the data outweigh the prior about 125 to 1 along the direction they see, while a multiplier the
samples do not move (a host time on compute-bound runs) stays exactly at 1, and the split between two
multipliers the samples cannot tell apart (math vs memory on runs whose kernels all do both) is the prior's:
both move together, in proportion to how much the samples depend on each. The predictor is the model itself
(any table perfcast predicts), so the Jacobian is taken by forward differences in log space; a few steps
converge because predictions are close to power laws in the multipliers.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from perfcast.catalog.corrections import CORRECTION_NAMES, DeviceCorrections
from perfcast.errors import ConfigError, UnsupportedError

__all__ = ["MAX_MULTIPLIER", "NOISE_SIGMA_LOG", "PRIOR_SIGMA_LOG", "RIDGE", "AdaptFit", "fit_corrections"]

PRIOR_SIGMA_LOG = 0.25  # a device's multipliers within about +-25 % of the datasheet (one standard deviation, log)
NOISE_SIGMA_LOG = 0.05  # the log error of one measured run the model keeps with the right multipliers
RIDGE = (NOISE_SIGMA_LOG / PRIOR_SIGMA_LOG) ** 2
MAX_MULTIPLIER = 4.0  # a multiplier beyond 4x (or below 1/4) is not a correction: the fit stops there
_STEP_LOG = 0.02  # forward-difference step of the Jacobian, in log multiplier
_MAX_ITERATIONS = 10
_TOLERANCE_LOG = 1e-4  # converged when no log multiplier moves more than this
_MIN_SENSITIVITY = 1e-6  # below this |d log pred / d log multiplier| summed over samples, a multiplier is not seen


@dataclass(frozen=True)
class AdaptFit:
    """A fitted device: its corrections, the measured values fitted (``values``, from ``runs`` runs), the weighted
    rms log error before (datasheet) and after, and the multipliers the samples could move (``fitted``)."""

    corrections: DeviceCorrections
    runs: int
    values: int
    rms_log_before: float
    rms_log_after: float
    fitted: tuple[str, ...]
    iterations: int


def _corrections(theta: np.ndarray) -> DeviceCorrections:
    return DeviceCorrections(**{n: float(math.exp(t)) for n, t in zip(CORRECTION_NAMES, theta, strict=True)})


def fit_corrections(predict: Callable[[DeviceCorrections], np.ndarray], measured: np.ndarray, *,
                    runs: np.ndarray | None = None, ridge: float = RIDGE) -> AdaptFit:
    """The corrections that best explain ``measured`` (positive values; NaN = not measured) under the prior.

    ``predict(corrections)`` returns the model's prediction of each measured value on the device with those
    corrections (same shape; NaN where it cannot). ``runs`` labels the run each value belongs to (default: one
    run per value): a run's values share a weight of 1. ``ridge`` is the prior's strength (see the module
    docstring). Raises ConfigError when nothing measured can be fitted and UnsupportedError when no correction
    moves any prediction (the samples' table is priced without the corrected quantities).
    """
    meas = np.asarray(measured, dtype=float).ravel()
    labels = np.arange(meas.size) if runs is None else np.asarray(runs).ravel()
    theta = np.zeros(len(CORRECTION_NAMES))
    base = np.asarray(predict(_corrections(theta)), dtype=float).ravel()
    ok = np.isfinite(meas) & (meas > 0) & np.isfinite(base) & (base > 0)
    if not ok.any():
        raise ConfigError("no sample has both a positive measured value and a prediction: nothing to adapt to")
    _, inverse, counts = np.unique(labels[ok], return_inverse=True, return_counts=True)
    w = np.zeros(meas.size)
    w[ok] = 1.0 / counts[inverse]
    log_meas = np.where(ok, np.log(np.where(ok, meas, 1.0)), 0.0)

    def residual(pred: np.ndarray) -> np.ndarray:
        good = ok & np.isfinite(pred) & (pred > 0)
        if not np.array_equal(good, ok):
            return np.full(meas.size, np.nan)  # a correction that leaves a sample unpriced is not a step to take
        return np.where(ok, np.log(np.where(ok, pred, 1.0)) - log_meas, 0.0)

    def objective(r: np.ndarray, th: np.ndarray) -> float:
        return float(np.sum(w * r * r) + ridge * np.sum(th * th)) if np.all(np.isfinite(r)) else math.inf

    r = residual(base)
    before = math.sqrt(float(np.sum(w * r * r) / np.sum(w)))
    bound = math.log(MAX_MULTIPLIER)
    seen: np.ndarray | None = None
    iterations = 0
    for iterations in range(1, _MAX_ITERATIONS + 1):  # noqa: B007 - the count is reported
        jac = np.zeros((meas.size, theta.size))
        for j in range(theta.size):
            step = theta.copy()
            step[j] += _STEP_LOG
            rj = residual(np.asarray(predict(_corrections(step)), dtype=float).ravel())
            jac[:, j] = np.nan_to_num((rj - r) / _STEP_LOG, nan=0.0)
        if seen is None:
            seen = np.sum(w[:, None] * np.abs(jac), axis=0) > _MIN_SENSITIVITY
            if not seen.any():
                raise UnsupportedError("the samples do not depend on any quantity perfcast adapts per device "
                                       f"({', '.join(CORRECTION_NAMES)}): their table is priced without them")
        js = jac[:, seen]
        lhs = js.T @ (w[:, None] * js) + ridge * np.eye(js.shape[1])
        rhs = -(js.T @ (w * r) + ridge * theta[seen])
        delta = np.zeros_like(theta)
        delta[seen] = np.linalg.solve(lhs, rhs)
        current = objective(r, theta)
        accepted = False
        for _ in range(6):  # halve the step until the objective falls
            trial = np.clip(theta + delta, -bound, bound)
            rt = residual(np.asarray(predict(_corrections(trial)), dtype=float).ravel())
            if objective(rt, trial) <= current:
                moved = float(np.max(np.abs(trial - theta)))
                theta, r, accepted = trial, rt, True
                break
            delta = delta / 2.0
        if not accepted or moved < _TOLERANCE_LOG:
            break
    after = math.sqrt(float(np.sum(w * r * r) / np.sum(w)))
    assert seen is not None
    return AdaptFit(_corrections(theta), runs=int(counts.size), values=int(ok.sum()), rms_log_before=before,
                    rms_log_after=after, fitted=tuple(n for n, s in zip(CORRECTION_NAMES, seen, strict=True) if s),
                    iterations=iterations)
