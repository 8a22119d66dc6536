"""A serving config resolved to its deployment, before any request runs.

The builder checks what needs the catalogs (the model's context, the engine's dtype, the draft model's
vocabulary) and makes the iteration model (the execution-time predictor, tabulated once per process: a QPS
search, a co-location fixed point and a table of benchmark rows simulate the same deployment many times),
one GPU's memory and so the KV capacity of each engine, and the limits its schedulers obey.
:func:`serving_memory` answers whether a deployment fits without simulating it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from perfcast.catalog.defaults import default_dtype
from perfcast.catalog.hardware import load_hardware
from perfcast.catalog.models import ModelConfig, load_model
from perfcast.coefficients.bundle import Calibration, resolve_calibration
from perfcast.digest import content_digest
from perfcast.dtypes import DType
from perfcast.errors import ConfigError, UnsupportedError
from perfcast.serving.config import ServingConfig
from perfcast.serving.iteration import IterationModel
from perfcast.serving.kv import BlockManager, CountingBlockManager, KVCache
from perfcast.serving.kv.hybrid import HybridBlockManager
from perfcast.serving.kv.hybrid_prefix import HybridPrefixBlockManager
from perfcast.serving.kv.layout import KVLayout
from perfcast.serving.memory import ServingMemory, memory_breakdown
from perfcast.serving.schedulers import SchedulerLimits
from perfcast.serving.sources.requests import request_stream
from perfcast.system.cluster import load_cluster
from perfcast.workload.models.decoder import num_mtp_layers

__all__ = ["Deployment", "build_deployment", "max_model_len", "serving_dtype", "serving_memory"]


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


# per the contents of the model, device and calibration, and the deployment's fields the iteration model reads
_MODELS: dict[tuple[object, ...], IterationModel] = {}


def _iteration_model(model_cfg: ModelConfig, cfg: ServingConfig, *, dtype: DType, quantization: str,
                     kv_dtype: DType | None, pp: int, max_tokens: int, calibration: Calibration) -> IterationModel:
    """The deployment's iteration model, tabulated once per process (a QPS search, a co-location fixed point
    and a table of benchmark rows simulate the same deployment many times)."""
    key = (content_digest(model_cfg), content_digest(load_hardware(cfg.hardware)), cfg.tensor_parallel_size, pp,
           dtype, quantization, kv_dtype, max_tokens, cfg.max_num_seqs, cfg.engine, cfg.cluster, calibration.digest,
           cfg.expert_parallel_size, cfg.attention_data_parallel)
    hit = _MODELS.get(key)
    if hit is not None:
        return hit
    model = IterationModel(model_cfg, cfg.hardware, tp=cfg.tensor_parallel_size, pp=pp, dtype=dtype,
                           quantization=quantization, kv_dtype=kv_dtype, max_tokens=max_tokens,
                           max_seqs=cfg.max_num_seqs, engine=cfg.engine,
                           cluster=load_cluster(cfg.cluster) if cfg.cluster else None, calibration=calibration,
                           ep=cfg.expert_parallel_size, attention_dp=cfg.attention_data_parallel)
    if len(_MODELS) > 256:
        _MODELS.clear()
    _MODELS[key] = model
    return model


@dataclass(frozen=True)
class Deployment:
    """What a config resolves to before any request runs: the scheduling policy, the context limit (tokens),
    the iteration token budget (tokens), the dtype, the iteration model and one GPU's memory."""

    config: ServingConfig
    policy: str
    max_len: int
    budget: int
    dtype: DType
    model: IterationModel
    memory: ServingMemory
    draft: IterationModel | None = None  # speculative decoding's draft model, on the same GPUs

    @property
    def num_engines(self) -> int:
        """Schedulers of the run: every replica's pipeline virtual engines."""
        return self.config.num_replicas * self.config.pipeline_parallel_size

    @property
    def kv_blocks_per_engine(self) -> int:
        """KV blocks of one engine's cache (a replica's blocks split over its pipeline virtual engines)."""
        return max(1, self.memory.kv_blocks // self.config.pipeline_parallel_size)

    @property
    def kv_block_bytes(self) -> float:
        """KV bytes of one block on one GPU."""
        return self.memory.kv_block_bytes

    @property
    def limits(self) -> SchedulerLimits:
        """The knobs every engine's scheduler obeys."""
        cfg = self.config
        return SchedulerLimits(cfg.max_num_seqs, self.budget, cfg.chunk_size, self.max_len, cfg.preemption_mode)

    def new_cache(self) -> KVCache:
        """An empty KV cache for one engine (host swap space included): paged blocks with prefix caching, else
        the counting manager (the same answers, O(1) per operation)."""
        cfg = self.config
        cpu_blocks = int(cfg.swap_space // self.kv_block_bytes) // cfg.pipeline_parallel_size
        layout = self.memory.layout
        if layout is not None and cfg.enable_prefix_caching:  # sliding layers (checked in build_deployment)
            return HybridPrefixBlockManager(self.kv_blocks_per_engine, layout.block_size, cfg.watermark_frac, 0,
                                            full_groups=layout.full_groups, local_groups=layout.local_groups,
                                            local_window=layout.local_window or 1)
        if layout is not None:
            return hybrid_cache(layout, self.kv_blocks_per_engine, cfg.watermark_frac, cpu_blocks)
        if cfg.enable_prefix_caching:
            return BlockManager(self.kv_blocks_per_engine, cfg.block_size, cfg.watermark_frac, cpu_blocks, True)
        return CountingBlockManager(self.kv_blocks_per_engine, cfg.block_size, cfg.watermark_frac, cpu_blocks)

    def extra_prompt_tokens(self) -> int:
        """Image and retrieved tokens every prompt carries besides its own (they join the prompt)."""
        w = self.config.workload
        model = self.model
        if w.images_per_request and model.cfg.vision is None:
            raise ConfigError(f"{model.cfg.id} has no vision tower; --images-per-request needs a multimodal model "
                              "(e.g. llava-1.5-7b)")
        extra = w.images_per_request * model.image_tokens + w.retrieved_tokens
        if extra + 2 > self.max_len:
            raise ConfigError(f"{extra} image/retrieved tokens leave no room in max_model_len {self.max_len}")
        return extra


def build_deployment(cfg: ServingConfig, calibration: Calibration, *, memory_frac: float = 1.0) -> Deployment:
    """``cfg``'s deployment: the iteration model (tabulated once per process), the draft model, one GPU's
    memory with ``memory_frac`` of the usable memory (another model on the GPUs takes the rest) and the
    limits its schedulers obey, priced with ``calibration``."""
    policy = "sarathi" if cfg.scheduler == "vllm" and cfg.enable_chunked_prefill else cfg.scheduler
    model_cfg = load_model(cfg.model)
    if model_cfg.kind == "encoder-decoder":
        raise UnsupportedError(f"{model_cfg.id} is an encoder-decoder: serving it needs a cross-attention KV cache "
                               "(each sequence's encoder output, cached for its decoder), which perfcast's serving "
                               "simulator does not model; price a forward pass with perfcast predict --mode inference")
    max_len = max_model_len(cfg, model_cfg)
    budget = cfg.max_num_batched_tokens or (cfg.chunk_size if policy in ("sarathi", "sglang") else max(max_len, 2048))
    if policy == "static":
        budget = max(budget, max_len * cfg.max_num_seqs)
    dtype = serving_dtype(cfg, model_cfg)
    kv_dtype = None if cfg.kv_cache_dtype == "auto" else DType(cfg.kv_cache_dtype)
    model = _iteration_model(model_cfg, cfg, dtype=dtype, quantization=cfg.quantization, kv_dtype=kv_dtype,
                             pp=cfg.pipeline_parallel_size, max_tokens=min(max(budget, 1), 65536),
                             calibration=calibration)
    draft = None
    if cfg.speculative_model and cfg.num_speculative_tokens:
        mtp = cfg.speculative_model == MTP_DRAFT  # the target's own modules: its checkpoint's precision
        draft = _iteration_model(_draft_config(cfg.speculative_model, model_cfg), cfg, dtype=dtype,
                                 quantization=cfg.quantization if mtp else "none", kv_dtype=None, pp=1,
                                 max_tokens=min(max(budget, 1), 65536), calibration=calibration)
    memory = memory_breakdown(model, usable_frac=cfg.gpu_memory_utilization * memory_frac,
                              max_batched_tokens=budget, max_num_seqs=cfg.max_num_seqs, block_size=cfg.block_size,
                              draft=draft)
    if memory.layout is not None:
        _check_hybrid(cfg, memory.layout, model_cfg)
    return Deployment(cfg, policy, max_len, budget, dtype, model, memory, draft)


def _check_hybrid(cfg: ServingConfig, layout: KVLayout, model_cfg: ModelConfig) -> None:
    """What the hybrid cache (:class:`~perfcast.serving.kv.hybrid.HybridBlockManager`) does not model, refused."""
    if cfg.enable_prefix_caching and layout.state_layers:
        raise UnsupportedError(f"{model_cfg.id}: prefix caching with state-space (Mamba) layers is refused: vLLM "
                               "disables it for Mamba models unless its experimental Mamba prefix caching is on")
    if cfg.enable_prefix_caching and layout.local_kind != "sliding":
        raise UnsupportedError(f"{model_cfg.id}: prefix caching with {layout.local_kind} attention layers is not "
                               "modelled (only sliding-window groups' hits are)")
    if cfg.num_prefill_replicas and layout.state_layers:
        raise UnsupportedError(f"{model_cfg.id}: disaggregated serving of a model with state-space (Mamba) layers is "
                               "not modelled (the handover carries K/V per token, not a Mamba state)")
    if cfg.workload.num_beams > 1:
        raise UnsupportedError(f"{model_cfg.id}: beam search with {layout.local_kind or 'state-space'} layers is not "
                               "modelled")


def hybrid_cache(layout: KVLayout, num_blocks: int, watermark_frac: float, num_cpu_blocks: int) -> KVCache:
    """An empty block manager for a cache of several layer types (``layout``'s groups)."""
    return HybridBlockManager(num_blocks, layout.block_size, watermark_frac, num_cpu_blocks,
                              full_groups=layout.full_groups, local_groups=layout.local_groups,
                              local_kind=layout.local_kind, local_window=layout.local_window,
                              state_groups=layout.state_groups)


_VOCAB_TOL = 0.01  # a draft's vocabulary within 1% of the target's: the same tokenizer, rows padded differently


MTP_DRAFT = "mtp"  # --speculative-model mtp: the target's own multi-token-prediction module drafts


def _draft_config(name: str, target: ModelConfig) -> ModelConfig:
    """The draft model of speculative decoding: a decoder LLM proposing tokens of the target's vocabulary, or
    with ``mtp`` the target's own multi-token-prediction module (DeepSeek-V3/R1's ``num_nextn_predict_layers``:
    vLLM's ``deepseek_mtp`` method, SGLang's EAGLE with the NextN module), priced as one block like the
    target's MoE layers with the target's embedding and LM head, run once per proposed token. Its ``eh_proj``
    (2h -> h) and two norms are left out (under 1 % of the block's weights for DeepSeek-V3), and its weights
    count the embedding and head again though the module shares the target's."""
    if name == MTP_DRAFT:
        depth = num_mtp_layers(target)
        if not depth:
            raise ConfigError(f"--speculative-model mtp drafts with the target's multi-token-prediction module, and "
                              f"{target.id} declares none (num_nextn_predict_layers); use a draft model, or a model "
                              "with one (DeepSeek-V3/R1)")
        moe = target.moe.model_copy(update={"first_dense_layers": 0}) if target.moe is not None else None
        return target.model_copy(update={"id": f"{target.id}-mtp", "num_layers": depth, "moe": moe})
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


def serving_memory(cfg: ServingConfig, *, memory_frac: float = 1.0,
                   calibration: Calibration | None = None) -> ServingMemory:
    """Whether ``cfg``'s deployment fits, with one GPU's memory breakdown (see :mod:`perfcast.serving.memory`),
    without simulating. Besides the weights and activations, the KV cache of one engine must hold at least
    one request of the workload (its prompt and output, each beam's tokens, under the cache's watermark);
    requests longer than ``max_model_len`` do not count (they are refused whatever the memory). ``calibration``:
    the shipped one when None."""
    dep = build_deployment(cfg, resolve_calibration(calibration), memory_frac=memory_frac)
    memory = dep.memory
    if not memory.fits:
        return memory
    extra = dep.extra_prompt_tokens()
    stream = request_stream(cfg)
    prompt = np.asarray(stream.prompt_tokens, dtype=np.int64) + extra
    output = np.asarray(stream.output_tokens, dtype=np.int64)
    servable = prompt + output <= dep.max_len
    if not servable.any():
        return memory  # every request is refused for its length: bad input the simulation reports
    pp = cfg.pipeline_parallel_size
    kv: KVCache = (CountingBlockManager(max(1, memory.kv_blocks // pp), cfg.block_size, cfg.watermark_frac, 0)
                   if memory.layout is None else
                   hybrid_cache(memory.layout, max(1, memory.kv_blocks // pp), cfg.watermark_frac, 0))
    beams = cfg.workload.num_beams
    pairs = sorted({(int(p), int(o)) for p, o in zip(prompt[servable], output[servable], strict=True)},
                   key=lambda po: po[0] + beams * po[1])
    if any(kv.can_ever_allocate(p + o, beams, p) for p, o in pairs):
        return memory
    p, o = pairs[0]
    tokens = kv.num_blocks * kv.block_size
    verdict = (f"the KV cache of one engine holds {tokens:,} tokens ({kv.num_blocks:,} blocks of {kv.block_size}, "
               f"{memory.kv_cache_bytes / 2**30:.2f} GiB of KV cache per GPU), too few for one request of the "
               f"workload: the smallest needs {p:,} + {o:,}" + (f" x {beams} beams" if beams > 1 else "")
               + " tokens; use more tensor or pipeline parallelism, a smaller dtype or quantization, or shorter "
               "requests")
    return dataclasses.replace(memory, fits=False, verdict=verdict)
