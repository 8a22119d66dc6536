"""One GPU's share of a training micro-batch, priced per layer.

The micro-batch workload is built once (engine-style fused kernels,
FlashAttention), rewritten for the plan (LoRA, the precision recipe's quantized GEMMs and
quantize kernels, expert routing, context parallelism), differentiated, sharded for tensor parallelism, and priced by
the kernel layer. Ops are then grouped into *parts* by the scope that emitted
them (``embed``, each kind of transformer layer, ``head`` + ``loss``) and
summed per phase, so pipeline stages can be assembled from per-layer costs
without re-pricing anything; the cost of a plan does not grow with depth or
GPU count.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from perfcast.catalog.corrections import correct_compose
from perfcast.catalog.hardware import Hardware
from perfcast.catalog.models import ModelConfig
from perfcast.coefficients.compose import ComposeCoefficients
from perfcast.coefficients.kernel import Coefficients
from perfcast.digest import content_digest
from perfcast.dtypes import DType
from perfcast.kernel.energy import MATRIX_KINDS
from perfcast.kernel.legacy_mma import fa2_attention
from perfcast.kernel.predict import price_ops
from perfcast.kernel.types import KernelTime
from perfcast.system.plan import ParallelPlan
from perfcast.workload.backward import SavedActivations, backward_ops
from perfcast.workload.build import WorkloadSpec, build_workload
from perfcast.workload.models.decoder import num_mtp_layers
from perfcast.workload.precision import check_recipe_hardware, get_recipe, recipe_backward_ops, to_recipe
from perfcast.workload.sharding import shard_tp
from perfcast.workload.transforms import apply_lora, route_experts, shard_context
from perfcast.workload.types import Mode, Op, OpKind, Phase

__all__ = ["LayerCost", "MicroBatchCosts", "micro_batch_costs", "mtp_layers"]

_LOW_PRECISION = (DType.FP8, DType.FP4)  # GEMM datapaths the fitted fp8_gemm_efficiency applies to


@dataclass
class LayerCost:
    """Costs of one instance of a part (a layer, or the embedding / head) for one micro-batch on one GPU.

    Times in seconds; ``fwd_comm``/``bwd_comm`` map a collective (``tp_all_reduce``,
    ``ep_all_to_all``...) to ``[bytes, calls]`` one instance issues per phase. ``*_matrix_s`` is the kernel
    time of the matrix ops (GEMMs, attention, convolutions); ``*_matrix_J`` and ``*_other_J`` the dynamic
    energy the kernel layer priced for the matrix ops and the others (``KernelTime.dynamic_J``), joules.
    ``*_fp8_s`` is the kernel time of the GEMMs on a low-precision datapath (FP8 or FP4, the precision recipe's).
    """

    label: str
    count: int
    fwd_s: float = 0.0
    bwd_s: float = 0.0
    fwd_host_s: float = 0.0
    bwd_host_s: float = 0.0
    fwd_gemm_s: float = 0.0
    bwd_gemm_s: float = 0.0
    fwd_fp8_s: float = 0.0
    bwd_fp8_s: float = 0.0
    fwd_kernels: float = 0.0
    bwd_kernels: float = 0.0
    attention_fwd_s: float = 0.0
    fwd_flops: float = 0.0
    bwd_flops: float = 0.0
    fwd_comm: dict[str, list[float]] = field(default_factory=dict)
    bwd_comm: dict[str, list[float]] = field(default_factory=dict)
    params: float = 0.0
    trainable_params: float = 0.0
    expert_params: float = 0.0  # the trainable parameters of routed experts (sharded over the expert-DP group)
    weight_elements: float = 0.0
    quantized_weight_bytes: float = 0.0
    quantized_elements: float = 0.0
    attention_bwd_s: float = 0.0
    activation_bytes: float = 0.0
    input_bytes: float = 0.0
    routed_experts: int = 0  # an MoE layer's experts and the experts each token is routed to (for dispatch)
    experts_per_token: int = 0
    # Megatron's selective recompute modules (``recompute_modules``): forward seconds each re-runs and saved bytes
    # each drops, per layer (:func:`_recompute_modules`; combined by :meth:`selective_fwd_s` / ``_dropped_bytes``)
    module_fwd_s: dict[str, float] = field(default_factory=dict)
    module_saved_bytes: dict[str, float] = field(default_factory=dict)
    fwd_matrix_s: float = 0.0
    bwd_matrix_s: float = 0.0
    fwd_matrix_J: float = 0.0
    fwd_other_J: float = 0.0
    bwd_matrix_J: float = 0.0
    bwd_other_J: float = 0.0
    attention_fwd_J: float = 0.0
    moe_blocks: float = 0.0  # MoE blocks (routers) per instance: 1 in an MoE layer, the MTP's in the head
    attention_blocks: float = 0.0  # fused attention kernels per instance (forward)


    def _modules(self, modules: tuple[str, ...]) -> set[str]:
        chosen = set(modules)
        if "moe" in chosen:  # the whole MoE block holds its activation and shared experts
            chosen -= {"moe_act", "shared_experts"}
        return chosen

    def selective_fwd_s(self, modules: tuple[str, ...]) -> float:
        """Kernel seconds per layer that selective recompute of ``modules`` re-runs, core attention excepted
        (priced with the training attention scale by the step model)."""
        return sum(self.module_fwd_s.get(m, 0.0) for m in self._modules(modules) if m != "core_attn")

    def selective_dropped_bytes(self, modules: tuple[str, ...]) -> float:
        """Saved activation bytes per layer that selective recompute of ``modules`` does not keep."""
        return sum(self.module_saved_bytes.get(m, 0.0) for m in self._modules(modules))


@dataclass
class MicroBatchCosts:
    """Per-part costs in model order (``embed``, layer kinds, ``head``) and the model-FLOP convention.

    ``forward_flops_per_token`` is the forward's share of the model FLOPs (what a full recompute runs again);
    ``causal_flops_per_token`` the model FLOPs as Megatron-LM's current count has them (:func:`_model_flops`)."""

    parts: list[LayerCost]
    tokens: int
    model_flops_per_token: float
    attention_flops_per_token: float
    hidden_bytes: float
    forward_flops_per_token: float
    causal_flops_per_token: float

    def part(self, label: str) -> LayerCost | None:
        """The part with this label, if any."""
        for p in self.parts:
            if p.label == label:
                return p
        return None

    @property
    def layers(self) -> list[LayerCost]:
        """The transformer-layer parts (not embedding or head)."""
        return [p for p in self.parts if p.label not in ("embed", "head")]


def _label(op: Op) -> str:
    first = op.name.split(".", 1)[0]
    if first in ("head", "loss", "optimizer"):
        return "head"
    return first


class ModelFlops(NamedTuple):
    """A micro-batch's FLOP counts per token (see :func:`_model_flops`)."""

    model: float  # Megatron's 2021 convention: 3 x (matmuls + attention over the whole score matrix)
    attention: float  # its attention part
    forward: float  # the forward's share (what a full recompute runs again)
    causal: float  # Megatron-LM's current count (Megatron-Bridge's TFLOP/s)


def _model_flops(forward: list[Op], tokens: int, seq_len: int, swiglu: bool) -> ModelFlops:
    """Model FLOPs per token in two conventions, in one walk over the forward's ops.

    ``model``: Megatron's convention: 3 x (matmul FLOPs + non-causal attention FLOPs) of the forward (forward,
    input gradient, weight gradient). Convolutions count as matmuls, so a CNN's model FLOPs are the usual 3 x
    forward FLOPs per image. A frozen weight (LoRA's base) gets no weight gradient, so its matmuls count
    2 x their forward FLOPs (the adapters, trainable, 3 x): the convention of litgpt's ``estimate_flops``
    (Lightning-AI/litgpt ``litgpt/utils.py``: trainable parameters 3 x, frozen ones 2 x), which is the
    matmul FLOPs a LoRA step executes.

    ``causal``: Megatron-LM's ``num_floating_point_operations`` since 2025 (the count of Megatron-Bridge's
    "Model TFLOP/sec/GPU"): 3 x the forward's matmuls, and attention over the whole sequence (``seq_len``)
    with the causal mask's half of the score matrix (``/ 2  # causal mask``), sliding windows ignored; a gated
    MLP counts its gate only when it is a SwiGLU (``gated_linear_multiplier = 3/2 if args.swiglu else 1``),
    so a GLU of another activation counts as a two-matrix MLP. On the published Megatron-Bridge rows this
    reproduces the ratio of TFLOP/s to tokens/s to 0.5% (Llama 3, Qwen3 MoE, GPT-OSS)."""
    matmul = frozen = bmm = scores = causal_scores = ungated = 0.0
    for op in forward:
        if op.kind is OpKind.GEMM and op.op == "linear":
            b, m, k, n = op.dims
            flops = 2.0 * b * m * k * n * op.count
            if op.get("frozen", False):
                frozen += flops
            else:
                matmul += flops
            leaf = op.name.rsplit(".", 1)[-1]
            if not swiglu and leaf in ("gate_proj", "gate_up_proj"):  # the gate Megatron does not count
                ungated += flops if leaf == "gate_proj" else 0.5 * flops
        elif op.kind is OpKind.CONV:  # a convolution is a matmul over its im2col view
            matmul += op.flops * op.count
        elif op.kind is OpKind.GEMM and op.op == "bmm":
            b, m, k, n = op.dims
            bmm += 2.0 * b * m * k * n * op.count
        elif op.kind is OpKind.ATTENTION:
            b, h, _, q, kv, d, _ = op.dims
            vd = float(op.get("v_head_dim", d) or d)  # type: ignore[arg-type]
            scores += 2.0 * b * h * q * kv * (d + vd) * op.count
            causal_scores += 2.0 * b * h * q * (seq_len / 2.0) * (d + vd) * op.count
    attention = bmm + scores
    causal = 3.0 * (matmul + frozen - ungated + bmm + causal_scores) / tokens
    if frozen:
        return ModelFlops((3.0 * (matmul + attention) + 2.0 * frozen) / tokens, 3.0 * attention / tokens,
                          (matmul + frozen + attention) / tokens, causal)
    mf = 3.0 * (matmul + attention) / tokens
    return ModelFlops(mf, 3.0 * attention / tokens, mf / 3.0, causal)


def _swiglu(cfg: ModelConfig) -> bool:
    """Whether the model's gated MLP is a SwiGLU as Megatron names it (``--swiglu``). GPT-OSS's Hugging Face
    config says ``silu``, but its gate is x * sigmoid(1.702 x) (a quick-GELU, clamped, times up + 1), which
    Megatron runs as ``quick_gelu`` with ``gated_linear_unit`` and not as ``swiglu``."""
    return cfg.activation == "silu" and cfg.model_type != "gpt_oss"


# per the contents of the model, device and coefficients, and the plan's fields the costs depend on
_CACHE: dict[tuple[object, ...], MicroBatchCosts] = {}


def micro_batch_costs(cfg: ModelConfig, plan: ParallelPlan, hw: Hardware, coeffs: Coefficients,
                      compose: ComposeCoefficients, *, forward: tuple[Op, ...] | None = None) -> MicroBatchCosts:
    """Price one micro-batch of ``plan`` on one GPU of ``hw``, per part and phase (memoized).

    ``forward``: the micro-batch's forward ops as given (a captured model, :mod:`perfcast.capture`) instead
    of built from ``cfg``; names start with the part label (``embed``, ``layers``, ``head``) and repeated
    layers carry their ``count``. Not memoized.
    """
    check_recipe_hardware(get_recipe(plan.precision), hw)
    if forward is not None:
        return _price(cfg, plan, hw, coeffs, compose, forward)
    key = (content_digest(cfg), content_digest(hw), content_digest(coeffs), content_digest(compose), plan.tp,
           plan.cp, plan.cp_kind, plan.ep, plan.etp, plan.sp, plan.micro_batch, plan.seq_len, plan.precision,
           plan.lora_rank, plan.lora_targets, plan.qlora, plan.moe_skew, plan.moe_capacity_factor,
           plan.moe_grouped_gemm, plan.mtp_layers, plan.framework, plan.fused_kernels, plan.attention_kernels)
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    costs = _price(cfg, plan, hw, coeffs, compose)
    if len(_CACHE) > 512:
        _CACHE.clear()
    _CACHE[key] = costs
    return costs


def _forward_ops(cfg: ModelConfig, plan: ParallelPlan,
                 given: tuple[Op, ...] | None = None) -> tuple[list[Op], list[Op], int]:
    """The micro-batch's forward ops after the plan's rewrites, those before routing, and its tokens per GPU."""
    local_seq = plan.seq_len // plan.cp
    recipe = get_recipe(plan.precision)
    if given is not None:  # a captured forward: only the precision recipe applies (the caller refuses cp, LoRA
        # and experts)
        ops = to_recipe(list(given), recipe)
        return ops, list(given), plan.micro_batch * (1 if cfg.kind == "cnn" else local_seq)
    # plain PyTorch model code run eagerly launches one kernel per line of its norms, RoPE and gated
    # activation (the Hugging Face layout); fused kernels or a compiler run them as one kernel each
    style = "hf" if plan.framework == "eager" and not plan.fused_kernels else "engine"
    spec = WorkloadSpec(Mode.TRAINING, plan.micro_batch, local_seq, dtype=recipe.activation_dtype,
                        style=style, attention="flash", optimizer="none", loss=True, mtp_layers=mtp_layers(cfg, plan))
    wl = build_workload(cfg, spec)
    forward = list(wl.phase(Phase.FORWARD))
    forward = shard_context(forward, plan.cp)
    if plan.lora_rank:
        q_dim, kv_dim = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
        ff = cfg.intermediate_size
        fused = {"qkv_proj": {"q": q_dim, "k": kv_dim, "v": kv_dim}, "gate_up_proj": {"gate": ff, "up": ff}}
        forward = apply_lora(forward, plan.lora_rank, plan.lora_targets, qlora=plan.qlora, fused=fused)
    # the model-FLOP convention counts the model (with its adapters and frozen weights), before the precision
    # recipe's quantize kernels and the expert routing of this GPU
    convention = list(forward)
    forward = to_recipe(forward, recipe)
    if cfg.moe is not None:
        whole = plan.etp == 1 and plan.tp > 1  # whole experts: each TP rank routes its sequence-parallel share
        forward = route_experts(forward, cfg.moe.num_experts, cfg.moe.experts_per_token, ep=plan.ep,
                                skew=plan.moe_skew, capacity_factor=plan.moe_capacity_factor,
                                token_split=plan.tp if whole else 1, grouped=plan.moe_grouped_gemm)
    # a CNN's seq_len is its image side: its FLOPs and throughput count images, not tokens
    return forward, convention, plan.micro_batch * (1 if cfg.kind == "cnn" else local_seq)


def mtp_layers(cfg: ModelConfig, plan: ParallelPlan) -> int:
    """Multi-token-prediction layers the plan trains: its ``mtp_layers``, else the config's
    ``num_nextn_predict_layers`` (attention decoders only; a model the generic decoder builder does not build
    trains none unless asked, which is refused)."""
    if plan.mtp_layers is not None:
        return plan.mtp_layers
    if cfg.kind != "decoder" or cfg.ssm is not None or cfg.linear_attention is not None:
        return 0
    return num_mtp_layers(cfg)


def _sequence_parallel(ops: list[Op], tp: int) -> list[Op]:
    """Sequence parallelism: the replicated norm / dropout / residual kernels run on ``1/tp`` of the tokens (in
    the layers, and in the MTP modules' blocks the head part carries)."""
    out = []
    for op in ops:
        mtp_block = op.name.startswith("head.mtp.") and not op.name.startswith("head.mtp.loss.")
        if op.kind is OpKind.VECTOR and op.tp_split == "none" and (_label(op) != "head" or mtp_block):
            f = 1.0 / tp
            rows, cols = op.dims
            dims = (max(1, rows // tp), cols) if rows > 1 else (rows, max(1, cols // tp))
            op = op.with_(dims=dims, flops=op.flops * f, bytes_read=op.bytes_read * f,
                          bytes_written=op.bytes_written * f,
                          fused_bytes=None if op.fused_bytes is None else op.fused_bytes * f)
        out.append(op)
    return out


def _price(cfg: ModelConfig, plan: ParallelPlan, hw: Hardware, coeffs: Coefficients,
           compose: ComposeCoefficients, given: tuple[Op, ...] | None = None) -> MicroBatchCosts:
    """One micro-batch's forward and backward ops after the plan's rewrites, priced and summed per part."""
    forward, convention, tokens = _forward_ops(cfg, plan, given)
    flops = _model_flops(convention, tokens, plan.seq_len, _swiglu(cfg))
    ops = forward + backward_ops(forward) + recipe_backward_ops(forward, get_recipe(plan.precision))
    ops = shard_tp(ops, plan.tp)
    if plan.sp and plan.tp > 1:
        ops = _sequence_parallel(ops, plan.tp)
    priced = [o for o in ops if o.kind is not OpKind.COMM]
    kernels = price_ops(priced, hw, coeffs)
    if plan.attention_kernels == "fa2":
        kernels = fa2_attention(priced, kernels, hw, coeffs)
    host = correct_compose(compose, hw.corrections).host
    launch_s = {"eager": host.autograd_op_s, "compiled": host.compiled_op_s, "graph": 0.0}[plan.framework]
    parts = _sum_parts(ops, kernels, plan, launch_s)
    e = get_recipe(plan.precision).activation_dtype.bytes
    local_tokens = tokens // (plan.tp if plan.sp and plan.tp > 1 else 1)
    hidden = local_tokens * cfg.hidden_size * e
    for part in parts.values():
        part.input_bytes = hidden
    ordered = [parts["embed"]] if "embed" in parts else []
    ordered += [p for lbl, p in parts.items() if lbl not in ("embed", "head")]
    if "head" in parts:
        ordered.append(parts["head"])
    _add_parallel_comm(ordered, cfg, plan, tokens, e)
    return MicroBatchCosts(parts=ordered, tokens=tokens, model_flops_per_token=flops.model,
                           attention_flops_per_token=flops.attention, hidden_bytes=hidden,
                           forward_flops_per_token=flops.forward, causal_flops_per_token=flops.causal)


def _sum_parts(ops: list[Op], kernels: list[KernelTime], plan: ParallelPlan,
               launch_s: float) -> dict[str, LayerCost]:
    """Each part's (``embed``, each kind of layer, ``head``) sums over one of its layers: kernel seconds and
    joules by phase and class, host launches (``launch_s`` per kernel), FLOPs, saved activations, parameters;
    ``kernels`` prices the ops that are not communication, in order."""
    parts: dict[str, LayerCost] = {}
    layer_counts: dict[str, int] = {}
    for op in ops:
        label = _label(op)
        if label not in ("embed", "head") and ".experts." not in op.name:
            layer_counts[label] = min(layer_counts.get(label, op.count), op.count)
    it = iter(kernels)
    saved = SavedActivations(sequence_parallel=plan.tp if plan.sp else 1)
    moe_scopes = {op.name.rsplit(".router.", 1)[0] for op in ops if ".router." in op.name}
    previous: Op | None = None
    for op in ops:
        label = _label(op)
        n = 1 if label in ("embed", "head") else layer_counts.get(label, op.count)
        part = parts.get(label)
        if part is None:
            part = parts[label] = LayerCost(label=label, count=n)
        per = op.count / n  # instances of this op per layer
        fwd = op.phase is Phase.FORWARD
        if op.kind is OpKind.COMM:
            kind = "tp_reduce_scatter+all_gather" if plan.sp else f"tp_{op.op}"
            entry = (part.fwd_comm if fwd else part.bwd_comm).setdefault(kind, [0.0, 0.0])
            entry[0] += op.bytes_read * per
            entry[1] += per
            continue
        kt = next(it)
        if fwd:
            before = part.activation_bytes
            _add_forward(part, op, kt.time_s * per, kt.dynamic_J * per, per, launch_s, saved)
            if label not in ("embed", "head") and op.op not in _PRECISION_KERNELS:
                _recompute_modules(part, op, previous, moe_scopes, kt.time_s * per, part.activation_bytes - before)
                previous = op
        else:
            _add_backward(part, op, kt.time_s * per, kt.dynamic_J * per, per, launch_s)
    return parts


_PRECISION_KERNELS = ("cast", "amax", "quantize")  # a recipe's kernels before a GEMM re-run with it, not on their own
_ACTIVATIONS = ("silu", "gelu", "relu", "relu2", "tanh", "sigmoid")  # alone or gated (``silu_mul``)
_LAYER_NORMS = ("input_layernorm", "post_attention_layernorm", "pre_mlp_layernorm", "pre_feedforward_layernorm")
_BLOCK_EDGES = _LAYER_NORMS + ("residual",)  # a block's norm runs before it, its residual add after it


def _recompute_modules(part: LayerCost, op: Op, previous: Op | None, moe_scopes: set[str], t: float,
                       saved_bytes: float) -> None:
    """Book forward op ``op`` (``t`` s per layer, keeping ``saved_bytes``) under Megatron's selective
    recompute modules (``--recompute-modules``), as they re-run it and drop what it keeps:

    - ``core_attn``: the attention kernel (FlashAttention keeps q, k and v, the module's checkpoint: no bytes);
    - ``layernorm``: the layers' input / pre-MLP norms; the linear after one keeps their output, dropped;
    - ``moe_act``: the experts' activation; the expert GEMM after it keeps its output, dropped;
    - ``shared_experts``, ``mlp`` (a dense MLP), ``moe`` (the MoE block: router, permutation, experts, shared
      experts): every op of the block re-runs, and all it keeps but the block's input is dropped.
    """
    leaf = op.name.rsplit(".", 1)[-1]

    def book(module: str, seconds: float, dropped: float) -> None:
        part.module_fwd_s[module] = part.module_fwd_s.get(module, 0.0) + seconds
        part.module_saved_bytes[module] = part.module_saved_bytes.get(module, 0.0) + dropped

    prev_leaf = previous.name.rsplit(".", 1)[-1] if previous is not None else ""
    if op.kind is OpKind.ATTENTION:
        book("core_attn", t, 0.0)
    elif op.kind is OpKind.VECTOR and leaf in _LAYER_NORMS:
        book("layernorm", t, 0.0)
    if op.kind is OpKind.GEMM and prev_leaf in _LAYER_NORMS:
        book("layernorm", 0.0, saved_bytes)
    if ".experts." in op.name and op.kind is OpKind.VECTOR and op.op.removesuffix("_mul") in _ACTIVATIONS:
        book("moe_act", t, 0.0)
    elif (".experts." in op.name and op.kind is OpKind.GEMM and previous is not None
          and ".experts." in previous.name and previous.op.removesuffix("_mul") in _ACTIVATIONS):
        book("moe_act", 0.0, saved_bytes)
    if leaf in _BLOCK_EDGES:
        return
    scope = next((s for s in moe_scopes if op.name.startswith(s + ".")), None)
    block = "moe" if scope is not None else "mlp" if ".mlp." in op.name else ""
    for module, inside in ((block, bool(block)), ("shared_experts", ".shared_expert" in op.name)):
        if not inside:
            continue
        first = module not in part.module_fwd_s  # the block's first op keeps its input: the checkpoint
        book(module, t, 0.0 if first else saved_bytes)


def _add_forward(part: LayerCost, op: Op, t: float, joules: float, per: float, launch_s: float,
                 saved: SavedActivations) -> None:
    """Add forward op ``op`` (``per`` instances per layer, ``t`` s and ``joules`` J of them) to ``part``: its
    time by class, launches, FLOPs, the activations it saves for the backward and the parameters it holds."""
    if op.kind in MATRIX_KINDS:
        part.fwd_matrix_s += t
        part.fwd_matrix_J += joules
    else:
        part.fwd_other_J += joules
    part.fwd_s += t
    part.fwd_kernels += per
    part.fwd_host_s += launch_s * per
    part.fwd_flops += op.flops * per
    if op.kind is OpKind.GEMM and op.dtype in _LOW_PRECISION:
        part.fwd_fp8_s += t
    if op.kind is OpKind.GEMM:
        part.fwd_gemm_s += t
    if op.kind is OpKind.ATTENTION:
        part.attention_fwd_s += t
        part.attention_fwd_J += joules
        part.attention_blocks += per
    if op.name.endswith(".router.gate"):
        part.moe_blocks += per
    part.activation_bytes += saved.add(op) * per
    if op.kind is OpKind.GEMM and op.op == "linear" and not op.get("tied", False):
        groups, _, k, nn = op.dims  # a grouped GEMM (MoE experts) holds one weight per group
        stored = groups * (k * nn + (nn if op.get("bias", False) else 0))
        part.weight_elements += stored * per
        part.params += stored * per
    elif op.kind is OpKind.EMBEDDING:
        part.weight_elements += op.weight_bytes / op.dtype.bytes * per
        part.params += op.weight_bytes / op.dtype.bytes * per
    elif op.kind is OpKind.VECTOR and op.params:
        part.weight_elements += op.params * per
        part.params += op.params * per
    if op.op == "dequantize":
        part.quantized_weight_bytes += float(op.get("stored_weight_bytes", 0.0)) * per  # type: ignore[arg-type]
        part.quantized_elements += op.dims[1] * per
    part.trainable_params += op.params * per
    if ".experts." in op.name:
        part.expert_params += op.params * per


def _add_backward(part: LayerCost, op: Op, t: float, joules: float, per: float, launch_s: float) -> None:
    """Add backward op ``op`` (``per`` instances per layer, ``t`` s and ``joules`` J of them) to ``part``."""
    if op.kind in MATRIX_KINDS:
        part.bwd_matrix_s += t
        part.bwd_matrix_J += joules
    else:
        part.bwd_other_J += joules
    part.bwd_s += t
    part.bwd_kernels += per
    if op.kind is OpKind.GEMM and op.dtype in _LOW_PRECISION:
        part.bwd_fp8_s += t
    part.bwd_host_s += launch_s * per
    part.bwd_flops += op.flops * per
    if op.kind is OpKind.GEMM:
        part.bwd_gemm_s += t
    if op.kind is OpKind.ATTENTION:
        part.attention_bwd_s += t


def _add_parallel_comm(ordered: list[LayerCost], cfg: ModelConfig, plan: ParallelPlan, tokens: int,
                       e: float) -> None:
    """The expert- and context-parallel traffic of each layer part (bytes, calls; ``e`` bytes per element)."""
    # EP all-to-all: dispatch and combine per MoE block (an MoE layer's, the MTP layers' in the head), the
    # tokens x top-k hidden vectors
    if cfg.moe is not None and plan.ep > 1:
        routed = tokens * cfg.moe.experts_per_token * cfg.hidden_size * e / (plan.tp if plan.sp else 1)
        for part in ordered:
            if part.moe_blocks:
                n = part.moe_blocks
                part.fwd_comm["ep_all_to_all"] = [2.0 * routed * n, 2.0 * n]
                part.bwd_comm["ep_all_to_all"] = [2.0 * routed * n, 2.0 * n]
                part.routed_experts, part.experts_per_token = cfg.moe.num_experts, cfg.moe.experts_per_token
    # CP: ring attention passes K/V blocks (forward) and K/V + their gradients (backward) cp-1 times;
    # Ulysses regroups q, k, v and the output by all-to-all; per layer, and per MTP layer in the head
    if plan.cp > 1:
        kv = tokens * 2 * cfg.num_kv_heads * cfg.head_dim * e / plan.tp
        qo = tokens * 2 * cfg.num_heads * cfg.head_dim * e / plan.tp
        for part in ordered:
            if part.label == "embed" or (part.label == "head" and not part.attention_blocks):
                continue
            n = part.attention_blocks if part.label == "head" else 1.0
            if plan.cp_kind == "ring":
                part.fwd_comm["cp_ring_send_recv"] = [kv * (plan.cp - 1) * n, (plan.cp - 1.0) * n]
                part.bwd_comm["cp_ring_send_recv"] = [2 * kv * (plan.cp - 1) * n, (plan.cp - 1.0) * n]
            else:
                part.fwd_comm["cp_all_to_all"] = [(kv + qo) * n, 4.0 * n]
                part.bwd_comm["cp_all_to_all"] = [(kv + qo) * n, 4.0 * n]
