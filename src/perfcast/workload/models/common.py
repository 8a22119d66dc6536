"""Pieces shared by several model builders: activations, norms, the LM head, the loss."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from perfcast.workload.graph import Graph

__all__ = ["activation", "dropout_residual", "layer_groups", "lm_loss", "matmul_attention", "python_rmsnorm"]


def activation(g: Graph, name: str, kind: str, numel: int) -> None:
    """The activation function as eager PyTorch launches it (``gelu_new`` is 8 kernels)."""
    e = g.esize
    if kind in ("gelu_new", "gelu_pytorch_tanh_python", "gelu_fast"):
        chain = g.new_chain(f"{name}.gelu_new")
        # NewGELUActivation: 0.5*x*(1+tanh(sqrt(2/pi)*(x+0.044715*x^3))), one kernel per operator
        steps = (("mulu", 1), ("powu", 1), ("mulu", 1), ("add", 2), ("mulu", 1), ("tanh", 1), ("addu", 1), ("mul", 2))
        last = len(steps) - 1
        for i, (op, inputs) in enumerate(steps):
            fused = (numel * e if i == 0 else 0.0) + (numel * e if i == last else 0.0)
            g.pointwise(f"{name}.{i}_{op}", op, numel, inputs=inputs, chain=chain, fused_bytes=fused)
        return
    op = {
        "gelu": "gelu", "gelu_pytorch_tanh": "gelu", "gelu_python": "gelu", "quick_gelu": "gelu",
        "relu": "relu", "silu": "silu", "swish": "silu", "tanh": "tanh", "relu2": "relu2",
        "squared-relu": "relu2", "sigmoid": "sigmoid",
    }.get(kind, "gelu")
    g.pointwise(name, op, numel, chain=g.new_chain(name))


def dropout_residual(g: Graph, name: str, numel: int) -> None:
    """``residual + dropout(hidden)``: dropout (training only) then the residual add, one fused chain."""
    e = g.esize
    chain = g.new_chain(name)
    dropped = g.dropout(f"{name}.dropout", numel, chain=chain, first_in_chain=True)
    # fused: read the residual (and the hidden state unless dropout already read it), write the sum
    fused = numel * e * (2 if dropped is not None else 3)
    g.pointwise(f"{name}.add", "add", numel, inputs=2, chain=chain, fused_bytes=fused)


def python_rmsnorm(g: Graph, name: str, rows: int, cols: int) -> None:
    """RMSNorm written in Python (Llama/T5 style): pow, mean, add-eps, rsqrt, mul, mul-weight.

    Eager PyTorch launches one kernel per line; a compiler fuses them into one
    kernel that reads the input once and writes the output once.
    """
    e = g.esize
    numel = rows * cols
    chain = g.new_chain(f"{name}.rmsnorm")
    g.pointwise(f"{name}.pow", "powu", numel, chain=chain, fused_bytes=numel * e)
    g.reduction(f"{name}.mean", "mean", rows, cols, out_cols=1, chain=chain, fused_bytes=0.0)
    g.pointwise(f"{name}.add_eps", "addu", rows, chain=chain, fused_bytes=0.0)
    g.pointwise(f"{name}.rsqrt", "rsqrt", rows, chain=chain, fused_bytes=0.0)
    g.pointwise(f"{name}.mul", "mul", numel, inputs=1, extra_read_bytes=rows * e, chain=chain, fused_bytes=0.0)
    g.pointwise(f"{name}.mul_weight", "mul", numel, inputs=1, extra_read_bytes=cols * e, chain=chain, params=cols,
                fused_bytes=numel * e)


def lm_loss(g: Graph, tokens: int, vocab: int) -> None:
    """Cross-entropy over the logits: log-softmax (a row reduction) and the NLL gather.

    Under tensor parallelism the logits stay split by vocabulary (Megatron's vocab-parallel
    cross-entropy): each GPU reduces its share of the vocabulary.
    """
    with g.scope("loss", group="loss"):
        g.reduction("log_softmax", "softmax", tokens, vocab, tp_split="column")
        g.pointwise("nll", "cross_entropy", tokens, inputs=1)


def matmul_attention(g: Graph, batch: int, q_len: int, k_len: int, nh: int, hd: int, *, scale: bool,
                     mask: str | None) -> None:
    """Eager attention written with ``torch.matmul`` on permuted views (GPT-2, BERT, T5).

    matmul copies q, k^T and v into contiguous ``(b*h, s, d)`` buffers; the
    scores then pass through an optional scale, a mask (``where`` = GPT-2's
    causal ``torch.where``, ``add`` = an additive mask row, ``bias`` = T5's
    full position bias tensor) and a softmax (and dropout in training). Under a
    compiler the scale, mask, softmax and dropout fuse into one kernel.
    """
    e = g.esize
    scores = batch * nh * q_len * k_len
    g.copy("q_contiguous", batch * q_len * nh * hd)
    g.copy("k_contiguous", batch * k_len * nh * hd)
    g.bmm("qk", batch * nh, q_len, hd, k_len)
    chain = g.new_chain("softmax")
    read_scores = scores * e  # the fused kernel reads the scores once
    if scale:
        g.pointwise("scale", "divu", scores, chain=chain, fused_bytes=read_scores)
        read_scores = 0.0
    if mask == "where":
        g.pointwise("causal_mask", "where", scores, extra_read_bytes=q_len * k_len, chain=chain,
                    fused_bytes=read_scores)
    elif mask == "add":
        g.pointwise("mask_add", "add", scores, extra_read_bytes=batch * k_len * e, chain=chain,
                    fused_bytes=read_scores)
    elif mask == "bias":
        g.pointwise("add_position_bias", "add", scores, inputs=2, chain=chain, fused_bytes=read_scores + scores * e)
    consumed = 0.0 if (scale or mask) else scores * e
    g.reduction("softmax", "softmax", batch * nh * q_len, k_len, chain=chain, fused_bytes=consumed + scores * e)
    g.dropout("attn_dropout", scores, chain=chain)
    g.copy("v_contiguous", batch * k_len * nh * hd)
    g.bmm("pv", batch * nh, q_len, k_len, hd)


def layer_groups(kinds: Sequence[str], moe_layer: Callable[[int], bool]) -> dict[tuple[str, bool], int]:
    """Layers per (kind, MoE FFN?) in first-seen order: ``kinds`` names each layer's mixer, ``moe_layer(i)``
    whether layer ``i`` has an MoE feed-forward block (hybrid builders emit each group once with its count)."""
    counts: dict[tuple[str, bool], int] = {}
    for i, kind in enumerate(kinds):
        key = (kind, moe_layer(i))
        counts[key] = counts.get(key, 0) + 1
    return counts
