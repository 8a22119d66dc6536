"""How long one serving iteration takes: a batch of prefill chunks and decode tokens on one replica.

An iteration of a continuous-batching engine runs every layer once over the
tokens it schedules: new prompt tokens (whole prompts or chunks of them) and
one token for each decoding sequence. Its time splits, as VIDUR splits it, into

- the token-parallel part (QKV/O/MLP GEMMs, norms, activations, RoPE, KV-cache
  writes, embeddings): a function of the number of tokens ``T`` only;
- attention: one varlen FlashAttention call for the prefill chunks (FLOPs from
  each chunk's causal (query, key) pairs against its context) and one paged
  decode call for the decoding sequences (reading their whole KV cache);
- the LM head over the sequences that emit a token this iteration;
- tensor-parallel all-reduces (two per layer over ``T`` hidden vectors);
- the engine's own work per iteration on the CPU (scheduling, input
  preparation, sampling): a fixed part and a part per sequence.

Mixture-of-experts models may split their experts over ``ep`` GPUs (expert
parallelism: each GPU holds ``num_experts / ep`` whole experts, each cut ``tp / ep``
ways) and run attention data-parallel (``attention_dp``, TensorRT-LLM's
``enable_attention_dp``): each of the ``tp`` GPUs then serves its own share of the
sequences with a full copy of the attention weights and of its sequences' KV cache,
and the MoE layers exchange tokens instead of all-reducing them (an all-gather of
every rank's hidden vectors before the experts and a reduce-scatter of their
weighted sums after, over the ``tp`` GPUs; dense layers of the model run on each
GPU's own tokens with no collective). The batch the scheduler forms is the union
of the ranks' batches, spread evenly by sequence: attention, the LM head, the
per-sequence CPU work and every layer outside the routed experts (projections,
norms, shared experts, dense MLPs: a table of their own, by a rank's tokens) are
priced for the busiest rank, ``ceil(n / tp)`` of the ``n`` decoding sequences and
of the ``n`` prefill chunks, each chunk whole on its rank (a prompt is not split
over ranks, so one long chunk paces every rank); the experts for every token of
the union. The KV cache of the union is ``tp`` times one GPU's.

A MoE layer's experts run as grouped GEMMs (:func:`_group_experts`) with the kernels around them as each
engine launches them (:func:`_expert_quantize`): TensorRT-LLM's CUTLASS MoE runner copies every token's
top-k rows into expert order in an expand kernel of its own, which (with FP8/FP4 GEMMs) writes them
quantized, as its gated activation writes the second GEMM's input; vLLM's fused_moe gathers the rows inside
its GEMM, after one per-token quantization of the hidden states. Both are recalled from the engines'
sources (``moe_kernels.cu``'s expandInputRows / doGatedActivation / finalizeMoeRouting, vLLM's
``fused_moe.py``), not re-checked against a stored copy.

TensorRT-LLM (``engine="trtllm"``) with an FP8 KV cache on a GPU with FP8 tensor cores
runs prefill attention as FP8 context FMHA: Q, K and V in FP8 and both attention
GEMMs on the FP8 tensor cores (TensorRT-LLM's ``use_fp8_context_fmha``, which its
documentation describes for FP8 checkpoints with an FP8 KV cache on Ada and Hopper;
the PyTorch backend and Blackwell's FMHA kernels do the same with an FP8 KV cache).
This is recalled from TensorRT-LLM's documentation and sources, not re-checked
against a stored copy. ASSUMPTION: the FP8 kernel reaches the same fraction of the
FP8 peak as the 16-bit kernel of the 16-bit peak (its FLOPs are priced at the
16-bit : FP8 peak ratio); the output stays 16-bit. Decode attention already reads
the FP8 cache at one byte per element and is bandwidth-bound, so it is unchanged.
Other engines (vLLM) keep 16-bit prefill attention.

State-space (Mamba) layers: the token-parallel table leaves out each Mamba mixer's scan and causal conv1d,
which the kernel layer prices (:mod:`perfcast.kernel.ssm`) in two tables of their own: a prefill table over
the iteration's new prompt tokens (the chunks scanned as one sequence: the workload IR's prefill scan over
``T`` tokens, its final conv and SSM state written once) and a decode table over the decoding sequences (one
recurrent step each, reading and writing its conv and SSM state: the IR's decode scan of ``n`` sequences).
Both count in ``linear_s``. Only a hybrid's attention layers attend: attention is priced for
``attention_layers_per_stage`` layers (every layer of a pure transformer, none of Mamba-1/2, four of
Jamba-v0.1's 32). The KV cache by layer type is :mod:`perfcast.serving.kv.layout`'s.

The token-parallel part, the LM head and the all-reduces are priced once by the
kernel and collective layers on a grid of sizes and interpolated into dense
tables, so an iteration costs a table lookup plus one attention evaluation:
the simulator's per-event work does not grow with the model. The linear layers'
and the LM head's dynamic energy (the kernel layer's, priced with their times)
is tabulated the same way, and an iteration also returns its attention calls'
FLOPs and bytes, from which :mod:`perfcast.serving.energy` prices theirs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from perfcast.catalog.hardware import Hardware, base_hardware_id, load_hardware
from perfcast.catalog.models import ModelConfig, load_model
from perfcast.catalog.params import count_params
from perfcast.catalog.quantization import QuantizationConfig
from perfcast.coefficients.bundle import Calibration, resolve_calibration
from perfcast.dtypes import DType
from perfcast.errors import ConfigError, UnsupportedError
from perfcast.kernel.attention import attention_rates
from perfcast.kernel.legacy_mma import legacy_mma_slowdown
from perfcast.kernel.predict import price_ops
from perfcast.serving.engines import load_engine
from perfcast.serving.kv.layout import KVLayout, kv_layout
from perfcast.serving.stack import custom_allreduce_times, stack_hardware
from perfcast.system.cluster import Cluster, cluster_for_gpu
from perfcast.system.collectives import collective_times
from perfcast.workload.build import WorkloadSpec, build_workload
from perfcast.workload.graph import Graph, causal_pairs
from perfcast.workload.models.vision import build_vision_encoder
from perfcast.workload.quantization import QUANTIZATION_CHOICES, Quantization, resolve_quantization
from perfcast.workload.sharding import check_tp, shard_tp
from perfcast.workload.transforms import quantize_weights
from perfcast.workload.types import Mode, Op, OpKind

__all__ = ["TORCH_SAMPLER", "DecodeTerms", "IterationBreakdown", "IterationModel", "PrefillChunk", "Priced",
           "kv_cache_dtype", "weight_bytes_per_gpu"]

# IterationModel.priced: six parts (s), dynamic energy (J), prefill FLOPs and bytes, decode FLOPs and bytes
Priced = tuple[float, float, float, float, float, float, float, float, float, float, float]
# IterationModel.decode_terms: linear, comm, head and CPU seconds, dynamic energy (J), decode FLOPs per cached
# token, decode bytes fixed and per cached token (full-context layers), then the windowed layers' FLOPs and bytes
# per cached token and the cached tokens they read at most (their window x the sequences)
DecodeTerms = tuple[float, float, float, float, float, float, float, float, float, float, float]


# vLLM V0's Sampler (vllm/model_executor/layers/sampler.py, v0.5.4; recalled, not re-read): the kernels it runs
# on the GPU for each sampling sequence over the V logits of the full vocabulary (gathered to the driver rank),
# as (step, vector op, bytes read, bytes written) per vocabulary entry: the upcast to FP32, the temperature, the
# probabilities and log-probabilities, the random draw (``_multinomial``: a copy of the rows, exponential noise,
# a division and an argmax; the OpenAI server's default temperature samples), and the sampled token's rank
# among the log-probabilities (``_get_ranks``, always computed). No top-p / top-k sort or penalties: the
# requests leave them at their neutral values (an ASSUMPTION for the benchmarks perfcast reproduces).
TORCH_SAMPLER: tuple[tuple[str, str, float, float], ...] = (
    ("upcast", "copy", 2.0, 4.0),
    ("temperature", "div", 4.0, 4.0),
    ("softmax", "softmax", 4.0, 4.0),
    ("log_softmax", "softmax", 4.0, 4.0),
    ("sample_rows", "copy", 4.0, 4.0),
    ("exponential", "exponential", 0.0, 4.0),
    ("draw", "div", 8.0, 4.0),
    ("argmax", "max", 4.0, 0.0),
    ("rank_rows", "copy", 4.0, 4.0),
    ("rank_compare", "gt", 4.0, 1.0),
    ("rank_sum", "sum", 1.0, 0.0),
)


@dataclass(frozen=True, slots=True)
class PrefillChunk:
    """``new_tokens`` prompt tokens appended to a context that then holds ``context_tokens`` tokens."""

    new_tokens: int
    context_tokens: int


@dataclass(frozen=True)
class IterationBreakdown:
    """Seconds of one iteration by part; ``time_s`` is their sum."""

    linear_s: float
    attention_prefill_s: float
    attention_decode_s: float
    lm_head_s: float
    tp_comm_s: float
    cpu_overhead_s: float

    JSON_EXTRA: ClassVar[tuple[str, ...]] = ("time_s",)  # to_json: the parts, then their sum

    @property
    def time_s(self) -> float:
        """The iteration's duration."""
        return (self.linear_s + self.attention_prefill_s + self.attention_decode_s + self.lm_head_s
                + self.tp_comm_s + self.cpu_overhead_s)


def _grid(top: int) -> np.ndarray:
    """Every size up to 64, then steps of ~3% (GEMM time is piecewise in the row count)."""
    pts = list(range(1, min(top, 64) + 1))
    x = 64.0
    while x < top:
        x *= 1.03
        pts.append(min(top, int(round(x))))
    return np.unique(np.array(pts, dtype=np.int64))


def kv_cache_dtype(kv_dtype: DType | None, quantization: str, dtype: DType,
                   checkpoint: QuantizationConfig | None = None) -> DType:
    """The KV cache's format: ``kv_dtype`` when given, else FP8 when ``fp8`` or ``fp4`` is asked for explicitly
    (TensorRT-LLM's FP8 and FP4 checkpoints ship an FP8 cache), else, under ``auto``, the format the checkpoint
    is calibrated for (``checkpoint.kv_cache_dtype``: ModelOpt's ``kv_cache_quant_algo`` FP8, which
    TensorRT-LLM and SGLang apply by default; with vLLM it takes ``--kv-cache-dtype fp8``, an ASSUMPTION of
    the deployment that ``kv_dtype`` overrides), else the activation ``dtype`` (vLLM's ``kv_cache_dtype=auto``)."""
    if kv_dtype is not None:
        return kv_dtype
    if quantization in ("fp8", "fp4"):
        return DType.FP8
    if quantization == "auto" and checkpoint is not None and checkpoint.kv_cache_dtype is not None:
        return DType(checkpoint.kv_cache_dtype)
    return dtype


@dataclass
class IterationModel:
    """Iteration time of one replica (``tp`` GPUs of ``hardware``, ``pp`` pipeline stages).

    ``quantization`` is ``auto`` (the checkpoint's own, from its ``quantization_config``) or a
    :data:`~perfcast.workload.quantization.QUANTIZATION_SCHEMES` name (a checkpoint quantized that way),
    run as the GPU runs it (:mod:`perfcast.workload.quantization`: FP8 weights on a GPU without FP8 math
    run weight-only); ``quant`` is the resolved value. ``kv_dtype`` is the KV-cache format (default: FP8
    when ``fp8`` or ``fp4`` is asked for explicitly, as TensorRT-LLM's FP8 and FP4 checkpoints ship an FP8
    cache; under ``auto`` the checkpoint's calibrated KV format when it has one (ModelOpt
    ``kv_cache_quant_algo``); else the activation dtype, as vLLM's ``kv_cache_dtype=auto``). ``max_tokens`` bounds the
    tokens one iteration may schedule (the dense tables cover it; larger batches interpolate).
    ``ep`` (expert-parallel GPUs, dividing ``tp``) and ``attention_dp`` (attention data-parallel over
    the ``tp`` GPUs) apply to mixture-of-experts models (module docstring).
    """

    model: ModelConfig | str
    hardware: Hardware | str
    tp: int = 1
    pp: int = 1
    dtype: DType = DType.BF16
    quantization: str = "auto"
    kv_dtype: DType | None = None
    max_tokens: int = 16384
    max_seqs: int = 1024
    engine: str = "vllm"
    calibration: Calibration | None = None
    cluster: Cluster | None = None
    attention_dp: bool = False
    ep: int = 1
    _linear: np.ndarray = field(init=False, repr=False)
    _comm: np.ndarray = field(init=False, repr=False)
    _head: np.ndarray = field(init=False, repr=False)
    _linear_J: np.ndarray = field(init=False, repr=False)
    _head_J: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.cfg = load_model(self.model)
        self.hw = self.hardware if isinstance(self.hardware, Hardware) else load_hardware(self.hardware)
        self.cal = resolve_calibration(self.calibration)
        self.co, self.sc = self.cal.kernel, self.cal.serving
        self.profile = load_engine(self.engine)
        if self.profile.id not in self.sc.engines:
            raise ConfigError(f"engine {self.engine!r} has no fitted CPU overhead in the serving coefficients; "
                              f"those have {', '.join(sorted(self.sc.engines))}")
        self.hw = stack_hardware(self.hw, self.sc.stack(self.hw.vendor))
        if self.quantization not in QUANTIZATION_CHOICES:
            raise ConfigError(f"unknown quantization {self.quantization!r}; use one of "
                              f"{', '.join(QUANTIZATION_CHOICES)}")
        self.quant: Quantization = resolve_quantization(self.cfg, self.quantization, self.hw)
        check_tp(self.cfg, self.tp)
        if self.ep < 1 or self.tp % self.ep:
            raise ConfigError(f"expert parallelism {self.ep} must divide the tensor-parallel size {self.tp}")
        if (self.ep > 1 or self.attention_dp) and self.cfg.moe is None:
            raise ConfigError(f"expert parallelism and attention data parallelism need a mixture-of-experts "
                              f"model; {self.cfg.id} is dense")
        self.dp = self.tp if self.attention_dp else 1  # attention ranks, each with its own sequences
        layers = self.cfg.num_layers
        if self.pp < 1 or self.pp > layers:
            raise ConfigError(f"pipeline stages ({self.pp}) must be between 1 and the {layers} layers of {self.cfg.id}")
        if self.cluster is not None and self.cluster.gpu != base_hardware_id(self.hw.id):
            raise ConfigError(f"cluster {self.cluster.id} is a node of {self.cluster.gpu}, not {self.hw.id}: its "
                              f"fabric would price {self.hw.id}'s collectives; give a cluster of {self.hw.id} (or "
                              "drop --cluster for its own node)")
        self.cl = self.cluster or cluster_for_gpu(self.hw.id)
        if self.tp > self.cl.domain:
            raise ConfigError(f"tensor parallelism {self.tp} exceeds the {self.cl.domain} GPUs of one "
                              f"{self.cl.id} node")
        self.kv = kv_cache_dtype(self.kv_dtype, self.quantization, self.dtype, self.cfg.quantization)
        cfg = self.cfg
        self.heads = cfg.num_heads // (1 if self.attention_dp else self.tp)
        self.kv_heads = max(1, cfg.num_kv_heads // (1 if self.attention_dp else self.tp))
        self.head_dim = cfg.head_dim
        self.v_head_dim = int(cfg.mla.v_head_dim if cfg.mla is not None else cfg.head_dim)
        self.layers_per_stage = -(-layers // self.pp)  # uneven stages: the fullest one paces the pipeline
        ssm = cfg.ssm
        # attention layers of the fullest stage (a hybrid's Mamba and MLP-only layers do not attend)
        self.attention_layers_per_stage = (self.layers_per_stage if ssm is None else
                                           -(-sum(m == "attention" for m in ssm.layer_mixers) // self.pp))
        self._local_layers, self.local_window = self._local_attention()
        self._vision: dict[int, tuple[float, float]] = {}
        self._tables()

    # -- tables -------------------------------------------------------------------------------
    def _build(self, tokens: int) -> list[Op]:
        # T tokens of many sequences priced as one sequence's token-parallel work: requests are checked
        # against the context by the engine, not here
        spec = WorkloadSpec(Mode.PREFILL, 1, tokens, dtype=self.dtype, style="engine", attention="flash",
                            quantization="none", check_context=False)
        expand = self.profile.moe_expand_kernel  # TensorRT-LLM's CUTLASS MoE runner (_group_experts, _expert_quantize)
        ops = quantize_weights(_group_experts(list(build_workload(self.cfg, spec).ops), separate_permute=expand),
                               self.quant)
        return _expert_quantize(ops, fused=expand)

    def _ops(self, tokens: int) -> tuple[list[Op], list[Op]]:
        """One GPU's ops at ``tokens`` tokens: those priced on the replica's ``tokens`` (every op; under attention
        DP the routed experts over the union of the ranks' tokens), and under attention DP the ops an attention
        rank runs unsharded on ``tokens`` tokens of its own (empty otherwise)."""
        if self.ep == 1 and not self.attention_dp:
            return _shard(self._build(tokens), self.tp), []
        full = self._build(tokens)
        experts = [_expert_share(o, self.ep) for o in _shard(full, self.tp // self.ep)
                   if _is_routed_expert(o) and o.kind is not OpKind.COMM]
        if self.attention_dp:  # each rank runs everything else on its own tokens, unsharded
            return experts, [o for o in full if not _is_routed_expert(o)]
        return [o for o in _shard(full, self.tp) if not _is_routed_expert(o)] + experts, []

    def _tables(self) -> None:
        """Tabulate what an iteration costs besides attention, and attention's per-layer constants."""
        grid = _grid(self.max_tokens)
        self.weight_bytes = 0.0
        lin_ops, owner, comm_bytes, comm_calls, head_ops = self._sort_ops(grid)
        self.weight_bytes = self._weight_bytes()
        dense = np.arange(self.max_tokens + 1, dtype=float)
        self._linear, self._linear_J = self._linear_table(grid, dense, lin_ops, owner)
        self._rank_l: list[float] = [0.0]
        self._rank_J_l: list[float] = [0.0]
        if self._rank_ops[0]:  # attention DP: one rank's own ops, by its own tokens
            self._rank_l, self._rank_J_l = (t.tolist() for t in self._linear_table(grid, dense, *self._rank_ops))
        self._comm = self._comm_table(grid, dense, comm_bytes, comm_calls)
        self._head, self._head_J = self._head_table(head_ops)
        self._scan_tables(grid, dense)
        eng = self.sc.engines[self.profile.id]
        # the engine's CPU time per iteration: its own, and under tensor parallelism its ranks' per-layer sync,
        # which grows with each doubling of the ranks that must all reach a layer's all-reduce
        self._cpu_fixed = eng.iteration_overhead_s + (eng.tp_sync_per_layer_s * self.layers_per_stage
                                                      * math.log2(self.tp) if self.tp > 1 else 0.0)
        self.request_overhead_s = eng.request_overhead_s
        self.prompt_token_overhead_s = eng.prompt_token_overhead_s
        self._cpu_per_seq = eng.per_sequence_overhead_s
        self.image_overhead_s = eng.image_overhead_s  # CPU per image of a starting request (s)
        self.kv_bytes_per_token = self._kv_bytes_per_token()
        self._attention_constants()
        self._linear_l = self._linear.tolist()
        self._comm_l = self._comm.tolist()
        self._head_l = self._head.tolist()
        self._linear_J_l = self._linear_J.tolist()
        self._head_J_l = self._head_J.tolist()

    def _sort_ops(self, grid: np.ndarray) -> tuple[list[Op], list[int], np.ndarray, float, list[Op]]:
        """One GPU's ops at every grid size, sorted: the token-parallel ops (and the grid point each belongs
        to), the bytes each grid point's layer all-reduces carry and their calls per iteration, and the
        attention and LM-head ops of the smallest size (priced elsewhere). A state-space model's scans and
        conv1d (which read and write each sequence's state) go to ``self._scan_prefill_ops`` instead, and under
        attention DP the token-parallel ops a rank runs on its own tokens to ``self._rank_ops``."""
        lin_ops: list[Op] = []
        owner: list[int] = []
        comm_bytes = np.zeros(len(grid))
        comm_calls = 0.0
        head_ops: list[Op] = []
        ssm = self.cfg.ssm is not None
        self._scan_prefill_ops: tuple[list[Op], list[int]] = ([], [])
        self._rank_ops: tuple[list[Op], list[int]] = ([], [])
        for i, t in enumerate(grid):
            replica, rank = self._ops(int(t))
            for own, op in [(False, o) for o in replica] + [(True, o) for o in rank]:
                if op.kind is OpKind.COMM:
                    if ssm and "layers" in op.name.split(".", 1)[0]:
                        # a hybrid's layer all-reduces as the IR emits them (a Mamba mixer's out_proj, an
                        # attention or MLP block: one each), every one over the T hidden vectors
                        comm_bytes[i] = float(t) * self.cfg.hidden_size * self.dtype.bytes
                        if i == 0:
                            comm_calls += op.count * self.layers_per_stage / self.cfg.num_layers
                    elif op.name.startswith("layers") or op.name.startswith("moe_layers"):
                        # every all-reduce of a layer carries the T hidden vectors of its output in the
                        # activation dtype: a MoE layer reduces after the weighted sum of its experts
                        # (TensorRT-LLM's MoE finalize, vLLM's fused_moe), not the top-k expert outputs
                        comm_bytes[i] = float(t) * self.cfg.hidden_size * self.dtype.bytes
                        comm_calls = 2.0 * self.layers_per_stage
                    continue
                if op.kind is OpKind.ATTENTION or op.name.startswith("head."):
                    if i == 0:
                        head_ops.append(op)
                    continue
                if ssm and _is_state_op(op):
                    self._scan_prefill_ops[0].append(op)
                    self._scan_prefill_ops[1].append(i)
                    continue
                if own:
                    self._rank_ops[0].append(op)
                    self._rank_ops[1].append(i)
                    continue
                lin_ops.append(op)
                owner.append(i)
        return lin_ops, owner, comm_bytes, comm_calls, head_ops

    def _linear_table(self, grid: np.ndarray, dense: np.ndarray, lin_ops: list[Op],
                      owner: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """Seconds of the token-parallel ops (one stage, one GPU) for every token count up to ``max_tokens``,
        and their dynamic energy (joules, :attr:`~perfcast.kernel.types.KernelTime.dynamic_J`) on the same grid."""
        times = price_ops(lin_ops, self.hw, self.co)
        per = np.zeros(len(grid))
        per_J = np.zeros(len(grid))
        stage = self.layers_per_stage / self.cfg.num_layers
        for op, kt, i in zip(lin_ops, times, owner, strict=True):
            share = stage if op.count > 1 else 1.0  # repeated (layer) ops split over the stages
            per[i] += kt.time_s * op.count * share
            per_J[i] += kt.dynamic_J * op.count * share
        g = grid.astype(float)
        table, table_J = np.interp(dense, g, per), np.interp(dense, g, per_J)
        table[0] = table_J[0] = 0.0
        return table, table_J

    def _comm_table(self, grid: np.ndarray, dense: np.ndarray, comm_bytes: np.ndarray,
                    comm_calls: float) -> np.ndarray:
        """Seconds of the tensor-parallel collectives (one stage) for every token count up to ``max_tokens``."""
        if self.attention_dp and self.tp > 1:
            # per MoE layer of the stage: all-gather the ranks' hidden vectors, reduce-scatter the experts' sums
            moe = self.cfg.moe
            assert moe is not None  # checked in __post_init__
            moe_layers = sum(moe.is_moe_layer(i) for i in range(self.cfg.num_layers)) / self.pp
            hidden = grid.astype(float) * self.cfg.hidden_size * self.dtype.bytes
            co = self.cal.collectives
            ct = (collective_times("all_gather", hidden, self.tp, self.cl, coeffs=co, shared_nics=False)
                  + collective_times("reduce_scatter", hidden, self.tp, self.cl, coeffs=co, shared_nics=False))
            table = np.interp(dense, grid.astype(float), ct * moe_layers)
        elif self.tp > 1 and comm_calls:
            ct = collective_times("all_reduce", comm_bytes, self.tp, self.cl, coeffs=self.cal.collectives,
                                  shared_nics=False)
            if self.profile.custom_allreduce:
                ct = np.minimum(ct, custom_allreduce_times(comm_bytes, self.tp, self.cl, self.sc.custom_allreduce,
                                                           self.profile.custom_allreduce_max_bytes))
            table = np.interp(dense, grid.astype(float), ct * comm_calls)
        else:
            table = np.zeros_like(dense)
        table[0] = 0.0
        return table

    def _scan_tables(self, grid: np.ndarray, dense: np.ndarray) -> None:
        """A state-space model's Mamba mixers' scans and conv1d (one stage, one GPU), priced by the kernel layer:
        for every token count of prefill (the chunks' tokens scanned as one sequence, whose final state is
        written once) and for every count of decoding sequences (one recurrent step each: its conv and SSM
        state read and written), seconds and dynamic energy (J). Empty for a model without state layers."""
        self._has_scan = self.cfg.ssm is not None and bool(self._scan_prefill_ops[0])
        if not self._has_scan:
            self._scan_p_l = self._scan_p_J_l = self._scan_d_l = self._scan_d_J_l = [0.0]
            return
        ops, owner = self._scan_prefill_ops
        self._scan_p_l, self._scan_p_J_l = (t.tolist() for t in self._linear_table(grid, dense, ops, owner))
        seqs = _grid(self.max_seqs)
        d_ops: list[Op] = []
        d_owner: list[int] = []
        for i, n in enumerate(seqs):
            # each attention rank steps its own sequences unsharded under attention DP, else all of them split
            batch = -(-int(n) // self.dp) if self.attention_dp else int(n)
            spec = WorkloadSpec(Mode.DECODE, batch, 2, dtype=self.dtype, style="engine", attention="flash",
                                quantization="none", check_context=False)  # context 2: a state to read
            ops_n = list(build_workload(self.cfg, spec).ops)
            for op in ops_n if self.attention_dp else _shard(ops_n, self.tp):
                if op.kind is not OpKind.COMM and _is_state_op(op):
                    d_ops.append(op)
                    d_owner.append(i)
        d_dense = np.arange(self.max_seqs + 1, dtype=float)
        self._scan_d_l, self._scan_d_J_l = (t.tolist() for t in self._linear_table(seqs, d_dense, d_ops, d_owner))

    def _head_table(self, head_ops: list[Op]) -> tuple[np.ndarray, np.ndarray]:
        """Seconds of the LM head (and its norm, one GPU) over every count of sampling sequences up to
        ``max_seqs``, and their dynamic energy (joules) on the same grid."""
        seqs = _grid(self.max_seqs)
        scaled: list[Op] = []
        for n in seqs:
            for op in head_ops:
                if op.kind is OpKind.ATTENTION:
                    continue
                if op.kind is OpKind.GEMM:
                    b, _, k, nn = op.dims
                    scaled.append(op.with_(dims=(b, int(n), k, nn)))
                else:
                    rows, cols = op.dims
                    f = float(n) / max(rows, 1)
                    scaled.append(op.with_(dims=(int(n), cols), flops=op.flops * f, bytes_read=op.bytes_read * f,
                                           bytes_written=op.bytes_written * f))
        per_head = len([o for o in head_ops if o.kind is not OpKind.ATTENTION])
        priced = price_ops(scaled, self.hw, self.co)
        ht = np.array([k.time_s for k in priced]).reshape(len(seqs), per_head).sum(1)
        hj = np.array([k.dynamic_J for k in priced]).reshape(len(seqs), per_head).sum(1)
        if self.profile.sampler == "torch-fp32":
            st, sj = self._sampler_table(seqs)
            # the driver rank samples alone: its time paces the iteration, its energy is one GPU's (the energy
            # tally multiplies a GPU's dynamic energy by the tensor-parallel ranks)
            ht, hj = ht + st, hj + sj / self.tp
        dense, g = np.arange(self.max_seqs + 1, dtype=float), seqs.astype(float)
        table, table_J = np.interp(dense, g, ht), np.interp(dense, g, hj)
        table[0] = table_J[0] = 0.0
        return table, table_J

    def _sampler_table(self, seqs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Seconds and dynamic energy (joules) of :data:`TORCH_SAMPLER`'s kernels for each count of sampling
        sequences in ``seqs`` (the driver rank's, over the full vocabulary)."""
        vocab = int(self.cfg.vocab_size)
        ops = [Op(name=f"head.sampler.{step}", op=vop, kind=OpKind.VECTOR, dims=(int(n), vocab), dtype=DType.FP32,
                  flops=float(n) * vocab, bytes_read=float(n) * vocab * rd, bytes_written=float(n) * vocab * wr)
               for n in seqs for step, vop, rd, wr in TORCH_SAMPLER]
        priced = price_ops(ops, self.hw, self.co)
        shape = (len(seqs), len(TORCH_SAMPLER))
        return (np.array([k.time_s for k in priced]).reshape(shape).sum(1),
                np.array([k.dynamic_J for k in priced]).reshape(shape).sum(1))

    def _kv_bytes_per_token(self) -> float:
        """KV-cache bytes of one token on one GPU, every layer (K and V, or MLA's latent)."""
        # each GPU caches its KV heads; past tp = num_kv_heads every GPU holds (a replica of) one head
        # attention DP: each GPU caches whole tokens of its own sequences (tp GPUs hold tp times as many)
        # MLA (DeepSeek-V2/V3): one latent of kv_lora_rank + rope elements per token and layer, shared by
        # every head, so each tensor-parallel GPU holds all of it (engines run attention DP to split it)
        if (self.cfg.ssm is not None or self.cfg.linear_attention is not None or self.cfg.sliding_window
                or self.cfg.attention_chunk_size):
            # per layer type (kv.layout): the attention layers' K/V only; Mamba state is per sequence
            return self.kv_layout().kv_bytes_per_token
        mla = self.cfg.mla
        if mla is not None:
            return float((mla.kv_lora_rank + mla.qk_rope_head_dim) * self.kv.bytes * self.cfg.num_layers
                         / (self.tp if self.attention_dp else 1))
        split = self.tp if self.attention_dp else min(self.tp, max(1, self.cfg.num_kv_heads))
        return 2.0 * cfg_kv_dim(self.cfg) * self.kv.bytes * self.cfg.num_layers / split

    def kv_layout(self, block_size: int = 16, state_dtype: DType | None = None) -> KVLayout:
        """One GPU's cache by layer type and its vLLM pool (:mod:`perfcast.serving.kv.layout`) with attention
        blocks of ``block_size`` tokens (raised for a Mamba hybrid) and the SSM state in ``state_dtype``
        (default: the model dtype, vLLM's ``mamba_ssm_cache_dtype=auto``)."""
        return kv_layout(self.cfg, tp=self.tp, attention_dp=self.attention_dp, kv_dtype=self.kv, dtype=self.dtype,
                         state_dtype=state_dtype, block_size=block_size)

    def _local_attention(self) -> tuple[int, int | None]:
        """The fullest stage's attention layers that see only a window of keys (sliding-window layers; Llama-4's
        chunked layers, a chunk being at most ``attention_chunk_size`` keys) and that window (tokens); (0, None)
        when every attention layer sees the whole context. Their attention is priced on at most the window's
        keys per query (:meth:`_priced`)."""
        cfg = self.cfg
        mixers = cfg.ssm.layer_mixers if cfg.ssm is not None else ("attention",) * cfg.num_layers
        local = [i for i, m in enumerate(mixers) if m == "attention" and cfg.attention_type(i) != "full"]
        if not local:
            return 0, None
        windows = {cfg.attention_window(i) for i in local}
        if len(windows) > 1:
            raise UnsupportedError(f"{cfg.id}: attention layers with different windows in one model are not "
                                   "modelled")
        share = -(-len(local) // self.pp)
        return min(share, self.attention_layers_per_stage), windows.pop()

    def _attention_constants(self) -> None:
        """Attention per layer in scalars (the event loop's hot path): the kernel layer's rates and the
        FLOPs / bytes per query-key pair, cached token and sequence (FlashAttention / paged decode)."""
        mla = self.cfg.mla
        self._att = attention_rates(self.hw, self.dtype, self.co)
        if self.profile.attention_kernels == "fa2":  # Ampere's mma.sync on Hopper and later (kernel.legacy_mma)
            self._att = self._att._replace(s_per_flop=self._att.s_per_flop * legacy_mma_slowdown(self.hw, self.dtype))
        h, kvh, d, vd = self.heads, self.kv_heads, self.head_dim, self.v_head_dim
        e, kve = self.dtype.bytes, self.kv.bytes
        self._flop_per_pair = 2.0 * h * (d + vd)
        self._q_bytes_per_token = h * (d + vd) * e  # prefill: Q read and O written per new token
        self._kv_bytes_per_ctx = kvh * (d + vd) * kve  # K and V of one cached token, read once
        self._dec_q_bytes = h * d * e  # decode: one query row ...
        self._dec_o_bytes = h * vd * e  # ... and one output row per sequence
        self._dec_flop_per_pair = self._flop_per_pair
        self._dec_kv_bytes_per_ctx = self._kv_bytes_per_ctx
        if mla is None and self.fp8_context_attention:
            # FP8 context FMHA (module docstring): QK^T and PV on the FP8 tensor cores, Q read in FP8. The
            # attention rates are the 16-bit kernel's, so its FLOPs count at the 16-bit : FP8 peak ratio
            self._flop_per_pair *= self.hw.peak(self.dtype) / self.hw.peak(DType.FP8)
            self._q_bytes_per_token = h * d * kve + h * vd * e
        if mla is not None:
            # prefill expands the latent per head (its kv_b_proj is a linear op); K/V of a cached context
            # token are read as the latent. Decode absorbs the up-projections: every head attends over the
            # latent (QK over kv_lora_rank + rope, PV over kv_lora_rank), read once for all the heads.
            lat = mla.kv_lora_rank + mla.qk_rope_head_dim
            self._kv_bytes_per_ctx = lat * kve
            self._dec_flop_per_pair = 2.0 * h * (lat + mla.kv_lora_rank)
            self._dec_kv_bytes_per_ctx = lat * kve
            self._dec_q_bytes = h * lat * e
            self._dec_o_bytes = h * mla.kv_lora_rank * e

    @property
    def fp8_context_attention(self) -> bool:
        """Whether prefill attention runs TensorRT-LLM's FP8 context FMHA (module docstring): an engine whose
        profile runs it (``trtllm``), an FP8 KV cache and FP8 tensor cores on the GPU."""
        return (self.profile.fp8_context_attention and self.kv is DType.FP8 and self.dtype.bytes == 2
                and bool(self.hw.peak_flops_per_s.fp8))

    def _weight_bytes(self) -> float:
        return weight_bytes_per_gpu(self.cfg, tp=self.tp, dtype=self.dtype, quantization=self.quant,
                                    attention_dp=self.attention_dp)

    @property
    def quantization_label(self) -> str:
        """The weights' quantization and how this GPU runs it, in words (for reports)."""
        return self.quant.label

    # -- queries ------------------------------------------------------------------------------
    @staticmethod
    def _lookup(table: list[float], n: int) -> float:
        if n < len(table):
            return table[n]
        return table[-1] * n / (len(table) - 1)  # beyond the table: linear in the count

    def breakdown(self, prefill: tuple[PrefillChunk, ...] | list[PrefillChunk] = (), num_decode: int = 0,
                  decode_context_tokens: int = 0, num_logits: int | None = None) -> IterationBreakdown:
        """Seconds by part of an iteration running ``prefill`` chunks and ``num_decode`` decode tokens
        whose sequences hold ``decode_context_tokens`` cached tokens in total (one pipeline stage when pp > 1:
        the last, slowest one, whose layers share the GPU with the LM head).

        ``num_logits`` (default: decoding sequences plus prefill chunks) is how many sequences sample.
        """
        q = sum(c.new_tokens for c in prefill)
        tokens = q + num_decode
        pairs = sum(causal_pairs(c.new_tokens, c.context_tokens) for c in prefill)
        kv_read = sum(c.context_tokens for c in prefill)
        return self._parts(tokens, q, pairs, kv_read, len(prefill), num_decode, decode_context_tokens,
                           len(prefill) + num_decode if num_logits is None else num_logits)

    def priced(self, num_prefill_tokens: int, prefill_pairs: float, prefill_context_tokens: int,
               num_prefill_seqs: int, num_decode: int, decode_context_tokens: int, num_logits: int) -> Priced:
        """:meth:`breakdown` from running sums (what the simulator keeps per batch), one stage on one GPU: its six
        parts in :class:`IterationBreakdown`'s field order (s; summed in that order they are its ``time_s`` bit
        for bit), then what its energy is priced from: the linear layers' and LM head's dynamic energy (J), and
        the prefill and decode attention calls' FLOPs and bytes (their seconds are parts 2 and 3)."""
        return self._priced(num_prefill_tokens + num_decode, num_prefill_tokens, prefill_pairs,
                            prefill_context_tokens, num_prefill_seqs, num_decode, decode_context_tokens, num_logits)

    def _parts(self, tokens: int, q: int, pairs: float, kv_read: int, n_prefill: int, n_decode: int,
               decode_kv: int, logits: int) -> IterationBreakdown:
        return IterationBreakdown(*self._priced(tokens, q, pairs, kv_read, n_prefill, n_decode, decode_kv,
                                                logits)[:6])

    def _priced(self, tokens: int, q: int, pairs: float, kv_read: int, n_prefill: int, n_decode: int,
                decode_kv: int, logits: int) -> Priced:
        """:meth:`priced`'s values as plain floats (the hot path)."""
        linear = self._lookup(self._linear_l, tokens)
        dynamic = self._lookup(self._linear_J_l, tokens)
        comm = self._lookup(self._comm_l, tokens)
        dp = self.dp
        if dp > 1:  # the busiest attention rank: ceil(n / dp) of each kind of sequence, their share of the work
            if n_prefill:
                r = -(-n_prefill // dp)
                f = r / n_prefill
                q, pairs, kv_read, n_prefill = int(math.ceil(q * f)), pairs * f, int(math.ceil(kv_read * f)), r
            if n_decode:
                r = -(-n_decode // dp)
                decode_kv, n_decode = int(math.ceil(decode_kv * r / n_decode)), r
            logits = -(-logits // dp)
            # ... whose own tokens run the layers outside the routed experts: its prefill chunks and decodes
            linear += self._lookup(self._rank_l, q + n_decode)
            dynamic += self._lookup(self._rank_J_l, q + n_decode)
        # the LM head runs on the last stage only, which then paces the pipeline: a stage here is that
        # slowest one (its layers and the head), so pp stages of it are a micro-batch's time in steady state
        head = self._lookup(self._head_l, logits)
        dynamic += self._lookup(self._head_J_l, logits)
        if self._has_scan:  # Mamba mixers: the prefill tokens' scan and one recurrent step per decoding sequence
            linear += self._lookup(self._scan_p_l, q) + self._lookup(self._scan_d_l, n_decode)
            dynamic += self._lookup(self._scan_p_J_l, q) + self._lookup(self._scan_d_J_l, n_decode)
        att, local = self._att, self._local_layers
        layers = self.attention_layers_per_stage - local
        att_p = att_d = p_flops = p_bytes = d_flops = d_bytes = 0.0
        if n_prefill:
            p_flops = self._flop_per_pair * pairs
            p_bytes = self._q_bytes_per_token * q + self._kv_bytes_per_ctx * kv_read
            att_p = att.time_s(p_flops, p_bytes, n_prefill) * layers
            p_flops *= layers
            p_bytes *= layers
        if n_decode:
            ctx = max(1, decode_kv)
            d_flops = self._dec_flop_per_pair * ctx
            d_bytes = self._dec_q_bytes + self._dec_kv_bytes_per_ctx * ctx + self._dec_o_bytes * n_decode
            att_d = att.time_s(d_flops, d_bytes, n_decode) * layers
            d_flops *= layers
            d_bytes *= layers
        if local:  # windowed layers: a query sees at most the window's keys, a chunk reads at most its window
            w = self.local_window or 1
            if n_prefill:
                lf = self._flop_per_pair * min(pairs, float(q) * w)
                lb = self._q_bytes_per_token * q + self._kv_bytes_per_ctx * min(kv_read, n_prefill * w)
                att_p += att.time_s(lf, lb, n_prefill) * local
                p_flops += lf * local
                p_bytes += lb * local
            if n_decode:
                lctx = max(1, min(decode_kv, n_decode * w))
                lf = self._dec_flop_per_pair * lctx
                lb = self._dec_q_bytes + self._dec_kv_bytes_per_ctx * lctx + self._dec_o_bytes * n_decode
                att_d += att.time_s(lf, lb, n_decode) * local
                d_flops += lf * local
                d_bytes += lb * local
        cpu = self._cpu_fixed + self._cpu_per_seq * (n_prefill + n_decode) if tokens else 0.0
        return linear, att_p, att_d, head, comm, cpu, dynamic, p_flops, p_bytes, d_flops, d_bytes

    def decode_step(self, num_decode: int) -> tuple[float, float, float, float]:
        """A decode-only iteration of ``num_decode`` sequences as ``(fixed_s, a, b, c)``: its seconds with
        ``ctx`` cached tokens in total are ``fixed_s + ((a * ctx)**4 + (b + c * ctx)**4)**0.25``
        (:meth:`decode_times` for one iteration, cheap enough to call per event)."""
        n = num_decode
        att, layers = self._att, self.attention_layers_per_stage
        lookup = self._lookup
        r = -(-n // self.dp) if self.dp > 1 else n  # sequences of the busiest attention rank
        share = r / n if n else 1.0  # ... and its share of the cached tokens
        fixed = (lookup(self._linear_l, n) + lookup(self._rank_l, r if self.dp > 1 else 0)
                 + lookup(self._comm_l, n) + lookup(self._head_l, r)
                 + self._cpu_fixed + self._cpu_per_seq * r + (att.fixed_s + att.per_sequence_s * r) * layers)
        if self._has_scan:
            fixed += lookup(self._scan_d_l, n)
        full = layers - self._local_layers  # the windowed layers' terms: decode_local
        return (fixed, self._dec_flop_per_pair * att.s_per_flop * full * share,
                (self._dec_q_bytes + self._dec_o_bytes * r) * att.s_per_byte * full,
                self._dec_kv_bytes_per_ctx * att.s_per_byte * full * share)

    def decode_local(self, num_decode: int) -> tuple[float, float, float, float] | None:
        """The windowed attention layers' part of a decode-only iteration of ``num_decode`` sequences, beside
        :meth:`decode_step`'s: ``(a, b, c, cap)``, adding ``((a * y)**4 + (b + c * y)**4)**0.25`` seconds with
        ``y = min(ctx, cap)`` (each sequence reads at most the window's cached tokens); None without such layers."""
        local = self._local_layers
        if not local:
            return None
        n, att = num_decode, self._att
        r = -(-n // self.dp) if self.dp > 1 else n
        share = r / n if n else 1.0
        return (self._dec_flop_per_pair * att.s_per_flop * local * share,
                (self._dec_q_bytes + self._dec_o_bytes * r) * att.s_per_byte * local,
                self._dec_kv_bytes_per_ctx * att.s_per_byte * local * share, float(n * (self.local_window or 1)))

    def decode_terms(self, num_decode: int) -> DecodeTerms:
        """What a decode-only iteration of ``num_decode`` sequences costs besides its decode attention's seconds
        (one stage on one GPU): ``(linear_s, comm_s, lm_head_s, cpu_s)``, which do not depend on its cached
        tokens (:meth:`decode_step`'s ``fixed_s`` is their sum plus the attention kernels' fixed cost; the rest
        of the iteration is decode attention), the linear layers' and LM head's dynamic energy (J), and the
        decode attention call's FLOPs and bytes with ``ctx`` cached tokens in total as ``flops_per_ctx * ctx``
        and ``bytes_fixed + bytes_per_ctx * ctx`` (:meth:`priced`'s, linear in ``ctx``), then the windowed layers'
        FLOPs and bytes per cached token and the most cached tokens they read (``min(ctx, cap)``)."""
        n = num_decode
        r = -(-n // self.dp) if self.dp > 1 else n
        share = r / n if n else 1.0
        lookup, layers = self._lookup, self.attention_layers_per_stage
        scan_s, scan_J = (lookup(self._scan_d_l, n), lookup(self._scan_d_J_l, n)) if self._has_scan else (0.0, 0.0)
        local = self._local_layers
        full = layers - local
        rank = r if self.dp > 1 else 0  # attention DP: the busiest rank's own tokens (rank tables)
        return (lookup(self._linear_l, n) + lookup(self._rank_l, rank) + scan_s, lookup(self._comm_l, n),
                lookup(self._head_l, r), self._cpu_fixed + self._cpu_per_seq * r,
                lookup(self._linear_J_l, n) + lookup(self._rank_J_l, rank) + lookup(self._head_J_l, r) + scan_J,
                self._dec_flop_per_pair * full * share, (self._dec_q_bytes + self._dec_o_bytes * r) * layers,
                self._dec_kv_bytes_per_ctx * full * share, self._dec_flop_per_pair * local * share,
                self._dec_kv_bytes_per_ctx * local * share, float(n * (self.local_window or 1)))

    def decode_times(self, num_decode: int, decode_context_tokens: np.ndarray) -> np.ndarray:
        """Seconds of consecutive decode-only iterations of the same ``num_decode`` sequences whose cached
        tokens total ``decode_context_tokens[i]`` in iteration ``i`` (vectorized :meth:`priced`)."""
        ctx = np.maximum(np.asarray(decode_context_tokens, dtype=float), 1.0)
        fixed, a, b, c = self.decode_step(num_decode)
        seconds = fixed + ((a * ctx) ** 4 + (b + c * ctx) ** 4) ** 0.25
        local = self.decode_local(num_decode)
        if local is not None:
            la, lb, lc, cap = local
            y = np.minimum(ctx, cap)
            seconds = seconds + ((la * y) ** 4 + (lb + lc * y) ** 4) ** 0.25
        return np.asarray(seconds, dtype=float)

    def vision(self, images: int) -> tuple[float, float]:
        """The vision tower (and projector) over ``images`` images, tensor-parallel like the LM, on one GPU:
        its seconds and its ops' dynamic energy (J)."""
        if images <= 0:
            return 0.0, 0.0
        hit = self._vision.get(images)
        if hit is None:
            if self.cfg.vision is None:
                raise ConfigError(f"{self.cfg.id} has no vision tower; images need a multimodal model "
                                  "(e.g. llava-1.5-7b)")
            g = Graph(self.dtype)
            build_vision_encoder(g, self.cfg.vision, images)
            ops = [o for o in shard_tp(list(g.ops), self.tp) if o.kind is not OpKind.COMM]
            priced = list(zip(ops, price_ops(ops, self.hw, self.co), strict=True))
            hit = (sum(k.time_s * o.count for o, k in priced), sum(k.dynamic_J * o.count for o, k in priced))
            self._vision[images] = hit
        return hit

    @property
    def image_tokens(self) -> int:
        """Text-sequence tokens one image becomes (0 without a vision tower)."""
        return self.cfg.vision.num_image_tokens if self.cfg.vision is not None else 0

    def check_fits(self, gpu_memory_utilization_frac: float) -> None:
        """Raise a one-line ConfigError when the weights alone do not fit the usable memory."""
        usable = self.hw.memory_bytes * gpu_memory_utilization_frac
        per_gpu = self.weight_bytes / self.pp
        if per_gpu >= usable:
            need = math.ceil(per_gpu / (self.hw.memory_bytes * gpu_memory_utilization_frac) * self.tp)
            raise ConfigError(
                f"{self.cfg.id} needs {per_gpu / 2**30:.1f} GiB of weights per GPU at tp={self.tp}, pp={self.pp}, "
                f"more than the {usable / 2**30:.1f} GiB usable on {self.hw.id}; use at least tp*pp={need}")


def weight_bytes_per_gpu(model: ModelConfig | str, *, tp: int = 1, dtype: DType = DType.BF16,
                         quantization: str | Quantization = "auto", attention_dp: bool = False) -> float:
    """Bytes of weights on one GPU of a ``tp``-way replica, every pipeline stage together (divide by ``pp``
    for one stage): every expert, quantized block weights, 16-bit embeddings and head. Under attention data
    parallelism only the routed experts are split over the GPUs; everything else is on each of them.

    ``quantization`` is ``auto`` (the checkpoint's own format: its group or block sizes), a scheme name (its
    generic format) or a resolved :class:`~perfcast.workload.quantization.Quantization`. MXFP4 quantizes
    only the routed experts' weights (their biases and every other layer stay in ``dtype``).
    """
    cfg = load_model(model)
    q = resolve_quantization(cfg, quantization)
    count = count_params(cfg)
    head = 0 if cfg.tie_word_embeddings else count.embedding  # an untied LM head is as large as the token table
    block = count.total - count.embedding - head
    outer = (count.embedding + head) * dtype.bytes
    if q.checkpoint is not None:
        per_param = q.checkpoint.bytes_per_weight(cfg.hidden_size)  # groups run along the input (hidden) axis
    else:
        qbytes = {"none": dtype.bytes, "w4a16": 0.5 + 2.0 / 128, "w8a16": 1.0 + 2.0 / 128, "w8a8": 1.0, "fp8": 1.0,
                  "fp4": 0.5 + 1.0 / 16, "mxfp4": 0.5 + 1.0 / 32}
        per_param = qbytes[q.scheme]
    routed = _routed_expert_params(cfg)
    if q.scheme == "mxfp4":  # the experts' weight matrices only
        weights = _routed_expert_params(cfg, biases=False)
        routed_bytes = weights * per_param + (routed - weights) * dtype.bytes
        rest = (block - routed) * dtype.bytes
    else:
        routed_bytes, rest = routed * per_param, (block - routed) * per_param
    if not attention_dp:
        if q.scheme == "mxfp4":
            return (routed_bytes + rest + outer) / tp
        return (block * per_param + outer) / tp
    return routed_bytes / tp + rest + outer


def _is_routed_expert(op: Op) -> bool:
    return ".experts." in op.name


def _expert_share(op: Op, ep: int) -> Op:
    """One GPU's share of a routed-expert op when ``ep`` GPUs split the experts: a grouped GEMM keeps
    ``ceil(groups / ep)`` of its active experts (each with its tokens), other ops ``1 / ep`` of their work."""
    if ep == 1:
        return op
    if op.kind is OpKind.GEMM and len(op.dims) == 4 and op.dims[0] > 1:
        g, m, k, n = op.dims
        mine = -(-g // ep)
        f = mine / g
        return op.with_(dims=(mine, m, k, n), flops=op.flops * f, bytes_read=op.bytes_read * f,
                        bytes_written=op.bytes_written * f, weight_bytes=op.weight_bytes * f)
    f = 1.0 / ep
    if op.kind is OpKind.VECTOR and len(op.dims) == 2:
        rows, cols = op.dims
        return op.with_(dims=(rows, max(1, cols // ep)), flops=op.flops * f, bytes_read=op.bytes_read * f,
                        bytes_written=op.bytes_written * f)
    return op.with_(flops=op.flops * f, bytes_read=op.bytes_read * f, bytes_written=op.bytes_written * f,
                    weight_bytes=op.weight_bytes * f)


def _routed_expert_params(cfg: ModelConfig, *, biases: bool = True) -> float:
    """Parameters of every routed expert of every MoE layer (0 for a dense model); ``biases=False``: their
    weight matrices only."""
    moe = cfg.moe
    if moe is None:
        return 0.0
    width = moe.expert_intermediate_size
    per = cfg.hidden_size * width * (3 if moe.gated else 2) + ((width * (2 if moe.gated else 1) + cfg.hidden_size)
                                                               if moe.expert_bias and biases else 0)
    return float(per * moe.num_experts * sum(moe.is_moe_layer(i) for i in range(cfg.num_layers)))


def _group_experts(ops: list[Op], *, separate_permute: bool = False) -> list[Op]:
    """Serving engines run a MoE layer's experts as grouped kernels (vLLM's fused_moe, TensorRT-LLM's MoE
    plugin): one GEMM launch per projection covers every active expert, each with its own weights and tokens.

    The builders emit one op per active expert (``count`` = layers x experts); here each becomes one op per
    layer whose leading GEMM dimension is the expert group (dims ``(experts, tokens, k, n)``: the kernel model
    prices tiles and weight traffic per group), and the pointwise kernels cover every expert's tokens at once.
    The weighted sum of the experts' outputs stays one kernel. The token permutation is a gather inside the
    grouped GEMM in vLLM's fused_moe (its Triton kernel reads each expert's rows through the sorted token
    ids), so it is dropped; TensorRT-LLM's CUTLASS MoE runner (``separate_permute``) copies every token's
    top-k rows into expert order in a kernel of its own (``expandInputRowsKernel``, which also quantizes
    them for FP8/FP4 GEMMs) before the first grouped GEMM, so the builder's ``permute`` stays.
    """
    layers: dict[str, int] = {}
    for op in ops:
        if ".router." in op.name:
            layers[op.name.split(".router.")[0]] = op.count
    out: list[Op] = []
    for op in ops:
        if op.name.endswith(".permute") and op.name.rsplit(".", 1)[0] in layers and not separate_permute:
            continue
        if ".experts." not in op.name:
            out.append(op)
            continue
        base = op.name.split(".experts.")[0]
        n_layers = layers.get(base, 0)
        if not n_layers or op.count % n_layers or op.count == n_layers:
            out.append(op)
            continue
        groups = op.count // n_layers
        if op.kind is OpKind.GEMM and op.op == "linear":
            _, m, k, n = op.dims
            out.append(op.with_(dims=(groups, m, k, n), count=n_layers, flops=op.flops * groups,
                                bytes_read=op.bytes_read * groups, bytes_written=op.bytes_written * groups,
                                weight_bytes=op.weight_bytes * groups))
        elif op.kind is OpKind.VECTOR:
            rows, cols = op.dims
            out.append(op.with_(dims=(rows, cols * groups), count=n_layers, flops=op.flops * groups,
                                bytes_read=op.bytes_read * groups, bytes_written=op.bytes_written * groups))
        else:
            out.append(op)
    return out


def _expert_quantize(ops: list[Op], *, fused: bool) -> list[Op]:
    """The quantize kernels of a MoE layer's grouped GEMMs (FP8/INT8/FP4 activations), as the engines run them.

    :func:`~perfcast.workload.transforms.quantize_weights` gives each GEMM a cast of its own input as if it
    were one expert's rows. ``fused`` (TensorRT-LLM's CUTLASS MoE runner) quantizes them inside its other
    kernels: the expand kernel (``permute``) writes every token's top-k rows in the first GEMM's input format
    and the gated activation writes the second GEMM's, so the casts go and those two kernels write the
    narrower rows (per element: the cast's output bytes over its input count). Otherwise (vLLM's fused_moe)
    the layer's hidden states are quantized once, per token, before the first GEMM gathers its rows from
    them, and the second GEMM's input (every routed row's intermediate, all experts) is quantized whole.
    """
    per_elem: dict[tuple[str, bool], float] = {}  # (MoE block, second GEMM) -> quantized bytes per element
    tokens: dict[str, tuple[int, int]] = {}  # MoE block -> (tokens, hidden) its router sees
    gemms = {op.name: op for op in ops if op.kind is OpKind.GEMM}
    for name, op in gemms.items():
        if name.endswith(".router.gate"):
            tokens[name.removesuffix(".router.gate")] = (op.dims[1], op.dims[2])
    out: list[Op] = []
    for op in ops:
        if not (".experts." in op.name and op.op == "cast" and op.kind is OpKind.VECTOR):
            out.append(op)
            continue
        block, proj = op.name.split(".experts.", 1)
        second = proj.startswith("down_proj")
        per = op.bytes_written / max(op.flops, 1.0)  # a cast's FLOPs count its elements
        per_elem[(block, second)] = per
        if fused:
            continue
        g, m, k, _ = gemms[op.name.rsplit(".", 1)[0]].dims
        t, h = tokens.get(block, (g * m, k))
        elems = g * m * k if second else t * h
        out.append(op.with_(dims=(1, elems), flops=float(elems), bytes_read=elems * op.bytes_read / max(op.flops, 1.0),
                            bytes_written=elems * per))
    if not fused:
        return out
    fused_out: list[Op] = []
    for op in out:
        block = op.name.rsplit(".", 1)[0]
        if op.name.endswith(".permute") and (block, False) in per_elem:
            op = op.with_(bytes_written=op.bytes_written / op.dtype.bytes * per_elem[(block, False)])
        elif op.name.endswith(".experts.act_and_mul"):
            act_per = per_elem.get((op.name.split(".experts.", 1)[0], True))
            if act_per is not None:
                op = op.with_(bytes_written=op.bytes_written / op.dtype.bytes * act_per)
        fused_out.append(op)
    return fused_out


def _shard(ops: list[Op], tp: int) -> list[Op]:
    """:func:`~perfcast.workload.sharding.shard_tp`, a Mamba scan split by its heads first (shard_tp does not
    split ``ssm_scan`` ops): ``heads / tp`` heads per GPU, the B/C groups split when ``tp`` divides them, else
    replicated (vLLM's Mamba-2 layers), FLOPs and bytes by the heads' share."""
    if tp > 1 and any(o.kind is OpKind.SSM_SCAN for o in ops):
        ops = [_shard_scan(o, tp) if o.kind is OpKind.SSM_SCAN else o for o in ops]
    return shard_tp(ops, tp)


def _shard_scan(op: Op, tp: int) -> Op:
    b, s, heads, p, n, groups, chunk = op.dims
    mine = max(1, heads // tp)
    f = mine / heads
    return op.with_(dims=(b, s, mine, p, n, groups // tp if groups % tp == 0 else groups, chunk),
                    flops=op.flops * f, bytes_read=op.bytes_read * f, bytes_written=op.bytes_written * f,
                    params=int(op.params * f), tp_split="none",
                    meta=tuple((k, v * f if k in ("matmul_flops", "output_flops", "state_bytes")
                                and isinstance(v, float) else v) for k, v in op.meta))


def _is_state_op(op: Op) -> bool:
    """A Mamba mixer's op that reads or writes a sequence's state: the scan and the causal conv1d."""
    return op.kind is OpKind.SSM_SCAN or op.op == "causal_conv1d"


def cfg_kv_dim(cfg: ModelConfig) -> int:
    """Elements of K (or V) cached per token per layer: kv heads x head dim."""
    return int(cfg.num_kv_heads * cfg.head_dim)
