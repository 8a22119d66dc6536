"""One PPO iteration of RLHF (actor, critic, reward and reference models) on one cluster.

The layout is the colocated one of DeepSpeed-Chat's hybrid engine (and OpenRLHF's
colocated mode): all four models live on every GPU of the cluster, ZeRO-sharded over
all of them, and the phases of an iteration run one after the other:

1. **reshard**: the actor's bf16 weights are all-gathered from their ZeRO-3 shards
   into the generation layout (whole weights per GPU, or a ``generation_tp`` slice);
   zero at ZeRO stages below 3, where every GPU already holds them;
2. **generation**: ``gpus / generation_tp`` actor replicas each generate for their
   share of the prompts as one static batch: one prefill iteration over the prompts,
   then ``generated_tokens - 1`` decode iterations with every sequence's context
   growing (every response has the full length; no early stop). Iteration times are
   the serving layer's :class:`~perfcast.serving.iteration.IterationModel` (engine
   kernels and the engine's CPU overhead per iteration, ``engine`` preset);
3. **scoring**: each GPU runs forward passes over its share of the prompt+response
   sequences through the actor (old log-probabilities), the reference, the critic
   (values) and the reward model, ``scoring_micro_batch`` sequences at a time
   (:func:`perfcast.compose.predict.predict`, FlashAttention); at ZeRO-3 each pass
   all-gathers the model's weights layer by layer, prefetched so that a pass takes
   the longer of its compute and its gather;
4. **training**: ``ppo_epochs`` x ``mini_batches`` optimizer steps of the actor and
   then of the critic over the same sequences (data-parallel over every GPU,
   :func:`perfcast.system.training.simulate_training`).

The critic and the reward model are priced as the language model they are built from
(their scalar value head is priced as the LM head it replaces: about 2% more FLOPs for
a 7B model with a 32k vocabulary).

Memory per GPU is the peak over the phases. Always resident: the actor's and the
critic's training states (weights, gradients, optimizer, as sharded by ZeRO) and the
frozen bf16 weights of the reference and reward models (sharded at ZeRO-3). On top:
generation holds the gathered actor weights and the KV cache of its batch; scoring
holds one micro-batch's FP32 logits; training holds the trained model's activations
and communication buffers. Every phase adds the CUDA context and the allocator's
fragmentation allowance (:mod:`perfcast.system.memory`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from perfcast.catalog.models import load_model
from perfcast.catalog.params import count_params
from perfcast.compose.predict import StepRequest, predict
from perfcast.dtypes import DType
from perfcast.serving.iteration import IterationModel, PrefillChunk
from perfcast.system.cluster import load_cluster
from perfcast.system.collectives import collective_time
from perfcast.system.memory import CUDA_CONTEXT_BYTES, FRAGMENTATION_FRAC
from perfcast.system.plan import ParallelPlan
from perfcast.system.training import TrainingResult, simulate_training
from perfcast.workload.types import Mode

__all__ = ["RLHFConfig", "RLHFMemory", "RLHFResult", "simulate_rlhf_iteration"]

_ROLES = ("actor", "reference", "critic", "reward")


class RLHFConfig(BaseModel):
    """One PPO iteration: the four models, the cluster, the batch and how each phase runs (lengths in tokens)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    actor: str = Field(description="policy model: generates, then is trained")
    critic: str = Field(description="value model: scores, then is trained")
    reward: str = Field(description="frozen reward model: scores")
    reference: str = Field(description="frozen initial policy: scores (KL penalty)")
    cluster: str = Field(description="cluster id, alias or cluster YAML path")
    nodes: int = Field(default=1, ge=1)
    prompts: int = Field(gt=0, description="prompts per PPO iteration")
    prompt_tokens: int = Field(gt=0, description="tokens of each prompt")
    generated_tokens: int = Field(gt=0, description="tokens generated per prompt (every response runs to the end)")
    generation_tp: int = Field(default=1, ge=1, description="GPUs per actor replica while generating")
    engine: str = Field(default="vllm", description="serving CPU-overhead preset of the generation engine")
    scoring_micro_batch: int = Field(default=8, ge=1, description="sequences per scoring forward pass")
    train_micro_batch: int = Field(default=4, ge=1, description="sequences per GPU per training micro-batch")
    mini_batches: int = Field(default=1, ge=1, description="optimizer steps per PPO epoch and trained model")
    ppo_epochs: int = Field(default=1, ge=1, description="passes over the iteration's experience")
    zero: Literal[1, 2, 3] = Field(default=3, description="ZeRO stage of every model (frozen ones shard at 3)")
    recompute: Literal["none", "selective", "full"] = Field(default="full",
                                                            description="activation recompute in training")

    @model_validator(mode="after")
    def _batches_divide(self) -> RLHFConfig:
        if self.prompts % self.mini_batches:
            raise ValueError(f"mini_batches={self.mini_batches} must divide prompts={self.prompts}")
        return self

    @property
    def seq_len(self) -> int:
        """Tokens of a prompt and its response."""
        return self.prompt_tokens + self.generated_tokens


@dataclass(frozen=True)
class RLHFMemory:
    """Bytes per GPU: the resident parts, each phase's own parts, and each phase's total."""

    actor_states_bytes: float
    critic_states_bytes: float
    frozen_weights_bytes: float
    generation_weights_bytes: float
    kv_cache_bytes: float
    scoring_logits_bytes: float
    training_activations_bytes: float
    comm_buffers_bytes: float
    capacity_bytes: float

    def _with_overheads(self, tensors: float) -> float:
        return tensors + CUDA_CONTEXT_BYTES + FRAGMENTATION_FRAC * tensors

    @property
    def resident_bytes(self) -> float:
        """What stays on a GPU through the whole iteration (training states and frozen weights)."""
        return self.actor_states_bytes + self.critic_states_bytes + self.frozen_weights_bytes

    @property
    def phase_bytes(self) -> dict[str, float]:
        """Total per GPU in each phase, context and fragmentation included."""
        r = self.resident_bytes
        return {"generation": self._with_overheads(r + self.generation_weights_bytes + self.kv_cache_bytes),
                "scoring": self._with_overheads(r + self.scoring_logits_bytes + self.comm_buffers_bytes),
                "training": self._with_overheads(r + self.training_activations_bytes + self.comm_buffers_bytes)}

    @property
    def peak_phase(self) -> str:
        """The phase that needs the most memory."""
        phases = self.phase_bytes
        return max(phases, key=lambda k: phases[k])

    @property
    def total_bytes(self) -> float:
        """Peak bytes per GPU over the iteration."""
        return self.phase_bytes[self.peak_phase]

    @property
    def fits(self) -> bool:
        """Whether every phase fits in the device memory."""
        return self.total_bytes <= self.capacity_bytes


@dataclass(frozen=True)
class RLHFResult:
    """Seconds of one PPO iteration by phase, with the parts that make them up, and memory per GPU."""

    config: RLHFConfig
    gpu_id: str
    num_gpus: int
    reshard_s: float
    generation_prefill_s: float
    generation_decode_s: float
    scoring_s: dict[str, float]
    actor_train_s: float
    critic_train_s: float
    memory: RLHFMemory
    actor_training: TrainingResult
    critic_training: TrainingResult

    @property
    def generation_s(self) -> float:
        """Prefill plus every decode iteration of the slowest replica."""
        return self.generation_prefill_s + self.generation_decode_s

    @property
    def scoring_total_s(self) -> float:
        """The four models' forward passes."""
        return sum(self.scoring_s.values())

    @property
    def training_s(self) -> float:
        """The actor's and the critic's updates."""
        return self.actor_train_s + self.critic_train_s

    @property
    def iteration_time_s(self) -> float:
        """One PPO iteration, phases in sequence."""
        return self.reshard_s + self.generation_s + self.scoring_total_s + self.training_s

    @property
    def generated_tokens_per_s(self) -> float:
        """Response tokens of the iteration per second of the whole iteration."""
        return self.config.prompts * self.config.generated_tokens / self.iteration_time_s


def _states_bytes(res: TrainingResult) -> float:
    m = res.memory
    return m.weights_bytes + m.gradients_bytes + m.optimizer_bytes


def _generation(cfg: RLHFConfig, hw_id: str, gpus: int) -> tuple[float, float, float, float]:
    """(prefill seconds, decode seconds, gathered weight bytes, KV bytes) of the fullest replica."""
    replicas = gpus // cfg.generation_tp
    seqs = math.ceil(cfg.prompts / replicas)
    p, g = cfg.prompt_tokens, cfg.generated_tokens
    model = IterationModel(cfg.actor, hw_id, tp=cfg.generation_tp, dtype=DType.BF16, engine=cfg.engine,
                           max_tokens=max(seqs * p, seqs), max_seqs=seqs)
    prefill = model.breakdown([PrefillChunk(p, p)] * seqs).time_s
    # decode iteration i (1..g-1) extends every sequence to p + i tokens
    contexts = seqs * (p + np.arange(1, g, dtype=float))
    decode = float(model.decode_times(seqs, contexts).sum()) if g > 1 else 0.0
    kv = seqs * (p + g) * model.kv_bytes_per_token
    return prefill, decode, model.weight_bytes, kv


def _scoring(cfg: RLHFConfig, hw_id: str, gpus: int, cluster_id: str) -> dict[str, float]:
    """Seconds of each model's forward passes over one GPU's share of the sequences."""
    cl = load_cluster(cluster_id, nodes=cfg.nodes)
    per_gpu = math.ceil(cfg.prompts / gpus)
    mb = min(cfg.scoring_micro_batch, per_gpu)
    full, rest = divmod(per_gpu, mb)
    out: dict[str, float] = {}
    for role in _ROLES:
        name = getattr(cfg, role)
        gather = 0.0
        if cfg.zero == 3 and gpus > 1:
            weight_bytes = 2.0 * count_params(load_model(name)).total
            gather = collective_time("all_gather", weight_bytes, gpus, cl).time_s
        total = 0.0
        for batch, times in ((mb, full), (rest, 1 if rest else 0)):
            if times:
                st = predict(StepRequest(model=name, hardware=hw_id, mode=Mode.INFERENCE, batch_size=batch,
                                         seq_len=cfg.seq_len, dtype=DType.BF16, attention="flash"))
                total += times * max(st.time_s, gather)
        out[role] = total
    return out


def simulate_rlhf_iteration(cfg: RLHFConfig) -> RLHFResult:
    """Predict one PPO iteration of ``cfg`` (see the module docstring for the layout and the phases)."""
    from perfcast.errors import ConfigError

    cl = load_cluster(cfg.cluster, nodes=cfg.nodes)
    gpus = cl.num_gpus
    hw = cl.hardware()
    if cfg.generation_tp > cl.domain or gpus % cfg.generation_tp:
        raise ConfigError(f"generation_tp={cfg.generation_tp} must divide the {gpus} GPUs and fit one "
                          f"{cl.domain}-GPU node of {cl.id}")
    if cfg.prompts < gpus:
        raise ConfigError(f"prompts={cfg.prompts} leaves GPUs idle; use at least one prompt per GPU ({gpus})")
    if (cfg.prompts // cfg.mini_batches) % gpus:
        raise ConfigError(f"each mini-batch of {cfg.prompts // cfg.mini_batches} sequences must split evenly over "
                          f"the {gpus} GPUs; choose prompts and mini_batches so that it does")
    for role in _ROLES:
        if load_model(getattr(cfg, role)).kind != "decoder":
            raise ConfigError(f"{role} {getattr(cfg, role)!r} is not a decoder language model")

    plan = ParallelPlan(dp=gpus, zero=cfg.zero, recompute=cfg.recompute, seq_len=cfg.seq_len,
                        micro_batch=min(cfg.train_micro_batch, cfg.prompts // cfg.mini_batches // gpus),
                        global_batch=cfg.prompts // cfg.mini_batches)
    actor = simulate_training(cfg.actor, cl, plan, nodes=cfg.nodes)
    critic = simulate_training(cfg.critic, cl, plan, nodes=cfg.nodes)
    steps = cfg.mini_batches * cfg.ppo_epochs

    reshard = 0.0
    actor_bytes = 2.0 * count_params(load_model(cfg.actor)).total
    if cfg.zero == 3:
        reshard = collective_time("all_gather", actor_bytes, gpus, cl).time_s
    prefill, decode, gen_weights, kv = _generation(cfg, hw.id, gpus)
    scoring = _scoring(cfg, hw.id, gpus, cl.id)

    frozen = sum(2.0 * count_params(load_model(getattr(cfg, r))).total for r in ("reference", "reward"))
    vocab = load_model(cfg.actor).vocab_size
    mb = min(cfg.scoring_micro_batch, math.ceil(cfg.prompts / gpus))
    memory = RLHFMemory(
        actor_states_bytes=_states_bytes(actor), critic_states_bytes=_states_bytes(critic),
        frozen_weights_bytes=frozen / gpus if cfg.zero == 3 else frozen,
        generation_weights_bytes=gen_weights, kv_cache_bytes=kv,
        scoring_logits_bytes=4.0 * mb * cfg.seq_len * vocab,
        training_activations_bytes=max(actor.memory.activations_bytes, critic.memory.activations_bytes),
        comm_buffers_bytes=max(actor.memory.comm_buffers_bytes, critic.memory.comm_buffers_bytes),
        capacity_bytes=float(hw.memory_bytes))
    return RLHFResult(config=cfg, gpu_id=hw.id, num_gpus=gpus, reshard_s=reshard, generation_prefill_s=prefill,
                      generation_decode_s=decode, scoring_s=scoring, actor_train_s=actor.step_time_s * steps,
                      critic_train_s=critic.step_time_s * steps, memory=memory, actor_training=actor,
                      critic_training=critic)
