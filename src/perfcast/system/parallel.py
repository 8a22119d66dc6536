"""One node's data-, tensor- or pipeline-parallel step (``predict --parallelism dpN | tpN | ppN``).

Each GPU's compute is one GPU's step (:func:`perfcast.compose.step.predict_step`); what the GPUs do together
is priced as ``train`` prices it:

- ``dpN``: each GPU runs ``batch / N``; in training the gradients (every parameter, in the training dtype)
  are all-reduced over the node with the collective NCCL would pick (:mod:`perfcast.system.collectives`),
  bucketed per layer and overlapped with the backward pass (:func:`perfcast.system.step.exposed_reduction_s`).
- ``tpN``: Megatron sharding of the op list (:func:`perfcast.workload.sharding.shard_tp`); every all-reduce
  the sharding inserts is priced by the same collectives and left exposed, as ``train --tp N`` leaves it
  without TP overlap.
- ``ppN``: the layers split into ``N`` stages (:func:`perfcast.system.training.split_layers`), the embedding
  on the first and the head on the last; ``m`` micro-batches run through the simulated schedule
  (:func:`perfcast.system.schedule.simulate_pipeline`: 1F1B in training, forward passes alone in inference)
  with the activation sends between stages; each stage then updates its own parameters.

The GPUs' collectives run on the node the GPU ships in (:func:`perfcast.system.cluster.cluster_for_gpu`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from perfcast.catalog.hardware import Hardware
from perfcast.catalog.models import ModelConfig
from perfcast.coefficients.bundle import Calibration
from perfcast.compose.step import predict_step
from perfcast.compose.types import OpTime, StepTime
from perfcast.errors import ConfigError
from perfcast.system.cluster import Cluster, cluster_for_gpu
from perfcast.system.schedule import simulate_pipeline
from perfcast.system.step import exposed_reduction_s
from perfcast.system.training import LayerComm, split_layers
from perfcast.workload.sharding import check_tp, shard_tp
from perfcast.workload.types import Mode, OpKind, Phase, Workload

__all__ = ["NodeStep", "node_for", "predict_data_parallel", "predict_pipeline_parallel", "predict_tensor_parallel"]


def node_for(hw: Hardware, gpus: int) -> Cluster:
    """The node ``gpus`` GPUs of ``hw`` share (raises ConfigError when they do not fit its scale-up domain)."""
    node = cluster_for_gpu(hw)
    if gpus > node.domain:
        raise ConfigError(f"{gpus} GPUs are more than the {node.domain} GPUs of one {node.id} node; use a degree "
                          f"up to {node.domain} (more GPUs: perfcast train, perfcast serve --num-replicas)")
    return node.with_nodes(1)


@dataclass(frozen=True)
class NodeStep:
    """How each GPU's step is composed (:func:`perfcast.compose.step.predict_step`) and how the GPUs
    communicate (``comm``: the node's collectives) and overlap (``calibration.training``)."""

    hw: Hardware
    calibration: Calibration
    comm: LayerComm
    fused: bool = False
    framework: str | None = None

    def step(self, w: Workload) -> StepTime:
        """One GPU's step of ``w``."""
        return predict_step(w, self.hw, calibration=self.calibration, fused=self.fused, framework=self.framework)


def _stretched(step: StepTime, time_s: float, comm_s: float) -> StepTime:
    """``step`` lasting ``time_s`` with ``comm_s`` exposed communication; its interval scaled alike."""
    f = time_s / step.time_s if step.time_s > 0 else 1.0
    return replace(step, time_s=time_s, low_s=step.low_s * f, high_s=step.high_s * f, comm_s=comm_s)


def _layers(w: Workload) -> int:
    """The layers a workload repeats (its largest op count), 1 for none."""
    return max((o.count for o in w.ops), default=1)


def predict_data_parallel(build: Callable[[int], Workload], batch: int, n: int, node: NodeStep) -> StepTime:
    """``dpN``: the per-GPU batch plus, in training, the exposed gradient all-reduce."""
    if batch % n:
        raise ConfigError(f"data parallelism dp{n} needs a batch divisible by {n} (got {batch})")
    w = build(batch // n)
    step = node.step(w)
    if w.mode is not Mode.TRAINING:
        return replace(step, parallelism=f"dp{n}", batch_size=batch)
    grad_bytes = sum(o.params * o.count * o.dtype.bytes for o in w.ops if o.phase is Phase.FORWARD)
    total = node.comm.time("all_reduce", grad_bytes, n, 1)
    exposed = float(exposed_reduction_s(total, step.by_phase_s.get("bwd", 0.0), _layers(w),
                                        node.calibration.training.overlap_interference))
    return replace(_stretched(step, step.time_s + exposed, step.comm_s + exposed), parallelism=f"dp{n}",
                   batch_size=batch)


def predict_tensor_parallel(w: Workload, cfg: ModelConfig, n: int, node: NodeStep) -> StepTime:
    """``tpN``: the sharded ops plus their all-reduces, exposed."""
    check_tp(cfg, n)
    ops = shard_tp(w.ops, n)
    compute = replace(w, ops=tuple(o for o in ops if o.kind is not OpKind.COMM), tp=n)
    step = node.step(compute)
    comm_s = sum(node.comm.time(o.op, o.bytes_read, n, 1) * o.count for o in ops if o.kind is OpKind.COMM)
    return replace(_stretched(step, step.time_s + comm_s, step.comm_s + comm_s), parallelism=f"tp{n}")


def _stage_of(times: tuple[OpTime, ...], n: int) -> list[int]:
    """The stage of each op: -1 for a repeated op (a layer's: every stage holds its share of the layers), 0 for
    an op named like one before the first layer in the forward (the embedding), the last for the others (head,
    loss)."""
    first: set[str] = set()
    for t in times:
        if t.op.count > 1:
            break
        if t.op.phase is Phase.FORWARD:
            first.add(t.op.name.split(".", 1)[0])
    return [-1 if t.op.count > 1 else (0 if t.op.name.split(".", 1)[0] in first else n - 1) for t in times]


def predict_pipeline_parallel(build: Callable[[int], Workload], cfg: ModelConfig, batch: int, n: int,
                              microbatches: int | None, node: NodeStep) -> StepTime:
    """``ppN``: ``m`` micro-batches (default ``N``) through ``N`` stages, simulated."""
    layers = cfg.num_layers + (cfg.num_decoder_layers or 0)
    if layers < n:
        raise ConfigError(f"pp{n} needs at least {n} layers; {cfg.id} has {layers}")
    m = microbatches or n
    if batch % m:
        raise ConfigError(f"pipeline parallelism with {m} micro-batches needs a batch divisible by {m} (got {batch})")
    w = build(batch // m)
    full = node.step(w)
    # each stage's device time carries the one-GPU step's host overhead (launch gaps, step overhead) pro rata
    scale = full.time_s / full.device_busy_s if full.device_busy_s > 0 else 1.0
    per_stage = split_layers(layers, n)
    fwd, bwd, params = [0.0] * n, [0.0] * n, [0.0] * n
    opt_s = 0.0
    for t, stage in zip(full.ops, _stage_of(full.ops, n), strict=True):
        shares = [(s, k / layers) for s, k in enumerate(per_stage)] if stage < 0 else [(stage, 1.0)]
        for s, share in shares:
            if t.op.phase is Phase.FORWARD:
                fwd[s] += t.total_s * share * scale
                params[s] += t.op.params * t.op.count * share
            elif t.op.phase is Phase.BACKWARD:
                bwd[s] += t.total_s * share * scale
            else:
                opt_s += t.total_s * share * scale
    training = w.mode is Mode.TRAINING
    act_bytes = (batch // m) * w.seq_len * cfg.hidden_size * w.dtype.bytes
    send = node.comm.time("send_recv", act_bytes, 2, 1)
    pipe = simulate_pipeline(fwd, bwd, m, schedule="1f1b", send_s=send, forward_only=not training)
    # the optimizer runs on every stage over its own parameters once the pipeline drains
    total_params = sum(params)
    tail = max(opt_s * p / total_params for p in params) if total_params > 0 else opt_s
    sends = (2 if training else 1) * m * send
    return replace(_stretched(full, pipe.time_s + tail, sends), parallelism=f"pp{n}", batch_size=batch)
