"""Fit the energy model on measured GPU energy (``energy/``: ML.ENERGY serving, diffusion and batch-1 runs).

Three steps, each on the visible rows and again per GPU without that GPU's rows (``held_out``, what ``perfcast
validate`` predicts a GPU's rows with):

1. **The serving engine's CPU time** (vLLM 0.5, :mod:`perfcast.serving.engines` ``vllm-0.5``): its time per
   iteration, per running sequence (sampling, detokenizing and streaming in the API server's process) and, under
   tensor parallelism, per layer and doubling of the ranks (each rank's worker process launches the layer and all
   meet at its all-reduce: the slowest of more ranks is slower), from
   the log ratios of predicted to measured output throughput of ``llm_serving_energy.csv`` (:data:`ENGINE_TARGETS`)
   (``ENGINE_ROWS_PER_GPU`` rows per GPU, a fixed sample: each row simulates twice), Gauss-Newton with each
   coefficient held to its prior (a Gaussian in its logarithm): 3 ms per iteration, 0.2 ms per sequence (a
   Python engine's per-request output processing) and 0.3 ms per layer and doubling of tensor-parallel ranks (a
   guess: a Python layer's launches and a cross-process all-reduce), each within a factor of three. Times set
   the energy (static and idle power run for them), so they come first. Then **its CPU time per image**
   (``image_overhead_s``): vLLM 0.5's engine process fetches, decodes and processes each request's image (the HF
   image processor) in the iteration that starts it, with the GPUs idle; on the output throughput of the
   visual-chat rows (``mllm_serving_energy.csv``, one image per request), priced on a grid of times with the
   engine's other CPU times kept, Huber loss plus a prior of 20 ms within a factor of three.
2. **The host time per eager kernel** (``compose.json``'s ``eager_op_s``, and ``diffusers_op_s`` for diffusers
   pipelines, whose Python does more per kernel): batch-1 generation and small diffusers batches are
   launch-bound, so their latency (``latency_per_response_s``, ``batch_latency_s``) measures it; each table's
   rows are priced on a grid of host times and the Huber loss of the log errors plus a prior (10 us within a
   factor of three; for ``diffusers_op_s``, the ``eager_op_s`` of the same fold: a pipeline's kernels are eager
   PyTorch's) is minimized, per held-out GPU too. A GPU-bound step hides it (the NeuSight end-to-end rows
   move by 0.1 point between 10 and 30 us).
3. **The power model's energy-only terms** (:mod:`perfcast.coefficients.energy`): ``idle_frac`` and
   ``active_frac``. Neither moves a time, and a run's energy is linear in both below the power cap, so each
   row is simulated three times (at the priors and one step along each) and the fit is a weighted least
   squares on the log ratios of predicted to measured average power per GPU over those slopes, Huber's loss
   (quadratic to 0.2), priors 0.15 (the leakage share) within a factor of two and 0.2 within a factor of three.
   Power, not energy per token, is the target: energy per token is power over throughput, and the throughput
   error is the engine's and the host's, fitted in steps 1 and 2.

The held-out power fits reuse the slopes of the other GPUs' rows as simulated with the engine fitted on every
row (their times are that fit's): a second-order leak of the held-out GPU's throughput, stated in
``fitted_on``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from perfcast.coefficients.bundle import Calibration
from perfcast.coefficients.energy import ENERGY_SCHEMA_VERSION, EnergyCoefficients, EnergyFit
from perfcast.coefficients.serving import EngineOverhead, ServingFit
from perfcast.errors import ConfigError
from perfcast.groundtruth.files import find_groundtruth, read_header, read_rows
from perfcast.groundtruth.tables import predict_table, recognize
from perfcast.validate.fit import POWER_NOTE

__all__ = ["ENGINE", "ENGINE_ROWS_PER_GPU", "POWER_TARGETS", "EnergyRows", "fit_energy", "fit_engine",
           "fit_power", "power_slopes"]

ENGINE = "vllm-0.5"
# what the engine is fitted on: throughput only. The rows' mean TPOT does not follow from their throughput and
# batch (Little's law: at 1,024 running requests on H100, gemma-2-2b's 2,162 tokens/s imply 0.47 s per token and
# the row says 0.28 s), and the source does not record how it computes it, so TPOT is reported, not fitted
ENGINE_TARGETS = ("output_throughput_tok_per_s",)
ENGINE_ROWS_PER_GPU = 24
# table kind -> the measured column of average power per GPU (W), or of the run's total over num_gpus
POWER_TARGETS: dict[str, str] = {"serving_energy": "avg_power_per_gpu_W", "energy_diffusion": "avg_power_total_W",
                                 "energy_legacy_bs1": "avg_power_W"}
ENERGY_FILES = ("llm_serving_energy.csv", "mllm_serving_energy.csv", "diffusion_energy.csv",
                "legacy_v1_bs1_llm_energy.csv")
_HUBER = 0.2
_PRIORS = {"idle_frac": (0.15, math.log(2.0)), "active_frac": (0.2, math.log(3.0))}
_ENGINE_PRIORS = {"iteration_overhead_s": (3e-3, math.log(3.0)), "per_sequence_overhead_s": (2e-4, math.log(3.0)),
                  "tp_sync_per_layer_s": (3e-4, math.log(3.0))}
_STEP = 0.1


def _sample(rows: list[dict[str, str]], per_gpu: int) -> list[dict[str, str]]:
    """``per_gpu`` rows of each GPU, evenly spaced down the table (a fixed sample)."""
    out: list[dict[str, str]] = []
    for g in sorted({r.get("gpu_id", "") for r in rows}):
        mine = [r for r in rows if r.get("gpu_id", "") == g]
        idx = np.unique(np.linspace(0, len(mine) - 1, min(per_gpu, len(mine))).round().astype(int))
        out += [mine[int(i)] for i in idx]
    return out


@dataclass
class EnergyRows:
    """The visible energy tables' rows by table kind."""

    by_kind: dict[str, list[dict[str, str]]]

    @classmethod
    def load(cls, groundtruth: Path | None = None) -> EnergyRows:
        root = groundtruth or find_groundtruth()
        if root is None:
            raise ConfigError("no ground truth found: give --groundtruth")
        by_kind: dict[str, list[dict[str, str]]] = {}
        for name in ENERGY_FILES:
            path = root / "energy" / name
            if not path.is_file():
                continue
            try:
                kind = recognize(read_header(path)).name
            except ConfigError:  # a table this build does not predict
                continue
            if kind in POWER_TARGETS:
                by_kind.setdefault(kind, []).extend(read_rows(path))
        return cls(by_kind)


def _with_engine(cal: Calibration, *values: float) -> Calibration:
    return _with_engine_values(cal, **dict(zip(_ENGINE_PRIORS, values, strict=True)))


def _with_engine_values(cal: Calibration, **values: float) -> Calibration:
    eng = cal.serving.engines[ENGINE].model_copy(update=values)
    return cal.with_serving(cal.serving.model_copy(update={"engines": {**cal.serving.engines, ENGINE: eng}}))


def _engine_residuals(rows: Sequence[dict[str, str]], cal: Calibration) -> np.ndarray:
    p = predict_table(recognize(list(rows[0])), list(rows), cal)
    out = []
    for col in ENGINE_TARGETS:
        meas = np.array([float(r[col]) if r.get(col) else math.nan for r in rows])
        r = np.log(p.pred[col] / meas)
        out.append(np.where(np.isfinite(r), r, 0.0))
    return np.concatenate(out)


def fit_engine(rows: Sequence[dict[str, str]], cal: Calibration, *, iterations: int = 3,
               log: Callable[[str], None] = lambda _m: None) -> EngineOverhead:
    """The ``vllm-0.5`` engine's CPU times fitted on serving energy ``rows`` (module docstring, step 1)."""
    names = list(_ENGINE_PRIORS)
    prior = np.log([_ENGINE_PRIORS[n][0] for n in names])
    sigma = np.array([_ENGINE_PRIORS[n][1] for n in names])
    x = prior.copy()

    def res(xx: np.ndarray) -> np.ndarray:
        return _engine_residuals(rows, _with_engine(cal, *np.exp(xx)))

    def cost(r: np.ndarray, xx: np.ndarray) -> float:
        a = np.abs(r)
        loss = np.where(a <= _HUBER, r**2, 2 * _HUBER * a - _HUBER**2).sum()
        return float(loss + (((xx - prior) / sigma) ** 2).sum())

    r = res(x)
    c = cost(r, x)
    for it in range(iterations):
        jac = np.zeros((r.size, x.size))
        for k in range(x.size):
            xk = x.copy()
            xk[k] += _STEP
            jac[:, k] = (res(xk) - r) / _STEP
        w = np.minimum(1.0, _HUBER / np.maximum(np.abs(r), 1e-12))
        pw = np.diag(1.0 / sigma**2)
        step = np.clip(np.linalg.solve(jac.T @ (w[:, None] * jac) + pw, -(jac.T @ (w * r) + pw @ (x - prior))),
                       -1.0, 1.0)
        for scale in (1.0, 0.5, 0.25):
            x_new = x + scale * step
            r_new = res(x_new)
            c_new = cost(r_new, x_new)
            if c_new < c:
                x, r, c = x_new, r_new, c_new
                break
        log(f"  engine {ENGINE} iteration {it + 1}: rms log error {math.sqrt(float((r**2).mean())):.3f}; "
            + ", ".join(f"{n}={v:.3g}" for n, v in zip(names, np.exp(x), strict=True)))
    base = cal.serving.engines[ENGINE]
    return base.model_copy(update=dict(zip(names, np.exp(x).tolist(), strict=True)))


def power_slopes(rows_by_kind: dict[str, list[dict[str, str]]], cal: Calibration, *,
                 log: Callable[[str], None] = lambda _m: None) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """Per row: log of measured power, predicted power at the priors and its slopes along ``idle_frac`` and
    ``active_frac`` (W per unit), stacked ``(measured_log, p0, slopes[n, 2])``, and each row's GPU."""
    at = {n: _PRIORS[n][0] for n in _PRIORS}
    steps = {"idle_frac": 0.05, "active_frac": 0.1}
    meas, p0, slopes, gpus = [], [], [], []
    for kind_name, rows in rows_by_kind.items():
        kind = recognize(list(rows[0]))
        col = POWER_TARGETS[kind_name]
        preds = []
        for point in ({}, {"idle_frac": steps["idle_frac"]}, {"active_frac": steps["active_frac"]}):
            fit = EnergyFit(**{n: at[n] + point.get(n, 0.0) for n in at})
            preds.append(predict_table(kind, rows, cal.with_kernel(fit.apply(cal.kernel))).pred[col])
        log(f"  power: {kind_name} {len(rows)} rows priced at 3 points")
        for i, r in enumerate(rows):
            m = float(r.get(col) or "nan")
            n = float(r.get("num_gpus") or 1) if col == "avg_power_total_W" else 1.0
            if not (math.isfinite(m) and m > 0 and math.isfinite(preds[0][i]) and preds[0][i] > 0):
                continue
            meas.append(math.log(m / n))
            p0.append(preds[0][i] / n)
            slopes.append([(preds[1][i] - preds[0][i]) / n / steps["idle_frac"],
                           (preds[2][i] - preds[0][i]) / n / steps["active_frac"]])
            gpus.append(r.get("gpu_id", ""))
    return np.array(meas), np.array(p0), np.array(slopes).reshape(-1, 2), gpus


def fit_power(meas_log: np.ndarray, p0: np.ndarray, slopes: np.ndarray) -> EnergyFit:
    """``idle_frac`` and ``active_frac`` from rows' slopes (module docstring, step 2): Gauss-Newton on the Huber
    loss of the log power ratios, with the priors."""
    names = list(_PRIORS)
    x0 = np.array([_PRIORS[n][0] for n in names])
    sigma = np.array([_PRIORS[n][1] for n in names])
    x = x0.copy()
    for _ in range(30):
        pred = p0 + slopes @ (x - x0)
        pred = np.maximum(pred, 1e-3)
        r = np.log(pred) - meas_log
        jac = slopes / pred[:, None]
        # priors in log space: d/dx log(x) = 1/x
        pr = (np.log(x) - np.log(x0)) / sigma
        pj = np.diag(1.0 / (x * sigma))
        w = np.minimum(1.0, _HUBER / np.maximum(np.abs(r), 1e-12))
        h = jac.T @ (w[:, None] * jac) + pj.T @ pj
        g = jac.T @ (w * r) + pj.T @ pr
        step = np.linalg.solve(h, -g)
        x = np.clip(x + step, [0.02, 0.0], [0.8, 1.0])
        if np.abs(step).max() < 1e-7:
            break
    return EnergyFit(**dict(zip(names, x.tolist(), strict=True)))


def fit_energy(cal: Calibration, *, groundtruth: Path | None = None, engine: bool = True,
               log: Callable[[str], None] = lambda _m: None) -> tuple[Calibration, EnergyCoefficients]:
    """Fit the three steps on the visible energy rows (module docstring): the calibration with the fitted engine
    (in its serving coefficients, held-out folds included), host time (in its compose coefficients) and power
    terms (in its kernel coefficients), and the energy coefficients to write. ``engine`` False keeps ``cal``'s
    engine (steps 2 and 3 only)."""
    data = EnergyRows.load(groundtruth)
    if engine:
        cal = _fit_engines(cal, data, log)
    cal = _fit_images(cal, data, log)
    cal, host_folds = _fit_host(cal, data, log)
    return _fit_power(cal, data, log, host_folds)


# table kind -> its measured latency of one eager run, and the host coefficient that run's kernels take
HOST_TARGETS: dict[str, tuple[str, str]] = {"energy_legacy_bs1": ("latency_per_response_s", "eager_op_s"),
                                            "energy_diffusion": ("batch_latency_s", "diffusers_op_s")}
_HOST_GRID = np.geomspace(4e-6, 1e-4, 25)  # host seconds per eager kernel tried (the fit refines between them)
_HOST_PRIOR = (1e-5, math.log(3.0))  # compose.json's prior for eager PyTorch 2.x, within a factor of three


def _host_cost(resid: np.ndarray, log_x: np.ndarray, prior_s: float) -> np.ndarray:
    a = np.abs(resid)
    loss = np.where(a <= _HUBER, resid**2, 2 * _HUBER * a - _HUBER**2).sum(axis=0)
    return loss + ((log_x - math.log(prior_s)) / _HOST_PRIOR[1]) ** 2


def _best_host(resid: np.ndarray, prior_s: float = _HOST_PRIOR[0], grid: np.ndarray = _HOST_GRID) -> float:
    """The seconds (a host time per kernel, or per image) minimizing the Huber loss of ``resid`` (rows x ``grid``)
    plus the prior (``prior_s`` within a factor of three): the grid's best point refined by a parabola through it
    and its neighbours (in log seconds; ``grid`` is geometric)."""
    lx = np.log(grid)
    cost = _host_cost(resid, lx, prior_s)
    k = int(np.argmin(cost))
    if 0 < k < lx.size - 1:
        y0, y1, y2 = cost[k - 1], cost[k], cost[k + 1]
        denom = y0 - 2 * y1 + y2
        if denom > 0:
            shift = 0.5 * (y0 - y2) / denom
            return float(math.exp(lx[k] + shift * (lx[1] - lx[0])))
    return float(grid[k])


_IMAGE_GRID = np.geomspace(2e-3, 2e-1, 21)  # the engine's CPU seconds per image tried
_IMAGE_PRIOR_S = 0.02  # JPEG decode, resize and normalize of a photo in PIL/numpy: tens of ms, within a factor of 3
_IMAGE_TASKS = ("v2-visual-chat",)


def _fit_images(cal: Calibration, data: EnergyRows, log: Callable[[str], None]) -> Calibration:
    """Step 1b: the ``vllm-0.5`` engine's CPU time per image (``image_overhead_s``) on the visual-chat rows'
    output throughput, on every row and per held-out GPU (the other GPUs' rows), the engine's other CPU times kept
    (each row priced once per grid point with ``cal``'s engine)."""
    rows = [r for r in data.by_kind.get("serving_energy", []) if r.get("task") in _IMAGE_TASKS]
    if not rows:
        return cal
    # a throughput's log error, signed as a time's
    resid, gpus = _grid_residuals(rows, "output_throughput_tok_per_s", _IMAGE_GRID,
                                  lambda x: _with_engine_values(cal, image_overhead_s=x), sign=-1.0)
    full = _best_host(resid, _IMAGE_PRIOR_S, _IMAGE_GRID)
    folds = {g: _best_host(resid[gpus != g], _IMAGE_PRIOR_S, _IMAGE_GRID) for g in sorted(set(gpus.tolist()))}
    serving = cal.serving
    held = dict(serving.held_out)
    for g, fold_fit in held.items():  # a GPU without visual rows keeps the fit on every row
        if ENGINE in fold_fit.engines:
            eng = fold_fit.engines[ENGINE].model_copy(update={"image_overhead_s": folds.get(g, full)})
            held[g] = fold_fit.model_copy(update={"engines": {**fold_fit.engines, ENGINE: eng}})
    log(f"fit energy: {ENGINE} image_overhead_s {full * 1e3:.1f} ms on {gpus.size} visual-chat rows; without "
        + ", ".join(f"{g} {v * 1e3:.1f}" for g, v in folds.items()))
    fitted_on = dict(serving.fitted_on)
    fitted_on["engines"] = (fitted_on.get("engines", "") + f"; {ENGINE}: image_overhead_s on the output throughput "
                            f"of {gpus.size} visual-chat rows (energy/mllm_serving_energy.csv, one image per "
                            "request), Huber loss on log errors, prior 20 ms within a factor of 3, the engine's other "
                            "CPU times kept (perfcast fit --stages energy)")
    engine = serving.engines[ENGINE].model_copy(update={"image_overhead_s": full})
    serving = serving.model_copy(update={"engines": {**serving.engines, ENGINE: engine}, "held_out": held,
                                         "fitted_on": fitted_on})
    return cal.with_serving(serving)


def _grid_residuals(rows: list[dict[str, str]], column: str, grid: np.ndarray,
                    at: Callable[[float], Calibration], *, sign: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """The log errors of ``rows``' ``column`` (``sign`` x log predicted / measured) with the calibration ``at`` gives
    for each value of ``grid`` (rows x grid, predictable rows only), and each row's GPU."""
    kind = recognize(list(rows[0]))
    p = np.stack([predict_table(kind, rows, at(float(x))).pred[column] for x in grid], axis=1)
    m = np.array([float(r.get(column) or "nan") for r in rows])[:, None]
    ok = np.all(np.isfinite(p) & (p > 0), axis=1) & np.isfinite(m[:, 0]) & (m[:, 0] > 0)
    return sign * np.log(p[ok] / m[ok]), np.array([(r.get("gpu_id") or "").strip() for r in rows])[ok]


def _host_residuals(cal: Calibration, kind_name: str, rows: list[dict[str, str]]) -> tuple[np.ndarray, np.ndarray]:
    """The log latency errors of ``rows`` (a table of ``kind_name``) at each host time of the grid (rows x grid,
    predictable rows only) and each row's GPU."""
    column, coefficient = HOST_TARGETS[kind_name]

    def at(x: float) -> Calibration:
        host = cal.compose.host.model_copy(update={coefficient: x})
        return cal.with_compose(cal.compose.model_copy(update={"host": host}))

    return _grid_residuals(rows, column, _HOST_GRID, at)


def _host_prior(coefficient: str, eager_op_s: float) -> float:
    """The prior of a host time per kernel (s): 10 us for plain eager PyTorch's; for a diffusers pipeline's, the
    plain eager time fitted on the same rows (its kernels are eager PyTorch's, launched from more Python: the
    A100's text-to-image rows alone hide the host behind the GPU and cannot pin it)."""
    return eager_op_s if coefficient == "diffusers_op_s" else _HOST_PRIOR[0]


def _fit_host(cal: Calibration, data: EnergyRows,
              log: Callable[[str], None]) -> tuple[Calibration, dict[str, dict[str, float]]]:
    """The host times per eager kernel (batch-1 generation's, diffusers'), each on its eager runs' latency: on
    every row and per held-out GPU (module docstring). ``cal`` with the full fits in its compose coefficients;
    per GPU, the held-out fits."""
    folds: dict[str, dict[str, float]] = {}
    host = cal.compose.host
    notes = dict(cal.compose.fitted_on)
    for kind_name, (column, coefficient) in HOST_TARGETS.items():
        rows = data.by_kind.get(kind_name)
        if not rows:
            continue
        resid, gpus = _host_residuals(cal, kind_name, rows)
        full = _best_host(resid, _host_prior(coefficient, host.eager_op_s))
        host = host.model_copy(update={coefficient: full})
        for gpu in sorted(set(gpus.tolist())):
            fold = folds.setdefault(gpu, {})
            fold[coefficient] = _best_host(resid[gpus != gpu],
                                           _host_prior(coefficient, fold.get("eager_op_s", host.eager_op_s)))
        log(f"fit energy: {coefficient} {full * 1e6:.1f} us on {len(gpus)} {kind_name} rows; without "
            + ", ".join(f"{g} {f[coefficient] * 1e6:.1f}" for g, f in folds.items() if coefficient in f))
        notes[coefficient] = (f"perfcast fit --stages energy: {column} of {len(gpus)} {kind_name} rows "
                              "(energy/), Huber loss on log errors, prior "
                              + ("eager_op_s" if coefficient == "diffusers_op_s" else "10 us")
                              + " within a factor of 3; held-out fits in energy.json")
    compose = cal.compose.model_copy(update={
        "host": host, "fitted_on": notes,
        "produced_by": ("perfcast fit --stages energy (eager_op_s, diffusers_op_s); the rest are priors (see "
                        "fitted_on)")})
    return cal.with_compose(compose), folds


def _fit_engines(cal: Calibration, data: EnergyRows, log: Callable[[str], None]) -> Calibration:
    """Step 1 on every row and per held-out GPU: ``cal`` with the fitted engine in its serving coefficients."""
    serving_rows = data.by_kind.get("serving_energy", [])
    text_rows = [r for r in serving_rows if r.get("task") in ("v2-chat", "v2-code")]
    engine_rows = _sample(text_rows, ENGINE_ROWS_PER_GPU)
    gpus = sorted({r["gpu_id"] for r in engine_rows})
    log(f"fit energy: engine {ENGINE} on {len(engine_rows)} serving rows ({', '.join(gpus)})")
    full_engine = fit_engine(engine_rows, cal, log=log)
    serving = cal.serving
    held = dict(serving.held_out)
    for g in gpus:
        log(f"fit energy: engine {ENGINE} without {g}")
        fold = fit_engine([r for r in engine_rows if r["gpu_id"] != g], cal, log=log)
        base = held.get(g, ServingFit(engines=serving.engines, custom_allreduce=serving.custom_allreduce,
                                      stacks=serving.stacks))
        held[g] = base.model_copy(update={"engines": {**base.engines, ENGINE: fold}})
    for g, fold_fit in held.items():  # every other fold keeps the engine fitted on every row
        if g not in gpus:
            held[g] = fold_fit.model_copy(update={"engines": {**fold_fit.engines, ENGINE: full_engine}})
    fitted_on = dict(serving.fitted_on)
    fitted_on["engines"] = (fitted_on.get("engines", "") + f"; {ENGINE}: iteration_overhead_s, "
                            "per_sequence_overhead_s and tp_sync_per_layer_s on energy/llm_serving_energy.csv "
                            f"({len(engine_rows)} rows, {ENGINE_ROWS_PER_GPU} per GPU), log residuals of output "
                            "throughput (the rows' TPOT is not fitted: see fit_energy.ENGINE_TARGETS), "
                            "priors 3 ms, 0.2 ms and 0.3 ms within a factor of 3 (perfcast fit --stages energy)")
    serving = serving.model_copy(update={"engines": {**serving.engines, ENGINE: full_engine}, "held_out": held,
                                         "fitted_on": fitted_on})
    return cal.with_serving(serving)


def _fit_power(cal: Calibration, data: EnergyRows, log: Callable[[str], None],
               host_folds: dict[str, dict[str, float]]) -> tuple[Calibration, EnergyCoefficients]:
    """Step 2 on every row and per held-out GPU: ``cal`` with the fitted shares, and the energy coefficients."""
    power_rows = data.by_kind  # every visible row (a serving row simulates twice per point)
    meas, p0, slopes, row_gpus = power_slopes(power_rows, cal, log=log)
    full = fit_power(meas, p0, slopes)
    log(f"fit energy: power idle_frac={full.idle_frac:.3f} active_frac={full.active_frac:.3f} on {meas.size} rows")
    folds = {}
    gpu_arr = np.array(row_gpus)
    for g in sorted(set(row_gpus)):
        keep = gpu_arr != g
        host = cal.compose.host
        folds[g] = fit_power(meas[keep], p0[keep], slopes[keep]).model_copy(update={
            "eager_op_s": host_folds.get(g, {}).get("eager_op_s", host.eager_op_s),
            "diffusers_op_s": host_folds.get(g, {}).get("diffusers_op_s", host.diffusers_op_s)})
        log(f"  power without {g}: idle_frac={folds[g].idle_frac:.3f} active_frac={folds[g].active_frac:.3f}")
    counts = ", ".join(f"{k} {len(v)}" for k, v in power_rows.items())
    coeffs = EnergyCoefficients(
        schema_version=ENERGY_SCHEMA_VERSION, produced_by="perfcast fit --stages energy",
        idle_frac=full.idle_frac, active_frac=full.active_frac, eager_op_s=cal.compose.host.eager_op_s,
        diffusers_op_s=cal.compose.host.diffusers_op_s,
        held_out=folds,
        fitted_on={
            "idle_frac": f"energy/*.csv measured average power per GPU ({counts} rows: every visible row), "
                         "Huber loss on log ratios, prior 0.15 within a factor of 2",
            "active_frac": "the same rows and loss, prior 0.2 within a factor of 3",
            "eager_op_s": "the host time per eager kernel (also in compose.json): the latency of the batch-1 rows, "
                          "Huber loss on log errors, prior 10 us within a factor of 3",
            "diffusers_op_s": "the same for diffusers pipelines, on the latency of the text-to-image rows, prior "
                              "eager_op_s (of the same fold) within a factor of 3",
            "held_out": "per GPU: the same fit without that GPU's rows; the other GPUs' rows keep the times of the "
                        f"{ENGINE} engine fitted on every row (a second-order leak of the held-out GPU's throughput)",
        })
    kernel = full.apply(cal.kernel)
    kernel = kernel.model_copy(update={"fitted_on": {**kernel.fitted_on, "power": POWER_NOTE}})
    return cal.with_kernel(kernel), coeffs
