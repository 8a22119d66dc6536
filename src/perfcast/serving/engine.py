"""The serving simulator: a discrete-event loop over arrivals and iteration ends.

Requests arrive (a pre-generated, sorted stream, read with a cursor rather
than pushed on the heap), a global router hands each to a replica, and each
replica's scheduler forms iterations whose durations come from
:class:`~perfcast.serving.iteration.IterationModel` (kernel, composition and
collective layers, tabulated once per deployment). The heap holds one entry per
busy engine, so the loop's work per event is O(log replicas) plus the batch it
forms. A replica with ``pipeline_parallel_size`` stages runs that many virtual
engines (as vLLM does): each has its own scheduler and share of the KV cache,
and an iteration's latency is every stage's time, while the stages overlap
across the virtual engines. The stages are shared, each working through the
virtual engines' micro-batches in turn, so a micro-batch cannot leave the last
stage before the micro-batches ahead of it have: an iteration that starts at
``now`` with one stage's time ``t`` ends at ``max(now + pp * t, end + t)``, where
``end`` is the latest end of the other virtual engines' iterations in flight (a
prefill holds back the decode micro-batches behind it). On such a replica, decode
stretches end at the next event of any engine, so every iteration in flight is
the one that spans the present.

The decoding requests of each engine form a
:class:`~perfcast.serving.decoding.DecodeSet`: every one of them decodes in every
decode iteration, so the set counts decode steps and keeps each member relative
to that count, and the paged KV cache grows them as one group. Forming a batch
is therefore O(1) for its decode part (plus its prefill chunks): its size and
its cached tokens are running totals, the first member to finish is the top of
a heap, and taking each member's KV slot is a count of blocks
(O(block_size)). Decode-only stretches run in one step: when a policy forms a
decode-only batch, the same batch repeats until a member finishes, a request
arrives or the KV cache fills; the engine steps the iteration-time closed form
(a function of the batch's cached tokens, which grow by the batch size per
iteration) in a scalar loop up to the next arrival and then advances the set
and its KV group by that many tokens at once. The result equals iterating one
by one; the work per event is O(1) plus one scalar step per iteration.

Running through: when only the decode set can be in an engine's next batch
(nothing waiting, swapped out or prefilling, no closed loop, no hand-overs)
and the iterations in flight end before the next arrival, the engine settles
them and forms that batch at once instead of going back to the event loop: a
stretch goes on past a member's finish, and a prefill iteration that completes
every prompt in flight goes on to the decode stretch after it. Each engine's
requests, times and counts are those of the event loop; only run-wide sums
(KV utilization, GPU time) may add their terms in another order across engines.
At low load an arriving request then costs one engine event, not two or three.

Speculative decoding (a draft model proposing ``k`` tokens, each accepted with
probability ``a`` until the first rejection, plus the target's own token):
a decode step costs ``k`` draft decode iterations and one target iteration that
verifies ``k + 1`` tokens per sequence; each sequence then advances by its
accepted tokens plus one (drawn from a seeded generator, so runs repeat).

Disaggregated serving (``num_prefill_replicas`` > 0, as in DistServe/Splitwise):
arrivals go to the prefill pool; when a request's prompt is done (its first
token is out) its KV cache is sent to a decode replica over the given link
(each tensor-parallel rank sends its shard: per-GPU KV bytes / bandwidth plus a
latency) and it decodes there.

Beam search (``num_beams`` = ``b`` > 1, as TensorRT-LLM's beam_width): a request prefills its prompt once
(one sequence, sampling once), then decodes ``b`` rows per iteration: ``b`` query tokens in the linear
layers and the LM head, ``b`` sequences in decode attention, each reading the shared prompt and its own
generated tokens. The decode set and the KV group count rows, so a stretch's batch size and cached tokens
carry the beam weight (no per-iteration loop over beams). Its KV cache holds the prompt's full blocks once
and every beam's tail (see :mod:`perfcast.serving.kv`); ``max_num_seqs`` counts beams. It finishes after
its output tokens, which count once (the returned sequence). Not modelled with prefix caching or
speculative decoding (a one-line error).

Multimodal prompts: each image adds the vision tower's image tokens to the prompt
and its encoder time to the iteration that starts the request's prefill.
Retrieval (RAG): a request reaches the engine after its retrieval stage (a
lognormal time with the given mean and CV, seeded) with the retrieved tokens in
its prompt; its TTFT counts from its arrival, retrieval included.

Requests the deployment can never serve are refused at arrival, counted with their reason
(``rejection_counts``, ``requests_rejected`` and ``rejection_reasons`` in ``as_dict``) and left out of
every latency and throughput figure: a prompt plus output longer than ``max_model_len`` (by default the
model's context, ``ModelConfig.max_positions``; vLLM answers such a request 400 with "This model's maximum
context length is X tokens. However, you requested Y tokens (P in the messages, O in the completion)"),
more beams than ``max_num_seqs``, more KV blocks than the replica has, or an unchunked prompt above the
token budget. Lengths are never truncated to fit. When every request is refused, the run is a one-line
ConfigError.

Determinism: one seed drives the request stream; ties in time are broken by
(time, event kind, engine index), so the same inputs give bit-identical output.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from perfcast.catalog.defaults import default_dtype
from perfcast.catalog.hardware import load_hardware
from perfcast.catalog.models import ModelConfig, load_model
from perfcast.dtypes import DType
from perfcast.errors import ConfigError
from perfcast.serving.coefficients import ServingCoefficients
from perfcast.serving.config import ServingConfig
from perfcast.serving.energy import ServingEnergy, serving_energy
from perfcast.serving.iteration import IterationModel
from perfcast.serving.kv import BlockManager, CountingBlockManager, prefix_block_hashes
from perfcast.serving.memory import ServingMemory, memory_breakdown
from perfcast.serving.metrics import ServingMetrics, summarize_requests
from perfcast.serving.request import Request
from perfcast.serving.schedulers import SCHEDULERS, Batch, ReplicaScheduler, SchedulerLimits
from perfcast.serving.sources.arrivals import RequestStream, generate_requests
from perfcast.serving.sources.traces import load_trace
from perfcast.workload.graph import causal_pairs

__all__ = ["IterationEvent", "ServingResult", "max_model_len", "serving_dtype", "serving_memory", "simulate_serving"]

_PCIE_BPS = 25e9  # swap traffic between GPU and host memory (PCIe 4.0 x16, per direction, achieved)


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
    dtype: str = "fp16"  # the dtype that ran (``config.dtype`` resolved; see :func:`serving_dtype`)
    rejection_counts: dict[str, int] = field(default_factory=dict)  # reason -> requests refused for it, most first
    memory: ServingMemory | None = None  # one GPU's memory breakdown (the deployment fits: it ran)

    @property
    def max_concurrent_sequences(self) -> int:
        """Requests of the workload's mean length (prompt + output tokens, each beam holding its own output
        under beam search) whose KV cache fits in one engine's blocks at once (the KV-capacity bound on the
        batch, before ``max_num_seqs``)."""
        beams = self.config.workload.num_beams  # beam search: every beam holds its own output tokens
        mean_len = float(np.mean(self.prompt_tokens + beams * self.output_tokens)) if self.prompt_tokens.size else 0.0
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
            cfg.kv_transfer_bandwidth_Bps)

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

    def workload_summary(self) -> dict[str, Any]:
        """The requests this run simulated: where their lengths come from (a trace or fixed), the prompt and
        output length statistics (tokens), the arrival process, its rate parameter (``qps``) and the rate its
        draws realized (``offered_requests_per_s``, gaps over the arrival span), and the count."""
        w = self.config.workload

        def stats(x: np.ndarray) -> dict[str, float | None]:
            if not x.size:
                return {"mean": None, "p50": None, "p99": None, "max": None}
            p50, p99 = np.percentile(x, [50.0, 99.0])
            return {"mean": float(x.mean()), "p50": float(p50), "p99": float(p99), "max": float(x.max())}

        n = int(self.arrival_s.size)
        span_s = float(self.arrival_s[-1] - self.arrival_s[0]) if n else 0.0
        fixed = w.prompt_tokens is not None
        arrival = w.arrival if (w.qps is not None or w.arrival == "trace") else "all at once"
        return {"lengths": "fixed" if fixed else f"trace {w.trace}", "trace": None if fixed else w.trace,
                "prompt_tokens": stats(self.prompt_tokens), "output_tokens": stats(self.output_tokens),
                "arrival": arrival, "qps": w.qps, "burstiness_cv": w.burstiness_cv if w.arrival == "gamma" else None,
                "concurrency": w.concurrency, "num_requests": n,
                "arrival_span_s": span_s, "offered_requests_per_s": (n - 1) / span_s if span_s > 0 else None,
                "seed": w.seed}

    def as_dict(self) -> dict[str, Any]:
        """One JSON-ready object; keys carry their units."""
        out: dict[str, Any] = {
            "model": self.config.model, "hardware": self.config.hardware, "scheduler": self.config.scheduler,
            "tensor_parallel_size": self.config.tensor_parallel_size,
            "pipeline_parallel_size": self.config.pipeline_parallel_size,
            "num_replicas": self.config.num_replicas, "dtype": self.dtype,
            "quantization": self.config.quantization, "workload": self.workload_summary(),
        }
        out.update(self.metrics.as_dict())
        out.update({
            "requests_rejected": sum(self.rejection_counts.values()),
            "rejection_reasons": [{"reason": reason, "requests": k} for reason, k in self.rejection_counts.items()],
            "preemptions": self.preemptions, "iterations": self.iterations,
            "kv_blocks_per_engine": self.kv_blocks_per_engine,
            "kv_utilization_frac": {"mean": self.kv_utilization_mean_frac, "max": self.kv_utilization_max_frac},
            "kv_fragmentation_mean_frac": self.kv_fragmentation_mean_frac,
            "prefix_hit_frac": self.prefix_hit_frac,
            "weight_bytes_per_gpu": self.weight_bytes_per_gpu,
            "spec_tokens_per_step": self.spec_tokens_per_step,
            "weight_bytes_per_replica": self.weight_bytes_per_gpu * self.config.tensor_parallel_size
            * self.config.pipeline_parallel_size,
            "gpu_memory_bytes": self.gpu_memory_bytes,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "max_concurrent_sequences": self.max_concurrent_sequences,
            "prefix_cache_bytes": self.prefix_cache_bytes,
            "kv_transfer_mean_s": self.kv_transfer_mean_s,
            "retrieval_mean_s": self.retrieval_mean_s,
            "retrieval_share_frac": self.retrieval_share_frac,
        })
        if self.memory is not None:
            out.update(self.memory.as_dict())
        out.update(self.energy().as_dict())
        return out

    def energy(self) -> ServingEnergy:
        """Energy of the run over every GPU of the deployment (a prior power model; computed after the run
        from what it counted)."""
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


def serving_dtype(cfg: ServingConfig, model_cfg: ModelConfig | None = None) -> DType:
    """The dtype the deployment runs: ``cfg.dtype``, or for ``auto`` the checkpoint's as a serving engine loads
    it (:func:`perfcast.catalog.defaults.default_dtype` with ``engine=True``)."""
    if cfg.dtype != "auto":
        return DType(cfg.dtype)
    return default_dtype(model_cfg or load_model(cfg.model), load_hardware(cfg.hardware), engine=True)


def max_model_len(cfg: ServingConfig, model_cfg: ModelConfig | None = None) -> int:
    """The context limit of the deployment (tokens of prompt plus output): ``cfg.max_model_len``, by default the
    model's (``ModelConfig.max_positions``, for every position scheme). A limit above the model's is bad input,
    as vLLM refuses it, unless ``allow_long_max_model_len`` says the deployment runs longer (vLLM's
    ``VLLM_ALLOW_LONG_MAX_MODEL_LEN``)."""
    model_cfg = model_cfg or load_model(cfg.model)
    context = model_cfg.max_positions
    if cfg.max_model_len is not None and cfg.max_model_len > context and not cfg.allow_long_max_model_len:
        raise ConfigError(f"max_model_len {cfg.max_model_len} is above {model_cfg.id}'s maximum context length of "
                          f"{context} tokens; use max_model_len <= {context}")
    return cfg.max_model_len or context


def _requests(cfg: ServingConfig) -> RequestStream:
    w = cfg.workload
    trace = load_trace(w.trace) if w.trace else None
    lengths = (w.prompt_tokens, w.output_tokens)
    if trace is None and None in lengths:
        raise ConfigError("the workload needs request lengths: a trace (--trace) or both --prompt-tokens and "
                          "--output-tokens")
    if (w.prompt_tokens is None) != (w.output_tokens is None):
        raise ConfigError("give both --prompt-tokens and --output-tokens, or neither (lengths from the trace)")
    arrival = w.arrival
    qps = w.qps
    if arrival != "trace" and qps is None:
        arrival, qps = "fixed", 1e12  # no rate: every request arrives at once (an offline run)
    return generate_requests(num_requests=w.num_requests, seed=w.seed, arrival=arrival,
                             qps=None if arrival == "trace" else qps, burstiness_cv=w.burstiness_cv, trace=trace,
                             prompt_tokens=w.prompt_tokens, output_tokens=w.output_tokens)


def _count_reasons(rejection: dict[int, tuple[str, str]]) -> dict[str, int]:
    """Requests refused per reason, the most frequent first (ties in the reason's order)."""
    counts: dict[str, int] = {}
    for reason, _ in rejection.values():
        counts[reason] = counts.get(reason, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


_MODELS: dict[tuple[object, ...], tuple[ModelConfig, ServingCoefficients | None, IterationModel]] = {}


def _iteration_model(model_cfg: ModelConfig, cfg: ServingConfig, *, dtype: DType, quantization: str,
                     kv_dtype: DType | None, pp: int, max_tokens: int,
                     serving: ServingCoefficients | None) -> IterationModel:
    """The deployment's iteration model, tabulated once per process (a QPS search, a co-location fixed point
    and a table of benchmark rows simulate the same deployment many times)."""
    key = (id(model_cfg), cfg.hardware, cfg.tensor_parallel_size, pp, dtype, quantization, kv_dtype, max_tokens,
           cfg.max_num_seqs, cfg.engine, cfg.cluster, id(serving), cfg.expert_parallel_size,
           cfg.attention_data_parallel)
    hit = _MODELS.get(key)
    if hit is not None and hit[0] is model_cfg and hit[1] is serving:
        return hit[2]
    from perfcast.system.cluster import load_cluster

    model = IterationModel(model_cfg, cfg.hardware, tp=cfg.tensor_parallel_size, pp=pp, dtype=dtype,
                           quantization=quantization, kv_dtype=kv_dtype, max_tokens=max_tokens,
                           max_seqs=cfg.max_num_seqs, engine=cfg.engine,
                           cluster=load_cluster(cfg.cluster) if cfg.cluster else None, serving=serving,
                           ep=cfg.expert_parallel_size, attention_dp=cfg.attention_data_parallel)
    if len(_MODELS) > 256:
        _MODELS.clear()
    _MODELS[key] = (model_cfg, serving, model)
    return model


@dataclass(frozen=True)
class _Deployment:
    """What a config resolves to before any request runs: the scheduling policy, the context limit, the
    iteration token budget, the dtype, the iteration model and one GPU's memory."""

    policy: str
    max_len: int
    budget: int
    dtype: DType
    model: IterationModel
    memory: ServingMemory
    draft: IterationModel | None = None  # speculative decoding's draft model, on the same GPUs


def _deployment(cfg: ServingConfig, *, serving: ServingCoefficients | None, memory_frac: float) -> _Deployment:
    if cfg.scheduler not in SCHEDULERS:
        SCHEDULERS.get(cfg.scheduler)  # raises UnknownNameError listing the schedulers
    policy = "sarathi" if cfg.scheduler == "vllm" and cfg.enable_chunked_prefill else cfg.scheduler
    model_cfg = load_model(cfg.model)
    max_len = max_model_len(cfg, model_cfg)
    budget = cfg.max_num_batched_tokens or (cfg.chunk_size if policy == "sarathi" else max(max_len, 2048))
    if policy == "static":
        budget = max(budget, max_len * cfg.max_num_seqs)
    dtype = serving_dtype(cfg, model_cfg)
    kv_dtype = None if cfg.kv_cache_dtype == "auto" else DType(cfg.kv_cache_dtype)
    model = _iteration_model(model_cfg, cfg, dtype=dtype, quantization=cfg.quantization, kv_dtype=kv_dtype,
                             pp=cfg.pipeline_parallel_size, max_tokens=min(max(budget, 1), 65536), serving=serving)
    draft = None
    if cfg.speculative_model and cfg.num_speculative_tokens:
        draft = _iteration_model(_draft_config(cfg.speculative_model, model_cfg), cfg, dtype=dtype,
                                 quantization="none", kv_dtype=None, pp=1, max_tokens=min(max(budget, 1), 65536),
                                 serving=serving)
    memory = memory_breakdown(model, usable_frac=cfg.gpu_memory_utilization * memory_frac,
                              max_batched_tokens=budget, max_num_seqs=cfg.max_num_seqs, block_size=cfg.block_size,
                              draft=draft)
    return _Deployment(policy, max_len, budget, dtype, model, memory, draft)


_VOCAB_TOL = 0.01  # a draft's vocabulary within 1% of the target's: the same tokenizer, rows padded differently


def _draft_config(name: str, target: ModelConfig) -> ModelConfig:
    """The draft model of speculative decoding: a decoder LLM proposing tokens of the target's vocabulary."""
    draft = load_model(name)
    if draft.kind != "decoder" or draft.vision is not None:
        kind = "multimodal" if draft.vision is not None else draft.kind
        raise ConfigError(f"--speculative-model {draft.id} is not a text decoder (its kind: {kind}); a draft model "
                          f"is a decoder-only LLM of {target.id}'s tokenizer")
    if abs(draft.vocab_size - target.vocab_size) > _VOCAB_TOL * target.vocab_size:
        raise ConfigError(f"--speculative-model {draft.id} has a {draft.vocab_size:,}-token vocabulary and "
                          f"{target.id} {target.vocab_size:,}: a draft proposes tokens of the target's tokenizer "
                          "(vLLM refuses a draft of another vocabulary); use a smaller model of the same family")
    return draft


def _extra_prompt_tokens(cfg: ServingConfig, model: IterationModel, max_len: int) -> int:
    """Image and retrieved tokens every prompt carries besides its own (they join the prompt)."""
    w = cfg.workload
    if w.images_per_request and model.cfg.vision is None:
        raise ConfigError(f"{model.cfg.id} has no vision tower; --images-per-request needs a multimodal model "
                          "(e.g. llava-1.5-7b)")
    extra = w.images_per_request * model.image_tokens + w.retrieved_tokens
    if extra + 2 > max_len:
        raise ConfigError(f"{extra} image/retrieved tokens leave no room in max_model_len {max_len}")
    return extra


def serving_memory(cfg: ServingConfig, *, memory_frac: float = 1.0,
                   serving: ServingCoefficients | None = None) -> ServingMemory:
    """Whether ``cfg``'s deployment fits, with one GPU's memory breakdown (see :mod:`perfcast.serving.memory`),
    without simulating. Besides the weights and activations, the KV cache of one engine must hold at least
    one request of the workload (its prompt and output, each beam's tokens, under the cache's watermark);
    requests longer than ``max_model_len`` do not count (they are refused whatever the memory)."""
    dep = _deployment(cfg, serving=serving, memory_frac=memory_frac)
    memory = dep.memory
    if not memory.fits:
        return memory
    extra = _extra_prompt_tokens(cfg, dep.model, dep.max_len)
    stream = _requests(cfg)
    prompt = np.asarray(stream.prompt_tokens, dtype=np.int64) + extra
    output = np.asarray(stream.output_tokens, dtype=np.int64)
    servable = prompt + output <= dep.max_len
    if not servable.any():
        return memory  # every request is refused for its length: bad input the simulation reports
    pp = cfg.pipeline_parallel_size
    kv = CountingBlockManager(max(1, memory.kv_blocks // pp), cfg.block_size, cfg.watermark_frac, 0)
    beams = cfg.workload.num_beams
    pairs = sorted({(int(p), int(o)) for p, o in zip(prompt[servable], output[servable], strict=True)},
                   key=lambda po: po[0] + beams * po[1])
    if any(kv.can_ever_allocate(p + o, beams, p) for p, o in pairs):
        return memory
    p, o = pairs[0]
    tokens = kv.num_blocks * cfg.block_size
    verdict = (f"the KV cache of one engine holds {tokens:,} tokens ({kv.num_blocks:,} blocks of {cfg.block_size}, "
               f"{memory.kv_cache_bytes / 2**30:.2f} GiB of KV cache per GPU), too few for one request of the "
               f"workload: the smallest needs {p:,} + {o:,}" + (f" x {beams} beams" if beams > 1 else "")
               + " tokens; use more tensor or pipeline parallelism, a smaller dtype or quantization, or shorter "
               "requests")
    return dataclasses.replace(memory, fits=False, verdict=verdict)


def simulate_serving(cfg: ServingConfig, *, keep_events: bool = False, audit: bool = False,
                     serving: ServingCoefficients | None = None, memory_frac: float = 1.0,
                     iteration_scale: float = 1.0, iteration_extra_s: float = 0.0) -> ServingResult:
    """Simulate ``cfg`` to completion of every request (or its rejection with a reason).

    ``keep_events`` keeps every iteration for the timeline; ``audit`` checks every KV cache's
    invariants (blocks in use within capacity, no block owned twice) after each iteration (tests);
    ``serving`` replaces the packaged engine coefficients (fits). ``memory_frac`` (the share of the usable
    GPU memory this model gets), ``iteration_scale`` and ``iteration_extra_s`` (every iteration's time is
    ``time * scale + extra``) describe another model sharing the GPUs (:mod:`perfcast.serving.experiments.colocation`).
    """
    dep = _deployment(cfg, serving=serving, memory_frac=memory_frac)
    policy, max_len, budget, dtype, model, memory = (dep.policy, dep.max_len, dep.budget, dep.dtype, dep.model,
                                                      dep.memory)
    if not memory.fits:  # an answer (serving_memory gives it with the breakdown), but nothing to simulate
        raise ConfigError(f"the deployment does not fit: {memory.verdict}")
    pp = cfg.pipeline_parallel_size
    kv_per_token = memory.kv_bytes_per_token
    blocks = memory.kv_blocks
    per_engine = max(1, blocks // pp)
    cpu_blocks = int(cfg.swap_space // (kv_per_token * cfg.block_size)) // pp
    limits = SchedulerLimits(cfg.max_num_seqs, budget, cfg.chunk_size, max_len, cfg.preemption_mode)
    cls = SCHEDULERS.get(policy)

    def cache() -> BlockManager | CountingBlockManager:
        if cfg.enable_prefix_caching:
            return BlockManager(per_engine, cfg.block_size, cfg.watermark_frac, cpu_blocks, True)
        return CountingBlockManager(per_engine, cfg.block_size, cfg.watermark_frac, cpu_blocks)  # same answers, O(1)

    engines: list[ReplicaScheduler] = [cls(cache(), limits) for _ in range(cfg.num_replicas * pp)]  # type: ignore[arg-type]
    w = cfg.workload
    images = w.images_per_request
    extra_prompt = _extra_prompt_tokens(cfg, model, max_len)
    stream = _requests(cfg)  # lengths as asked: a request beyond max_len is rejected, as vLLM does, not truncated
    n = stream.num_requests
    arrival = np.asarray(stream.arrival_s, dtype=float)
    prompt = np.asarray(stream.prompt_tokens, dtype=np.int64) + extra_prompt
    retrieval = np.zeros(n)
    if w.retrieval_latency_s > 0:
        cv = w.retrieval_latency_cv
        sigma = math.sqrt(math.log1p(cv * cv))
        retrieval = w.retrieval_latency_s * np.exp(
            np.random.default_rng(w.seed + 3).normal(-0.5 * sigma * sigma, sigma, size=n)) if cv else np.full(
            n, w.retrieval_latency_s)
    output = np.asarray(stream.output_tokens, dtype=np.int64)
    first = np.full(n, np.nan)
    finish = np.full(n, np.nan)
    generated = np.zeros(n, dtype=np.int64)
    replica_of = np.full(n, -1, dtype=np.int64)
    preempted = np.zeros(n, dtype=np.int64)
    status = ["pending"] * n
    rejection: dict[int, tuple[str, str]] = {}  # request id -> (the reason it was refused, its own figures)
    prefix_rng = np.random.default_rng(w.seed + 1) if w.shared_prefix_tokens else None
    prefix_ids = prefix_rng.integers(0, w.num_prefixes, size=n) if prefix_rng is not None else None

    heap: list[tuple[float, int]] = []
    busy = [False] * len(engines)
    in_flight: list[Batch | None] = [None] * len(engines)
    steps = [1] * len(engines)  # iterations the batch in flight stands for
    gpu_time = 0.0  # iteration time on its own, summed (what another model sharing the GPUs sees)
    outstanding = [0] * cfg.num_replicas
    events: list[IterationEvent] = []
    iterations = 0
    kv_time = kv_util_sum = kv_frag_sum = 0.0
    kv_max = 0.0
    rr = [0, 0]  # round-robin cursors of the (prefill, decode) pools
    stage_factor = float(pp)  # an iteration passes through every stage
    end_at = [0.0] * len(engines)  # when each engine's iteration in flight leaves the last stage (s; pp > 1)
    decode_steps: dict[int, tuple[float, float, float, float]] = {}  # model.decode_step per batch size
    prefill_times: dict[tuple[int, float, int, int, int], float] = {}  # model.time_s of prefill-only batches
    block_bytes = kv_per_token * cfg.block_size

    def start(e: int, now: float) -> None:
        sched = engines[e]
        batch = sched.schedule()
        if sched.rejected:
            for req, reason, detail in sched.rejected:
                status[req.id] = f"rejected: {reason}: {detail}"
                rejection[req.id] = (reason, detail)
                outstanding[req.replica] -= 1
                if limit:
                    release(now)
            sched.rejected.clear()
        if batch is None:
            busy[e] = False
            return
        n_decode = batch.num_decode
        if (not batch.prefill and not batch.swapped_blocks and sched.steady_decode and not keep_events
                and n_decode > 0 and not spec_k):
            run_decodes(e, now, sched, batch)
            return
        q = ctx = 0
        pairs = 0.0
        logits = n_decode  # every decoding sequence samples, and every prompt that completes
        rows = 0  # sequences the completing prompts decode next (their beams)
        for req, k in batch.prefill:
            end = req.computed_tokens + k
            q += k
            pairs += causal_pairs(k, end) if k > 1 else end
            ctx += end
            if end >= req.prefill_target:
                logits += 1
                rows += req.num_beams
        dec_ctx = batch.decode_context_tokens
        if audit and n_decode:
            audit_decode(sched, batch)
        if images:
            starting = sum(1 for r, _ in batch.prefill if r.computed_tokens == 0 and r.preemptions == 0)
            dt_vision = model.vision_time_s(starting * images)
        else:
            dt_vision = 0.0
        if spec_k and n_decode and not batch.prefill:
            dt = speculate(e, sched) * stage_factor
        else:
            spec_lookahead[e] = []
            dt = iteration_s(q, pairs, ctx, len(batch.prefill), n_decode, dec_ctx, logits) * stage_factor
        gpu_s = dt + dt_vision
        dt = gpu_s * iteration_scale + iteration_extra_s
        if pp > 1:  # it leaves the last stage after the micro-batches ahead of it, and its own last stage
            dt = max(dt, ahead_end_s(e) + gpu_s / stage_factor - now)
        if batch.swapped_blocks:
            dt += batch.swapped_blocks * block_bytes / _PCIE_BPS
        if keep_events:
            events.append(IterationEvent(e, now, dt, q, n_decode))
        end_s = now + dt
        if (not n_decode and logits == len(sched.prefilling) and runs_through(sched, end_s, horizon_s())
                and (sched.reserve_full_length or sched.kv.decode_fits(len(sched.decoding) + rows))):
            # every prompt in flight completes and the decode batch that follows is known: go on to it
            account(e, dt, gpu_s, 1)
            settle(e, batch, end_s, 1)
            after = sched.decode_batch()
            if after is None:
                busy[e] = False
            else:
                run_decodes(e, end_s, sched, after)
            return
        occupy(e, batch, end_s, dt, gpu_s, 1)

    def occupy(e: int, batch: Batch, end_s: float, span_s: float, gpu_s: float, k: int) -> None:
        """Engine ``e`` runs ``batch`` for ``k`` iterations until ``end_s``; :func:`account` for them."""
        account(e, span_s, gpu_s, k)
        busy[e] = True
        in_flight[e] = batch
        steps[e] = k
        end_at[e] = end_s
        heapq.heappush(heap, (end_s, e))

    def account(e: int, span_s: float, gpu_s: float, k: int) -> None:
        """``k`` iterations of engine ``e`` lasting ``span_s`` seconds (``gpu_s`` of GPU time on their own):
        count them, and weigh its KV use (as it is now) by their span."""
        nonlocal iterations, kv_time, kv_util_sum, kv_frag_sum, kv_max, gpu_time
        util, frag = engines[e].kv.fill_fracs()
        kv_util_sum += util * span_s
        kv_frag_sum += frag * span_s
        kv_time += span_s
        kv_max = max(kv_max, util)
        gpu_time += gpu_s
        iterations += k

    def audit_decode(sched: ReplicaScheduler, batch: Batch) -> None:
        """Audit: the batch's decode totals match its rows, and a paged cache holds each row's context (the
        prompt and every token generated, this iteration's slot included)."""
        rows = sched.decode_rows()
        assert sum(r.num_beams for r in rows) == batch.num_decode, (len(rows), batch.num_decode)
        total = sum((r.prompt_tokens + sched.generated(r)) * r.num_beams for r in rows)
        assert total == batch.decode_context_tokens, (total, batch.decode_context_tokens)
        if not sched.reserve_full_length:
            for r in rows:
                assert sched.kv.seq_num_tokens(r.id) == r.prompt_tokens + sched.generated(r), r

    def iteration_s(q: int, pairs: float, ctx: int, n_prefill: int, n_decode: int, dec_ctx: int,
                    logits: int) -> float:
        """``model.time_s`` (s, one stage), remembered for prefill-only batches: their shapes repeat (the
        same prompt lengths), while a batch with decodes rarely meets its cached tokens again."""
        if n_decode:
            return model.time_s(q, pairs, ctx, n_prefill, n_decode, dec_ctx, logits)
        key = (q, pairs, ctx, n_prefill, logits)
        hit = prefill_times.get(key)
        if hit is None:
            if len(prefill_times) > 1 << 16:
                prefill_times.clear()
            hit = prefill_times[key] = model.time_s(q, pairs, ctx, n_prefill, 0, 0, logits)
        return hit

    def run_decodes(e: int, now: float, sched: ReplicaScheduler, batch: Batch) -> None:
        """Run the decode-only ``batch`` (its first iteration's KV slots taken) as a stretch of identical
        iterations: until a member finishes, the next arrival or hand-over, or the KV cache is full.

        When nothing could join the batch (no request waiting, swapped out or prefilling, no closed loop and
        no decode pool fed by hand-overs), a stretch that ends at a member's finish before the next arrival
        goes on here: the finished members leave at that iteration's end and the others, with their next KV
        slot, form the next stretch, as scheduling at that boundary would. O(1) per stretch besides one
        scalar step per iteration (O(block_size) to count the cache's blocks).
        """
        dec, kv = sched.decoding, sched.kv
        grows = not sched.reserve_full_length  # a full-length reservation already holds every token
        nxt = horizon_s()
        # pipeline stages: the first iteration leaves the last stage after the micro-batches ahead of it (the
        # others in flight, which no event changes before nxt); -inf without stages
        ahead = ahead_end_s(e) if pp > 1 else -math.inf
        through = not sched.prefilling and runs_through(sched, now, nxt)
        while True:
            fin = dec.steps_to_finish()  # the fin-th iteration finishes someone
            k = 1 + kv.max_group_growth(fin - 1) if grows and fin > 1 else fin
            j, end, gpu_s = stretch(now, batch.num_decode, batch.decode_context_tokens, k, nxt, ahead) if k > 1 else (
                0, now, 0.0)
            if j > 1:
                if grows:
                    kv.grow_group(j - 1)
                span = end - now
            else:  # one iteration, priced like any other
                if audit:
                    audit_decode(sched, batch)
                num = batch.num_decode
                gpu_s = model.time_s(0, 0.0, 0, 0, num, batch.decode_context_tokens, num) * stage_factor
                span = gpu_s * iteration_scale + iteration_extra_s
                end = now + span
                if end < ahead + gpu_s / stage_factor:
                    end = ahead + gpu_s / stage_factor
                    span = end - now
                j = 1
            ahead = -math.inf  # the iterations that follow are the next micro-batch behind them
            if not (through and j == fin and end < nxt and (not grows or kv.decode_fits(len(dec)))):
                occupy(e, batch, end, span, gpu_s, j)
                return
            account(e, span, gpu_s, j)
            settle(e, batch, end, j)
            if not sched.continue_decoding(batch):  # the checks above: every next KV slot fits
                busy[e] = False
                return
            now = end

    def ahead_end_s(e: int) -> float:
        """When the last of the other virtual engines' iterations in flight on ``e``'s replica leaves the last
        pipeline stage (s; -inf when none is in flight)."""
        first = e - e % pp
        return max([end_at[u] for u in range(first, first + pp) if u != e and busy[u]], default=-math.inf)

    def horizon_s() -> float:
        """:func:`next_event_s`, and with pipeline stages also the next end of any engine's iterations (s), where
        the micro-batches ahead of an engine's next iteration change."""
        nxt = next_event_s()
        if pp > 1 and heap and heap[0][0] < nxt:
            return heap[0][0]
        return nxt

    def next_event_s() -> float:
        """When the next request arrives or reaches a pool (s): the next thing that can change a batch from
        outside its engine."""
        return min(arrival_l[cursor] if cursor < n and in_system < limit_n else math.inf,
                   transfers[0][0] if transfers else math.inf)

    def runs_through(sched: ReplicaScheduler, end: float, nxt: float) -> bool:
        """Whether the engine may settle its iterations ending at ``end`` (s) and form its next batch ahead of
        the event loop: only its decode set can be in that batch (no request waiting or swapped out, no
        closed loop, no hand-overs), the policy repeats it unchanged, and ``end`` comes before the next
        arrival or hand-over at ``nxt`` (s). (The caller also checks that the decode set's KV slots fit
        without preempting.)"""
        if limit or disagg or spec_k or keep_events or sched.waiting or sched.swapped or not sched.steady_decode:
            return False
        return end < nxt

    def stretch(now: float, num: int, ctx: int, k: int, nxt: float, ahead: float) -> tuple[int, float, float]:
        """Up to ``k`` decode-only iterations of ``num`` sequences holding ``ctx`` cached tokens, from ``now``
        (s), stopping after the first that ends at or after ``nxt`` (s): (iterations, end time in s, GPU
        seconds on their own). Each iteration's time is the closed form of its cached tokens, which grow by
        ``num`` per iteration; the first one leaves the last pipeline stage no sooner than one stage after
        ``ahead`` (s), when the micro-batches ahead of it have."""
        step = decode_steps.get(num)
        if step is None:
            step = decode_steps[num] = model.decode_step(num)
        fixed, a, m0, m1 = step  # one iteration: fixed + ((a ctx)^4 + (m0 + m1 ctx)^4)^(1/4)
        scale, extra = iteration_scale, iteration_extra_s
        end = now
        gpu_s = 0.0
        x = float(max(ctx, 1))  # exact: token counts stay far below 2**53
        grow = float(num)
        for j in range(1, k + 1):
            c = a * x
            m = m0 + m1 * x
            raw = (fixed + (c * c * c * c + m * m * m * m) ** 0.25) * stage_factor
            gpu_s += raw
            end += raw * scale + extra
            if j == 1 and end < ahead + raw / stage_factor:
                end = ahead + raw / stage_factor
            x += grow
            if end >= nxt:
                return j, end, gpu_s
        return k, end, gpu_s

    def advance_decodes(e: int, k: int) -> list[Request]:
        """The decode set emitted the iterations' tokens (and speculative decoding its accepted draft tokens);
        returns the members that are done, in running order."""
        dec = engines[e].decoding
        dec.advance(k)  # one token per iteration each
        if not spec_k:
            return dec.pop_finished()
        sched = engines[e]
        for req, look in spec_lookahead[e]:
            if look:
                # accepted draft tokens: consecutive successes, each with the acceptance rate
                draws = spec_rng.random(look)
                extra = int(np.argmin(draws < cfg.spec_acceptance_rate)) if (
                    draws >= cfg.spec_acceptance_rate).any() else look
                if extra:
                    sched.kv.append(req.id, extra)
                    dec.bump(req, extra)
                spec_stats[0] += 1
                spec_stats[1] += extra + 1
        return dec.pop_finished()

    def complete(e: int, now: float) -> None:
        batch = in_flight[e]
        in_flight[e] = None
        assert batch is not None
        settle(e, batch, now, steps[e])

    def settle(e: int, batch: Batch, now: float, k: int) -> None:
        """Engine ``e``'s ``batch`` ran ``k`` iterations up to ``now`` (s): its prompts that completed emit their
        first token and decode, hand over or finish; the decode set emits its tokens and its finished members
        leave."""
        sched = engines[e]
        if audit:
            sched.kv.check_invariants()
            assert sched.kv.num_used_blocks <= sched.kv.num_blocks
        if not batch.prefill:  # a decode-only batch (the common case): its finished members leave
            if batch.num_decode:
                for req in advance_decodes(e, k):
                    done(req, sched, now)
            return
        emitted: list[Request] = []
        for req, chunk in batch.prefill:
            req.computed_tokens += chunk
            if not req.in_prefill:  # the prompt is in: it samples its next token
                req.generated += 1
                emitted.append(req)
        finished = advance_decodes(e, k) if batch.num_decode else []
        for req in emitted:
            if math.isnan(req.first_token_s):
                req.first_token_s = now
                first[req.id] = now
            if req.generated >= req.output_tokens:
                sched.prefilled(req, decodes=False)
                done(req, sched, now)
            elif disagg and req.replica < disagg:  # prompt done in the prefill pool: hand the KV cache over
                sched.prefilled(req, decodes=False)
                sched.finish(req)
                outstanding[req.replica] -= 1
                ready = now + cfg.kv_transfer_latency_s + (
                    req.context_tokens * kv_gpu_bytes_per_token / cfg.kv_transfer_bandwidth_Bps)
                handed[req.id] = req
                heapq.heappush(transfers, (ready, req.id, 1))
            else:
                sched.prefilled(req, decodes=True)
        for req in finished:
            done(req, sched, now)

    def done(req: Request, sched: ReplicaScheduler, now: float) -> None:
        """``req`` emitted its last token at ``now``: record it and free its KV cache."""
        req.finish_s = now
        finish[req.id] = now
        generated[req.id] = req.generated
        preempted[req.id] = req.preemptions
        status[req.id] = "completed"
        outstanding[req.replica] -= 1
        if limit:
            release(now)
        sched.finish(req)

    def route(req: Request, pool: range) -> int:
        rep: int
        if cfg.router == "round_robin" or len(pool) == 1:
            key = 0 if pool.start == 0 else 1
            rep = pool[rr[key] % len(pool)]
            rr[key] += 1
        elif cfg.router == "least_outstanding":
            rep = min(pool, key=lambda i: (outstanding[i], i))
        else:
            rep = min(pool, key=lambda i: (sum(len(engines[i * pp + v].waiting) for v in range(pp)), i))
        outstanding[rep] += 1
        req.replica = rep
        if pp == 1:
            return rep
        return min(range(rep * pp, rep * pp + pp), key=lambda v: (engines[v].num_outstanding, v))

    disagg = cfg.num_prefill_replicas
    if disagg and not 0 < disagg < cfg.num_replicas:
        raise ConfigError(f"--num-prefill-replicas {disagg} must leave decode replicas: use 1..{cfg.num_replicas - 1} "
                          f"of the {cfg.num_replicas} replicas")
    if disagg and policy == "static":
        raise ConfigError("disaggregated serving needs a continuous-batching scheduler, not static")
    arrival_pool = range(disagg) if disagg else range(cfg.num_replicas)
    decode_pool = range(disagg, cfg.num_replicas)
    transfers: list[tuple[float, int, int]] = []  # (time it reaches a pool, request id, 0 arrival / 1 decode pool)
    handed: dict[int, Request] = {}
    kv_gpu_bytes_per_token = model.kv_bytes_per_token / pp

    beams = w.num_beams
    if beams > 1 and cfg.enable_prefix_caching:
        raise ConfigError(f"beam search ({beams} beams) is not modelled with --enable-prefix-caching; drop one")
    spec_k = cfg.num_speculative_tokens if cfg.speculative_model else 0
    if beams > 1 and spec_k:
        raise ConfigError(f"beam search ({beams} beams) does not combine with speculative decoding (engines "
                          "refuse it too); drop --speculative-model or use 1 beam")
    if cfg.num_speculative_tokens and not cfg.speculative_model:
        raise ConfigError("--num-speculative-tokens needs --speculative-model (the draft model)")
    draft = dep.draft if spec_k else None
    spec_rng = np.random.default_rng(w.seed + 2)
    spec_lookahead: list[list[tuple[Request, int]]] = [[] for _ in engines]  # per engine: each row's lookahead
    spec_stats = [0, 0]  # decode steps with speculation, tokens they emitted

    def speculate(e: int, sched: ReplicaScheduler) -> float:
        """Reserve lookahead KV slots and return the step time of speculative decoding for the decode batch."""
        assert draft is not None
        kv = sched.kv
        rows = sched.decode_rows()
        contexts = [r.prompt_tokens + sched.generated(r) for r in rows]
        ks = []
        room = kv.num_available_blocks  # lookahead slots are reserved against it cumulatively
        for req, c in zip(rows, contexts, strict=True):
            k = min(spec_k, req.output_tokens - (c - req.prompt_tokens) - 1)
            need = kv.append_need(req.id, k) if k > 0 else 0
            if k > 0 and need <= room:
                room -= need
                ks.append(k)
            else:
                ks.append(0)
        spec_lookahead[e] = list(zip(rows, ks, strict=True))
        b = len(rows)
        ctx = sum(contexts)
        kmax = max(ks) if ks else 0
        draft_s = float(draft.decode_times(b, ctx + b * np.arange(kmax)).sum()) if kmax else 0.0
        q = sum(k + 1 for k in ks)
        pairs = sum((k + 1) * (c + k) for c, k in zip(contexts, ks, strict=True))
        verify_s = model.time_s(q, float(pairs), ctx + q, b, 0, 0, q)
        return draft_s + verify_s

    cursor = 0
    arrival_l, prompt_l, output_l = arrival.tolist(), prompt.tolist(), output.tolist()  # plain numbers in the loop
    has_retrieval = w.retrieval_latency_s > 0
    # closed loop: requests in the system (sent, neither finished nor rejected) stay within the concurrency
    limit = w.concurrency or 0
    limit_n = limit or n + 1
    in_system = 0

    def release(now: float) -> None:
        """A request left the system: the slot goes to the next request not yet sent and not yet given a
        slot (the first ``limit - in_system`` unsent requests hold the free slots), sent now if it was due."""
        nonlocal in_system
        in_system -= 1
        j = cursor + limit - in_system - 1
        if j < n and arrival_l[j] < now:
            arrival_l[j] = now

    while cursor < n or heap or transfers:
        next_arrival = arrival_l[cursor] if cursor < n and in_system < limit_n else math.inf
        next_transfer = transfers[0][0] if transfers else math.inf
        if heap and heap[0][0] <= next_arrival and heap[0][0] <= next_transfer:
            now, e = heapq.heappop(heap)
            complete(e, now)
            start(e, now)
            continue
        if next_transfer <= next_arrival:
            now, rid, to_decode = heapq.heappop(transfers)
            req = handed.pop(rid)
            e = route(req, decode_pool if to_decode else arrival_pool)
            replica_of[rid] = req.replica
            engines[e].add(req)
            if not busy[e]:
                start(e, now)
            continue
        now = float(next_arrival)
        i = cursor
        cursor += 1
        in_system += 1
        req = Request(i, now, prompt_l[i], output_l[i], beams)
        if prefix_ids is not None:
            req.prefix_hashes = prefix_block_hashes(int(prefix_ids[i]), w.shared_prefix_tokens, int(prompt[i]),
                                                    cfg.block_size, i)
        if has_retrieval and retrieval[i] > 0:  # the retrieval stage runs first
            handed[i] = req
            heapq.heappush(transfers, (now + float(retrieval[i]), i, 0))
            continue
        e = route(req, arrival_pool)
        replica_of[i] = req.replica
        engines[e].add(req)
        if not busy[e]:
            start(e, now)

    if n and len(rejection) == n:
        # nothing could be served: the workload does not fit the deployment (e.g. every request longer than the
        # context, or a KV budget too small for one request), not a result
        reasons = "; ".join(f"{k} {reason}" for reason, k in _count_reasons(rejection).items())
        raise ConfigError(f"no request can be served: all {n} were rejected ({reasons}); the first: "
                          f"{rejection[0][1]}")
    for i in range(n):
        if status[i] == "pending":  # pragma: no cover - the loop drains every engine
            status[i] = "incomplete: the simulation ended with the request unfinished"
    if limit:  # the times requests were actually sent
        arrival = np.asarray(arrival_l, dtype=float)
    completed = np.array([s == "completed" for s in status], dtype=bool)
    metrics = summarize_requests(arrival_s=arrival, first_token_s=first, finish_s=finish, prompt_tokens=prompt,
                                 output_tokens=output, completed=completed, slo_ttft_s=cfg.slo_ttft_s,
                                 slo_tpot_s=cfg.slo_tpot_s)
    hit = sum(s.kv.prefix_hit_tokens for s in engines)
    query = sum(s.kv.prefix_query_tokens for s in engines)
    return ServingResult(
        config=cfg, metrics=metrics, arrival_s=arrival, first_token_s=first, finish_s=finish, prompt_tokens=prompt,
        output_tokens=output, generated_tokens=generated, replica=replica_of, preemptions_per_request=preempted,
        status=status, preemptions=sum(s.preemptions for s in engines), iterations=iterations,
        kv_blocks_per_engine=per_engine,
        kv_utilization_mean_frac=kv_util_sum / kv_time if kv_time else 0.0, kv_utilization_max_frac=kv_max,
        kv_fragmentation_mean_frac=kv_frag_sum / kv_time if kv_time else 0.0,
        prefix_hit_frac=hit / query if query else 0.0, weight_bytes_per_gpu=model.weight_bytes / pp,
        spec_tokens_per_step=spec_stats[1] / spec_stats[0] if spec_stats[0] else 0.0, gpu_time_s=gpu_time,
        events=events, kv_bytes_per_token=kv_per_token, retrieval_mean_s=float(retrieval.mean()) if n else 0.0,
        gpu_memory_bytes=float(model.hw.memory_bytes), dtype=dtype.value, rejection_counts=_count_reasons(rejection),
        memory=memory)
