"""Training-time rewrites of a forward op list (before the backward pass is derived from it).

Each function takes forward ops and returns new forward ops; ``backward_ops``
then derives the matching gradients, so a frozen weight loses its weight
gradient and an adapter gains one without any special case downstream.

- :func:`to_fp8`: Transformer-Engine style FP8 training: the linear layers of
  the transformer blocks run FP8 GEMMs (inputs and weights cast with a
  per-tensor scale); embeddings, the LM head, attention and everything else
  stay in the activation dtype.
- :func:`apply_lora`: LoRA fine-tuning: the base weights are frozen, each
  targeted linear layer gains a rank-``r`` adapter (``x @ A @ B``, trainable);
  QLoRA stores the frozen base in 4 bits and dequantizes it before each GEMM.
- :func:`shard_context`: context parallelism: each GPU keeps ``seq/cp`` tokens
  of every sequence; attention still covers the whole causal sequence (ring
  attention passes K/V blocks around, Ulysses regroups heads), so each GPU
  does ``1/cp`` of the attention work against ``seq`` keys.
- :func:`quantize_weights`: inference-time quantization of the transformer blocks'
  linear layers: weight-only (W4A16, W8A16, MXFP4 experts, FP8 or NVFP4 on GPUs
  without FP8 or FP4 math: narrower weights streamed into a 16-bit GEMM), W8A8 (INT8 GEMMs on
  per-token quantized activations), FP8 or FP4 (:mod:`perfcast.workload.quantization`
  says which scheme a run uses).
- :func:`route_experts`: expert parallelism and routing skew for MoE layers: a
  GPU runs its ``E/ep`` local experts over the tokens all ``ep`` ranks route to
  them; the busiest expert (which paces the layer) gets ``1 + skew`` times the
  mean load, capped by the capacity factor when one is set.
"""

from __future__ import annotations

from dataclasses import replace

from perfcast.dtypes import DType
from perfcast.workload.graph import causal_pairs, reachable_keys
from perfcast.workload.precision import RECIPES, to_recipe
from perfcast.workload.quantization import QUANTIZATION_SCHEMES, Quantization
from perfcast.workload.types import Op, OpKind

__all__ = ["QUANTIZATION_SCHEMES", "apply_lora", "lora_target_names", "quantize_weights", "route_experts",
           "shard_context", "to_fp8"]

# LoRA target names (PEFT's) -> the fused projections an engine-style graph uses
_LORA_ALIASES: dict[str, tuple[str, ...]] = {
    "q": ("q_proj", "qkv_proj", "q_b_proj"), "k": ("k_proj", "qkv_proj"), "v": ("v_proj", "qkv_proj"),
    "o": ("o_proj",), "gate": ("gate_proj", "gate_up_proj"), "up": ("up_proj", "gate_up_proj", "fc1"),
    "down": ("down_proj", "fc2"),
}


def _in_blocks(op: Op) -> bool:
    return op.name.startswith(("layers", "moe_layers"))


def to_fp8(ops: list[Op] | tuple[Op, ...]) -> list[Op]:
    """FP8 GEMMs for the transformer blocks' linear layers, with the casts they need (the ``fp8`` recipe of
    :mod:`perfcast.workload.precision`: per-tensor delayed scaling).

    Each FP8 linear layer reads an FP8 copy of its input (a cast kernel; in the
    backward the output gradient is cast likewise). Weights are cast once per
    step and cached across micro-batches, a cost left out.
    """
    return to_recipe(ops, RECIPES["fp8"])


_WEIGHT_DTYPES = {"w4a16": DType.INT4, "w8a16": DType.INT8, "mxfp4": DType.FP4, "fp8": DType.FP8, "fp4": DType.FP4}
_GROUP_SIZE = 128  # generic weight-only schemes keep one 16-bit scale per 128 weights (GPTQ/AWQ group size)
_MX_BYTES = 0.5 + 1.0 / 32  # MXFP4: 4-bit values + one 8-bit (E8M0) scale per 32
_NVFP4_BYTES = 0.5 + 1.0 / 16  # NVFP4: 4-bit values + one 8-bit (E4M3) scale per 16
# generic storage bytes per weight of the weight-only schemes (a checkpoint's own format may differ)
_GENERIC_WEIGHT_BYTES = {"w4a16": 0.5 + 2.0 / _GROUP_SIZE, "w8a16": 1.0 + 2.0 / _GROUP_SIZE, "mxfp4": _MX_BYTES,
                         "fp8": 1.0, "fp4": _NVFP4_BYTES}


def _generic(scheme: str) -> Quantization:
    if scheme not in QUANTIZATION_SCHEMES:
        raise ValueError(f"unknown quantization {scheme!r}; use one of {', '.join(QUANTIZATION_SCHEMES)}")
    return Quantization(scheme=scheme, weight_only=scheme in ("w4a16", "w8a16", "mxfp4"))


def _quantized(op: Op, q: Quantization) -> bool:
    """Whether ``op`` is a linear layer the scheme quantizes: the blocks' (MXFP4: the MoE experts') but routers."""
    if not (op.kind is OpKind.GEMM and op.op == "linear" and _in_blocks(op) and ".router." not in op.name):
        return False
    return ".experts." in op.name if q.scheme == "mxfp4" else True


def _stored_weight_bytes(op: Op, q: Quantization, per_weight: float) -> float:
    """Bytes of ``op``'s stored weights at ``per_weight`` bytes per element (its bias stays in 16 bits)."""
    g, _, k, n = op.dims
    bias = max(0.0, op.weight_bytes - g * k * n * op.dtype.bytes)
    return g * k * n * per_weight + bias


def quantize_weights(ops: list[Op] | tuple[Op, ...], scheme: str | Quantization) -> list[Op]:
    """The blocks' linear layers under a quantization ``scheme`` (a QUANTIZATION_SCHEMES name, or a resolved
    :class:`~perfcast.workload.quantization.Quantization` carrying a checkpoint's own format).

    Weight-only runs (``w4a16``, ``w8a16``, ``mxfp4`` on the MoE experts, ``fp8`` on a GPU without FP8
    math, ``fp4`` on a GPU without FP4 math) keep 16-bit activations and GEMM math and stream the narrower
    weights with their scales;
    ``w8a8`` runs INT8 GEMMs after a per-token quantization kernel on each input; ``fp8`` runs FP8
    GEMMs the same way; ``fp4`` (NVFP4) runs FP4 GEMMs on 4-bit weights and activations with one 8-bit
    scale per 16 elements. Embeddings, the LM head, attention and MoE routers keep the activation dtype
    (and MXFP4 leaves every layer but the experts in it). ``weight_bytes`` of a quantized op is its stored
    weights: data, scales and zero points (the checkpoint's group or block size when it has one).
    """
    q = scheme if isinstance(scheme, Quantization) else _generic(scheme)
    if q.scheme == "none":
        return list(ops)
    ckpt = q.checkpoint
    if q.scheme == "fp8" and not q.weight_only:
        cast = to_fp8(ops)
        if ckpt is None or ckpt.weight_block_size is None:
            return cast
        # block-scaled FP8 (DeepSeek-V3): one fp32 scale per block adds to the stored weights
        fixed: list[Op] = []
        for op in cast:
            if op.kind is OpKind.GEMM and op.dtype is DType.FP8 and op.weight_bytes:
                weight = op.dims[0] * op.dims[2] * op.dims[3] * ckpt.bytes_per_weight(op.dims[2])
                op = op.with_(bytes_read=op.bytes_read - op.weight_bytes + weight, weight_bytes=weight)
            fixed.append(op)
        return fixed
    out: list[Op] = []
    for op in ops:
        if not _quantized(op, q):
            out.append(op)
            continue
        _, m, k, n = op.dims
        e = op.dtype.bytes
        if q.weight_only:
            w = _WEIGHT_DTYPES[q.scheme]
            per = ckpt.bytes_per_weight(k) if ckpt is not None else _GENERIC_WEIGHT_BYTES[q.scheme]
            if ckpt is None and q.scheme in ("w4a16", "w8a16"):
                weight = op.dims[0] * k * n * per  # generic integer schemes count bias-free weights (every expert
                # of a grouped GEMM: dims[0])
            else:
                weight = _stored_weight_bytes(op, q, per)
            meta = tuple((key, w.value if key == "weight_dtype" else v) for key, v in op.meta)
            out.append(op.with_(bytes_read=op.bytes_read - op.weight_bytes + weight, weight_bytes=weight, meta=meta))
            continue
        low = DType.FP4 if q.scheme == "fp4" else DType.INT8
        per = (ckpt.bytes_per_weight(k) if ckpt is not None else _NVFP4_BYTES) if low is DType.FP4 else low.bytes
        act = m * k  # quantize the input per token (per block for fp4), then a low-precision GEMM
        out.append(Op(name=f"{op.name}.quantize_{low.value}", op="cast", kind=OpKind.VECTOR, dims=(1, act),
                      dtype=op.dtype, flops=float(act), bytes_read=act * e, bytes_written=act * per,
                      count=op.count, phase=op.phase, group=op.group,
                      tp_split="column" if op.tp_split == "row" else "none", meta=(("inputs", 1), ("outputs", 1))))
        meta = tuple((key, low.value if key == "weight_dtype" else v) for key, v in op.meta)
        out.append(op.with_(dtype=low, bytes_read=op.bytes_read * per / e, weight_bytes=op.weight_bytes * per / e,
                            meta=meta))
    return out


def lora_target_names(targets: tuple[str, ...] | list[str]) -> set[str]:
    """Projection names (as the graph builders name them) that LoRA targets like ``q``/``v`` cover."""
    names: set[str] = set()
    for t in targets:
        key = t.removesuffix("_proj")
        names.update(_LORA_ALIASES.get(key, (t,)))
    return names


def apply_lora(ops: list[Op] | tuple[Op, ...], rank: int, targets: tuple[str, ...] | list[str], *,
               qlora: bool = False, fused: dict[str, dict[str, int]] | None = None) -> list[Op]:
    """Freeze every parameter and add rank-``rank`` adapters to the targeted linear layers.

    ``fused`` maps a fused projection to its parts' output widths (``qkv_proj``:
    ``{"q": 4096, "k": 1024, "v": 1024}``); each targeted part gets its own
    adapter, as PEFT attaches them to separate projections. With ``qlora`` the
    frozen block weights are stored in 4 bits (NF4, one scale per 64 weights)
    and dequantized to the activation dtype before each GEMM.
    """
    wanted = {t.removesuffix("_proj") for t in targets}
    names = lora_target_names(targets)
    out: list[Op] = []
    for op in ops:
        frozen = op.with_(params=0, meta=_set(op.meta, "frozen", True)) if (op.params or op.get("tied")) else op
        if op.kind is not OpKind.GEMM or op.op != "linear":
            out.append(frozen)
            continue
        _, m, k, n = op.dims
        e = op.dtype.bytes
        if qlora and _in_blocks(op):
            packed = k * n * (0.5 + 4.0 / 64)  # 4-bit codes + fp32 absmax per block of 64
            out.append(Op(name=f"{op.name}.dequant_nf4", op="dequantize", kind=OpKind.VECTOR, dims=(1, k * n),
                          dtype=op.dtype, flops=2.0 * k * n, bytes_read=packed, bytes_written=float(k * n * e),
                          count=op.count, phase=op.phase, group=op.group, tp_split="column",
                          meta=(("inputs", 1), ("outputs", 1), ("stored_weight_bytes", packed))))
        out.append(frozen)
        leaf = op.name.rsplit(".", 1)[-1]
        if leaf not in names:
            continue
        parts = (fused or {}).get(leaf)
        widths = [w for part, w in parts.items() if part in wanted] if parts else [n]
        for i, width in enumerate(widths):
            out.extend(_adapter(op, f"lora{i}" if len(widths) > 1 else "lora", m, k, width, rank))
    return out


def _adapter(op: Op, name: str, m: int, k: int, n: int, rank: int) -> list[Op]:
    """A LoRA adapter beside ``op``: down-projection A (k -> r), up-projection B (r -> n) added to the output."""
    e = op.dtype.bytes
    meta = (("bias", False), ("frozen", False), ("weight_dtype", op.dtype.value), ("tied", False))
    return [
        Op(name=f"{op.name}.{name}_a", op="linear", kind=OpKind.GEMM, dims=(1, m, k, rank), dtype=op.dtype,
           flops=2.0 * m * k * rank, bytes_read=(m * k + k * rank) * e, bytes_written=float(m * rank * e),
           count=op.count, phase=op.phase, group=op.group, weight_bytes=k * rank * e, params=k * rank,
           tp_split="row" if op.tp_split == "row" else "none", meta=meta),
        Op(name=f"{op.name}.{name}_b", op="linear", kind=OpKind.GEMM, dims=(1, m, rank, n), dtype=op.dtype,
           flops=2.0 * m * rank * n, bytes_read=(m * rank + rank * n + m * n) * e, bytes_written=float(m * n * e),
           count=op.count, phase=op.phase, group=op.group, weight_bytes=rank * n * e, params=rank * n,
           tp_split="column" if op.tp_split in ("column", "vocab") else "none", meta=meta),
    ]


def _set(meta: tuple[tuple[str, object], ...], key: str, value: object) -> tuple[tuple[str, object], ...]:
    return tuple((k, v) for k, v in meta if k != key) + ((key, value),)


def shard_context(ops: list[Op] | tuple[Op, ...], cp: int) -> list[Op]:
    """Per-GPU attention of a ``cp``-way context-parallel run (the op list was built for ``seq/cp`` tokens).

    Every other op already has ``seq/cp`` tokens. Attention is rebuilt: the
    local queries attend to the whole sequence's keys (at most a sliding
    window of them), and with load-balanced chunking each GPU does ``1/cp`` of
    the causal pairs.
    """
    if cp == 1:
        return list(ops)
    out: list[Op] = []
    for op in ops:
        if op.kind is not OpKind.ATTENTION or op.dims[3] == 1:
            out.append(op)
            continue
        b, h, kvh, q, _, d, causal = op.dims
        window, chunked = op.get("window"), op.get("chunk")
        w = int(window) if window else None  # type: ignore[call-overload]
        c = int(chunked) if chunked else None  # type: ignore[call-overload]
        full = q * cp
        keys, touched = reachable_keys(q, full, w, c)
        if not (w or c):
            keys = touched = full
        vd = int(op.get("v_head_dim", d) or d)  # type: ignore[call-overload]
        e = op.dtype.bytes
        pairs = causal_pairs(full, full, w, c) if causal else float(full * keys)
        flops = 2.0 * b * h * (pairs / cp) * (d + vd)
        read = b * (h * q * d + kvh * touched * (d + vd)) * e
        out.append(op.with_(dims=(b, h, kvh, q, keys, d, causal), flops=flops, bytes_read=read))
    return out


def route_experts(ops: list[Op] | tuple[Op, ...], num_experts: int, top_k: int, *, ep: int = 1,
                  skew: float = 0.0, capacity_factor: float | None = None, token_split: int = 1,
                  grouped: bool = True) -> list[Op]:
    """A training GPU's MoE ops under expert parallelism ``ep``, routing skew and the capacity factor.

    The graph builder emits the expert MLP once per active expert (``count`` = layers x active experts) on
    ``tokens * k / active`` tokens each. Here a GPU holds ``E/ep`` local experts, each receiving ``mean =
    tokens * k * ep / E`` tokens from the ``ep`` ranks on average. The busiest GPU paces the layer: it holds
    the busiest expert, with ``(1 + skew)`` x the mean, and ``E/ep - 1`` experts at the mean, every expert
    capped at ``capacity_factor`` x the mean when tokens beyond capacity drop, and in all no more than the
    tokens the ``ep`` ranks route (with ``ep`` 1 the skew moves tokens between the GPU's own experts and
    the total stays ``tokens * k``). Each local expert is priced at that GPU's average per-expert load.

    ``grouped`` (Megatron-Core's ``moe_grouped_gemm``, TE's GroupedLinear / cuBLAS grouped GEMM): each
    projection of a layer is one kernel over all local experts, dims ``(E/ep, tokens per expert, k, n)``
    (the kernel model prices every expert's tiles and weights, so small per-expert GEMMs stay inefficient)
    with ``count`` = layers, and each pointwise kernel covers every local expert's tokens. Otherwise one
    kernel per local expert and projection (``count`` = layers x ``E/ep``), as a loop over experts runs.

    The router gains its load-balancing loss (a reduction over the tokens' ``E`` scores in FP32: Megatron's
    ``switch_load_balancing_loss_func``), and the token permutation becomes a ``permute`` kernel whose
    backward scatters the gradient back (``unpermute``); with ``ep`` > 1 and several local experts the received
    tokens are also regrouped by local expert before the experts and back after them (``sort_chunks``,
    ``unsort_chunks``).
    ``token_split``: each rank dispatches ``1/token_split`` of the router's tokens (the sequence-parallel
    share of a TP rank whose experts are whole, Megatron's expert_tensor_parallel_size 1); the expert ops are
    then left unsplit by tensor parallelism (``tp_split`` none).
    """
    routers = {op.name.removesuffix(".router.gate"): op for op in ops if op.name.endswith(".router.gate")}
    if not routers:
        return list(ops)
    local = max(1, num_experts // ep)
    out: list[Op] = []
    for op in ops:
        scope = _moe_scope(op, routers)
        if scope is None:
            out.append(op)
            continue
        router = routers[scope]
        layers = router.count
        if op is router:
            out.append(op)
            continue
        if op.name == f"{scope}.router.topk_softmax":
            out.append(op)
            out.append(_aux_loss(op, scope))
            continue
        if op.name == f"{scope}.permute":
            out.append(op.with_(op="permute"))
            if ep > 1 and local > 1:
                out.append(_sort_chunks(op, f"{scope}.sort_chunks", router, num_experts, top_k, ep, skew,
                                        capacity_factor, token_split))
            continue
        if op.name == f"{scope}.unpermute_weighted_sum" and ep > 1 and local > 1:
            out.append(_sort_chunks(op, f"{scope}.unsort_chunks", router, num_experts, top_k, ep, skew,
                                    capacity_factor, token_split))
            out.append(op)
            continue
        if not op.name.startswith(f"{scope}.experts."):
            out.append(op)
            continue
        new_tokens = _expert_load(router.dims[1] / token_split, num_experts, top_k, ep, skew, capacity_factor)
        if token_split > 1:
            op = op.with_(tp_split="none")
        if op.kind is OpKind.GEMM:
            op = _retoken_gemm(op, new_tokens)
        else:
            ratio = new_tokens / max(1, _expert_tokens(ops, op))
            rows, cols = op.dims
            op = replace(op, dims=(rows, max(1, round(cols * ratio))), flops=op.flops * ratio,
                         bytes_read=op.bytes_read * ratio, bytes_written=op.bytes_written * ratio,
                         fused_bytes=None if op.fused_bytes is None else op.fused_bytes * ratio)
        out.append(_group(op, local, layers) if grouped else op.with_(count=layers * local))
    return out


def _moe_scope(op: Op, routers: dict[str, Op]) -> str | None:
    """The MoE block (``moe_layers.mlp``) ``op`` belongs to, if any."""
    for scope in routers:
        if op.name.startswith(f"{scope}."):
            return scope
    return None


def _expert_load(tokens: float, num_experts: int, top_k: int, ep: int, skew: float,
                 capacity_factor: float | None) -> int:
    """Tokens per local expert on the busiest of ``ep`` GPUs (see :func:`route_experts`)."""
    local = max(1, num_experts // ep)
    mean = tokens * top_k * ep / num_experts
    cap = float("inf") if capacity_factor is None else mean * capacity_factor
    busiest, others = min(mean * (1.0 + skew), cap), min(mean, cap)
    on_gpu = min(busiest + (local - 1) * others, ep * local * others)  # ep ranks route ep * local * mean pairs
    return max(1, round(on_gpu / local))


def _group(op: Op, groups: int, layers: int) -> Op:
    """One kernel per layer for ``groups`` local experts' copies of expert op ``op`` (a grouped GEMM, or a
    pointwise kernel over all their tokens)."""
    scaled = dict(flops=op.flops * groups, bytes_read=op.bytes_read * groups,
                  bytes_written=op.bytes_written * groups, params=op.params * groups, count=layers)
    if op.kind is OpKind.GEMM:
        _, m, k, n = op.dims
        return op.with_(dims=(groups, m, k, n), weight_bytes=op.weight_bytes * groups, **scaled)
    rows, cols = op.dims
    return op.with_(dims=(rows, cols * groups),
                    fused_bytes=None if op.fused_bytes is None else op.fused_bytes * groups, **scaled)


def _sort_chunks(near: Op, name: str, router: Op, num_experts: int, top_k: int, ep: int, skew: float,
                 capacity_factor: float | None, token_split: int) -> Op:
    """The regrouping of the tokens an all-to-all brings from ``ep`` ranks into local-expert order (before the
    experts, ``sort_chunks``) or back into rank order (after them, ``unsort_chunks``): Megatron-Core's
    all-to-all dispatcher with several local experts (``sort_chunks_by_idxs``), a gather of every received
    hidden vector."""
    local = max(1, num_experts // ep)
    received = _expert_load(router.dims[1] / token_split, num_experts, top_k, ep, skew, capacity_factor) * local
    h = router.dims[2]
    e = near.dtype.bytes
    numel = received * h
    return Op(name=name, op="permute", kind=OpKind.VECTOR, dims=(1, numel), dtype=near.dtype, flops=0.0,
              bytes_read=numel * e + received * 8.0, bytes_written=float(numel * e), count=near.count,
              phase=near.phase, group=near.group, tp_split="none", meta=(("inputs", 1), ("outputs", 1)))


def _aux_loss(scores: Op, scope: str) -> Op:
    """The router's load-balancing loss: the FP32 routing probabilities summed per expert over the tokens (and
    the tokens per expert counted), times the expert fractions; one reduction over ``tokens x E``."""
    tokens, experts = scores.dims
    f32 = DType.FP32.bytes
    return Op(name=f"{scope}.router.aux_loss", op="sum", kind=OpKind.VECTOR, dims=(tokens, experts),
              dtype=DType.FP32, flops=2.0 * tokens * experts, bytes_read=tokens * experts * f32 + tokens * 8.0,
              bytes_written=experts * f32, count=scores.count, phase=scores.phase, group=scores.group,
              tp_split="none", meta=(("inputs", 1), ("outputs", 1), ("reduce", True)))


def _expert_tokens(ops: list[Op] | tuple[Op, ...], op: Op) -> int:
    """Tokens per expert of the layer ``op`` belongs to (from the first expert GEMM)."""
    scope = op.name.rsplit(".", 1)[0]
    for o in ops:
        if o.kind is OpKind.GEMM and o.name.startswith(scope):
            return o.dims[1]
    return 1


def _retoken_gemm(op: Op, tokens: int) -> Op:
    b, m, k, n = op.dims
    e = op.dtype.bytes
    weight = op.weight_bytes
    read = tokens * k * e + weight
    written = tokens * n * op.dtype.bytes
    return op.with_(dims=(b, tokens, k, n), flops=op.flops * tokens / max(1, m), bytes_read=read,
                    bytes_written=float(written))
