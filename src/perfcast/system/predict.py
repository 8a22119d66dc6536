"""``perfcast.predict``: one step on one GPU, or on the GPUs of one node (``dpN``, ``tpN``, ``ppN``).

One GPU's step is compose's (:func:`perfcast.compose.predict.predict`); a step over several GPUs adds what
they do together, priced by system's model (:mod:`perfcast.system.parallel`: the collectives and pipeline
schedules ``train`` uses), with its energy over all its GPUs and the memory of the most loaded one.
"""

from __future__ import annotations

import math
from dataclasses import replace

from perfcast.coefficients.bundle import Calibration
from perfcast.compose.energy import with_energy
from perfcast.compose.memory import step_memory
from perfcast.compose.predict import StepRequest, parse_parallelism, prepare
from perfcast.compose.predict import predict as predict_one_gpu
from perfcast.compose.types import StepTime
from perfcast.errors import ConfigError
from perfcast.system.parallel import (
    NodeStep,
    node_for,
    predict_data_parallel,
    predict_pipeline_parallel,
    predict_tensor_parallel,
)
from perfcast.system.training import LayerComm
from perfcast.workload.sharding import shard_tp
from perfcast.workload.types import Mode

__all__ = ["predict"]


def predict(req: StepRequest, calibration: Calibration | None = None) -> StepTime:
    """Predict one step (see :class:`perfcast.compose.predict.StepRequest`), with its energy over all its GPUs,
    mean power per GPU and the memory of one GPU (``StepTime.memory``). A step that does not fit is still
    predicted: ``memory.fits`` says whether it does. ``calibration``: the shipped one when None."""
    par = parse_parallelism(req.parallelism)
    if par.kind == "none":
        return predict_one_gpu(req, calibration)
    if req.microbatches is not None and par.kind != "pp":
        raise ConfigError(f"microbatches={req.microbatches} split the batch over pipeline stages: they need "
                          f"parallelism ppN (got {par})")
    step = prepare(req, calibration)
    cfg, hw, cal, build = step.cfg, step.hw, step.calibration, step.build
    co = cal.kernel
    n = par.degree
    node = NodeStep(hw, cal, LayerComm(node_for(hw, n), cal.collectives), fused=req.fused, framework=req.framework)
    if par.kind == "dp":
        st = predict_data_parallel(build, req.batch_size, n, node)
        memory = step_memory(build(req.batch_size // n), hw, gpus=n)
    elif par.kind == "tp":
        w = build(req.batch_size)
        st = predict_tensor_parallel(w, cfg, n, node)
        memory = step_memory(w, hw, ops=shard_tp(w.ops, n), gpus=n)
    else:
        st = predict_pipeline_parallel(build, cfg, req.batch_size, n, req.microbatches, node)
        m = req.microbatches or n
        layers = cfg.num_layers + (cfg.num_decoder_layers or 0)
        # the most loaded stage: a full share of the layers (1F1B: up to n micro-batches in flight)
        memory = step_memory(build(req.batch_size // m), hw, gpus=n, layer_frac=math.ceil(layers / n) / layers,
                             microbatches=m, in_flight=min(m, n) if step.mode is Mode.TRAINING else 1)
        # one op list per micro-batch, spread over the stages
        return replace(with_energy(st, hw, co, gpus=n, copies=m), memory=memory)
    return replace(with_energy(st, hw, co, gpus=n), memory=memory)
