"""Fit the serving coefficients on the online serving benchmarks (``serving_online/serving_online.csv``).

What the benchmarks see and the kernel and collective layers cannot: per engine, the CPU time an iteration
exposes and the front end's time per request; the engines' custom all-reduce latency; and, per software stack
off CUDA (ROCm), the share of the datasheet peaks its serving kernels reach. Each row's residuals are the log
ratios of predicted to measured throughput per GPU, median TPOT and median TTFT, the three figures a
deployment is chosen by.

The loss is Huber's on the log residuals (quadratic to 0.2, linear beyond), so that a group of rows the model
misses as a whole cannot drag a shared coefficient off the rows it explains. Every coefficient is held to a
prior (a Gaussian in its logarithm, of the width below), so that a fold whose rows cannot tell a coefficient
apart (no SGLang row, no AMD GPU) leaves it at its prior, and an engine without rows keeps its priors:

- the CPU time per iteration: 2 ms for vLLM (its Python scheduler, input preparation and sampling between
  steps), 0.5 ms for SGLang and 0.3 ms for TensorRT-LLM (an overlap scheduler or a C++ runtime hides most of
  theirs), within a factor of three; the front end's time per request: 10 ms, and per prompt token (tokenizing
  its text): 2 us (a fast tokenizer's half a million tokens per second), each within a factor of three;
- the custom all-reduce latency: 8 us (a flag handshake over NVLink/xGMI plus a launch), within a factor of two;
- ROCm's matrix rate: the ratio of the median BF16 MAMF efficiency of the AMD GPUs in ``published/gemm.csv`` to
  that of the NVIDIA GPUs there (the best GEMM each stack reaches, measured), within 30%; its memory rate: 1,
  within 20%.

The solver is Gauss-Newton with a damped step; each Jacobian column re-simulates only the rows the coefficient
touches (an engine's rows, the rows on more than one GPU, a stack's GPUs). ``fit_serving`` fits every visible
row and, per GPU, the same without that GPU's rows (``held_out``), which ``perfcast validate`` uses to print
the error leave-one-GPU-out.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from perfcast.catalog.hardware import load_hardware
from perfcast.coefficients.bundle import Calibration
from perfcast.coefficients.serving import (
    SERVING_SCHEMA_VERSION,
    CustomAllReduce,
    EngineOverhead,
    ServingCoefficients,
    ServingFit,
    StackEfficiency,
    stack_of,
)
from perfcast.errors import ConfigError
from perfcast.groundtruth.files import find_groundtruth, read_rows
from perfcast.groundtruth.online_tables import online_config, online_figures
from perfcast.serving.engines import load_engine
from perfcast.serving.experiments.run import Simulation, run_experiment
from perfcast.validate.mamf import mamf_efficiencies

__all__ = ["FIT_TARGETS", "Param", "fit_serving", "fit_serving_rows", "online_rows", "rocm_matrix_prior"]

FIT_TARGETS = ("total_tput_tok_s_per_gpu", "tpot_ms_median", "ttft_ms_median")
_STEP = 0.1  # finite-difference step in log(coefficient)
_HUBER = 0.2  # log residuals beyond this weigh linearly, not quadratically (a group the model misses, e.g.
# DeepSeek-R1 on SGLang/MI300X, must not drag a stack's coefficients off the rows it explains)
# the priors of the CPU times every engine shares (an engine's own iteration prior is its shipped value)
REQUEST_OVERHEAD_PRIOR_S = 0.01  # the API server's hand-off to the scheduler and the first token's way back
PROMPT_TOKEN_PRIOR_S = 2e-6  # tokenizing a prompt's text: a fast (Rust) tokenizer's ~0.5 M tokens/s on one core


@dataclass(frozen=True)
class Param:
    """One fitted coefficient: its place, prior (value and width in log units) and the rows it touches."""

    name: str
    prior: float
    log_sigma: float
    touches: Callable[[dict[str, str]], bool]


# each engine's prior CPU time per iteration (s): vLLM's Python scheduler, input preparation and sampling between
# steps; SGLang's overlap scheduler and TensorRT-LLM's C++ runtime hide most of theirs behind the GPU
_ITERATION_PRIORS_S = {"vllm": 2e-3, "sglang": 5e-4, "trtllm": 3e-4}


def rocm_matrix_prior(groundtruth: Path | None = None) -> tuple[float, str]:
    """The prior of ROCm's matrix-rate fraction and its source (module docstring)."""
    eff = mamf_efficiencies(groundtruth)
    amd: list[float] = []
    nvidia: list[float] = []
    for (gpu, kind), e in eff.items():
        if kind != "bf16":
            continue
        try:
            vendor = load_hardware(gpu).vendor
        except ConfigError:
            continue
        (amd if vendor == "amd" else nvidia if vendor == "nvidia" else []).append(e)
    if not amd or not nvidia:
        return 0.75, "default 0.75: published/gemm.csv has no BF16 MAMF rows of both vendors"
    value = float(np.median(amd) / np.median(nvidia))
    return value, (f"prior {value:.3f}: median BF16 MAMF efficiency of the AMD GPUs ({len(amd)}) over that of the "
                   f"NVIDIA GPUs ({len(nvidia)}) in published/gemm.csv")


def _engine(row: dict[str, str]) -> str:
    return load_engine((row.get("framework") or "").strip()).id


def _vendor(row: dict[str, str]) -> str:
    return load_hardware((row.get("gpu_id") or "").strip()).vendor


def _params(rows: Sequence[dict[str, str]], base: ServingCoefficients, rocm_prior: float) -> list[Param]:
    out: list[Param] = []
    for eng in sorted(base.engines):
        prior = base.engines[eng]
        it_prior = _ITERATION_PRIORS_S.get(eng, prior.iteration_overhead_s)
        out.append(Param(f"engines.{eng}.iteration_overhead_s", it_prior, math.log(3.0),
                         lambda r, e=eng: _engine(r) == e))  # type: ignore[misc]
        out.append(Param(f"engines.{eng}.request_overhead_s", REQUEST_OVERHEAD_PRIOR_S, math.log(3.0),
                         lambda r, e=eng: _engine(r) == e))  # type: ignore[misc]
        out.append(Param(f"engines.{eng}.prompt_token_overhead_s", PROMPT_TOKEN_PRIOR_S, math.log(3.0),
                         lambda r, e=eng: _engine(r) == e))  # type: ignore[misc]
    out.append(Param("custom_allreduce.latency_s", 8e-6, math.log(2.0),
                     lambda r: int(float(r.get("tp") or 1)) > 1))
    # always a coefficient, so that a fold without AMD rows holds it at its prior (not at a previous fit's value)
    out.append(Param("stacks.rocm.matrix_flops_frac", rocm_prior, 0.3, lambda r: stack_of(_vendor(r)) == "rocm"))
    out.append(Param("stacks.rocm.memory_bandwidth_frac", 1.0, 0.2, lambda r: stack_of(_vendor(r)) == "rocm"))
    return out


def _fit_of(base: ServingCoefficients, params: Sequence[Param], values: Sequence[float]) -> ServingFit:
    engines = {k: v.model_dump() for k, v in base.engines.items()}
    allreduce = base.custom_allreduce.model_dump()
    stacks = {k: v.model_dump() for k, v in base.stacks.items()}
    for p, v in zip(params, values, strict=True):
        part, *rest = p.name.split(".")
        if part == "engines":
            engines[rest[0]][rest[1]] = float(v)
        elif part == "custom_allreduce":
            allreduce[rest[0]] = float(v)
        else:
            stacks.setdefault(rest[0], StackEfficiency().model_dump())[rest[1]] = float(v)
    return ServingFit(engines={k: EngineOverhead(**v) for k, v in engines.items()},
                      custom_allreduce=CustomAllReduce(**allreduce),
                      stacks={k: StackEfficiency(**v) for k, v in stacks.items()})


def _residuals(rows: Sequence[dict[str, str]], cal: Calibration) -> np.ndarray:
    """Per row, the log ratio predicted / measured of each of :data:`FIT_TARGETS` (0 where either is missing)."""
    out = np.zeros((len(rows), len(FIT_TARGETS)))
    for i, row in enumerate(rows):
        cfg = online_config(row)
        res = run_experiment(Simulation(cfg, calibration=cal))
        fig = online_figures(res, cfg.tensor_parallel_size * cfg.num_replicas)
        for j, t in enumerate(FIT_TARGETS):
            try:
                measured = float(row.get(t) or "nan")
            except ValueError:
                measured = math.nan
            value = fig[t]
            if measured > 0 and value > 0 and math.isfinite(value):
                out[i, j] = math.log(value / measured)
    return out


def fit_serving_rows(rows: Sequence[dict[str, str]], cal: Calibration, *, iterations: int = 3,
                     label: str = "", log: Callable[[str], None] = lambda _m: None) -> ServingFit:
    """Fit the serving coefficients on ``rows`` (serving_online rows; module docstring), from ``cal``'s."""
    base = cal.serving
    rocm_prior, _ = rocm_matrix_prior()
    params = _params(rows, base, rocm_prior)
    touch = np.array([[p.touches(r) for p in params] for r in rows], dtype=bool)
    prior_x = np.log([p.prior for p in params])
    sigma = np.array([p.log_sigma for p in params])
    x = prior_x.copy()

    def cal_at(xx: np.ndarray) -> Calibration:
        return cal.with_serving(base.with_fit(_fit_of(base, params, np.exp(xx).tolist())))

    def huber(r: np.ndarray) -> np.ndarray:
        a = np.abs(r)
        return np.where(a <= _HUBER, r**2, 2.0 * _HUBER * a - _HUBER**2)

    def cost(r: np.ndarray, xx: np.ndarray) -> float:
        return float(huber(r).sum() + (((xx - prior_x) / sigma) ** 2).sum())

    r = _residuals(rows, cal_at(x))
    c = cost(r, x)
    log(f"fit serving{' (' + label + ')' if label else ''}: {len(rows)} rows, {len(params)} coefficients, "
        f"start rms log error {math.sqrt(float((r**2).mean())):.3f}")
    lam = 1e-2
    for it in range(iterations):
        jac = np.zeros((r.size, len(params)))
        for k in range(len(params)):
            idx = np.flatnonzero(touch[:, k])
            if not idx.size:
                continue
            xk = x.copy()
            xk[k] += _STEP
            rk = _residuals([rows[int(i)] for i in idx], cal_at(xk))
            d = np.zeros_like(r)
            d[idx] = (rk - r[idx]) / _STEP
            jac[:, k] = d.ravel()
        p_w = np.diag(1.0 / sigma**2)
        w = np.minimum(1.0, _HUBER / np.maximum(np.abs(r.ravel()), 1e-12))  # iteratively reweighted: Huber
        g = jac.T @ (w * r.ravel()) + p_w @ (x - prior_x)
        h = jac.T @ (w[:, None] * jac) + p_w
        while True:
            step = np.linalg.solve(h + lam * np.diag(np.diag(h)), -g)
            step = np.clip(step, -1.0, 1.0)
            x_new = x + step
            r_new = _residuals(rows, cal_at(x_new))
            c_new = cost(r_new, x_new)
            if c_new < c or lam > 1e3:
                break
            lam *= 10.0
        if c_new < c:
            x, r, c, lam = x_new, r_new, c_new, max(lam / 10.0, 1e-4)
        log(f"  iteration {it + 1}: rms log error {math.sqrt(float((r**2).mean())):.3f}; "
            + ", ".join(f"{p.name.split('.', 1)[1]}={v:.3g}" for p, v in zip(params, np.exp(x), strict=True)))
    return _fit_of(base, params, np.exp(x).tolist())


def online_rows(groundtruth: Path | None = None) -> list[dict[str, str]]:
    """The visible serving_online rows."""
    root = groundtruth or find_groundtruth()
    assert root is not None
    return list(read_rows(root / "serving_online" / "serving_online.csv"))


def fit_serving(cal: Calibration, *, groundtruth: Path | None = None, iterations: int = 3,
                log: Callable[[str], None] = lambda _m: None) -> ServingCoefficients:
    """Serving coefficients fitted on every visible serving_online row, with one fit per held-out GPU."""
    rows = online_rows(groundtruth)
    gpus = sorted({r["gpu_id"] for r in rows})
    full = fit_serving_rows(rows, cal, iterations=iterations, label="every GPU", log=log)
    held = {}
    for g in gpus:
        part = [r for r in rows if r["gpu_id"] != g]
        held[g] = fit_serving_rows(part, cal, iterations=iterations, label=f"{g} held out", log=log)
    rocm_prior, rocm_source = rocm_matrix_prior(groundtruth)
    base = cal.serving
    fitted_on = dict(base.fitted_on)
    engines = sorted({_engine(r) for r in rows})
    fitted_on["engines"] = (f"iteration_overhead_s and request_overhead_s of {', '.join(engines)}: "
                            f"serving_online.csv ({len(rows)} rows: {', '.join(gpus)}), log residuals of "
                            f"{', '.join(FIT_TARGETS)}, each held to its prior within a factor of 3; the other "
                            "engines keep their priors")
    fitted_on["custom_allreduce"] = ("latency_s: serving_online.csv rows on more than one GPU, prior 8 us within "
                                     "a factor of 2; bandwidth_frac: prior 0.7, not fitted")
    fitted_on["stacks"] = (f"rocm: serving_online.csv rows of AMD GPUs; matrix_flops_frac {rocm_source}, within "
                           "30%; memory_bandwidth_frac prior 1 within 20%")
    fitted_on["held_out"] = "per GPU: the same fit without that GPU's rows (perfcast validate's leave-one-GPU-out)"
    return ServingCoefficients(schema_version=SERVING_SCHEMA_VERSION, produced_by="perfcast fit --stages serving",
                               fitted_on=fitted_on, engines=full.engines, custom_allreduce=full.custom_allreduce,
                               stacks=full.stacks, held_out=held)
