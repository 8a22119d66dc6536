"""Layer 3: one training step of a model on a cluster under a parallel plan.

How a step is put together (all times per GPU, seconds):

1. One micro-batch is priced per layer on one GPU (:mod:`perfcast.system.layers`):
   kernel time vs. host launch time, plus the layer's tensor-, context- and
   expert-parallel collectives. TP collectives are exposed unless the plan
   overlaps them with GEMMs; ring attention overlaps its K/V passes with the
   attention kernels; all-to-alls are exposed.
2. Recompute re-runs the forward of each layer (full) or its attention (selective)
   inside the backward.
3. ZeRO-3 / FSDP gathers each layer's parameters before its forward and
   backward and reduce-scatters its gradients; with prefetch a layer takes the
   longer of its compute and its collectives (the first gather is exposed).
4. Layers are split into ``pp x vp`` stages and the pipeline schedule is
   simulated (:mod:`perfcast.system.schedule`), with activation sends between stages.
5. Gradients are all-reduced (ZeRO-0) or reduce-scattered (ZeRO-1/2, then the
   updated parameters all-gathered) across the data- and context-parallel
   ranks, overlapped with the last micro-batch's backward; what does not fit
   behind it is exposed. The Adam step runs on the local (sharded) parameters.

The overlaps, the data-parallel tail, the step's sum and the memory per GPU
are :mod:`perfcast.system.step`'s formulas, which the vectorized search
(:mod:`perfcast.sweep.evaluate`) applies to arrays of plans.

Throughput follows Megatron-LM's conventions: model FLOPs are
``3 x (matmul + non-causal attention FLOPs of the forward)`` per token (the
``72 B s L h^2 (1 + s/6h + V/12hL)`` formula of Narayanan et al. for GPT);
MFU divides model FLOP/s by the dense peak of the training precision
(BF16/FP16, FP8 for the FP8 recipes and MXFP8, FP4 for NVFP4); HFU adds the recomputed FLOPs. LoRA's frozen
base weights get no weight gradient, so their matmuls count 2 x (forward and
input gradient) instead of 3 x: litgpt's ``estimate_flops`` convention, the
FLOPs the step executes (see :func:`perfcast.system.layers.micro_batch_costs`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from perfcast.catalog.hardware import Hardware
from perfcast.catalog.models import ModelConfig, load_model
from perfcast.coefficients.bundle import Calibration, resolve_calibration
from perfcast.coefficients.collectives import CollectiveCoefficients
from perfcast.coefficients.kernel import Coefficients
from perfcast.coefficients.training import TrainingCoefficients
from perfcast.compose.interval import interval_for
from perfcast.digest import content_digest
from perfcast.dtypes import DType
from perfcast.errors import ConfigError
from perfcast.kernel.energy import ENERGY_STATUS, power_model, step_energy_J
from perfcast.kernel.predict import KernelTime, price_ops
from perfcast.kernel.types import Bound
from perfcast.system.cluster import Cluster, load_cluster
from perfcast.system.collectives.placement import members_per_domain
from perfcast.system.layers import LayerCost, MicroBatchCosts, micro_batch_costs
from perfcast.system.memory import MemoryBreakdown, training_memory
from perfcast.system.plan import ParallelPlan, check_plan
from perfcast.system.schedule import PipelineResult, ScheduleEvent, simulate_pipeline
from perfcast.system.step import (
    data_parallel_exposed_s,
    in_flight_microbatches,
    memory_parts_bytes,
    overlapped_s,
    step_time_s,
    zero3_layer_s,
)
from perfcast.system.summary import Interval, StageTime, TrainingSummary
from perfcast.workload.precision import get_recipe
from perfcast.workload.types import Op, OpKind, Phase

__all__ = ["FLOPS_CONVENTION", "LORA_FLOPS_CONVENTION", "TP_OVERLAP_EFFICIENCY", "LayerComm", "LayerTime",
           "TrainingResult", "layer_time", "optimizer_kernel", "optimizer_time_s", "simulate_training", "split_layers",
           "training_energy"]

TP_OVERLAP_EFFICIENCY = 0.8  # share of the GEMM time behind which overlapped TP collectives hide
_ADAM_BYTES = (16.0, 14.0)  # read: fp32 master, fp32 grad, two fp32 moments; write: master, moments, bf16 copy
_SGD_BYTES = (8.0, 6.0)
FLOPS_CONVENTION = ("Megatron-LM: model FLOPs = 3 x (matmul + non-causal attention) forward FLOPs; "
                    "MFU/HFU vs the dense peak of the training precision")
LORA_FLOPS_CONVENTION = ("litgpt estimate_flops for LoRA: frozen base matmuls 2 x their forward FLOPs (no weight "
                         "gradient), adapters and non-causal attention 3 x; MFU/HFU vs the dense peak of the training "
                         "precision")


@dataclass(frozen=True)
class TrainingResult:
    """Prediction of one training step (per GPU unless named otherwise).

    ``breakdown_s`` splits the step time of the critical pipeline rank into
    ``compute_s``, ``recompute_s``, exposed communication per collective
    (``tp_comm_s``, ``cp_comm_s``, ``ep_comm_s``, ``pp_send_s``, ``dp_comm_s``,
    ``fsdp_comm_s``), ``bubble_s``, ``optimizer_s`` and ``overhead_s``; they add
    up to ``step_time_s``. For a CNN (whose ``seq_len`` is the image side) a
    "token" is an image. ``comm_total_s`` is every collective's time whether
    hidden or not.
    """

    model_id: str
    cluster_id: str
    gpu_id: str
    num_gpus: int
    plan: ParallelPlan
    step_time_s: float
    low_s: float
    high_s: float
    tokens_per_step: int
    tokens_per_s_per_gpu: float
    model_flops_per_token: float
    hardware_flops_per_token: float
    causal_flops_per_token: float
    tflops_per_gpu: float
    mfu: float
    hfu: float
    peak_flops_per_s: float
    microbatches: int
    bubble_frac: float
    breakdown_s: dict[str, float]
    comm_total_s: dict[str, float]
    memory: MemoryBreakdown
    stage_fwd_s: tuple[float, ...]
    stage_bwd_s: tuple[float, ...]
    stage_layers: tuple[int, ...]
    events: tuple[ScheduleEvent, ...] = field(default=())
    energy_per_gpu_J: float = 0.0
    energy_breakdown_J: dict[str, float] = field(default_factory=dict)

    @property
    def energy_per_step_J(self) -> float:
        """Energy of one step over every GPU of the job, joules (see :func:`training_energy`)."""
        return self.energy_per_gpu_J * self.num_gpus

    @property
    def energy_per_token_J(self) -> float:
        """Energy of the whole job per trained token (image for a CNN), joules."""
        return self.energy_per_step_J / self.tokens_per_step if self.tokens_per_step else 0.0

    @property
    def avg_power_per_gpu_W(self) -> float:
        """Mean power of one GPU over the step, watts."""
        return self.energy_per_gpu_J / self.step_time_s if self.step_time_s > 0 else 0.0

    @property
    def hfu_tflops_per_gpu(self) -> float:
        """Hardware TFLOP/s per GPU: recomputed FLOPs counted (Megatron-LM 2021's "achieved teraFLOP/s")."""
        return self.hfu * self.peak_flops_per_s / 1e12

    @property
    def causal_tflops_per_gpu(self) -> float:
        """Model TFLOP/s per GPU as Megatron-LM counts them since 2025 (causal attention; see
        :attr:`~perfcast.system.layers.MicroBatchCosts.causal_flops_per_token`): Megatron-Bridge's tables."""
        return self.causal_flops_per_token * self.tokens_per_s_per_gpu / 1e12

    @property
    def samples_per_s_per_gpu(self) -> float:
        """Sequences (or images) per second per GPU."""
        return self.plan.effective_global_batch / self.step_time_s / self.num_gpus

    @property
    def fits(self) -> bool:
        """Whether every GPU's memory holds the step."""
        return self.memory.fits

    @property
    def flops_convention(self) -> str:
        """How model FLOPs (MFU) and hardware FLOPs (HFU) are counted for this plan."""
        return LORA_FLOPS_CONVENTION if self.plan.lora_rank else FLOPS_CONVENTION

    def json_view(self) -> TrainingSummary:
        """What the prediction reports (its JSON through :func:`~perfcast.results.serialize.to_json`)."""
        return TrainingSummary(
            model=self.model_id, cluster=self.cluster_id, gpu=self.gpu_id, num_gpus=self.num_gpus, plan=self.plan,
            step_time_s=self.step_time_s, step_time_interval_s=Interval(self.low_s, self.high_s),
            tokens_per_step=self.tokens_per_step, tokens_per_s_per_gpu=self.tokens_per_s_per_gpu,
            samples_per_s_per_gpu=self.samples_per_s_per_gpu, tflops_per_gpu=self.tflops_per_gpu, mfu=self.mfu,
            hfu=self.hfu, flops_convention=self.flops_convention, model_flops_per_token=self.model_flops_per_token,
            hardware_flops_per_token=self.hardware_flops_per_token, peak_tflops=self.peak_flops_per_s / 1e12,
            microbatches=self.microbatches, bubble_frac=self.bubble_frac, breakdown_s=dict(self.breakdown_s),
            comm_total_s=dict(self.comm_total_s), memory_per_gpu_bytes=self.memory.total_bytes,
            memory_capacity_bytes=self.memory.capacity_bytes, memory_breakdown_bytes=self.memory,
            fits_in_memory=self.fits, fits=self.fits, verdict="fits" if self.fits else "out_of_memory",
            stages=tuple(StageTime(f, b, n) for f, b, n in zip(self.stage_fwd_s, self.stage_bwd_s, self.stage_layers,
                                                               strict=True)),
            energy_per_step_J=self.energy_per_step_J, energy_per_gpu_per_step_J=self.energy_per_gpu_J,
            energy_per_token_J=self.energy_per_token_J, avg_power_per_gpu_W=self.avg_power_per_gpu_W,
            energy_breakdown_per_gpu_J=dict(self.energy_breakdown_J), energy_model=ENERGY_STATUS)


# -- communication -----------------------------------------------------------------------------------


class LayerComm:
    """Collective times on a cluster for groups laid out tp-fastest (Megatron's rank order)."""

    def __init__(self, cluster: Cluster, collectives: CollectiveCoefficients) -> None:
        self.cluster = cluster
        self.collectives = collectives
        self._memo: dict[tuple[str, float, int, int], float] = {}

    def per_node(self, stride: int, size: int) -> int:
        """GPUs of one group that share a scale-up domain, for a group of ``size`` ranks ``stride`` apart."""
        d = self.cluster.domain_share(self.cluster.num_gpus)  # the job's GPUs in one domain (partial racks)
        return members_per_domain(size, d // stride) if stride < d else 1

    def time(self, op: str, size_bytes: float, group: int, stride: int) -> float:
        """Seconds for one collective of ``size_bytes`` over ``group`` ranks placed ``stride`` apart."""
        if group <= 1 or size_bytes <= 0:
            return 0.0
        key = (op, float(size_bytes), group, stride)
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        from perfcast.system.collectives import price_collective

        t = price_collective(op, size_bytes, group, self.cluster, self.collectives,
                             gpus_per_node=self.per_node(stride, group)).time_s
        if len(self._memo) > 4096:
            self._memo.clear()
        self._memo[key] = t
        return t

    def calls(self, op: str, size_bytes: float, calls: float, group: int, stride: int) -> float:
        """Seconds for ``calls`` equal collectives that move ``size_bytes`` in all."""
        if calls <= 0:
            return 0.0
        return calls * self.time(op, size_bytes / calls, group, stride)


_COMMS: dict[tuple[str, str], LayerComm] = {}  # (cluster content, coefficients content) -> its priced collectives


def layer_comm(cluster: Cluster, collectives: CollectiveCoefficients) -> LayerComm:
    """The :class:`LayerComm` of ``cluster`` under ``collectives``, one per content, so the collectives priced
    for one prediction are not priced again by the next on the same cluster (a search, a sweep of batches)."""
    key = (content_digest(cluster), content_digest(collectives))
    hit = _COMMS.get(key)
    if hit is None:
        if len(_COMMS) > 64:
            _COMMS.clear()
        hit = _COMMS[key] = LayerComm(cluster, collectives)
    return hit


@dataclass
class LayerTime:
    """One layer kind's seconds: forward, backward, compute and recompute; collective seconds exposed and
    in total, by kind."""

    fwd_s: float
    bwd_s: float
    compute_s: float
    recompute_s: float
    exposed: dict[str, float]
    total: dict[str, float]


def _device_s(kernel_s: float, fp8_s: float, kernels: float, tc: TrainingCoefficients) -> float:
    """Device time of a run of kernels in a sustained training step."""
    return (kernel_s + fp8_s * (1.0 / tc.fp8_gemm_efficiency - 1.0)) / tc.compute_efficiency + \
        kernels * tc.kernel_gap_s


def ep_stride(plan: ParallelPlan) -> int:
    """Ranks between consecutive members of an expert-parallel group: ``tp`` with experts split like the MLP
    (Megatron-Core's expert grid, tp-ep-dp: EP carved from the CP x DP ranks), 1 with whole experts folded over
    TP x CP x DP."""
    return 1 if plan.etp == 1 else plan.tp


def deepep_share(experts: int, top_k: int, ep: int, per_domain: int) -> float:
    """Bytes DeepEP's dispatch (and combine) moves per byte an all-to-all dispatcher moves, under uniform routing.

    The all-to-all dispatcher sends one copy of a token per chosen expert. DeepEP sends one copy per destination
    node over the network and forwards it over NVLink to the GPUs there (its internode kernels), one per
    destination GPU inside a node (intranode). A token picks ``top_k`` of ``experts`` spread evenly over ``ep``
    ranks, ``per_domain`` of them per node; a group of ``m`` experts is hit with probability
    ``1 - C(E - m, k) / C(E, k)``. Across nodes the share is the expected nodes hit over ``k``; within one node,
    the expected ranks hit over ``k``.
    """
    if experts <= 0 or top_k <= 0 or ep <= 1:
        return 1.0
    groups = ep // per_domain if per_domain < ep else ep  # the network's destinations, else the node's GPUs
    per_group = experts / groups
    miss = 1.0
    for i in range(top_k):
        miss *= max(0.0, (experts - per_group - i) / (experts - i))
    return min(1.0, groups * (1.0 - miss) / top_k)


def layer_time(part: LayerCost, plan: ParallelPlan, comm: LayerComm, tc: TrainingCoefficients, *,
                grad_bytes: float) -> LayerTime:
    """Seconds of one layer kind's forward and backward under ``plan`` (compute, recompute and the TP/CP/EP
    collectives left exposed after overlap); ``grad_bytes`` is the bytes of its gradients to reduce."""
    tp, cp = plan.tp, plan.cp
    attn_extra = tc.attention_time_scale - 1.0
    fwd_kernel_s = part.fwd_s + attn_extra * part.attention_fwd_s
    bwd_kernel_s = part.bwd_s + attn_extra * part.attention_bwd_s
    fwd = max(_device_s(fwd_kernel_s, part.fwd_fp8_s, part.fwd_kernels, tc), part.fwd_host_s)
    bwd = max(_device_s(bwd_kernel_s, part.bwd_fp8_s, part.bwd_kernels, tc), part.bwd_host_s)
    compute = fwd + bwd
    recompute = 0.0
    if part.label not in ("embed", "head"):
        if plan.recompute == "full":
            recompute = fwd
        elif plan.recompute == "selective":
            attention = part.attention_fwd_s * tc.attention_time_scale if "core_attn" in plan.recompute_modules \
                else 0.0
            recompute = (attention + part.selective_fwd_s(plan.recompute_modules)) / tc.compute_efficiency
    exposed: dict[str, float] = {}
    total: dict[str, float] = {}

    def add(name: str, t_total: float, t_exposed: float) -> None:
        total[name] = total.get(name, 0.0) + t_total
        exposed[name] = exposed.get(name, 0.0) + t_exposed

    extra_f = extra_b = 0.0
    for phase, book in (("fwd", part.fwd_comm), ("bwd", part.bwd_comm)):
        gemm = part.fwd_gemm_s if phase == "fwd" else part.bwd_gemm_s
        attn = part.attention_fwd_s if phase == "fwd" else part.attention_bwd_s
        other = bwd if phase == "fwd" else fwd  # what the paired micro-batch computes meanwhile
        for kind, (size, calls) in book.items():
            if kind == "ep_all_to_all" and plan.moe_dispatcher == "deepep":
                size *= deepep_share(part.routed_experts, part.experts_per_token, plan.ep,
                                     comm.per_node(ep_stride(plan), plan.ep))
            name, t, e = _layer_comm_s(kind, size, calls, plan, comm, tc, gemm, attn)
            if kind == "ep_all_to_all" and plan.moe_a2a_overlap:
                # a forward's dispatch/combine run beside another micro-batch's backward of the layer, and the
                # backward's beside a forward: exposed is what that compute cannot cover, plus its interference
                e = float(overlapped_s(t, other, tc.overlap_interference))
            add(name, t, e)
            if phase == "fwd":
                extra_f += e
            else:
                extra_b += e
    f_total = fwd + extra_f
    b_total = bwd + recompute + extra_b
    if plan.zero == 3:
        shards = plan.dp * cp
        ag = comm.time("all_gather", part.params * 2.0, shards, tp)
        rs = comm.time("reduce_scatter", part.trainable_params * grad_bytes, shards, tp)
        if plan.dp_overlap:
            f_arr, b_arr = zero3_layer_s(f_total, b_total, ag, rs, tc.overlap_interference)
            f_new, b_new = float(f_arr), float(b_arr)
        else:
            f_new, b_new = f_total + ag, b_total + ag + rs
        add("fsdp_comm_s", 2 * ag + rs, (f_new - f_total) + (b_new - b_total))
        f_total, b_total = f_new, b_new
    return LayerTime(f_total, b_total, compute, recompute, exposed, total)


def _layer_comm_s(kind: str, size: float, calls: float, plan: ParallelPlan, comm: LayerComm,
                  tc: TrainingCoefficients, gemm_s: float, attention_s: float) -> tuple[str, float, float]:
    """One phase's collectives of ``kind`` (``calls`` of ``size`` bytes) in a layer: (the breakdown key, their
    seconds, the seconds left exposed after overlapping the phase's GEMMs (TP) or attention (ring CP))."""
    tp, cp = plan.tp, plan.cp
    if kind.startswith("tp_"):
        if kind == "tp_reduce_scatter+all_gather":
            t = comm.calls("reduce_scatter", size, calls, tp, 1) + comm.calls("all_gather", size, calls, tp, 1)
        else:
            t = comm.calls("all_reduce", size, calls, tp, 1)
        hidden = TP_OVERLAP_EFFICIENCY * gemm_s if plan.tp_comm_overlap else 0.0
        return "tp_comm_s", t, float(overlapped_s(t, hidden, tc.overlap_interference))
    if kind == "cp_ring_send_recv":
        t = comm.calls("send_recv", size, calls, 2, tp)
        return "cp_comm_s", t, float(overlapped_s(t, attention_s, tc.overlap_interference))
    if kind == "cp_all_to_all":
        t = comm.calls("all_to_all", size, calls, cp, tp)
        return "cp_comm_s", t, t
    if kind == "ep_all_to_all":
        # EP ranks sit tp apart when experts split like the MLP (Megatron-Core's expert grid, etp x ep x edp: EP
        # is carved from the cp x dp ranks, which is why ep need only divide dp * cp); folded over TP x CP x DP
        # (whole experts) they are consecutive ranks, so an EP group of up to a node's GPUs stays on its NVLink
        t = comm.calls("all_to_all", size, calls, plan.ep, ep_stride(plan))
        return "ep_comm_s", t, t
    raise ValueError(f"unknown layer collective {kind!r}")  # layers.py produces only the kinds above


# -- stages -------------------------------------------------------------------------------------------


def split_layers(n_layers: int, stages: int, *, embedding_and_loss: bool = False) -> list[int]:
    """Transformer layers per virtual stage: an even split, remainders on the middle stages (uneven plans).

    ``embedding_and_loss``: Megatron's split with the embedding and the loss counted as pipeline layers
    (``account_for_embedding_in_pipeline_split`` and ``account_for_loss_in_pipeline_split``): the layers + 2
    split evenly, the first stage's share holding the embedding in place of one layer and the last stage's the
    LM head and loss, so pp x vp may be the layers + 2 (Llama-3.1-405B's 126 layers on pp 8 x vp 16 = 128: one
    layer per virtual stage, the first and last holding only the embedding / the head).
    """
    if embedding_and_loss:
        if (n_layers + 2) % stages:
            raise ConfigError(f"with the embedding and the loss counted as pipeline layers, {n_layers} + 2 layers "
                              f"do not split evenly over {stages} virtual stages")
        counts = [(n_layers + 2) // stages] * stages
        counts[0] -= 1
        counts[-1] -= 1
        return counts
    base, extra = divmod(n_layers, stages)
    counts = [base] * stages
    order = list(range(1, stages - 1)) + [0, stages - 1] if stages > 2 else list(range(stages))
    for i in order[:extra]:
        counts[i] += 1
    return counts



@dataclass
class _Stage:
    fwd_s: float = 0.0
    bwd_s: float = 0.0
    compute_s: float = 0.0
    recompute_s: float = 0.0
    layers: int = 0
    params: float = 0.0
    trainable: float = 0.0
    expert_trainable: float = 0.0
    weight_elements: float = 0.0
    quantized_bytes: float = 0.0
    quantized_elements: float = 0.0
    activation_bytes: float = 0.0
    checkpoint_bytes: float = 0.0
    max_layer_activation: float = 0.0
    max_layer_params: float = 0.0
    matrix_kernel_s: float = 0.0
    other_kernel_s: float = 0.0
    matrix_J: float = 0.0
    other_J: float = 0.0
    exposed: dict[str, float] = field(default_factory=dict)
    total: dict[str, float] = field(default_factory=dict)

    def add(self, part: LayerCost, lt: LayerTime, n: int = 1, recompute: str = "none",
            modules: tuple[str, ...] = ("core_attn",)) -> None:
        matrix_s, other_s, matrix_J, other_J = _part_kernels(part, recompute, modules)
        kept = part.activation_bytes
        if recompute == "selective" and part.label not in ("embed", "head"):
            kept -= part.selective_dropped_bytes(modules)
        self.matrix_kernel_s += matrix_s * n
        self.other_kernel_s += other_s * n
        self.matrix_J += matrix_J * n
        self.other_J += other_J * n
        self.fwd_s += lt.fwd_s * n
        self.bwd_s += lt.bwd_s * n
        self.compute_s += lt.compute_s * n
        self.recompute_s += lt.recompute_s * n
        self.params += part.params * n
        self.trainable += part.trainable_params * n
        self.expert_trainable += part.expert_params * n
        self.weight_elements += part.weight_elements * n
        self.quantized_bytes += part.quantized_weight_bytes * n
        self.quantized_elements += part.quantized_elements * n
        self.activation_bytes += kept * n
        self.checkpoint_bytes += part.input_bytes * n
        self.max_layer_activation = max(self.max_layer_activation, kept)
        self.max_layer_params = max(self.max_layer_params, part.params)
        if part.label not in ("embed", "head"):
            self.layers += n
        for k, v in lt.exposed.items():
            self.exposed[k] = self.exposed.get(k, 0.0) + v * n
        for k, v in lt.total.items():
            self.total[k] = self.total.get(k, 0.0) + v * n


def _stages(costs: MicroBatchCosts, times: dict[str, LayerTime], plan: ParallelPlan) -> list[_Stage]:
    n_virtual = plan.pp * plan.vp
    sequence: list[LayerCost] = []
    for part in costs.layers:
        sequence.extend([part] * part.count)
    counts = split_layers(len(sequence), n_virtual, embedding_and_loss=plan.embedding_in_pipeline_split)
    stages = [_Stage() for _ in range(n_virtual)]
    embed, head = costs.part("embed"), costs.part("head")
    if embed is not None:
        stages[0].add(embed, times["embed"], recompute=plan.recompute, modules=plan.recompute_modules)
    pos = 0
    for s, c in enumerate(counts):
        # runs of the same layer kind are added at once
        i = pos
        while i < pos + c:
            j = i
            while j < pos + c and sequence[j] is sequence[i]:
                j += 1
            stages[s].add(sequence[i], times[sequence[i].label], j - i, plan.recompute, plan.recompute_modules)
            i = j
        pos += c
    if head is not None:
        stages[-1].add(head, times["head"], recompute=plan.recompute, modules=plan.recompute_modules)
    return stages


# -- optimizer and memory ------------------------------------------------------------------------------


def optimizer_time_s(params: float, plan: ParallelPlan, hw: Hardware, coeffs: Coefficients) -> float:
    """Seconds of the optimizer step over ``params`` parameters held by one GPU (a memory-bound pass)."""
    return optimizer_kernel(params, plan, hw, coeffs).time_s


def optimizer_kernel(params: float, plan: ParallelPlan, hw: Hardware, coeffs: Coefficients) -> KernelTime:
    """The optimizer step over ``params`` parameters held by one GPU, priced by the kernel layer (time and
    energy)."""
    if params <= 0:
        return KernelTime(0.0, Bound.MEMORY, 0.0, 0.0)
    rd, wr = _ADAM_BYTES if plan.optimizer == "adam" else _SGD_BYTES
    p = int(math.ceil(params))
    op = Op(name=f"optimizer.{plan.optimizer}", op=plan.optimizer, kind=OpKind.VECTOR, dims=(1, p), dtype=DType.FP32,
            flops=12.0 * p, bytes_read=rd * p, bytes_written=wr * p, phase=Phase.OPTIMIZER, group="optimizer",
            meta=(("inputs", 4), ("outputs", 3)))
    return price_ops([op], hw, coeffs)[0]


def _memory(stages: list[_Stage], rank: int, plan: ParallelPlan, hw: Hardware, m: int,
            grad_bytes: float) -> MemoryBreakdown:
    own = [stages[c * plan.pp + rank] for c in range(plan.vp)]
    flight = in_flight_microbatches(plan.pp, plan.vp, m, rank, gpipe=plan.effective_schedule == "gpipe")
    weights, grads, optimizer, acts = memory_parts_bytes(
        params=sum(s.params for s in own), trainable=sum(s.trainable for s in own),
        expert_trainable=sum(s.expert_trainable for s in own), expert_shards=plan.expert_shards,
        quantized_elements=sum(s.quantized_elements for s in own),
        quantized_bytes=sum(s.quantized_bytes for s in own), max_layer_params=max(s.max_layer_params for s in own),
        saved_activation_bytes=sum(s.activation_bytes for s in own),
        checkpoint_bytes=sum(s.checkpoint_bytes for s in own),
        max_layer_activation_bytes=max(s.max_layer_activation for s in own), in_flight=flight,
        full_recompute=plan.recompute == "full", zero=plan.zero, shards=plan.dp * plan.cp,
        weight_bytes_per_param=2.0 if plan.precision != "fp32" else 4.0, grad_bytes=grad_bytes,
        optimizer_bytes_per_param=12.0 if plan.optimizer == "adam" else 4.0,
        weight_copy_bytes_per_param=get_recipe(plan.precision).weight_copy_bytes_per_param)
    return training_memory(weights=float(weights), gradients=float(grads), optimizer=float(optimizer),
                           activations=float(acts), capacity=hw.memory_bytes)


# -- energy -------------------------------------------------------------------------------------------

_COMM_PARTS = ("tp_comm_s", "cp_comm_s", "ep_comm_s", "fsdp_comm_s", "dp_comm_s", "pp_send_s")


def _part_kernels(part: LayerCost, recompute: str, modules: tuple[str, ...] = ("core_attn",)
                  ) -> tuple[float, float, float, float]:
    """Kernel seconds and dynamic joules of one micro-batch of ``part``, matrix ops and the others, its
    recomputed forward (full) or selective modules (attention on the matrix units, the rest counted with the
    other kernels) included."""
    matrix_s = part.fwd_matrix_s + part.bwd_matrix_s
    other_s = part.fwd_s + part.bwd_s - matrix_s
    matrix_J = part.fwd_matrix_J + part.bwd_matrix_J
    other_J = part.fwd_other_J + part.bwd_other_J
    if part.label not in ("embed", "head"):
        if recompute == "full":
            matrix_s, other_s = matrix_s + part.fwd_matrix_s, other_s + part.fwd_s - part.fwd_matrix_s
            matrix_J, other_J = matrix_J + part.fwd_matrix_J, other_J + part.fwd_other_J
        elif recompute == "selective":
            if "core_attn" in modules:
                matrix_s, matrix_J = matrix_s + part.attention_fwd_s, matrix_J + part.attention_fwd_J
            other_s += part.selective_fwd_s(modules)
    return matrix_s, other_s, matrix_J, other_J


def training_energy(own: list[_Stage], microbatches: int, optimizer: KernelTime, breakdown_s: dict[str, float],
                    step_s: float, hw: Hardware, coeffs: Coefficients) -> dict[str, float]:
    """Energy of one GPU (a pipeline rank holding the stages ``own``) over one step, joules, by part:
    ``matrix_J``, ``memory_bound_J``, ``comm_J``, ``idle_J``.

    The sum of what the step's ops were priced at by the kernel layer (``KernelTime.dynamic_J``: every
    micro-batch's forward, backward and recompute, and the optimizer step) on top of the GPU's static power
    over its kernels, its idle power over the rest and its active power over exposed communication
    (:func:`perfcast.kernel.energy.step_energy_J`, the rule ``predict`` uses). The parts: the matrix ops
    (GEMMs, attention, convolutions) and the others with the static power over their kernel time, exposed
    communication, and the idle power of the rest of the step (bubbles, overhead, the gaps and the
    sustained-run slowdown the training coefficients add to the kernels). How settled: :data:`ENERGY_STATUS`.
    """
    pm = power_model(hw, coeffs)
    m = microbatches
    matrix_s = m * sum(s.matrix_kernel_s for s in own)
    other_s = m * sum(s.other_kernel_s for s in own) + optimizer.time_s
    matrix_J = m * sum(s.matrix_J for s in own)
    other_J = m * sum(s.other_J for s in own) + optimizer.dynamic_J
    comm = sum(breakdown_s.get(k, 0.0) for k in _COMM_PARTS)
    idle_s = max(0.0, step_s - matrix_s - other_s - comm)  # bubbles, overhead and gaps: no kernel running
    total = step_energy_J(pm, wall_s=step_s, dynamic_J=matrix_J + other_J, comm_s=comm, idle_s=idle_s)
    parts = {"matrix_J": pm.static_W * matrix_s + matrix_J, "memory_bound_J": pm.static_W * other_s + other_J,
             "comm_J": pm.comm_W * comm, "idle_J": pm.idle_W * idle_s}
    summed = sum(parts.values())
    if summed > total:  # capped at TDP
        parts = {k: v * total / summed for k, v in parts.items()}
    return parts


# -- the step -----------------------------------------------------------------------------------------


def simulate_training(model: str | ModelConfig, cluster: str | Cluster, plan: ParallelPlan, *,
                      nodes: int | None = None, calibration: Calibration | None = None,
                      keep_events: bool = False, forward: tuple[Op, ...] | None = None) -> TrainingResult:
    """Predict one optimizer step of ``model`` trained on ``cluster`` with ``plan``.

    ``nodes`` sets the cluster size; by default the plan's GPU count decides it
    (a plan smaller than one node uses part of a node). ``forward``: one micro-batch's forward ops given
    instead of built from ``model`` (a captured model; see :func:`perfcast.system.layers.micro_batch_costs`).
    ``calibration``: the shipped one when None.
    """
    cfg = load_model(model)
    cl, gpus = _sized_cluster(load_cluster(cluster), plan, nodes)
    check_plan(plan, cfg, cl, num_gpus=gpus)
    hw = cl.hardware()
    cal = resolve_calibration(calibration)
    co, cc, tc = cal.kernel, cal.compose, cal.training
    costs = micro_batch_costs(cfg, plan, hw, co, cc, forward=forward)
    comm = layer_comm(cl, cal.collectives)
    grad_bytes = 4.0 if plan.grad_reduce_dtype == "fp32" else 2.0
    times = {part.label: layer_time(part, plan, comm, tc, grad_bytes=grad_bytes) for part in costs.parts}
    stages = _stages(costs, times, plan)
    m = plan.microbatches
    p, v = plan.pp, plan.vp
    if plan.zero == 3 and stages:  # ZeRO-3: the first layer's gather of each pass cannot be prefetched
        first = stages[0]
        ag0 = comm.time("all_gather", first.max_layer_params * 2.0, plan.dp * plan.cp, plan.tp)
        first.fwd_s += ag0
        first.exposed["fsdp_comm_s"] = first.exposed.get("fsdp_comm_s", 0.0) + ag0
    send_s = 0.0
    if p > 1:
        send_s = comm.time("send_recv", costs.hidden_bytes / (1 if plan.sp else plan.tp), 2,
                           plan.tp * plan.cp * plan.dp)
    pipe: PipelineResult = simulate_pipeline([s.fwd_s for s in stages], [s.bwd_s for s in stages], m,
                                             schedule=plan.effective_schedule, chunks=v, send_s=send_s,
                                             keep_events=keep_events)
    ranks = _rank_tails(stages, plan, comm, tc, hw, co, grad_bytes)
    tail = [ranks.dp_exposed_s[r] + ranks.optimizer_s[r] for r in range(p)]
    crit = max(range(p), key=lambda r: pipe.busy_s[r] + tail[r])
    overhead = cc.host.step_overhead_s
    step = float(step_time_s(pipe.time_s, ranks.dp_exposed_s, ranks.optimizer_s, overhead))
    breakdown = _breakdown(stages, plan, pipe, crit, ranks, tail, overhead, send_s)
    comm_total = _comm_totals(stages, plan, ranks, send_s)

    tokens = plan.effective_global_batch * (1 if cfg.kind == "cnn" else plan.seq_len)  # CNNs: images
    tps = tokens / step / gpus
    mf = costs.model_flops_per_token
    hf = _hardware_flops_per_token(costs, plan)
    recipe = get_recipe(plan.precision)  # MFU vs the peak of its GEMM datapath (fp16 runs: BF16's, the same rate)
    train_dtype = recipe.fprop if recipe.low_precision or recipe.fprop is DType.FP32 else DType.BF16
    peak = hw.peak(train_dtype)
    energy = training_energy([stages[c * p + crit] for c in range(v)], m, ranks.optimizer_kernels[crit], breakdown,
                             step, hw, co)
    mems = [_memory(stages, r, plan, hw, m, grad_bytes) for r in {0, p - 1}]
    memory = max(mems, key=lambda mb: mb.total_bytes)
    low, high = interval_for(step, cal.intervals, kind="training")
    return TrainingResult(
        model_id=cfg.id, cluster_id=cl.id, gpu_id=hw.id, num_gpus=gpus, plan=plan, step_time_s=step,
        low_s=low, high_s=high, tokens_per_step=tokens, tokens_per_s_per_gpu=tps, model_flops_per_token=mf,
        hardware_flops_per_token=hf, causal_flops_per_token=costs.causal_flops_per_token,
        tflops_per_gpu=mf * tps / 1e12, mfu=mf * tps / peak, hfu=hf * tps / peak,
        peak_flops_per_s=peak, microbatches=m, bubble_frac=pipe.bubble_frac, breakdown_s=breakdown,
        comm_total_s=comm_total, memory=memory, stage_fwd_s=tuple(s.fwd_s for s in stages),
        stage_bwd_s=tuple(s.bwd_s for s in stages), stage_layers=tuple(s.layers for s in stages),
        events=tuple(pipe.events), energy_per_gpu_J=sum(energy.values()), energy_breakdown_J=energy,
    )


def _sized_cluster(cl: Cluster, plan: ParallelPlan, nodes: int | None) -> tuple[Cluster, int]:
    """``cl`` with ``nodes`` nodes (by default as many as the plan's GPUs fill) and the GPUs the step runs on."""
    if nodes is not None:
        cl = cl.with_nodes(nodes)
        return cl, cl.num_gpus
    gpus = plan.num_gpus
    cl = cl.with_nodes(max(1, -(-gpus // cl.gpus_per_node)))
    if gpus > cl.gpus_per_node and gpus % cl.gpus_per_node:
        raise ConfigError(f"{gpus} GPUs do not fill whole {cl.id} nodes of {cl.gpus_per_node} GPUs; "
                          f"use a multiple of {cl.gpus_per_node}")
    return cl, gpus


@dataclass(frozen=True)
class _RankTails:
    """After its last backward, per pipeline rank: the data-parallel gradient reduction (exposed and in all,
    s; ZeRO-1/2: with the parameter gather) and the optimizer step (its kernel, and seconds)."""

    dp_exposed_s: list[float]
    dp_total_s: list[float]
    optimizer_s: list[float]
    optimizer_kernels: list[KernelTime]


def _rank_tails(stages: list[_Stage], plan: ParallelPlan, comm: LayerComm, tc: TrainingCoefficients,
                hw: Hardware, co: Coefficients, grad_bytes: float) -> _RankTails:
    """Each pipeline rank's data-parallel reduction and optimizer step, over the stages (chunks) it holds."""
    p, v = plan.pp, plan.vp
    shards = plan.dp * plan.cp
    dp_exposed = [0.0] * p
    dp_total = [0.0] * p
    opt_s = [0.0] * p
    opt_k: list[KernelTime] = []
    for r in range(p):
        own = [stages[c * p + r] for c in range(v)]
        trainable = sum(s.trainable for s in own)
        params = sum(s.params for s in own)
        layers = max(1, sum(s.layers for s in own))
        window_b = sum(s.bwd_s for s in own) if plan.dp_overlap else 0.0
        window_f = sum(s.fwd_s for s in own) if plan.dp_overlap else 0.0
        ar = rs = ag = 0.0
        if plan.zero == 0:
            ar = comm.time("all_reduce", trainable * grad_bytes, shards, plan.tp)
        elif plan.zero in (1, 2):
            rs = comm.time("reduce_scatter", trainable * grad_bytes, shards, plan.tp)
            ag = comm.time("all_gather", params * 2.0, shards, plan.tp) if trainable > 0 else 0.0
        dp_total[r] = ar if plan.zero == 0 else rs + ag
        dp_exposed[r] = float(data_parallel_exposed_s(plan.zero, ar, rs, ag, window_b, window_f, layers,
                                                      tc.overlap_interference))
        opt_k.append(optimizer_kernel(trainable / (shards if plan.zero >= 1 else 1), plan, hw, co))
        opt_s[r] = opt_k[r].time_s
    return _RankTails(dp_exposed, dp_total, opt_s, opt_k)


def _breakdown(stages: list[_Stage], plan: ParallelPlan, pipe: PipelineResult, crit: int, ranks: _RankTails,
               tail: list[float], overhead_s: float, send_s: float) -> dict[str, float]:
    """The step on the critical rank ``crit`` by part (s): its busy time split into compute, recompute and
    exposed communication, the bubble (with the schedule's sends), its data-parallel tail and the overhead."""
    m, p, v = plan.microbatches, plan.pp, plan.vp
    own = [stages[c * p + crit] for c in range(v)]
    compute = sum(s.compute_s for s in own) * m
    recompute = sum(s.recompute_s for s in own) * m
    exposed: dict[str, float] = {}
    for s in own:
        for k, val in s.exposed.items():
            exposed[k] = exposed.get(k, 0.0) + val * m
    busy = pipe.busy_s[crit]
    bubble = max(0.0, pipe.time_s - busy)
    breakdown = {"compute_s": compute, "recompute_s": recompute}
    for k in ("tp_comm_s", "cp_comm_s", "ep_comm_s", "fsdp_comm_s"):
        breakdown[k] = exposed.get(k, 0.0)  # ZeRO-3's first gather is inside fsdp_comm_s
    breakdown["pp_send_s"] = 0.0
    accounted = compute + recompute + sum(exposed.values())
    # sends and waits inside the schedule beyond the stages' own time
    breakdown["bubble_s"] = bubble + max(0.0, busy - accounted)
    breakdown["dp_comm_s"] = ranks.dp_exposed_s[crit]
    breakdown["optimizer_s"] = ranks.optimizer_s[crit]
    breakdown["overhead_s"] = overhead_s + (max(tail) - tail[crit])
    if p > 1:
        sends = 2 * m * v * send_s
        moved = min(sends, breakdown["bubble_s"])
        breakdown["pp_send_s"] = moved
        breakdown["bubble_s"] -= moved
    return breakdown


def _comm_totals(stages: list[_Stage], plan: ParallelPlan, ranks: _RankTails, send_s: float) -> dict[str, float]:
    """Each kind of communication's seconds in one step, exposed or hidden (the busiest rank's for data
    parallelism)."""
    m = plan.microbatches
    comm_total: dict[str, float] = {}
    for s in stages:
        for k, val in s.total.items():
            comm_total[k] = comm_total.get(k, 0.0) + val * m
    comm_total["dp_comm_s"] = max(ranks.dp_total_s)
    comm_total["pp_send_s"] = 2 * m * plan.vp * send_s if plan.pp > 1 else 0.0
    return comm_total


def _hardware_flops_per_token(costs: MicroBatchCosts, plan: ParallelPlan) -> float:
    """FLOPs the GPUs run per token: the model's, plus the forward (full) or core attention (selective) again."""
    mf = costs.model_flops_per_token
    if plan.recompute == "full":
        return mf + costs.forward_flops_per_token
    if plan.recompute == "selective":
        return mf + costs.attention_flops_per_token / 3.0
    return mf
