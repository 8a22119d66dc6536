"""Training: derive the backward pass (and the optimizer step) from a forward op list.

Autograd's kernels follow from each forward op (PyTorch ``derivatives.yaml``):

- ``linear`` (``x @ W^T + b``): dX = dY @ W and dW = dY^T @ X (two GEMMs of the
  forward's FLOPs), the bias gradient is a column sum of dY.
- ``bmm`` ``(b, m, k, n)``: dA = dC @ B^T ``(b, m, n, k)``, dB = A^T @ dC ``(b, k, m, n)``.
- fused attention: the FlashAttention backward (recomputes the scores; 2.5x
  the forward's matmul FLOPs).
- Mamba scans (``ssm_scan``): one backward kernel of twice the forward's FLOPs that re-reads the saved inputs
  and the output gradient and writes the input gradients (:func:`_scan_backward`).
- pointwise ops: additions pass the gradient through (no kernel); a product of
  two tensors needs one kernel per input; unary functions one
  ``*_backward`` kernel reading the gradient and the saved input.
- row reductions: ``softmax_backward`` and ``layernorm_backward`` read the
  saved tensors and the gradient and write the input gradient (norms also
  reduce their parameter gradients).
- ``embedding``: a zero-filled table gradient plus an index-add of the token rows.
- ``dequantize`` (QLoRA's 4-bit base weight): no gradient, but the input gradient of
  the frozen GEMM needs the weight again; bitsandbytes' ``MatMul4Bit`` keeps only the
  packed weight and dequantizes it once more in the backward (one kernel of the forward's size).

Every parameter tensor ends with an ``AccumulateGrad`` kernel when gradients
accumulate into ``.grad`` (micro-batching, or NeuSight's runs without
``zero_grad``), and the optimizer step reads and writes every parameter once.
"""

from __future__ import annotations

from perfcast.dtypes import DType
from perfcast.workload.types import Op, OpKind, Phase

__all__ = ["SavedActivations", "backward_ops", "optimizer_ops", "optimizer_state_bytes_per_param"]

# unary/binary pointwise forward op -> backward kernels: (op name, full-size inputs, outputs)
_POINTWISE_BWD: dict[str, tuple[tuple[str, int, int], ...]] = {
    "add": (), "addu": (), "sub": (), "subu": (), "cat": (("copy", 1, 1),),
    "mulu": (("mulu", 1, 1),), "divu": (("divu", 1, 1),), "scale": (("mulu", 1, 1),),
    "mul": (("mul", 2, 1), ("mul", 2, 1)), "div": (("div", 2, 1), ("div", 3, 1)),
    "powu": (("powu", 1, 1), ("mulu", 1, 1), ("mul", 2, 1)),
    "tanh": (("tanh_backward", 2, 1),), "gelu": (("gelu_backward", 2, 1),), "relu": (("relu_backward", 2, 1),),
    "relu2": (("relu_backward", 2, 1), ("mul", 2, 1)), "silu": (("silu_backward", 2, 1),),
    "sigmoid": (("sigmoid_backward", 2, 1),), "rsqrt": (("rsqrt_backward", 2, 1),),
    "silu_mul": (("silu_mul_backward", 3, 2),), "rope": (("rope", 1, 1),),
    "where": (("where", 1, 1),), "max": (("where", 1, 1), ("where", 1, 1), ("sum", 1, 0)),
    "copy": (), "dropout": (("dropout_backward", 1, 1),), "cast": (("cast", 1, 1),),
    # MoE token permutation (a gather of each token's hidden vector once per chosen expert): its gradient is
    # scattered back to the token order by an unpermute kernel of the same size
    "permute": (("unpermute", 1, 1),),
    "cross_entropy": (("cross_entropy_backward", 1, 1),),
    # training BatchNorm: reduces grad and saved input per channel (weight/bias grads), then writes dX
    "batchnorm": (("batchnorm_backward", 4, 1),),
}
# forward ops that are not differentiable (masks, indices) or whose gradient is a view
# (the amax reductions and quantize kernels of block-scaled training precision recipes: scales are detached and
# the gradient passes a quantize straight through; :mod:`perfcast.workload.precision` adds the gradient's own)
_NO_GRAD = {"cumsum", "masked_fill", "bucket", "fill", "one_hot", "le", "lt", "nonzero", "bool", "amax", "quantize"}


# full-size tensors a vector op's backward reads besides the incoming gradient (PyTorch derivatives.yaml):
# norms their input (and small statistics), softmax/tanh/sigmoid/relu their output, the other unary functions
# their input, products of two tensors both inputs (a clamp, ``max`` against a scalar bound, its tensor).
# Ops missing here save nothing (sums, products with a scalar, copies, casts, RoPE with its cached tables,
# masks, reductions) except dropout (its 1-byte mask) and an unknown differentiable op (its input, as the
# backward kernel _backward_of gives it reads it).
_SAVED_INPUTS = {"layernorm": 1, "rmsnorm": 1, "batchnorm": 1, "gelu": 1, "silu": 1, "relu2": 1, "rsqrt": 1,
                 "powu": 1, "mul": 2, "div": 2, "max": 1, "silu_mul": 2}
_SAVED_OUTPUTS = {"softmax", "tanh", "sigmoid", "relu"}
_BINARY = {"mul", "div"}  # products of two tensors: each operand's gradient reads the other
_SAVE_NOTHING = _NO_GRAD | {"add", "addu", "sub", "subu", "mulu", "divu", "scale", "copy", "cat", "cast", "rope",
                            "where", "cross_entropy", "mean", "sum", "dequantize", "index_add", "permute"}


class SavedActivations:
    """Bytes autograd keeps for the backward, added op by op in forward order (training memory).

    Each op keeps what its own backward reads (PyTorch ``derivatives.yaml``): a trainable linear layer its
    input (for the weight gradient; a frozen one nothing), a product of two activations both, fused
    attention its q, k and v, a norm its input, dropout its mask, softmax its output (see ``_SAVED_INPUTS``);
    the loss keeps its softmax over the vocabulary in FP32; a product with a broadcast operand keeps that small
    operand. A tensor kept by two ops is counted once: consecutive linear layers reading one input (separate
    q/k/v or gate/up projections, LoRA adapters beside their frozen base) keep it once, and an op that keeps its
    output (softmax, ReLU, tanh) hands it to the next op, which reads it as its input. For a GPT layer this is
    Korthikanti et al. 2022 (Reducing Activation Recomputation in Large Transformer Models, Sec. 4.1):
    ``34 s b h`` bytes in 16 bits, plus ``5 a s^2 b`` when attention materializes its scores; on ops sharded
    ``t``-way it is their ``s b h (10 + 24 / t)`` (tensor parallelism) and ``34 s b h / t`` (with sequence
    parallelism, ``sequence_parallel=t``).
    """

    def __init__(self, *, sequence_parallel: int = 1) -> None:
        # Megatron's sequence parallelism keeps a column-parallel layer's input as its 1/tp shard of the
        # tokens and gathers it again in the backward (Korthikanti et al. 2022, Sec. 4.2.2)
        self._sp = sequence_parallel
        self._linear_inputs: set[tuple[int, int, int, str]] = set()  # inputs kept since the last non-linear op
        self._previous: Op | None = None
        self._previous_output_kept = 0.0  # bytes of the previous op's output it kept itself

    def add(self, op: Op) -> float:
        """Bytes ``op`` (the next forward op) keeps beyond what earlier ops keep."""
        handed = self._previous_output_kept
        previous, self._previous = self._previous, op
        self._previous_output_kept = 0.0
        e = op.dtype.bytes
        if op.kind is OpKind.GEMM and op.op == "linear":
            b, m, k, _ = op.dims
            key = (b, m, k, op.dtype.value)
            adapter_up = previous is not None and op.name.endswith("_b") and previous.name == op.name[:-2] + "_a"
            if op.get("frozen", False) or (key in self._linear_inputs and not adapter_up):
                return 0.0
            self._linear_inputs.add(key)
            shard = self._sp if op.tp_split in ("column", "vocab") else 1
            return max(0.0, b * m * k * e / shard - handed)
        self._linear_inputs.clear()
        if op.kind is OpKind.GEMM:  # bmm: both operands, the first being the previous op's output
            b, m, k, n = op.dims
            return b * m * k * e - min(handed, b * m * k * e) + b * k * n * e
        if op.kind is OpKind.ATTENTION:
            # q, k and v of this GPU's tokens (FlashAttention also keeps its output: the next op's input);
            # context parallelism passes the other ranks' K/V around again in the backward
            b, h, kvh, q, _, d, _ = op.dims
            vd = int(op.get("v_head_dim", d) or d)  # type: ignore[call-overload]
            return float(b * q * (h * d + kvh * (d + vd)) * e)
        if op.kind in (OpKind.CONV, OpKind.POOL):
            return max(0.0, op.bytes_read - op.weight_bytes - handed)
        if op.kind is OpKind.SSM_SCAN:  # a scan keeps its inputs (x, dt, B, C) and recomputes its states
            return float(op.bytes_read)
        if op.kind is not OpKind.VECTOR:
            return 0.0
        rows, cols = op.dims
        numel = float(rows * cols)
        if op.op == "dropout":
            return numel  # the 1-byte mask
        if op.op in _SAVED_OUTPUTS:
            if op.group == "loss":
                # the loss upcasts the logits and keeps its softmax in FP32 for the backward: Megatron's
                # vocab-parallel cross entropy (``logits.float()``, its saved ``exp_logits``), torchtitan's
                # ``cross_entropy_loss`` (``pred.float()``), Hugging Face's ``ForCausalLMLoss``
                e = max(e, DType.FP32.bytes)
            self._previous_output_kept = numel * e
            return numel * e
        if op.op in _SAVE_NOTHING:
            return 0.0
        if op.op in _BINARY:
            # a product keeps both operands; when one is broadcast (a norm's per-row scale, the router's
            # probabilities weighting the experts' outputs) it is that small tensor, not a second full-size one,
            # and a parameter operand (a norm's weight) is no activation
            full = min(_SAVED_INPUTS[op.op], int(op.get("inputs", 2)))  # type: ignore[call-overload]
            small = max(0.0, op.bytes_read - full * numel * e) if full < 2 and not op.params else 0.0
            return max(0.0, full * numel * e - handed) + small
        return max(0.0, _SAVED_INPUTS.get(op.op, 1) * numel * e - handed)


def backward_ops(forward: tuple[Op, ...] | list[Op], *, accumulate_grads: bool = False) -> list[Op]:
    """Backward kernels in autograd order (reverse of the forward)."""
    out: list[Op] = []
    for op in reversed(forward):
        out.extend(_backward_of(op))
        if (op.params or (op.get("tied", False) and not op.get("frozen", False))) and accumulate_grads:
            out.extend(_accumulate(op))
    return out


def _bwd(op: Op, suffix: str, new_op: str, kind: OpKind, dims: tuple[int, ...], flops: float, read: float,
         written: float, **kw: object) -> Op:
    return Op(
        name=f"{op.name}.{suffix}", op=new_op, kind=kind, dims=dims, dtype=op.dtype, flops=flops,
        bytes_read=read, bytes_written=written, count=op.count, phase=Phase.BACKWARD, group=op.group,
        tp_split=str(kw.pop("tp_split", op.tp_split)), **kw,  # type: ignore[arg-type]
    )


def _backward_of(op: Op) -> list[Op]:
    """The backward kernels of forward op ``op`` (its gradients with respect to its inputs and parameters)."""
    if op.kind is OpKind.GEMM:
        return _gemm_backward(op)
    if op.kind is OpKind.ATTENTION:
        return [_bwd(op, "grad", "attention_backward", OpKind.ATTENTION, op.dims, 2.5 * op.flops,
                     2 * op.bytes_read + op.bytes_written, op.bytes_read, meta=op.meta)]
    if op.kind is OpKind.EMBEDDING:
        return _embedding_backward(op)
    if op.kind is OpKind.CONV:
        # data gradient and weight gradient: two convolutions of the forward's FLOPs
        return [
            _bwd(op, "grad_input", "conv2d_backward_data", OpKind.CONV, op.dims, op.flops, op.bytes_read,
                 op.bytes_read - op.weight_bytes),
            _bwd(op, "grad_weight", "conv2d_backward_weight", OpKind.CONV, op.dims, op.flops,
                 op.bytes_read + op.bytes_written - op.weight_bytes, op.weight_bytes),
        ]
    if op.kind is OpKind.POOL:
        return [_bwd(op, "grad", f"{op.op}_backward", OpKind.POOL, op.dims, op.flops, op.bytes_written * 2,
                     op.bytes_read)]
    if op.kind is OpKind.SSM_SCAN:
        return [_scan_backward(op)]
    if op.kind is not OpKind.VECTOR or op.op in _NO_GRAD:
        return []
    return _vector_backward(op)


def _scan_backward(op: Op) -> Op:
    """A Mamba scan's backward (mamba_ssm's ``selective_scan_bwd`` / the SSD backward kernels): it recomputes the
    forward's states chunk by chunk and runs the recurrence in reverse for the input gradients, about twice the
    forward's FLOPs (vector and matrix alike: a hand-set ratio, not fitted); it reads the saved inputs and the
    output gradient and writes the input gradients (x, dt, B, C: the forward's reads again)."""
    meta = tuple((k, 2.0 * float(v) if k == "matmul_flops" else v)  # type: ignore[arg-type]
                 for k, v in op.meta)
    return _bwd(op, "grad", f"{op.op}_backward", OpKind.SSM_SCAN, op.dims, 2.0 * op.flops,
                op.bytes_read + op.bytes_written, op.bytes_read, meta=meta)


def _gemm_backward(op: Op) -> list[Op]:
    """A GEMM's input gradient, and its weight's (and bias's) unless frozen; a bmm's second operand's."""
    e = op.dtype.bytes
    b, m, k, n = op.dims
    frozen = bool(op.get("frozen", False))
    flops = 2.0 * b * m * k * n
    # the input gradient of a column-split (or vocab-split) GEMM reduces over the split features:
    # a row-split GEMM whose partial sums are all-reduced; that of a row-split GEMM is column-split
    row_split = {"column": "row", "vocab": "row", "row": "column"}.get(op.tp_split, op.tp_split)
    # the weight gradient (n x k) is split like the weight: its rows for column/vocab splits
    # ("out_rows"), its columns (the reduction features) for a row split; no communication either way
    weight_split = {"column": "out_rows", "vocab": "out_rows", "row": "column"}.get(op.tp_split, op.tp_split)
    outs = [_bwd(op, "grad_input", "bmm" if op.op == "bmm" else "linear", OpKind.GEMM, (b, m, n, k), flops,
                 b * (m * n + n * k) * e, b * m * k * e, meta=(("bias", False),), tp_split=row_split)]
    if op.op == "bmm":
        outs.append(_bwd(op, "grad_other", "bmm", OpKind.GEMM, (b, k, m, n), flops,
                         b * (k * m + m * n) * e, b * k * n * e))
    elif not frozen:
        # a grouped GEMM (b > 1: MoE experts) has one weight, and one weight gradient, per group
        outs.append(_bwd(op, "grad_weight", "linear", OpKind.GEMM, (b, n, m, k), flops,
                         b * (m * n + m * k) * e, b * n * k * e, meta=(("bias", False),), tp_split=weight_split))
        if op.get("bias", False):
            outs.append(_bwd(op, "grad_bias", "sum", OpKind.VECTOR, (b * m, n), float(b * m * n), b * m * n * e,
                             b * n * e, meta=(("inputs", 1), ("outputs", 1), ("reduce", True))))
    return outs


def _embedding_backward(op: Op) -> list[Op]:
    """An embedding table's gradient: zero it, then add each token's row (none for a frozen table)."""
    if op.get("frozen", False):
        return []  # a frozen table (LoRA) gets no gradient, and nothing flows past it
    e = op.dtype.bytes
    tokens, dim, vocab = op.dims
    return [_bwd(op, "grad_fill", "fill", OpKind.VECTOR, (1, vocab * dim), 0.0, 0.0, vocab * dim * e,
                 meta=(("inputs", 0), ("outputs", 1))),
            _bwd(op, "grad_index_add", "index_add", OpKind.VECTOR, (tokens, dim), float(tokens * dim),
                 2 * tokens * dim * e + tokens * 8, tokens * dim * e, meta=(("inputs", 2), ("outputs", 1)))]


def _vector_backward(op: Op) -> list[Op]:
    """A differentiable vector op's backward kernels: normalizations and softmax (and their parameters'
    gradient), reductions, dropout, and pointwise ops by :data:`_POINTWISE_BWD`."""
    e = op.dtype.bytes
    if op.op == "dequantize":
        return [_bwd(op, "redequant", "dequantize", OpKind.VECTOR, op.dims, op.flops, op.bytes_read,
                     op.bytes_written, meta=op.meta)]
    rows, cols = op.dims
    numel = rows * cols
    if op.op in ("softmax", "layernorm", "rmsnorm"):
        outs = [_bwd(op, "grad", f"{op.op}_backward", OpKind.VECTOR, op.dims, 4.0 * numel, 2 * numel * e,
                     numel * e, meta=(("inputs", 2), ("outputs", 1), ("reduce", True)))]
        if op.params:
            outs.append(_bwd(op, "grad_params", "sum", OpKind.VECTOR, op.dims, 2.0 * numel, 2 * numel * e,
                             op.params * e, meta=(("inputs", 2), ("outputs", 0), ("reduce", True))))
        return outs
    if op.op in ("mean", "sum"):
        return [_bwd(op, "grad", "mulu", OpKind.VECTOR, op.dims, float(numel), rows * e, numel * e,
                     meta=(("inputs", 0), ("outputs", 1)))]
    if op.op == "dropout":
        # grad * mask * scale: reads the gradient and the 1-byte mask
        return [_bwd(op, "grad", "dropout_backward", OpKind.VECTOR, op.dims, float(numel), numel * (e + 1),
                     numel * e, meta=(("inputs", 1), ("outputs", 1)))]
    # an unknown differentiable pointwise op: one backward kernel reading grad and input
    rules = _POINTWISE_BWD.get(op.op)
    if rules is None:
        rules = ((f"{op.op}_backward", 2, 1),)
    return [
        _bwd(op, f"grad{i}", name, OpKind.VECTOR, op.dims, float(numel), numel * ins * e, numel * outs_ * e,
             meta=(("inputs", ins), ("outputs", outs_)))
        for i, (name, ins, outs_) in enumerate(rules)
    ]


def _accumulate(op: Op) -> list[Op]:
    """``param.grad += grad`` per parameter tensor (weight, and bias when present).

    A tied weight (an LM head sharing the embedding table) adds its gradient into the shared
    tensor's: the same traffic as accumulating a tensor of its own.
    """
    e = op.dtype.bytes
    tensors = [op.params]
    if op.kind is OpKind.GEMM and (op.get("bias", False) or op.get("tied", False)):
        _, _, k, n = op.dims
        tensors = [k * n, n] if op.get("bias", False) else [k * n]
    elif op.kind is OpKind.VECTOR and op.op == "layernorm":
        tensors = [op.params // 2, op.params - op.params // 2]
    return [
        Op(name=f"{op.name}.accumulate_grad{i}", op="accumulate_grad", kind=OpKind.VECTOR, dims=(1, p),
           dtype=op.dtype, flops=float(p), bytes_read=2.0 * p * e, bytes_written=float(p * e), count=op.count,
           phase=Phase.BACKWARD, group=op.group, tp_split=op.tp_split, meta=(("inputs", 2), ("outputs", 1)))
        for i, p in enumerate(tensors) if p > 0
    ]


def optimizer_state_bytes_per_param(optimizer: str, dtype: DType, master_dtype: DType = DType.FP32) -> float:
    """Bytes of optimizer state per trainable parameter, as :func:`optimizer_ops` reads and writes them.

    Adam: two moments in ``master_dtype``, plus a ``master_dtype`` copy of the weights when they are
    narrower (mixed precision); SGD without momentum and ``none`` keep nothing.
    """
    if optimizer != "adam":
        return 0.0
    m = master_dtype.bytes
    return 2.0 * m + (m if dtype.bytes < m else 0.0)


def optimizer_ops(forward: tuple[Op, ...] | list[Op], *, optimizer: str = "adam",
                  master_dtype: DType = DType.FP32) -> list[Op]:
    """The optimizer step over every trainable parameter (multi-tensor ``foreach`` kernels).

    Adam reads parameter, gradient and both moments and writes parameter and
    moments (moments in ``master_dtype``); mixed precision adds an FP32 master
    copy of the weights. SGD reads parameter and gradient and writes the parameter.
    """
    if optimizer == "none":
        return []
    params = sum(op.params * op.count for op in forward)
    tensors = sum(op.count * (2 if op.get("bias", False) else 1) for op in forward if op.params)
    if params == 0:
        return []
    dtype = forward[0].dtype
    e, m = dtype.bytes, master_dtype.bytes
    master = m if dtype.bytes < m else 0.0
    if optimizer == "adam":
        read = params * (2 * e + 2 * m + master)
        written = params * (e + 2 * m + master)
        flops = 12.0 * params
    else:
        read, written, flops = params * 2 * e, params * e, 2.0 * params
    return [Op(name=f"optimizer.{optimizer}", op=optimizer, kind=OpKind.VECTOR, dims=(1, params), dtype=dtype,
               flops=flops, bytes_read=float(read), bytes_written=float(written), count=1, phase=Phase.OPTIMIZER,
               group="optimizer", meta=(("inputs", 4), ("outputs", 3), ("tensors", tensors)))]
