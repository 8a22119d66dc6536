"""A step request, and one call from (model, hardware, mode, batch, sequence, ...) to one GPU's StepTime.

A request spanning GPUs (``dpN``, ``tpN``, ``ppN``) is priced a layer up, by :func:`perfcast.system.predict.predict`
(system's collectives and pipeline schedules); this module reads the request and prices one GPU's step.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace

from perfcast.catalog.defaults import default_dtype
from perfcast.catalog.hardware import Hardware, alone_on_board, load_hardware
from perfcast.catalog.models import ModelConfig, load_model
from perfcast.coefficients.bundle import Calibration, resolve_calibration
from perfcast.compose.energy import with_energy
from perfcast.compose.memory import step_memory
from perfcast.compose.step import predict_step
from perfcast.compose.types import StepTime
from perfcast.dtypes import DType, parse_dtype
from perfcast.errors import ConfigError
from perfcast.workload.build import WorkloadSpec, build_workload
from perfcast.workload.quantization import resolve_quantization
from perfcast.workload.types import Mode, Workload

__all__ = ["Parallelism", "PreparedStep", "StepRequest", "parse_parallelism", "predict", "prepare"]


@dataclass(frozen=True, slots=True)
class Parallelism:
    """A parsed ``none`` / ``dpN`` / ``tpN`` / ``ppN`` request: ``kind`` and the number of GPUs ``degree``."""

    kind: str
    degree: int

    def __str__(self) -> str:
        return "none" if self.kind == "none" else f"{self.kind}{self.degree}"


def parse_parallelism(text: str) -> Parallelism:
    """Read ``none``, ``dp4``, ``tp2``, ``pp4`` (raises ConfigError)."""
    t = (text or "none").strip().lower()
    if t in ("none", "", "1"):
        return Parallelism("none", 1)
    m = re.fullmatch(r"(dp|tp|pp)(\d+)", t)
    if not m or int(m.group(2)) < 1:
        raise ConfigError(f"unknown parallelism {text!r}; use none, dpN, tpN or ppN (e.g. dp4, tp4, pp4)")
    return Parallelism(m.group(1), int(m.group(2)))


@dataclass(frozen=True, slots=True)
class StepRequest:
    """What to predict: one step of ``model`` on ``hardware``.

    ``mode`` is inference (one forward pass), training (forward + backward +
    optimizer unless ``optimizer='none'``), prefill or decode. ``parallelism`` is
    ``none``, ``dpN``, ``tpN`` or ``ppN`` (GPUs of one node). ``dtype`` None is the
    checkpoint's (:func:`perfcast.catalog.defaults.default_dtype`, the rule
    ``train`` and ``serve`` use too; a serving engine's for the engine style).
    ``quantization`` (inference modes; :mod:`perfcast.workload.quantization`)
    defaults to the checkpoint's own, run as ``hardware`` runs it; training runs
    in ``dtype``.
    """

    model: str | ModelConfig
    hardware: str | Hardware
    mode: Mode = Mode.INFERENCE
    batch_size: int = 1
    seq_len: int = 512
    dtype: DType | str | None = None
    fused: bool = False
    parallelism: str = "none"
    microbatches: int | None = None
    style: str | None = None
    attention: str | None = None
    optimizer: str = "adam"
    loss: bool = True
    accumulate_grads: bool = False
    framework: str | None = None
    quantization: str = "auto"


@dataclass(frozen=True)
class PreparedStep:
    """A request resolved against the catalogs: the model, the device, the kernel coefficients, the mode and
    ``build(batch)``, the workload of ``batch`` sequences in the request's dtype and style."""

    cfg: ModelConfig
    hw: Hardware
    calibration: Calibration
    mode: Mode
    build: Callable[[int], Workload]


def prepare(req: StepRequest, calibration: Calibration | None = None) -> PreparedStep:
    """Resolve ``req``'s model, device, dtype and quantization (raises ConfigError on a request that mixes
    what does not apply: quantizing a training step)."""
    cfg = load_model(req.model)
    hw = load_hardware(req.hardware) if not isinstance(req.hardware, Hardware) else req.hardware
    mode = Mode(req.mode)
    if mode is Mode.TRAINING and req.quantization not in ("auto", "none"):
        raise ConfigError(f"quantization {req.quantization} applies to inference modes; training runs in its dtype "
                          "(QLoRA: perfcast train --lora-rank R --qlora)")
    base = WorkloadSpec(mode, req.batch_size, req.seq_len, style=req.style, attention=req.attention,
                        optimizer=req.optimizer, loss=req.loss, accumulate_grads=req.accumulate_grads,
                        quantization=resolve_quantization(cfg, req.quantization, hw))
    if req.dtype is None:
        dtype = default_dtype(cfg, hw, engine=base.resolved_style == "engine")
    else:
        dtype = parse_dtype(req.dtype)

    def build(batch: int) -> Workload:
        return build_workload(cfg, replace(base, batch_size=batch, dtype=dtype))

    return PreparedStep(cfg, hw, resolve_calibration(calibration), mode, build)


def predict(req: StepRequest, calibration: Calibration | None = None) -> StepTime:
    """Predict one GPU's step (see :class:`StepRequest`), with its energy, mean power and memory
    (``StepTime.memory``; :mod:`perfcast.compose.memory`). A step that does not fit is still predicted:
    ``memory.fits`` says whether it does. A request over several GPUs (``dpN``, ``tpN``, ``ppN``) is
    :func:`perfcast.system.predict.predict`'s (``perfcast.predict``)."""
    par = parse_parallelism(req.parallelism)
    if par.kind != "none":
        raise ConfigError(f"parallelism {par} spans {par.degree} GPUs: perfcast.predict (perfcast.system.predict) "
                          "prices it with the collectives and pipeline schedules of a node")
    if req.microbatches is not None:
        raise ConfigError(f"microbatches={req.microbatches} split the batch over pipeline stages: they need "
                          "parallelism ppN (got none)")
    step = prepare(req, calibration)
    w = step.build(req.batch_size)
    hw = alone_on_board(step.hw)  # one device: the other dies of a multi-die board idle
    st = predict_step(w, hw, calibration=step.calibration, fused=req.fused, framework=req.framework)
    return replace(with_energy(st, hw, step.calibration.kernel), memory=step_memory(w, hw))
