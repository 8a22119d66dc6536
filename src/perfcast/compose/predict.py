"""One call from (model, hardware, mode, batch, sequence, ...) to a StepTime."""

from __future__ import annotations

from dataclasses import dataclass, replace

from perfcast.catalog.defaults import default_dtype
from perfcast.catalog.hardware import Hardware, load_hardware
from perfcast.catalog.models import ModelConfig, load_model
from perfcast.compose.coefficients import ComposeCoefficients
from perfcast.compose.energy import with_energy
from perfcast.compose.parallel import (
    StepOptions,
    parse_parallelism,
    predict_data_parallel,
    predict_pipeline_parallel,
    predict_tensor_parallel,
)
from perfcast.compose.types import StepTime
from perfcast.dtypes import DType, parse_dtype
from perfcast.kernel.coefficients import Coefficients, load_coefficients
from perfcast.workload.build import WorkloadSpec, build_workload
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


def predict(req: StepRequest, coeffs: Coefficients | None = None,
            compose: ComposeCoefficients | None = None) -> StepTime:
    """Predict one step (see :class:`StepRequest`), with its energy over all its GPUs and mean power per GPU."""
    cfg = load_model(req.model)
    hw = load_hardware(req.hardware) if not isinstance(req.hardware, Hardware) else req.hardware
    co = coeffs or load_coefficients()
    par = parse_parallelism(req.parallelism)
    mode = Mode(req.mode)
    base = WorkloadSpec(mode, req.batch_size, req.seq_len, style=req.style, attention=req.attention,
                        optimizer=req.optimizer, loss=req.loss, accumulate_grads=req.accumulate_grads)
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
    elif par.kind == "tp":
        step = predict_tensor_parallel(build(req.batch_size), cfg, n, hw, co, opts)
    elif par.kind == "pp":
        step = predict_pipeline_parallel(build, cfg, req.batch_size, n, req.microbatches, hw, co, opts)
        # one op list per micro-batch, spread over the stages
        return with_energy(step, hw, co, gpus=n, copies=req.microbatches or n)
    else:
        step = opts.step(build(req.batch_size), hw, co)
    return with_energy(step, hw, co, gpus=n)
