"""One call from (model, hardware, mode, batch, sequence, ...) to a StepTime."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from perfcast.catalog.defaults import default_dtype
from perfcast.catalog.hardware import Hardware, load_hardware
from perfcast.catalog.models import ModelConfig, load_model
from perfcast.compose.coefficients import ComposeCoefficients
from perfcast.compose.energy import with_energy
from perfcast.compose.memory import step_memory
from perfcast.compose.parallel import (
    StepOptions,
    parse_parallelism,
    predict_data_parallel,
    predict_pipeline_parallel,
    predict_tensor_parallel,
)
from perfcast.compose.types import StepTime
from perfcast.dtypes import DType, parse_dtype
from perfcast.errors import ConfigError
from perfcast.kernel.coefficients import Coefficients, load_coefficients
from perfcast.workload.build import WorkloadSpec, build_workload
from perfcast.workload.quantization import resolve_quantization
from perfcast.workload.sharding import shard_tp
from perfcast.workload.types import Mode, Workload

__all__ = ["StepRequest", "predict"]


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


def predict(req: StepRequest, coeffs: Coefficients | None = None,
            compose: ComposeCoefficients | None = None) -> StepTime:
    """Predict one step (see :class:`StepRequest`), with its energy over all its GPUs, mean power per GPU and
    one GPU's memory (``StepTime.memory``; :mod:`perfcast.compose.memory`). A step that does not fit is still
    predicted: ``memory.fits`` says whether it does."""
    cfg = load_model(req.model)
    hw = load_hardware(req.hardware) if not isinstance(req.hardware, Hardware) else req.hardware
    co = coeffs or load_coefficients()
    par = parse_parallelism(req.parallelism)
    mode = Mode(req.mode)
    if req.microbatches is not None and par.kind != "pp":
        raise ConfigError(f"microbatches={req.microbatches} split the batch over pipeline stages: they need "
                          f"parallelism ppN (got {par})")
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

    opts = StepOptions(fused=req.fused, framework=req.framework, compose=compose)
    n = par.degree
    if par.kind == "dp":
        step = predict_data_parallel(build, req.batch_size, n, hw, co, opts)
        memory = step_memory(build(req.batch_size // n), hw, gpus=n)
    elif par.kind == "tp":
        w = build(req.batch_size)
        step = predict_tensor_parallel(w, cfg, n, hw, co, opts)
        memory = step_memory(w, hw, ops=shard_tp(w.ops, n), gpus=n)
    elif par.kind == "pp":
        step = predict_pipeline_parallel(build, cfg, req.batch_size, n, req.microbatches, hw, co, opts)
        m = req.microbatches or n
        layers = cfg.num_layers + (cfg.num_decoder_layers or 0)
        # the most loaded stage: a full share of the layers (1F1B: up to n micro-batches in flight)
        memory = step_memory(build(req.batch_size // m), hw, gpus=n, layer_frac=math.ceil(layers / n) / layers,
                             microbatches=m, in_flight=min(m, n) if mode is Mode.TRAINING else 1)
        # one op list per micro-batch, spread over the stages
        return replace(with_energy(step, hw, co, gpus=n, copies=m), memory=memory)
    else:
        w = build(req.batch_size)
        step = opts.step(w, hw, co)
        memory = step_memory(w, hw)
    return replace(with_energy(step, hw, co, gpus=n), memory=memory)
