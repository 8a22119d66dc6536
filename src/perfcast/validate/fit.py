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
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from perfcast.coefficients.bundle import Calibration, resolve_calibration
from perfcast.coefficients.dotted import get_path, set_path
from perfcast.coefficients.kernel import Coefficients
from perfcast.groundtruth.files import find_groundtruth
from perfcast.groundtruth.kernel_tables import KernelRows, load_kernel_rows, predict_kernel_rows
from perfcast.groundtruth.vidur_tables import load_vidur_rows, predict_vidur_rows, rows_ops
from perfcast.validate.optimize import fit_least_squares

__all__ = ["FitStage", "collective_interval_residuals", "fit_coefficients"]

_SOFT_L1_SCALE = 0.15
MATRIX_TO_SIMT_ENERGY = 0.7


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
        ("launch.dispatch_s.vector", "log"),
    ),
    "neusight/kernels_vector.csv.gz split=train",
)
GEMM_STAGE = FitStage(
    "gemm",
    (
        ("power.simt_per_tensor_energy", "log"),
        ("gemm.paths.simt.max_efficiency", "logit"), ("gemm.paths.simt.k_overhead", "log"),
        ("gemm.paths.simt.tile_ai0", "log"), ("gemm.paths.simt.memory_efficiency", "logit"),
        ("launch.dispatch_s.bmm", "log"), ("launch.dispatch_s.linear", "log"),
        ("measurement.burst_tau_s", "log"),
    ),
    "neusight/kernels_gemm.csv.gz split=train",
)
TENSOR_STAGE = FitStage(
    "tensor",
    (
        ("power.energy_pJ_per_flop_7nm.tensor", "log"),
        ("gemm.paths.tensor.max_efficiency", "logit"), ("gemm.paths.tensor.k_overhead", "log"),
        ("gemm.paths.tensor.tile_ai0", "log"), ("gemm.paths.tensor.memory_efficiency", "logit"),
        # engine kernels stream at the DRAM efficiency fitted on the NeuSight vector table; what a
        # single GPU can identify is their extra issue cost per element (SM cycles)
        ("vector.sm_cycles_per_elem.rmsnorm", "log"), ("vector.sm_cycles_per_elem.rope", "log"),
        ("vector.sm_cycles_per_elem.silu_mul", "log"), ("vector.sm_cycles_per_elem.embedding", "log"),
        # CUPTI kernel durations (no host time) pin the kernel floor and the per-op fixed latencies
        ("launch.kernel_min_s", "log"), ("vector.min_time_s.rmsnorm", "log"), ("vector.min_time_s.rope", "log"),
        ("vector.min_time_s.silu_mul", "log"), ("vector.min_time_s.embedding", "log"), ("vector.l2_hit_frac", "logit"),
    ),
    "vidur/compute/*/*/mlp.csv (all rows; no split)",
)
ATTENTION_STAGE = FitStage(
    "attention",
    (("attention.compute_efficiency", "logit"), ("attention.memory_efficiency", "logit"),
     ("attention.fixed_s", "log"), ("attention.per_sequence_s", "log")),
    "vidur/legacy/compute/a100/attention_*.csv.gz (A100 FlashAttention, paged KV; all rows)",
)
CONV_STAGE = FitStage(
    "conv",
    # kernels_per_call stays at its prior (3: input transform, GEMM, output transform)
    (("conv.efficiency", "log"), ("conv.winograd_speedup", "log"), ("conv.memory_factor", "log")),
    "neusight/kernels_conv.csv.gz split=train",
)


class _Data:
    """Measured values and a predictor of the same shape, for one fitting stage."""

    def __init__(self, measured: np.ndarray, predict: Callable[[Coefficients], np.ndarray], rows: int) -> None:
        self.measured = measured
        self.predict = predict
        self.rows = rows


def _fit_stage(stage: FitStage, base: Coefficients, data: _Data, log: Callable[[str], None]) -> Coefficients:
    raw = base.model_dump(mode="json")
    names = [p for p, _ in stage.params]
    kinds = [k for _, k in stage.params]
    x0 = [get_path(raw, p) for p in names]
    measured = data.measured
    valid = np.isfinite(measured) & (measured > 0)
    # kernels that matter for whole-model time are the long ones; short calls are dominated by the
    # host dispatch of whatever machine ran the benchmark, so they weigh less
    weight = np.sqrt(np.clip(np.where(valid, measured, 1.0) / 2e-4, 0.05, 1.0))

    def make(x: np.ndarray) -> Coefficients:
        r = copy.deepcopy(raw)
        for p, v in zip(names, x, strict=True):
            set_path(r, p, v)
        return Coefficients.model_validate(r)

    def residuals(x: np.ndarray) -> np.ndarray:
        pred = data.predict(make(x))
        r = weight[valid] * np.log(pred[valid] / measured[valid]) / _SOFT_L1_SCALE
        # soft-L1 loss: quadratic near zero, linear in the tails (a few pathological kernels,
        # e.g. K > 50k on Pascal, must not drag the global coefficients)
        return _SOFT_L1_SCALE * np.sign(r) * np.sqrt(2.0 * (np.sqrt(1.0 + r * r) - 1.0))

    x, mse = fit_least_squares(residuals, x0, kinds)
    log(f"fit {stage.name}: {data.rows} rows, {int(valid.sum())} values, rms robust log error {np.sqrt(mse):.3f}")
    for p, v in zip(names, x, strict=True):
        log(f"  {p} = {v:.6g}")
    return make(x)


def _predict_kernels(rows: KernelRows, coeffs: Coefficients) -> np.ndarray:
    return predict_kernel_rows(rows, coeffs)


def _predict_attention(rows: Any, coeffs: Coefficients) -> np.ndarray:
    from perfcast.groundtruth.attention_tables import predict_attention_rows

    return predict_attention_rows(rows, coeffs)


def _vidur_data(root: Path, *, gpus: Sequence[str] | None, per_group: int, seed: int) -> tuple[_Data, str]:
    paths = sorted((root / "vidur" / "compute").glob("*/*/mlp.csv*"))
    rows = load_vidur_rows(paths)
    if gpus:
        rows = rows.subset(np.isin(rows.gpu, list(gpus)))
    rng = np.random.default_rng(seed)
    keep = np.zeros(len(rows), dtype=bool)
    for gpu in np.unique(rows.gpu):
        idx = np.flatnonzero(rows.gpu == gpu)
        keep[rng.choice(idx, min(per_group, idx.size), replace=False)] = True
    rows = rows.subset(keep)
    prepared = rows_ops(rows)
    measured = rows.measured_s.reshape(-1)
    data = _Data(measured, lambda c: predict_vidur_rows(rows, c, prepared).reshape(-1), len(rows))
    where = ",".join(sorted(np.unique(rows.gpu))) if gpus else "all GPUs"
    return data, f"vidur/compute/*/*/mlp.csv, {where} ({len(rows)} rows sampled, seed {seed})"


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


def fit_coefficients(groundtruth: Path | None = None, *, calibration: Calibration | None = None,
                     stages: Sequence[str] = ("vector", "gemm", "conv", "tensor", "attention"), per_group: int = 1500,
                     seed: int = 0, tensor_gpus: Sequence[str] | None = None, exclude_devices: Sequence[str] = (),
                     held_out: bool = True, log: Callable[[str], None] = print) -> Coefficients:
    """Fit the requested stages in order, starting from ``calibration``'s kernel coefficients (the shipped ones
    when None); returns the new kernel coefficients.

    ``exclude_devices`` (NeuSight device ids) leaves those GPUs' rows out of the NeuSight kernel stages (vector,
    gemm, conv). With ``held_out`` the result also keeps, per GPU those stages fitted on, the same stages fitted
    without its rows (:func:`fit_held_out`)."""
    root = groundtruth or find_groundtruth()
    assert root is not None
    base = resolve_calibration(calibration)
    co = base.kernel
    fitted_on = dict(co.fitted_on)
    fitted_on.pop("all", None)
    for name in stages:
        if name == "tensor":
            data, desc = _vidur_data(root, gpus=tensor_gpus, per_group=per_group, seed=seed)
            stage = TENSOR_STAGE
        elif name == "attention":
            from perfcast.groundtruth.attention_tables import load_attention_rows

            path = sorted((root / "vidur" / "legacy" / "compute").glob("*/attention_*.csv*"))[0]
            arows = load_attention_rows(path)
            arows = arows.subset(np.isfinite(arows.measured_s))
            data = _Data(arows.measured_s, functools.partial(_predict_attention, arows), len(arows))
            stage = ATTENTION_STAGE
            desc = f"{stage.description} ({len(arows)} rows)"
        else:
            stage = _NEUSIGHT_STAGES[name][1]
            rows = _sample(_train_rows(root, name, exclude_devices), per_group, seed)
            data = _Data(rows.latency_s, functools.partial(_predict_kernels, rows), len(rows))
            desc = f"{stage.description} ({len(rows)} rows sampled, seed {seed})"
        co = _fit_stage(stage, co, data, log)
        fitted_on[name] = desc
    if "gemm" in stages or "conv" in stages:
        co = _fit_cuda_core_energy(co, root, per_group=per_group, seed=seed, exclude_devices=exclude_devices,
                                   log=log)
        fitted_on["power"] = POWER_NOTE
    raw = co.model_dump(mode="json")
    if "gemm" in stages:
        # FP32 on AMD matrix cores reuses operands inside the unit; no FP32 MFMA rows are visible to
        # fit its energy, so it is a fixed fraction of the fitted CUDA-core energy (a prior)
        simt = raw["power"]["energy_pJ_per_flop_7nm"]["simt"]
        raw["power"]["energy_pJ_per_flop_7nm"]["matrix"] = MATRIX_TO_SIMT_ENERGY * simt
    if "tensor" in stages:
        # AMD's FP32 matrix cores (MFMA) are matrix units like tensor cores: no FP32 MFMA rows are
        # visible for fitting, so they take the tensor-core GEMM shape terms (their own peak and power)
        for key in ("max_efficiency", "k_overhead", "tile_ai0", "memory_efficiency"):
            raw["gemm"]["paths"]["matrix"][key] = raw["gemm"]["paths"]["tensor"][key]
        fitted_on["matrix"] = "no visible rows: GEMM terms copied from the tensor stage"
    raw["fitted_on"] = fitted_on
    raw["produced_by"] = "perfcast fit --stages " + ",".join(stages)
    co = Coefficients.model_validate(raw)
    kernel_stages = [s for s in stages if s in _NEUSIGHT_STAGES]
    if held_out and kernel_stages and not exclude_devices:
        co = with_held_out(co, fit_held_out(base.with_kernel(co), root, stages=kernel_stages, per_group=per_group,
                                            seed=seed, log=log))
    return co


POWER_STAGE = FitStage(
    "power",
    (("power.simt_per_tensor_energy", "log"),),
    "power.simt_per_tensor_energy refitted on neusight/kernels_gemm and kernels_conv split=train together (every "
    "FP32 CUDA-core kernel row)",
)


POWER_NOTE = ("simt_per_tensor_energy (boards with a base clock) fitted with the gemm stage, then on the gemm and "
              "conv train rows together; energy_pJ_per_flop_7nm.simt is the process-node energy of boards without "
              "a base clock (the last fit before the base-clock anchor, kept as a prior), .matrix 0.7x it, .tensor "
              "fitted with the tensor stage (they set the sustained clock); idle_frac and active_frac fitted on "
              "measured GPU power (perfcast fit --stages energy, see energy.json); leakage_frac, vmin_frac, "
              "process_exponent, memory_pJ_per_bit and flop_per_dram_byte are priors")


def _fit_cuda_core_energy(co: Coefficients, root: Path, *, per_group: int, seed: int,
                          exclude_devices: Sequence[str], log: Callable[[str], None]) -> Coefficients:
    """The CUDA-core energy ratio fitted again on the GEMM and convolution train rows together: it sets how far
    every FP32 CUDA-core kernel throttles, and the two tables see different GPUs throttle differently (T4's
    convolutions run at a clock its GEMM sweep does not reach)."""
    parts = [_sample(_train_rows(root, kind, exclude_devices), per_group, seed) for kind in ("gemm", "conv")]
    data = _Data(np.concatenate([r.latency_s for r in parts]),
                 lambda c: np.concatenate([predict_kernel_rows(r, c) for r in parts]), sum(len(r) for r in parts))
    return _fit_stage(POWER_STAGE, co, data, log)


@functools.lru_cache(maxsize=3)
def _kernel_table(path: Path, kind: str) -> KernelRows:
    """A NeuSight kernel table, read once per process (a fit and its held-out refits read each one many times)."""
    return load_kernel_rows(path, kind)


def _train_rows(root: Path, kind: str, exclude_devices: Sequence[str] = ()) -> KernelRows:
    """The ``split=train`` rows with a measured latency of NeuSight's ``kind`` kernel table (vector, gemm, conv),
    without ``exclude_devices``' rows."""
    rows = _kernel_table(root / "neusight" / f"{_NEUSIGHT_STAGES[kind][0]}.csv.gz", kind)
    return rows.subset((rows.split == "train") & np.isfinite(rows.latency_s)
                       & ~np.isin(rows.device, list(exclude_devices)))


_MATRIX_ENERGY = "power.energy_pJ_per_flop_7nm.matrix"  # set from the CUDA-core energy by the gemm stage
_NEUSIGHT_STAGES = {"vector": ("kernels_vector", VECTOR_STAGE), "gemm": ("kernels_gemm", GEMM_STAGE),
                    "conv": ("kernels_conv", CONV_STAGE)}


def with_held_out(co: Coefficients, folds: dict[str, dict[str, float]]) -> Coefficients:
    """``co`` with ``folds`` merged into its held-out fits (a GPU's new values replace its stored ones)."""
    fitted = ({p for _, stage in _NEUSIGHT_STAGES.values() for p, _ in stage.params} | {_MATRIX_ENERGY}
              | {p for p, _ in POWER_STAGE.params})
    # a value of a stage's earlier parameterization is dropped, not carried into the fold
    held = {g: {p: x for p, x in v.items() if p in fitted} for g, v in co.held_out.items()}
    for gpu, fold in folds.items():
        held.setdefault(gpu, {}).update(fold)
    fitted_on = {**co.fitted_on, "held_out": "per GPU: the NeuSight kernel stages (vector, gemm, conv; power with "
                                             "gemm or conv) it has split=train rows in, fitted again without them "
                                             "(perfcast validate's leave-one-GPU-out)"}
    return co.model_copy(update={"held_out": held, "fitted_on": fitted_on})


def fit_held_out(cal: Calibration, groundtruth: Path | None = None, *,
                 stages: Sequence[str] = ("vector", "gemm", "conv"), per_group: int = 1500, seed: int = 0,
                 log: Callable[[str], None] = print) -> dict[str, dict[str, float]]:
    """Per GPU with fitted rows in the NeuSight kernel ``stages``: those of the stages it has rows in, fitted
    again from ``cal``'s kernel coefficients without its rows; the fitted values by dotted path, keyed by the
    GPU's catalog id (:attr:`Coefficients.held_out`)."""
    from perfcast.catalog.hardware import load_hardware
    from perfcast.kernel.power import memory_kind

    root = groundtruth or find_groundtruth()
    assert root is not None
    has_rows: dict[str, list[str]] = {}
    vector_devices: set[str] = set()
    for name in stages:
        for dev in np.unique(_train_rows(root, name).device):
            has_rows.setdefault(str(dev), []).append(name)
            if name == "vector":
                vector_devices.add(str(dev))
    folds: dict[str, dict[str, float]] = {}
    for dev, dev_stages in sorted(has_rows.items()):
        log(f"fit {', '.join(dev_stages)} without {dev}")
        fold = fit_coefficients(root, calibration=cal, stages=dev_stages, per_group=per_group, seed=seed,
                                exclude_devices=[dev], held_out=False, log=lambda _m: None)
        raw = fold.model_dump(mode="json")
        paths = [p for name in dev_stages for p, _ in _NEUSIGHT_STAGES[name][1].params]
        if "gemm" in dev_stages:
            paths.append(_MATRIX_ENERGY)
        if "gemm" in dev_stages or "conv" in dev_stages:
            paths += [p for p, _ in POWER_STAGE.params if p not in paths]
        values = {p: get_path(raw, p) for p in paths}
        hw = load_hardware(dev)
        if "vector" in dev_stages and not any(memory_kind(load_hardware(str(d))) == memory_kind(hw)
                                              for d in vector_devices - {dev}):
            # the only GPU with its memory kind: without it nothing fits that kind's streaming efficiency,
            # which then takes the other kind's (the full fit's value would carry this GPU's own rows)
            other = "hbm" if memory_kind(hw) == "gddr" else "gddr"
            values[f"vector.memory_efficiency.{memory_kind(hw)}"] = values[f"vector.memory_efficiency.{other}"]
        folds[hw.id] = values
    return folds


def _log_ratio(measured: np.ndarray, predicted: np.ndarray) -> np.ndarray:
    ok = np.isfinite(measured) & np.isfinite(predicted) & (measured > 0) & (predicted > 0)
    return np.log(measured[ok] / predicted[ok])


def fit_intervals(cal: Calibration, groundtruth: Path | None = None, *,
                  quantiles: tuple[float, float] = (0.05, 0.95),
                  log: Callable[[str], None] = lambda _m: None) -> dict[str, Any]:
    """Prediction-interval quantiles of the log error ``log(measured / predicted)`` per prediction kind.

    kernel: NeuSight kernel rows with ``split=test`` (out of sample); vidur_op:
    VIDUR rows predicted leave-one-GPU-out; step: NeuSight end-to-end rows (never
    fitted on); gemm_published: published GEMM TFLOP/s rows; collective: VIDUR network and
    published collective rows predicted leave-one-cluster-out (refits start from the priors
    recorded in ``cal.collectives``). Everything else is predicted with ``cal``.
    """
    from perfcast.coefficients.intervals import INTERVAL_SCHEMA_VERSION
    from perfcast.groundtruth.predict_batch import predict_batch

    root = groundtruth or find_groundtruth()
    assert root is not None
    coeffs = cal.kernel
    kinds: dict[str, dict[str, Any]] = {}

    def add(name: str, resid: np.ndarray, source: str, qs: tuple[float, float] = quantiles) -> None:
        lo, hi = (float(np.quantile(resid, q)) for q in qs)
        kinds[name] = {"log_low": round(lo, 5), "log_high": round(hi, 5), "coverage_target": round(qs[1] - qs[0], 4),
                       "residuals": int(resid.size), "source": source}
        log(f"interval {name}: [{np.exp(lo):.3f}, {np.exp(hi):.3f}] x prediction from {resid.size} residuals")

    resid = []
    for fname, kind in (("kernels_gemm", "gemm"), ("kernels_vector", "vector")):
        rows = load_kernel_rows(root / "neusight" / f"{fname}.csv.gz", kind)
        rows = rows.subset(rows.split == "test")
        resid.append(_log_ratio(rows.latency_s, predict_kernel_rows(rows, coeffs)))
    add("kernel", np.concatenate(resid), "neusight kernels_gemm/kernels_vector split=test")

    paths = sorted((root / "vidur" / "compute").glob("*/*/mlp.csv*"))
    all_rows = load_vidur_rows(paths)
    vres = []
    for gpu in np.unique(all_rows.gpu):
        others = [g for g in np.unique(all_rows.gpu) if g != gpu]
        co = fit_coefficients(root, calibration=cal, stages=("tensor",), tensor_gpus=others, per_group=600,
                              log=lambda _m: None) if others else coeffs
        vrows = all_rows.subset(all_rows.gpu == gpu)
        vres.append(_log_ratio(vrows.measured_s.reshape(-1), predict_vidur_rows(vrows, co).reshape(-1)))
    add("vidur_op", np.concatenate(vres), "vidur/compute per-op medians, leave-one-GPU-out")

    eres = []
    for name in ("e2e.csv", "e2e_extra.csv"):
        res = predict_batch(root / "neusight" / name, cal)
        eres.append(_log_ratio(res.measured("measured_ms"), res.prediction.pred["measured_ms"]))
    # errors of one device are correlated, so the step interval takes the outer quantiles: a
    # device never seen behaves like the worst of the seen ones (coverage is reported leave-one-GPU-out)
    add("step", np.concatenate(eres), "neusight e2e.csv + e2e_extra.csv (never fitted on), 2.5-97.5% quantiles",
        (0.025, 0.975))

    from perfcast.groundtruth.attention_tables import load_attention_rows, predict_attention_rows

    apath = sorted((root / "vidur" / "legacy" / "compute").glob("*/attention_*.csv*"))[0]
    arows = load_attention_rows(apath)
    add("attention", _log_ratio(arows.measured_s, predict_attention_rows(arows, coeffs)),
        "vidur legacy A100 attention table (in-sample: the attention stage is fitted on it)")

    res = predict_batch(root / "published" / "gemm.csv", cal)
    add("gemm_published", _log_ratio(res.measured("tflops"), res.prediction.pred["tflops"])
        * -1.0, "published/gemm.csv (TFLOP/s; the ratio is inverted to a time ratio)")
    # TFLOP/s is inverse to time: an interval on time maps to the reversed interval on TFLOP/s
    g = kinds["gemm_published"]
    g["log_low"], g["log_high"] = -g["log_high"], -g["log_low"]
    add(*collective_interval_residuals(root, cal))
    add(*training_interval_residuals(root, cal, log=log))
    return {"schema_version": INTERVAL_SCHEMA_VERSION, "produced_by": "perfcast fit --intervals",
            "quantiles": list(quantiles), "kinds": kinds}


def collective_interval_residuals(root: Path, cal: Calibration) -> tuple[str, np.ndarray, str]:
    """The ``collective`` interval kind: log(measured / predicted), every cluster leave-one-cluster-out (refits
    start from the priors of ``cal.collectives``)."""
    from perfcast.validate.fit_collectives import leave_one_cluster_out, load_collective_rows

    rows, labels = load_collective_rows(root)
    pred, _ = leave_one_cluster_out(rows, labels, calibration=cal)
    return ("collective", _log_ratio(rows.measured_s, pred),
            "vidur/network + published/collectives.csv, leave-one-cluster-out")


def training_interval_residuals(root: Path, cal: Calibration,
                                log: Callable[[str], None] = lambda _m: None) -> tuple[str, np.ndarray, str]:
    """The ``training`` interval kind: log(measured / predicted step time) of published training rows, each GPU
    predicted with training coefficients refitted on the other GPUs' rows."""
    from perfcast.validate.fit_training import logo_training, training_cases

    cases = training_cases(root / "published" / "training.csv")
    log(f"training interval: leave-one-GPU-out over {len(cases)} published rows")
    resid = np.concatenate(list(logo_training(cases, cal).values()))
    return "training", resid, "published/training.csv, leave-one-GPU-out (throughput ratios as step-time ratios)"


HOST_PARAMS = (("host.eager_op_s", "log"), ("host.eager_training_op_s", "log"))


def fit_host(cal: Calibration, groundtruth: Path | None = None, *, exclude_devices: Sequence[str] = (),
             log: Callable[[str], None] = lambda _m: None) -> Any:
    """Fit the host time per eager kernel (inference and training forward) on NeuSight end-to-end rows.

    ``cal``'s kernel coefficients stay fixed (fitted on kernel tables) and its composition coefficients are
    the start; only the host-side
    dispatch cost of eager PyTorch, which no kernel table can show, is fitted here.
    ``exclude_devices`` leaves devices out (``perfcast validate`` predicts each device
    with this fitted on the other devices only).
    """
    from perfcast.coefficients.compose import ComposeCoefficients
    from perfcast.groundtruth.files import read_rows
    from perfcast.groundtruth.tables import predict_e2e

    root = groundtruth or find_groundtruth()
    assert root is not None
    cc = cal.compose
    rows = [r for name in ("e2e.csv", "e2e_extra.csv") for r in read_rows(root / "neusight" / name)]
    rows = [r for r in rows if r["device"] not in set(exclude_devices) and r.get("measured_ms")]
    measured = np.array([float(r["measured_ms"]) for r in rows])
    raw = cc.model_dump(mode="json")
    names = [p for p, _ in HOST_PARAMS]

    def make(x: np.ndarray) -> ComposeCoefficients:
        r = copy.deepcopy(raw)
        for p, v in zip(names, x, strict=True):
            set_path(r, p, v)
        return ComposeCoefficients.model_validate(r)

    def residuals(x: np.ndarray) -> np.ndarray:
        pred = predict_e2e(rows, cal.with_compose(make(x))).pred["measured_ms"]
        return np.log(pred / measured)

    x, mse = fit_least_squares(residuals, [get_path(raw, p) for p in names], [k for _, k in HOST_PARAMS])
    log(f"fit host: {len(rows)} end-to-end rows, rms log error {np.sqrt(mse):.3f}")
    for p, v in zip(names, x, strict=True):
        log(f"  {p} = {v:.6g}")
    out = make(x).model_dump(mode="json")
    excluded = f" without {', '.join(exclude_devices)}" if exclude_devices else ""
    out["fitted_on"] = {**out["fitted_on"], "host": f"neusight e2e.csv + e2e_extra.csv{excluded} ({len(rows)} rows)"}
    out["produced_by"] = "perfcast fit (host stage)"
    return ComposeCoefficients.model_validate(out)
