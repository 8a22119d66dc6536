"""Parallel plans: how a training job splits over GPUs, checked against the model and the cluster.

Degrees follow Megatron-LM: ``tp`` tensor, ``pp`` pipeline (``vp`` virtual
stages per pipeline rank for the interleaved schedule), ``dp`` data, ``cp``
context (sequence split across GPUs; ring attention or Ulysses all-to-all),
``ep`` expert parallel (carved out of the data-parallel ranks). Ranks are laid
out tp fastest, then cp, dp, pp (Megatron's order), so a TP group sits inside
a node and pipeline stages are the outermost split.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from perfcast.catalog.models import ModelConfig, check_context
from perfcast.errors import ConfigError, UnsupportedError
from perfcast.system.cluster import Cluster
from perfcast.workload.precision import RecipeName
from perfcast.workload.sharding import check_tp

__all__ = ["ParallelPlan", "check_plan", "divisors"]


RecomputeModule = Literal["core_attn", "layernorm", "moe_act", "shared_experts", "mlp", "moe"]


class ParallelPlan(BaseModel):
    """One training configuration (batch sizes in sequences, lengths in tokens)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    tp: int = Field(default=1, ge=1)
    pp: int = Field(default=1, ge=1)
    dp: int = Field(default=1, ge=1)
    cp: int = Field(default=1, ge=1)
    ep: int = Field(default=1, ge=1)
    etp: Literal["tp", 1] = Field(
        default="tp", description="expert tensor parallelism (Megatron's expert_tensor_parallel_size): 'tp' splits "
                                  "each expert like the dense MLP and carves EP out of the data-parallel ranks; 1 "
                                  "keeps experts whole and folds EP over the TP x CP x DP ranks (MoE parallel "
                                  "folding, Megatron-Core 0.10+)")
    vp: int = Field(default=1, ge=1, description="virtual pipeline stages (model chunks) per pipeline rank")
    sp: bool = Field(default=False, description="sequence parallelism alongside TP (norms and dropout sharded)")
    cp_kind: Literal["ring", "ulysses"] = "ring"
    tp_comm_overlap: bool = Field(default=False, description="TP collectives overlapped with GEMMs (userbuffers)")
    zero: Literal[0, 1, 2, 3] = Field(default=0, description="ZeRO stage; 3 = FSDP full shard")
    recompute: Literal["none", "selective", "full"] = "none"
    recompute_modules: tuple[RecomputeModule, ...] = Field(
        default=("core_attn",), description="what selective recompute re-runs (Megatron's --recompute-modules): "
                                            "core_attn, layernorm, moe_act, shared_experts, mlp, moe")
    micro_batch: int = Field(default=1, ge=1)
    global_batch: int | None = Field(default=None, ge=1, description="sequences per step (default micro x dp)")
    seq_len: int = Field(default=2048, ge=1)
    precision: RecipeName = Field(
        default="bf16", description="training precision recipe (perfcast.workload.precision): bf16, fp16, fp32, "
                                    "fp8 (per-tensor delayed scaling), fp8-cs (current scaling), fp8-block "
                                    "(1x128/128x128 blocks), mxfp8, nvfp4 (the last two on Blackwell)")
    schedule: Literal["gpipe", "1f1b", "interleaved"] = "1f1b"
    uneven_stages: bool = Field(default=False, description="allow layers not divisible by pp (last stages lighter)")
    embedding_in_pipeline_split: bool = Field(
        default=False, description="Megatron's account_for_embedding/loss_in_pipeline_split: the embedding and the "
                                   "loss count as a layer each when the layers are split over pipeline stages")
    optimizer: Literal["adam", "sgd"] = "adam"
    lora_rank: int = Field(default=0, ge=0, description="LoRA adapter rank (0 = full fine-tuning)")
    lora_targets: tuple[str, ...] = ("q", "k", "v", "o")
    qlora: bool = Field(default=False, description="frozen base weights stored in 4 bits (QLoRA)")
    moe_capacity_factor: float | None = Field(default=None, gt=0,
                                              description="expert capacity factor (None = dropless)")
    moe_skew: float = Field(default=0.0, ge=0, description="the busiest expert gets (1 + skew) x the mean load")
    moe_dispatcher: Literal["alltoall", "deepep"] = Field(
        default="alltoall", description="how routed tokens travel: alltoall (Megatron's all-to-all dispatcher, one "
                                        "copy per token and chosen expert) or deepep (DeepEP's kernels, one copy "
                                        "per destination node over the network, forwarded over NVLink inside it)")
    moe_a2a_overlap: bool = Field(
        default=False, description="the expert-parallel dispatch and combine of one micro-batch overlap the compute "
                                   "of another (Megatron's overlap_moe_expert_parallel_comm, DeepSeek-V3's "
                                   "DualPipe-style pairing of a forward with a backward)")
    moe_grouped_gemm: bool = Field(
        default=True, description="each expert projection of a layer runs as one grouped GEMM over the GPU's "
                                  "experts (Megatron-Core's moe_grouped_gemm, TE GroupedLinear); False = one GEMM "
                                  "kernel per expert")
    mtp_layers: int | None = Field(
        default=None, ge=0, description="multi-token-prediction layers trained on the last pipeline stage "
                                        "(Megatron's mtp_num_layers); None = the model config's "
                                        "num_nextn_predict_layers, 0 = none")
    framework: Literal["eager", "compiled", "graph"] = Field(
        default="eager", description="kernel launch: eager PyTorch, torch.compile, or CUDA graphs")
    fused_kernels: bool = Field(
        default=True, description="eager runs use hand-fused norm/RoPE/activation kernels (Megatron, Transformer "
                                  "Engine, Apex); False = plain PyTorch ops, one kernel per operation (eager "
                                  "torchtitan, Hugging Face); torch.compile fuses them either way")
    attention_kernels: Literal["native", "fa2"] = Field(
        default="native", description="the training attention kernels: native to the GPU (Transformer Engine's "
                                      "cuDNN fused attention, FlashAttention-3 on Hopper) or FlashAttention-2 "
                                      "(PyTorch SDPA's flash backend, the flash-attn 2 package), whose Ampere MMA "
                                      "instructions reach about 2/3 of the tensor peak of Hopper and later GPUs")
    grad_reduce_dtype: Literal["fp32", "bf16"] = Field(default="fp32", description="dtype of gradient reductions")
    dp_overlap: bool = Field(default=True, description="gradient reduction / parameter gathers overlap compute")

    @property
    def num_gpus(self) -> int:
        """GPUs the plan occupies."""
        return self.tp * self.pp * self.dp * self.cp

    @property
    def expert_shards(self) -> int:
        """Data-parallel copies of each expert (the expert-DP group that shards its optimizer states)."""
        if self.ep == 1 and self.etp == "tp":
            return self.dp * self.cp
        ranks = self.dp * self.cp * (self.tp if self.etp == 1 else 1)
        return max(1, ranks // self.ep)

    @property
    def effective_global_batch(self) -> int:
        """Sequences per optimizer step."""
        return self.global_batch or self.micro_batch * self.dp

    @property
    def microbatches(self) -> int:
        """Micro-batches each data-parallel rank runs per step (gradient accumulation x pipeline)."""
        return self.effective_global_batch // (self.micro_batch * self.dp)

    @property
    def effective_schedule(self) -> str:
        """The pipeline schedule actually run (interleaved when vp > 1)."""
        return "interleaved" if self.vp > 1 else ("1f1b" if self.schedule == "interleaved" else self.schedule)


def divisors(n: int, limit: int | None = None) -> list[int]:
    """Divisors of ``n`` (up to ``limit``)."""
    top = n if limit is None else min(n, limit)
    return [d for d in range(1, top + 1) if n % d == 0]


def check_plan(plan: ParallelPlan, cfg: ModelConfig, cluster: Cluster, *, num_gpus: int | None = None) -> None:
    """Raise ConfigError naming the first violated constraint and the valid choices."""
    gpus = num_gpus if num_gpus is not None else cluster.num_gpus
    where = (f"the {gpus} GPUs of the cluster ({cluster.nodes} nodes x {cluster.gpus_per_node})"
             if num_gpus is None else f"the {gpus} GPUs asked for")
    check_tp(cfg, plan.tp)
    share = cluster.domain_share(gpus)  # the job's GPUs in one scale-up domain (a partly used NVL72 rack)
    if plan.tp > 1 and share % plan.tp:
        raise ConfigError(
            f"tp={plan.tp} must divide the {share} GPUs of the job that share a scale-up fabric ({cluster.id}); "
            f"use tp in {{{', '.join(map(str, divisors(share)))}}}"
        )
    layers = cfg.num_layers + (cfg.num_decoder_layers or 0)
    if plan.pp > layers:
        raise ConfigError(f"pp={plan.pp} exceeds the {layers} layers of {cfg.id}")
    if plan.embedding_in_pipeline_split:
        if (layers + 2) % (plan.pp * plan.vp):
            raise ConfigError(f"with the embedding and the loss counted as pipeline layers, pp*vp = "
                              f"{plan.pp * plan.vp} must divide the {layers} layers of {cfg.id} + 2")
    elif layers % plan.pp and not plan.uneven_stages:
        raise ConfigError(
            f"pp={plan.pp} must divide the {layers} layers of {cfg.id} (or allow uneven stages); "
            f"use pp in {{{', '.join(map(str, divisors(layers, 64)))}}}"
        )
    if plan.num_gpus != gpus:
        rest = max(1, plan.tp * plan.pp * plan.cp)
        hint = (f"e.g. dp = {gpus // rest}" if gpus % rest == 0
                else f"tp*pp*cp = {rest} does not divide {gpus}")
        raise ConfigError(f"tp*pp*dp*cp = {plan.tp}*{plan.pp}*{plan.dp}*{plan.cp} = {plan.num_gpus} must equal "
                          f"{where}; {hint}")
    if plan.vp > 1:
        if plan.pp == 1:
            raise ConfigError("virtual pipeline stages (vp > 1) need pipeline parallelism (pp > 1)")
        # Megatron can count the embedding and the loss as pipeline layers: up to layers + 2 chunks
        most = layers + 2 if plan.embedding_in_pipeline_split else layers
        if plan.pp * plan.vp > most:
            raise ConfigError(f"pp*vp = {plan.pp * plan.vp} exceeds the {layers} layers of {cfg.id}"
                              + (" plus the embedding and the loss" if plan.embedding_in_pipeline_split else ""))
        if layers % (plan.pp * plan.vp) and not (plan.uneven_stages or plan.embedding_in_pipeline_split):
            ok = [v for v in range(2, layers // plan.pp + 1) if layers % (plan.pp * v) == 0]
            raise ConfigError(f"pp*vp = {plan.pp * plan.vp} must divide the {layers} layers of {cfg.id} (or allow "
                              f"uneven stages); use vp in {{{', '.join(map(str, ok)) or '1'}}}")
    gb = plan.effective_global_batch
    if plan.vp > 1 and gb % (plan.micro_batch * plan.dp) == 0 and plan.microbatches % plan.pp:
        good = plan.micro_batch * plan.dp * plan.pp
        raise ConfigError(
            f"the interleaved schedule (vp={plan.vp}) needs micro-batches per step ({plan.microbatches}) divisible "
            f"by pp={plan.pp}; use a global batch that is a multiple of micro_batch*dp*pp = {good}")
    if gb % (plan.micro_batch * plan.dp):
        unit = plan.micro_batch * plan.dp
        raise ConfigError(
            f"global batch {gb} must be divisible by micro_batch*dp = {plan.micro_batch}*{plan.dp} = {unit}; "
            f"e.g. global batch {unit * max(1, gb // unit)}")
    if plan.ep > 1:
        if cfg.moe is None:
            raise ConfigError(f"ep={plan.ep} needs a mixture-of-experts model; {cfg.id} is dense (use ep=1)")
        if cfg.moe.num_experts % plan.ep:
            raise ConfigError(f"ep={plan.ep} must divide the {cfg.moe.num_experts} experts of {cfg.id}; "
                              f"use ep in {{{', '.join(map(str, divisors(cfg.moe.num_experts)))}}}")
        if plan.etp == 1:
            ranks = plan.tp * plan.dp * plan.cp
            if ranks % plan.ep:
                raise ConfigError(f"ep={plan.ep} must divide tp*dp*cp = {ranks} (expert parallelism folded over the "
                                  f"TP, CP and DP ranks); use ep in {{{', '.join(map(str, divisors(ranks)))}}}")
            if plan.tp > 1 and not plan.sp:
                raise ConfigError("whole experts (etp=1) beside tp > 1 need sequence parallelism (sp): each TP rank "
                                  "dispatches its own share of the tokens")
        elif (plan.dp * plan.cp) % plan.ep:
            raise ConfigError(f"ep={plan.ep} must divide dp*cp = {plan.dp * plan.cp} (experts are sharded over the "
                              f"data-parallel ranks; with etp=1 over tp*dp*cp); use ep in "
                              f"{{{', '.join(map(str, divisors(plan.dp * plan.cp)))}}}")
    if plan.cp > 1 and plan.seq_len % (2 * plan.cp if plan.cp_kind == "ring" else plan.cp):
        need = 2 * plan.cp if plan.cp_kind == "ring" else plan.cp
        raise ConfigError(f"cp={plan.cp} ({plan.cp_kind}) needs a sequence length divisible by {need} "
                          f"(got {plan.seq_len})")
    if plan.cp > 1 and plan.cp_kind == "ulysses" and cfg.num_heads % (plan.cp * plan.tp):
        raise ConfigError(f"Ulysses cp={plan.cp} with tp={plan.tp} must divide the {cfg.num_heads} attention heads")
    check_context(cfg, plan.seq_len)
    if plan.sp and plan.tp == 1:
        raise ConfigError("sequence parallelism shards along the TP group: it needs tp > 1")
    if plan.qlora and plan.lora_rank == 0:
        raise ConfigError("QLoRA trains LoRA adapters: give a lora rank > 0")
    _check_settings_apply(plan, cfg)


def _check_settings_apply(plan: ParallelPlan, cfg: ModelConfig) -> None:
    """A setting that would have no effect with the rest of the plan is refused (priced without it, the step
    would not be the one asked for): each names what it needs."""
    defaults = ParallelPlan.model_fields
    if plan.tp_comm_overlap and plan.tp == 1:
        raise ConfigError("TP communication overlap hides tensor-parallel collectives: it needs tp > 1 (with tp=1 "
                          "there are none)")
    if plan.cp_kind != defaults["cp_kind"].default and plan.cp == 1:
        raise ConfigError(f"cp_kind={plan.cp_kind} is how context parallelism splits attention: it needs cp > 1")
    if plan.schedule == "interleaved" and plan.vp == 1:
        raise ConfigError("the interleaved schedule runs virtual pipeline stages: give vp > 1 (with vp=1 it is "
                          "1F1B)")
    if plan.schedule == "gpipe" and plan.vp > 1:
        raise ConfigError(f"vp={plan.vp} runs the interleaved 1F1B schedule (Megatron-LM), not gpipe; use schedule "
                          "interleaved (or 1f1b), or vp=1 for GPipe")
    if plan.schedule != defaults["schedule"].default and plan.pp == 1:
        raise ConfigError(f"schedule {plan.schedule} orders pipeline stages: it needs pp > 1")
    if plan.lora_targets != defaults["lora_targets"].default and plan.lora_rank == 0:
        raise ConfigError(f"LoRA targets {','.join(plan.lora_targets)} need LoRA: give a lora rank > 0 (rank 0 "
                          "trains every weight)")
    if plan.recompute_modules != defaults["recompute_modules"].default and plan.recompute != "selective":
        raise ConfigError(f"recompute modules {','.join(plan.recompute_modules)} are what selective recompute "
                          f"re-runs: they need recompute selective (not {plan.recompute})")
    if not plan.recompute_modules:
        raise ConfigError("recompute_modules is empty: give at least one of core_attn, layernorm, moe_act, "
                          "shared_experts, mlp, moe")
    if cfg.moe is None and {"moe_act", "shared_experts", "moe"} & set(plan.recompute_modules):
        raise ConfigError(f"recompute modules moe_act, shared_experts and moe are parts of mixture-of-experts "
                          f"layers; {cfg.id} is dense")
    if plan.moe_dispatcher != defaults["moe_dispatcher"].default and plan.ep == 1:
        raise ConfigError(f"the {plan.moe_dispatcher} dispatcher moves tokens between expert-parallel ranks: it "
                          "needs ep > 1")
    if plan.moe_a2a_overlap and plan.ep == 1:
        raise ConfigError("moe_a2a_overlap hides the expert-parallel all-to-alls: it needs ep > 1 (with ep=1 there "
                          "are none)")
    if cfg.moe is None and not plan.moe_grouped_gemm:
        raise ConfigError(f"moe_grouped_gemm=False runs experts one GEMM each; {cfg.id} is dense (no experts)")
    if plan.mtp_layers and (cfg.kind != "decoder" or cfg.ssm is not None or cfg.linear_attention is not None):
        raise UnsupportedError(f"multi-token-prediction layers (mtp_layers={plan.mtp_layers}) are modelled for "
                               f"attention decoders (DeepSeek-V3, GLM-4.5), not {cfg.id}")
    if cfg.moe is None and (plan.moe_skew != defaults["moe_skew"].default or plan.moe_capacity_factor is not None):
        what = "moe_skew" if plan.moe_skew else "the expert capacity factor"
        raise ConfigError(f"{what} applies to mixture-of-experts models; {cfg.id} is dense")
