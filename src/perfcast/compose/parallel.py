"""A first model of 4-GPU data, tensor and pipeline parallelism on one node.

Enough for the NeuSight-style ``dpN``/``tpN``/``ppN`` rows; the distributed
layer (collective algorithms, schedules, ZeRO, overlap) refines it.

- ``dpN``: each GPU runs ``batch / N``; in training the gradients (every
  parameter, in the training dtype) are all-reduced with a ring, bucketed and
  overlapped with the backward pass except for the last bucket.
- ``tpN``: Megatron sharding of the op list (:func:`perfcast.workload.sharding.shard_tp`)
  with a ring all-reduce after every row-parallel GEMM, not overlapped.
- ``ppN``: the layers split into ``N`` stages; ``m`` micro-batches flow
  through a GPipe/1F1B schedule: ``(m + N - 1)`` stage slots plus the
  activation sends between stages.

Links use the device's scale-up fabric (NVLink/xGMI bridges) or PCIe, at a
fitted efficiency, one direction at a time.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, replace

from perfcast.catalog.hardware import Hardware
from perfcast.catalog.models import ModelConfig
from perfcast.compose.coefficients import ComposeCoefficients, load_compose_coefficients
from perfcast.compose.step import predict_step
from perfcast.compose.types import StepTime
from perfcast.errors import ConfigError
from perfcast.kernel.coefficients import Coefficients
from perfcast.workload.sharding import check_tp, shard_tp
from perfcast.workload.types import Mode, OpKind, Phase, Workload

__all__ = [
    "Parallelism",
    "StepOptions",
    "link_bandwidth_Bps",
    "parse_parallelism",
    "predict_data_parallel",
    "predict_pipeline_parallel",
    "predict_tensor_parallel",
    "ring_allreduce_s",
]

_DDP_BUCKET_BYTES = 25 * 2**20  # torch DDP default bucket_cap_mb


class Parallelism:
    """A parsed ``none`` / ``dpN`` / ``tpN`` / ``ppN`` request."""

    def __init__(self, kind: str, degree: int) -> None:
        self.kind = kind
        self.degree = degree

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


def link_bandwidth_Bps(hw: Hardware, cc: ComposeCoefficients | None = None) -> tuple[float, float]:
    """Achieved per-direction bandwidth (bytes/s) and per-hop latency (s) between two GPUs of a node."""
    ic = hw.interconnect
    fabric = ic.fabric.value
    bidir = ic.fabric_bidir_bandwidth_Bps if fabric != "pcie" else ic.pcie_bidir_bandwidth_Bps
    if not bidir:
        bidir = ic.pcie_bidir_bandwidth_Bps or 32e9
        fabric = "pcie"
    comm = (cc or load_compose_coefficients()).comm
    eff = comm.link_efficiency.get(fabric, 0.7)
    return bidir / 2.0 * eff, comm.latency_s.get(fabric, 1e-5)


def ring_allreduce_s(size_bytes: float, n: int, hw: Hardware, cc: ComposeCoefficients | None = None) -> float:
    """Ring all-reduce of ``size_bytes`` over ``n`` GPUs: 2(n-1)/n of the data crosses each link."""
    if n <= 1 or size_bytes <= 0:
        return 0.0
    bw, lat = link_bandwidth_Bps(hw, cc)
    return 2.0 * (n - 1) / n * size_bytes / bw + 2.0 * (n - 1) * lat


def _with_comm_times(step: StepTime, comm_s: float) -> StepTime:
    f = (step.time_s + comm_s) / step.time_s if step.time_s > 0 else 1.0
    return replace(step, time_s=step.time_s + comm_s, low_s=step.low_s * f, high_s=step.high_s * f,
                   comm_s=step.comm_s + comm_s)


@dataclass(frozen=True, slots=True)
class StepOptions:
    """How each GPU's step is composed (see :func:`perfcast.compose.step.predict_step`)."""

    fused: bool = False
    framework: str | None = None
    compose: ComposeCoefficients | None = None

    def step(self, w: Workload, hw: Hardware, coeffs: Coefficients) -> StepTime:
        """One GPU's step under these options."""
        return predict_step(w, hw, coeffs=coeffs, fused=self.fused, framework=self.framework, compose=self.compose)


def predict_data_parallel(build: Callable[[int], Workload], batch: int, n: int, hw: Hardware,
                          coeffs: Coefficients, opts: StepOptions) -> StepTime:
    """``dpN``: the per-GPU batch plus the exposed gradient all-reduce."""
    if batch % n:
        raise ConfigError(f"data parallelism dp{n} needs a batch divisible by {n} (got {batch})")
    w: Workload = build(batch // n)
    step = opts.step(w, hw, coeffs)
    if w.mode is not Mode.TRAINING:
        return replace(step, parallelism=f"dp{n}", batch_size=batch)
    cc = opts.compose
    grad_bytes = sum(o.params * o.count * o.dtype.bytes for o in w.ops if o.phase is Phase.FORWARD)
    total = ring_allreduce_s(grad_bytes, n, hw, cc)
    last_bucket = ring_allreduce_s(min(_DDP_BUCKET_BYTES, grad_bytes), n, hw, cc)
    backward = step.by_phase_s.get("bwd", 0.0)
    exposed = max(last_bucket, total - backward)
    return replace(_with_comm_times(step, exposed), parallelism=f"dp{n}", batch_size=batch)


def predict_tensor_parallel(w: Workload, cfg: ModelConfig, n: int, hw: Hardware, coeffs: Coefficients,
                            opts: StepOptions) -> StepTime:
    """``tpN``: sharded ops plus their (exposed) all-reduces."""
    check_tp(cfg, n)
    ops = shard_tp(w.ops, n)
    comm = [o for o in ops if o.kind is OpKind.COMM]
    compute = replace(w, ops=tuple(o for o in ops if o.kind is not OpKind.COMM), tp=n)
    step = opts.step(compute, hw, coeffs)
    comm_s = sum(ring_allreduce_s(float(o.dims[0]), n, hw, opts.compose) * o.count for o in comm)
    return replace(_with_comm_times(step, comm_s), parallelism=f"tp{n}")


def predict_pipeline_parallel(build: Callable[[int], Workload], cfg: ModelConfig, batch: int, n: int,
                              microbatches: int | None, hw: Hardware, coeffs: Coefficients,
                              opts: StepOptions) -> StepTime:
    """``ppN``: ``m`` micro-batches through ``N`` stages; the slowest stage sets the pace."""
    layers = cfg.num_layers + (cfg.num_decoder_layers or 0)
    if layers < n:
        raise ConfigError(f"pp{n} needs at least {n} layers; {cfg.id} has {layers}")
    m = microbatches or n
    if batch % m:
        raise ConfigError(f"pipeline parallelism with {m} micro-batches needs a batch divisible by {m} (got {batch})")
    w: Workload = build(batch // m)
    full = opts.step(w, hw, coeffs)
    per_layer = [t for t in full.ops if t.op.count > 1]
    repeated = sum(t.total_s for t in per_layer)
    rest = full.device_busy_s - repeated
    per_stage_layers = math.ceil(layers / n)
    # the slowest stage: a full share of layers plus the non-repeated ops (embedding / LM head)
    stage = repeated * per_stage_layers / layers + rest
    scale = full.time_s / full.device_busy_s if full.device_busy_s > 0 else 1.0
    stage *= scale
    act_bytes = (batch // m) * w.seq_len * cfg.hidden_size * w.dtype.bytes
    bw, lat = link_bandwidth_Bps(hw, opts.compose)
    send = act_bytes / bw + lat
    passes = 2 if w.mode is Mode.TRAINING else 1
    slots = m + n - 1
    time = slots * (stage + passes * send)
    f = time / full.time_s if full.time_s > 0 else 1.0
    return replace(full, time_s=time, low_s=full.low_s * f, high_s=full.high_s * f, comm_s=slots * passes * send,
                   parallelism=f"pp{n}", batch_size=batch)
