"""What a serving simulation returns: every request's times, the summary metrics and the engines' counts."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from perfcast.serving.config import ServingConfig
from perfcast.serving.energy import EnergyCounts, ServingEnergy, serving_energy
from perfcast.serving.explain import TimeBreakdown
from perfcast.serving.memory import ServingMemory
from perfcast.serving.metrics import ServingMetrics
from perfcast.serving.summary import LengthStats, MeanMax, Rejection, ServingSummary, WorkloadSummary

__all__ = ["IterationEvent", "ServingResult"]


@dataclass(frozen=True, slots=True)
class IterationEvent:
    """One iteration of one engine (for the timeline)."""

    engine: int
    start_s: float
    duration_s: float
    prefill_tokens: int
    decode_seqs: int


@dataclass
class ServingResult:
    """A finished simulation: per-request times, summary metrics and engine statistics."""

    config: ServingConfig
    metrics: ServingMetrics
    arrival_s: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    generated_tokens: np.ndarray
    replica: np.ndarray
    preemptions_per_request: np.ndarray
    status: list[str]
    preemptions: int
    iterations: int
    kv_blocks_per_engine: int
    kv_utilization_mean_frac: float
    kv_utilization_max_frac: float
    kv_fragmentation_mean_frac: float
    prefix_hit_frac: float
    weight_bytes_per_gpu: float
    spec_tokens_per_step: float = 0.0
    gpu_time_s: float = 0.0  # summed time of every iteration on its own, without another model's share
    events: list[IterationEvent] = field(default_factory=list)
    kv_bytes_per_token: float = 0.0  # KV cache bytes of one token on one GPU (every layer its stage holds)
    retrieval_mean_s: float = 0.0  # RAG: mean time of the retrieval stage per request
    gpu_memory_bytes: float = 0.0  # memory of one GPU
    kv_transfer_bandwidth_Bps: float = 0.0  # disaggregated serving: per GPU, prefill to decode pool (else 0)
    dtype: str = "fp16"  # the dtype that ran (``config.dtype`` resolved; see :func:`serving_dtype`)
    rejection_counts: dict[str, int] = field(default_factory=dict)  # reason -> requests refused for it, most first
    memory: ServingMemory | None = None  # one GPU's memory breakdown (the deployment fits: it ran)
    breakdown: TimeBreakdown | None = None  # where the iterations' time went (runs asked to explain it)
    energy_counts: EnergyCounts | None = None  # what the iterations priced for their energy (serving_energy)

    @property
    def max_concurrent_sequences(self) -> int:
        """Requests of the workload's mean length (prompt + output tokens, each beam holding its own output
        under beam search) whose KV cache fits in one engine's blocks at once (the KV-capacity bound on the
        batch, before ``max_num_seqs``)."""
        beams = self.config.workload.num_beams  # beam search: every beam holds its own output tokens
        mean_len = float(np.mean(self.prompt_tokens + beams * self.output_tokens)) if self.prompt_tokens.size else 0.0
        layout = self.memory.layout if self.memory is not None else None
        if layout is not None:  # a hybrid cache: each group's blocks of one request at its end (kv.hybrid)
            bs, n = layout.block_size, math.ceil(mean_len)
            local = min(-(-n // bs), -(-layout.local_window // bs) + 1) if layout.local_window else 0
            per_seq = layout.full_groups * -(-n // bs) + layout.local_groups * local + layout.state_groups
            return self.kv_blocks_per_engine // per_seq if per_seq else 0
        return int(self.kv_blocks_per_engine * self.config.block_size // mean_len) if mean_len > 0 else 0

    @property
    def retrieval_share_frac(self) -> float:
        """RAG: mean retrieval time over mean end-to-end latency of the completed requests."""
        done = np.isfinite(self.finish_s)
        e2e = float(np.mean(self.finish_s[done] - self.arrival_s[done])) if done.any() else 0.0
        return self.retrieval_mean_s / e2e if e2e > 0 else 0.0

    @property
    def kv_transfer_mean_s(self) -> float:
        """Disaggregated serving: mean handover time of a prompt's KV cache to the decode pool (link latency
        plus the prompt's per-GPU KV bytes over the link); 0 when prefill and decode share the replicas."""
        cfg = self.config
        if not cfg.num_prefill_replicas or not self.prompt_tokens.size:
            return 0.0
        return cfg.kv_transfer_latency_s + float(np.mean(self.prompt_tokens)) * self.kv_bytes_per_token / (
            self.kv_transfer_bandwidth_Bps)

    @property
    def prefix_cache_bytes(self) -> float:
        """Prefix caching: KV bytes per GPU the shared prefixes ask for (every distinct prefix's full blocks
        once), capped at one engine's KV cache (beyond it, cached prefixes are evicted and miss)."""
        cfg, w = self.config, self.config.workload
        if not cfg.enable_prefix_caching or not w.shared_prefix_tokens:
            return 0.0
        blocks = min(min(w.num_prefixes, w.num_requests) * (w.shared_prefix_tokens // cfg.block_size),
                     self.kv_blocks_per_engine)
        return blocks * cfg.block_size * self.kv_bytes_per_token

    @property
    def busy_frac(self) -> float:
        """Share of the run the GPUs spend on this model's iterations (mean over engines)."""
        engines = self.config.num_replicas * self.config.pipeline_parallel_size
        span = float(np.nanmax(self.finish_s)) if np.isfinite(self.finish_s).any() else 0.0
        return min(1.0, self.gpu_time_s / (span * engines)) if span > 0 else 0.0

    @property
    def mean_iteration_s(self) -> float:
        """Mean time of one iteration on its own."""
        return self.gpu_time_s / self.iterations if self.iterations else 0.0

    def workload_summary(self) -> WorkloadSummary:
        """The requests this run simulated (see :class:`~perfcast.serving.summary.WorkloadSummary`)."""
        w = self.config.workload
        n = int(self.arrival_s.size)
        span_s = float(self.arrival_s[-1] - self.arrival_s[0]) if n else 0.0
        fixed = w.prompt_tokens is not None
        return WorkloadSummary(
            lengths="fixed" if fixed else f"trace {w.trace}", trace=None if fixed else w.trace,
            prompt_tokens=LengthStats.of(self.prompt_tokens), output_tokens=LengthStats.of(self.output_tokens),
            arrival=w.arrival if (w.qps is not None or w.arrival == "trace") else "all at once", qps=w.qps,
            burstiness_cv=w.burstiness_cv if w.arrival == "gamma" else None, concurrency=w.concurrency,
            num_requests=n, arrival_span_s=span_s,
            offered_requests_per_s=(n - 1) / span_s if span_s > 0 else None, seed=w.seed)

    def json_view(self) -> ServingSummary:
        """What the run reports (its JSON through :func:`~perfcast.results.serialize.to_json`)."""
        cfg = self.config
        return ServingSummary(
            model=cfg.model, hardware=cfg.hardware, scheduler=cfg.scheduler,
            tensor_parallel_size=cfg.tensor_parallel_size, pipeline_parallel_size=cfg.pipeline_parallel_size,
            num_replicas=cfg.num_replicas, dtype=self.dtype, quantization=cfg.quantization,
            workload=self.workload_summary(), metrics=self.metrics,
            requests_rejected=sum(self.rejection_counts.values()),
            rejection_reasons=tuple(Rejection(reason, k) for reason, k in self.rejection_counts.items()),
            preemptions=self.preemptions, iterations=self.iterations, kv_blocks_per_engine=self.kv_blocks_per_engine,
            kv_utilization_frac=MeanMax(self.kv_utilization_mean_frac, self.kv_utilization_max_frac),
            kv_fragmentation_mean_frac=self.kv_fragmentation_mean_frac, prefix_hit_frac=self.prefix_hit_frac,
            weight_bytes_per_gpu=self.weight_bytes_per_gpu, spec_tokens_per_step=self.spec_tokens_per_step,
            weight_bytes_per_replica=self.weight_bytes_per_gpu * cfg.tensor_parallel_size
            * cfg.pipeline_parallel_size,
            gpu_memory_bytes=self.gpu_memory_bytes, kv_bytes_per_token=self.kv_bytes_per_token,
            max_concurrent_sequences=self.max_concurrent_sequences, prefix_cache_bytes=self.prefix_cache_bytes,
            kv_transfer_mean_s=self.kv_transfer_mean_s, retrieval_mean_s=self.retrieval_mean_s,
            retrieval_share_frac=self.retrieval_share_frac, memory=self.memory, energy=self.energy(),
            iteration_breakdown_s=self.breakdown)

    def energy(self) -> ServingEnergy:
        """Energy of the run over every GPU of the deployment (a prior power model; priced after the run from
        what its iterations summed)."""
        return serving_energy(self)

    def request_rows(self) -> list[dict[str, Any]]:
        """One row per request (for the per-request CSV)."""
        rows = []
        for i in range(self.arrival_s.size):
            a, f, e = float(self.arrival_s[i]), float(self.first_token_s[i]), float(self.finish_s[i])
            n = int(self.output_tokens[i])
            rows.append({
                "request_id": i, "replica": int(self.replica[i]), "status": self.status[i],
                "arrival_s": a, "prompt_tokens": int(self.prompt_tokens[i]), "output_tokens": n,
                "generated_tokens": int(self.generated_tokens[i]), "ttft_s": f - a if math.isfinite(f) else None,
                "tpot_s": (e - f) / (n - 1) if math.isfinite(e) and n > 1 else None,
                "e2e_s": e - a if math.isfinite(e) else None, "preemptions": int(self.preemptions_per_request[i]),
            })
        return rows
