"""What a serving simulation is asked: the deployment, the engine's knobs and the load.

Field names follow vLLM's engine arguments where one exists (``max_num_seqs``,
``max_num_batched_tokens``, ``block_size``, ``gpu_memory_utilization``,
``enable_prefix_caching``, ``enable_chunked_prefill``, ``tensor_parallel_size``,
``pipeline_parallel_size``, ``swap_space`` in bytes here); everything is in base
units (seconds, bytes, tokens).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from perfcast.errors import ConfigError
from perfcast.serving.schedulers import SCHEDULERS

__all__ = ["MAX_NUM_SEQS", "MAX_REPLICAS", "MAX_REQUESTS", "MAX_SEED", "MAX_SWAP_SPACE_BYTES", "MAX_TOKENS",
           "PRECISION_QUANTIZATION", "ServingConfig", "WorkloadConfig"]

# Bounds on what one simulation is asked (the configs refuse beyond them in one line, naming the bound):
# requests per simulation: each is held in memory to the end; a million short requests take ~270 MB and ~10 s
# (measured, llama-2-7b on h100), long ones minutes: more is not a run a process can hold
MAX_REQUESTS = 1_000_000
# replicas behind the router, each simulated with its own scheduler and KV cache; 10,000 replicas take seconds
MAX_REPLICAS = 10_000
# sequences per iteration: the iteration model tabulates the LM head per sequence count up to it, as it does
# per token count up to 65,536 (vLLM's defaults are 256-1,024)
MAX_NUM_SEQS = 65_536
# CPU swap space per GPU: 1 PiB, beyond any host's memory
MAX_SWAP_SPACE_BYTES = 2.0**50
# tokens of one request (and the token limits of the engine): lengths live in int64 numpy arrays and are multiplied
# by bytes per token; 2^31 - 1 is 200x the longest context any model takes (10M tokens)
MAX_TOKENS = 2**31 - 1
# the workload seed: numpy's SeedSequence takes non-negative integers; the simulation derives seed + 1 .. seed + 3
MAX_SEED = 2**63 - 4

# a benchmark's precision label (as tables and MLPerf write it) -> ServingConfig.quantization
PRECISION_QUANTIZATION: dict[str, str] = {"fp16": "none", "bf16": "none", "fp8": "fp8", "fp4": "fp4", "nvfp4": "fp4"}


# the flag that sets a field, where the two names differ beyond - and _
_FLAGS = {"burstiness_cv": "--burstiness", "length_range_ratio": "--random-range-ratio",
          "kv_transfer_bandwidth_Bps": "--kv-transfer-bandwidth", "retrieval_latency_s": "--retrieval-latency"}


def _refuse_unused(config: BaseModel, name: str, applies: bool, why: str) -> None:
    """ConfigError when field ``name`` differs from its default where it has no effect (``applies`` False)."""
    value: Any = getattr(config, name)
    if applies or value == type(config).model_fields[name].default:
        return
    flag = _FLAGS.get(name, "--" + name.replace("_", "-"))
    shown = f"{value / 1e9:g} GB/s" if name == "kv_transfer_bandwidth_Bps" else f"{value:g}" if isinstance(
        value, float) else str(value)
    raise ConfigError(f"{flag} {shown} ({name}) has no effect here: it {why}")


class WorkloadConfig(BaseModel):
    """The requests: how many, when they arrive, how long they are."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    num_requests: int = Field(default=200, ge=1, le=MAX_REQUESTS)
    seed: int = Field(default=42, ge=0, le=MAX_SEED, description="seeds the lengths, arrivals and prefixes "
                      "(numpy's SeedSequence takes non-negative integers)")
    arrival: Literal["poisson", "gamma", "fixed", "trace"] = "poisson"
    qps: float | None = Field(default=None, gt=0, description="requests per second (None = all at time 0)")
    burstiness_cv: float = Field(default=1.0, gt=0, description="gamma arrivals: coefficient of variation of gaps")
    concurrency: int | None = Field(default=None, ge=1, description="closed loop: at most this many requests "
                                    "outstanding, the next sent when one finishes (a benchmark client's "
                                    "--max-concurrency); with qps, a request waits for its time and a free slot")
    trace: str | None = Field(default=None, description="a shipped trace name or a CSV path (lengths, arrivals)")
    prompt_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS)
    output_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS)
    length_range_ratio: float = Field(default=1.0, gt=0, le=1, description="with prompt_tokens/output_tokens: "
                                      "each request's lengths uniform in the integers [floor(r * L), L] (a "
                                      "benchmark client's --random-range-ratio; 1 = every request at L)")
    output_tokens_mean: float | None = Field(default=None, gt=1, le=MAX_TOKENS, description="with a data set "
                                             "preset (trace dataset:<name>): the mean of the output lengths "
                                             "(tokens; the model's own answers), the preset's spread kept")
    output_tokens_max: int | None = Field(default=None, ge=2, le=MAX_TOKENS, description="with a data set "
                                          "preset: the longest output (tokens; the request's max_tokens)")
    shared_prefix_tokens: int = Field(default=0, ge=0, le=MAX_TOKENS, description="tokens of a system prompt "
                                      "requests share")
    num_prefixes: int = Field(default=1, ge=1, le=MAX_REQUESTS, description="distinct shared prefixes (requests "
                              "pick one at random; at most one per request)")
    images_per_request: int = Field(default=0, ge=0, description="images in each prompt (multimodal models: each "
                                                                 "runs the vision tower and adds its image tokens)")
    retrieval_latency_s: float = Field(default=0.0, ge=0, description="RAG: mean time of the retrieval stage "
                                                                     "(query embedding + vector search) before the "
                                                                     "request reaches the engine")
    retrieval_latency_cv: float = Field(default=0.0, ge=0, description="coefficient of variation of that time "
                                                                       "(lognormal)")
    retrieved_tokens: int = Field(default=0, ge=0, le=MAX_TOKENS, description="RAG: tokens of retrieved context "
                                  "added to the prompt")
    num_beams: int = Field(default=1, ge=1, le=MAX_NUM_SEQS, description="beam search: beams per request "
                           "(TensorRT-LLM's beam_width); each decodes as a sequence of its own over the shared "
                           "prompt, and the request returns one sequence of output_tokens")

    @model_validator(mode="after")
    def _options_take_effect(self) -> WorkloadConfig:
        """A setting that only applies with another is refused without it (it would be ignored silently)."""
        _refuse_unused(self, "burstiness_cv", self.arrival == "gamma", "shapes gamma arrivals only; add --arrival "
                       "gamma (poisson gaps have CV 1)")
        _refuse_unused(self, "num_prefixes", self.shared_prefix_tokens > 0, "counts shared system prompts; add "
                       "--shared-prefix-tokens N")
        _refuse_unused(self, "retrieval_latency_cv", self.retrieval_latency_s > 0, "spreads the retrieval stage's "
                       "time; add --retrieval-latency S")
        _refuse_unused(self, "length_range_ratio", self.prompt_tokens is not None, "spreads the lengths "
                       "--prompt-tokens and --output-tokens give; add them")
        preset = self.trace is not None and self.trace.startswith("dataset:")
        for name in ("output_tokens_mean", "output_tokens_max"):
            _refuse_unused(self, name, preset, "sets the output lengths of a data set preset; give --trace "
                           "dataset:<name>")
        if self.arrival == "trace" and self.trace is None:
            raise ConfigError("--arrival trace takes the arrival times of a trace: give --trace (a shipped trace "
                              "with arrival times, or a CSV path with an arrival column)")
        return self


class ServingConfig(BaseModel):
    """One deployment under one load (see the module docstring for the names)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    model: str
    hardware: str
    tensor_parallel_size: int = Field(default=1, ge=1)
    pipeline_parallel_size: int = Field(default=1, ge=1)
    expert_parallel_size: int = Field(default=1, ge=1, description="MoE models: GPUs of a replica's tensor-parallel "
                                      "group the routed experts are split over (divides tensor_parallel_size)")
    attention_data_parallel: bool = Field(default=False, description="MoE models: each of the tensor_parallel_size "
                                          "GPUs runs attention on its own sequences (TensorRT-LLM's "
                                          "enable_attention_dp); max_num_seqs and max_num_batched_tokens then count "
                                          "the whole replica")
    num_replicas: int = Field(default=1, ge=1, le=MAX_REPLICAS)
    cluster: str | None = Field(default=None, description="cluster id for TP collectives (default: the GPU's node)")
    scheduler: str = "vllm"
    router: Literal["round_robin", "least_outstanding", "shortest_queue"] = "round_robin"
    engine: str = Field(default="vllm", description="CPU-overhead preset of the engine (vllm | trtllm)")
    dtype: Literal["auto", "bf16", "fp16"] = Field(
        default="auto", description="weights and activations; auto = the checkpoint's (its torch_dtype, an fp32 "
        "checkpoint served in fp16, bf16 in fp16 on a GPU without bf16 math), as vLLM's --dtype auto")
    quantization: Literal["auto", "none", "w4a16", "w8a16", "w8a8", "fp8", "fp4", "mxfp4"] = Field(
        default="auto", description="weights as the checkpoint stores them (auto: its quantization_config, none "
        "for an unquantized one), or a checkpoint quantized that way (none = a 16-bit copy); see "
        "perfcast.workload.quantization for how each scheme runs on the GPU")
    kv_cache_dtype: Literal["auto", "fp16", "bf16", "fp8"] = "auto"
    max_num_seqs: int = Field(default=256, ge=1, le=MAX_NUM_SEQS)
    max_num_batched_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS,
                                               description="token budget per iteration (default per scheduler)")
    max_model_len: int | None = Field(default=None, ge=2, le=MAX_TOKENS, description="context limit (default: the "
                                      "model's)")
    allow_long_max_model_len: bool = Field(default=False, description="accept a max_model_len above the model's "
                                           "context (vLLM's VLLM_ALLOW_LONG_MAX_MODEL_LEN): for a deployment "
                                           "known to run longer (e.g. RoPE scaled at serving time)")
    enable_chunked_prefill: bool = False
    chunk_size: int = Field(default=512, ge=1, le=MAX_TOKENS, description="sarathi / chunked prefill: tokens per "
                            "iteration")
    block_size: int = Field(default=16, ge=1, le=MAX_TOKENS)
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    watermark_frac: float = Field(default=0.01, ge=0, lt=1)
    swap_space: float = Field(default=4 * 2**30, ge=0, le=MAX_SWAP_SPACE_BYTES, description="CPU swap space per GPU "
                              "(bytes)")
    preemption_mode: Literal["recompute", "swap"] = "recompute"
    enable_prefix_caching: bool = False
    num_prefill_replicas: int = Field(default=0, ge=0, le=MAX_REPLICAS, description="disaggregated serving: the "
                                      "first N replicas only prefill, then hand the KV cache over")
    kv_transfer_bandwidth_Bps: float | None = Field(default=None, gt=0, description="per GPU, prefill to decode "
                                                    "pool (None: the cluster's: its scale-up links when every "
                                                    "replica sits in one NVLink domain, else its NICs' share per "
                                                    "GPU)")
    kv_transfer_latency_s: float = Field(default=100e-6, ge=0)
    speculative_model: str | None = Field(default=None, description="draft model for speculative decoding "
                                             "(mtp: the target's own multi-token-prediction module)")
    num_speculative_tokens: int = Field(default=0, ge=0, description="tokens the draft proposes per step")
    spec_acceptance_rate: float = Field(default=0.7, gt=0, lt=1,
                                        description="probability the target accepts each proposed token")
    slo_ttft_s: float | None = Field(default=None, gt=0)
    slo_tpot_s: float | None = Field(default=None, gt=0)
    slo_e2e_s: float | None = Field(default=None, gt=0, description="p99 end-to-end latency bound of a QPS search "
                                    "(MLPerf GPT-J server); not part of goodput")
    workload: WorkloadConfig = WorkloadConfig()

    @model_validator(mode="after")
    def _options_take_effect(self) -> ServingConfig:
        """A setting that only applies with another is refused without it (it would be ignored silently, or the
        deployment would not be the one asked for: a draft model that proposes no token decodes as without it)."""
        if self.speculative_model is not None and self.num_speculative_tokens == 0:
            raise ConfigError(f"--speculative-model {self.speculative_model} needs --num-speculative-tokens N (the "
                              "tokens the draft proposes per step; vLLM requires it too): with 0 nothing is "
                              "speculated")
        if self.num_speculative_tokens and self.speculative_model is None:
            raise ConfigError("--num-speculative-tokens needs --speculative-model (the draft model)")
        _refuse_unused(self, "spec_acceptance_rate", self.speculative_model is not None,
                       "applies to speculative decoding; add --speculative-model and --num-speculative-tokens")
        chunked = self.scheduler in ("sarathi", "sglang") or (self.scheduler == "vllm" and self.enable_chunked_prefill)
        _refuse_unused(self, "chunk_size", chunked, f"is the token budget of chunked prefill, which scheduler "
                       f"{self.scheduler} does not run here; use --scheduler sarathi or sglang, or "
                       "--enable-chunked-prefill (vllm), or --max-num-batched-tokens")
        if self.enable_chunked_prefill and self.scheduler not in ("vllm", "sarathi"):
            raise ConfigError(f"--enable-chunked-prefill turns vllm's scheduler into chunked prefill; scheduler "
                              f"{self.scheduler} has its own policy (drop the flag, or use --scheduler vllm)")
        for name in ("kv_transfer_bandwidth_Bps", "kv_transfer_latency_s"):
            _refuse_unused(self, name, self.num_prefill_replicas > 0, "is the prefill-to-decode link of "
                           "disaggregated serving; add --num-prefill-replicas N")
        self._check_combinations()
        return self

    def _check_combinations(self) -> None:
        """Refuse what the simulator does not model together, before any costly work."""
        SCHEDULERS.get(self.scheduler)  # an unknown name raises UnknownNameError listing the schedulers
        disagg, replicas = self.num_prefill_replicas, self.num_replicas
        if disagg and not 0 < disagg < replicas:
            raise ConfigError(f"--num-prefill-replicas {disagg} must leave decode replicas: use 1..{replicas - 1} "
                              f"of the {replicas} replicas")
        if disagg and self.scheduler == "static":
            raise ConfigError("disaggregated serving needs a continuous-batching scheduler, not static")
        beams = self.workload.num_beams
        if beams > 1 and self.enable_prefix_caching:
            raise ConfigError(f"beam search ({beams} beams) is not modelled with --enable-prefix-caching; drop one")
        if beams > 1 and self.speculative_model:
            raise ConfigError(f"beam search ({beams} beams) does not combine with speculative decoding (engines "
                              "refuse it too); drop --speculative-model or use 1 beam")

