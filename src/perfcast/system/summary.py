"""What a training prediction reports: :class:`TrainingSummary`, the JSON of ``perfcast train`` (a typed value;
:func:`perfcast.results.serialize.to_json` writes it with its field names, units in them, as keys)."""

from __future__ import annotations

from dataclasses import dataclass

from perfcast.compose.types import MemoryBreakdown
from perfcast.system.plan import ParallelPlan

__all__ = ["Interval", "StageTime", "TrainingSummary"]


@dataclass(frozen=True, slots=True)
class Interval:
    """A prediction interval (s)."""

    low: float
    high: float


@dataclass(frozen=True, slots=True)
class StageTime:
    """One pipeline stage: forward and backward time of one micro-batch (s) and the layers it holds."""

    fwd_s: float
    bwd_s: float
    layers: int


@dataclass(frozen=True, slots=True)
class TrainingSummary:
    """One training step as reported (per GPU unless named otherwise): the job, the plan, time and throughput,
    FLOP counts and utilization, the step's parts, memory and its verdict, the stages and the energy."""

    model: str
    cluster: str
    gpu: str
    num_gpus: int
    plan: ParallelPlan
    step_time_s: float
    step_time_interval_s: Interval
    tokens_per_step: int
    tokens_per_s_per_gpu: float
    samples_per_s_per_gpu: float
    tflops_per_gpu: float
    mfu: float
    hfu: float
    flops_convention: str
    model_flops_per_token: float
    hardware_flops_per_token: float
    peak_tflops: float
    microbatches: int
    bubble_frac: float
    breakdown_s: dict[str, float]
    comm_total_s: dict[str, float]
    memory_per_gpu_bytes: float
    memory_capacity_bytes: float
    memory_breakdown_bytes: MemoryBreakdown
    fits_in_memory: bool
    fits: bool
    verdict: str  # fits | out_of_memory
    stages: tuple[StageTime, ...]
    energy_per_step_J: float
    energy_per_gpu_per_step_J: float
    energy_per_token_J: float
    avg_power_per_gpu_W: float
    energy_breakdown_per_gpu_J: dict[str, float]
    energy_model: str
