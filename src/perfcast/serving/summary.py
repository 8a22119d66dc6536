"""What a serving run reports: :class:`ServingSummary`, the JSON of ``perfcast serve`` for one run, and
:class:`WorkloadSummary`, the requests it simulated. Typed values; :func:`perfcast.results.serialize.to_json`
writes them with their field names (units in the names) as keys."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from perfcast.results.serialize import json_field
from perfcast.serving.energy import ServingEnergy
from perfcast.serving.explain import TimeBreakdown
from perfcast.serving.memory import ServingMemory
from perfcast.serving.metrics import ServingMetrics

__all__ = ["LengthStats", "MeanMax", "Rejection", "ServingSummary", "WorkloadSummary"]


@dataclass(frozen=True, slots=True)
class LengthStats:
    """Mean, median, 99th percentile and maximum of the requests' lengths (tokens; None with no request)."""

    mean: float | None
    p50: float | None
    p99: float | None
    max: float | None

    @classmethod
    def of(cls, tokens: np.ndarray) -> LengthStats:
        """The statistics of ``tokens`` (one length per request)."""
        if not tokens.size:
            return cls(None, None, None, None)
        p50, p99 = np.percentile(tokens, [50.0, 99.0])
        return cls(float(tokens.mean()), float(p50), float(p99), float(tokens.max()))


@dataclass(frozen=True, slots=True)
class WorkloadSummary:
    """The requests a run simulated: where their lengths come from (``fixed`` or ``trace <name>``), their length
    statistics (tokens), the arrival process, its rate parameter ``qps`` and the rate its draws realized
    (``offered_requests_per_s``: gaps over the arrival span, None for a single arrival), and the count."""

    lengths: str
    trace: str | None
    prompt_tokens: LengthStats
    output_tokens: LengthStats
    arrival: str
    qps: float | None
    burstiness_cv: float | None  # gamma arrivals only
    concurrency: int | None
    num_requests: int
    arrival_span_s: float
    offered_requests_per_s: float | None
    seed: int


@dataclass(frozen=True, slots=True)
class Rejection:
    """Requests the engine refused for one reason."""

    reason: str
    requests: int


@dataclass(frozen=True, slots=True)
class MeanMax:
    """The mean and the maximum of a quantity over a run."""

    mean: float
    max: float


@dataclass(frozen=True, slots=True)
class ServingSummary:
    """One serving run as reported: the deployment, the workload, the metrics (their keys at the top level),
    rejections and engine counts, KV-cache and memory figures, the energy and, when asked, the time by part."""

    model: str
    hardware: str
    scheduler: str
    tensor_parallel_size: int
    pipeline_parallel_size: int
    num_replicas: int
    dtype: str
    quantization: str
    workload: WorkloadSummary
    metrics: ServingMetrics = field(metadata=json_field(flatten=True))
    requests_rejected: int
    rejection_reasons: tuple[Rejection, ...]  # most requests first
    preemptions: int
    iterations: int
    kv_blocks_per_engine: int
    kv_utilization_frac: MeanMax
    kv_fragmentation_mean_frac: float
    prefix_hit_frac: float
    weight_bytes_per_gpu: float
    spec_tokens_per_step: float
    weight_bytes_per_replica: float
    gpu_memory_bytes: float
    kv_bytes_per_token: float
    max_concurrent_sequences: int
    prefix_cache_bytes: float
    kv_transfer_mean_s: float
    retrieval_mean_s: float
    retrieval_share_frac: float
    memory: ServingMemory | None = field(metadata=json_field(flatten=True))  # its keys are memory_*_bytes
    energy: ServingEnergy = field(metadata=json_field(flatten=True))  # its keys are energy_*
    iteration_breakdown_s: TimeBreakdown | None = field(metadata=json_field(omit_none=True))
