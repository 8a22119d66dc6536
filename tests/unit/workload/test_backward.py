"""Unit tests of ``perfcast.workload.backward``: backward kernels and the optimizer step from forward ops."""

from __future__ import annotations

import pytest

from perfcast.dtypes import DType
from perfcast.workload.backward import backward_ops, optimizer_ops
from perfcast.workload.graph import Graph
from perfcast.workload.types import OpKind, Phase


def _graph(dtype: DType = DType.FP32) -> Graph:
    return Graph(dtype, training=True)


def test_linear_backward_is_two_gemms_of_forward_flops_plus_bias_sum() -> None:
    g = _graph()
    fwd = g.linear("fc", 64, 128, 256, bias=True)
    bwd = backward_ops([fwd])
    names = [o.name for o in bwd]
    assert names == ["fc.grad_input", "fc.grad_weight", "fc.grad_bias"]
    grad_in, grad_w, grad_b = bwd
    mult = 2.0 * 64 * 128 * 256
    assert grad_in.kind is OpKind.GEMM and grad_in.flops == mult and grad_in.dims == (1, 64, 256, 128)
    assert grad_w.kind is OpKind.GEMM and grad_w.flops == mult and grad_w.dims == (1, 256, 64, 128)
    assert grad_b.kind is OpKind.VECTOR and grad_b.op == "sum"
    assert all(o.phase is Phase.BACKWARD for o in bwd)
    # dW is written once: in x out elements
    assert grad_w.bytes_written == 128 * 256 * 4


def test_frozen_linear_has_no_weight_gradient() -> None:
    g = _graph()
    fwd = g.linear("fc", 8, 16, 32, bias=False, frozen=True)
    bwd = backward_ops([fwd])
    assert [o.name for o in bwd] == ["fc.grad_input"]
    assert fwd.params == 0
    assert optimizer_ops([fwd]) == []


def test_tied_linear_computes_its_weight_gradient_but_owns_only_its_bias() -> None:
    g = _graph()
    head = g.linear("lm_head", 8, 16, 100, bias=True, tied=True)
    assert head.params == 100  # bias only: the weight belongs to the embedding
    assert any(o.name == "lm_head.grad_weight" for o in backward_ops([head]))
    # the tied weight's gradient is still added into the shared tensor when gradients accumulate
    acc = [o for o in backward_ops([head], accumulate_grads=True) if o.op == "accumulate_grad"]
    assert [o.dims[1] for o in acc] == [16 * 100, 100]


def test_bmm_backward_is_two_bmms_of_forward_flops() -> None:
    g = _graph()
    fwd = g.bmm("qk", 24, 128, 64, 128)
    bwd = backward_ops([fwd])
    assert [o.op for o in bwd] == ["bmm", "bmm"]
    assert all(o.flops == fwd.flops for o in bwd)
    assert sorted(o.dims for o in bwd) == sorted([(24, 128, 128, 64), (24, 64, 128, 128)])


def test_fused_attention_backward_is_two_and_a_half_forward() -> None:
    g = _graph(DType.BF16)
    fwd = g.attention("attn", 2, 16, 16, 256, 256, 64)
    (bwd,) = backward_ops([fwd])
    assert bwd.op == "attention_backward" and bwd.kind is OpKind.ATTENTION
    assert bwd.flops == pytest.approx(2.5 * fwd.flops)
    assert bwd.dims == fwd.dims


def test_additions_pass_the_gradient_through() -> None:
    g = _graph()
    add = g.pointwise("res", "add", 1000, inputs=2)
    copy = g.copy("contig", 1000)
    assert backward_ops([add, copy]) == []


@pytest.mark.parametrize(("op", "kernels"), [("gelu", 1), ("mul", 2), ("tanh", 1), ("silu", 1), ("mulu", 1)])
def test_pointwise_backward_kernel_counts(op: str, kernels: int) -> None:
    g = _graph()
    fwd = g.pointwise("x", op, 4096, inputs=2 if op == "mul" else 1)
    bwd = backward_ops([fwd])
    assert len(bwd) == kernels
    assert all(o.kind is OpKind.VECTOR and o.dims == fwd.dims and o.count == fwd.count for o in bwd)


def test_norm_backward_reduces_its_parameter_gradients() -> None:
    g = _graph()
    ln = g.norm("ln", "layernorm", 64, 768)
    bwd = backward_ops([ln])
    assert [o.op for o in bwd] == ["layernorm_backward", "sum"]
    assert bwd[1].bytes_written == ln.params * 4


def test_dropout_backward_reads_gradient_and_one_byte_mask() -> None:
    g = _graph(DType.FP16)
    d = g.dropout("drop", 1000)
    assert d is not None
    (bwd,) = backward_ops([d])
    assert bwd.op == "dropout_backward"
    assert bwd.bytes_read == 1000 * (2 + 1)


def test_embedding_backward_fills_and_index_adds() -> None:
    g = _graph()
    emb = g.embedding("wte", 512, 768, 50257)
    ops = backward_ops([emb])
    assert [o.op for o in ops] == ["fill", "index_add"]
    assert ops[0].bytes_written == 50257 * 768 * 4  # the whole table gradient is zeroed


def test_backward_runs_in_reverse_order_and_keeps_counts() -> None:
    g = _graph()
    with g.scope("layers", count=12):
        a = g.linear("a", 8, 16, 16)
        b = g.linear("b", 8, 16, 16)
    bwd = backward_ops([a, b])
    assert bwd[0].name.startswith("layers.b.")
    assert bwd[-1].name.startswith("layers.a.")
    assert all(o.count == 12 for o in bwd)


def test_mask_ops_have_no_gradient() -> None:
    g = _graph()
    ops = [g.pointwise("m", "masked_fill", 100), g.pointwise("c", "cumsum", 100), g.host("nz", "nonzero")]
    assert backward_ops(ops) == []


def test_adam_reads_and_writes_every_parameter_once() -> None:
    g = _graph(DType.FP32)
    with g.scope("layers", count=3):
        lin = g.linear("fc", 8, 10, 20, bias=True)  # 220 params per layer
    norm = g.norm("ln", "layernorm", 8, 20)  # 40 params
    (opt,) = optimizer_ops([lin, norm], optimizer="adam")
    params = 3 * 220 + 40
    assert opt.dims == (1, params) and opt.phase is Phase.OPTIMIZER and opt.count == 1
    # fp32 training: read param, grad, m, v; write param, m, v (no master copy)
    assert opt.bytes_read == params * 4 * 4
    assert opt.bytes_written == params * 4 * 3
    assert opt.get("tensors") == 3 * 2 + 1


def test_mixed_precision_adam_keeps_an_fp32_master_copy() -> None:
    g = _graph(DType.BF16)
    lin = g.linear("fc", 8, 10, 20, bias=False)
    (opt,) = optimizer_ops([lin], optimizer="adam")
    # bf16 param and grad (2 + 2), fp32 m and v (4 + 4), fp32 master (4)
    assert opt.bytes_read == 200 * (2 + 2 + 4 + 4 + 4)
    assert opt.bytes_written == 200 * (2 + 4 + 4 + 4)


def test_sgd_and_none() -> None:
    g = _graph()
    lin = g.linear("fc", 8, 10, 20, bias=False)
    (sgd,) = optimizer_ops([lin], optimizer="sgd")
    assert sgd.op == "sgd" and sgd.bytes_read == 200 * 2 * 4 and sgd.bytes_written == 200 * 4
    assert optimizer_ops([lin], optimizer="none") == []


def test_no_parameters_means_no_optimizer_step() -> None:
    g = _graph()
    assert optimizer_ops([g.pointwise("x", "gelu", 10)], optimizer="adam") == []


def test_accumulate_grads_adds_a_kernel_per_parameter_tensor() -> None:
    g = _graph()
    lin = g.linear("fc", 8, 10, 20, bias=True)
    ln = g.norm("ln", "layernorm", 8, 20)
    acc = [o for o in backward_ops([lin, ln], accumulate_grads=True) if o.op == "accumulate_grad"]
    assert sorted(o.dims[1] for o in acc) == sorted([200, 20, 20, 20])
    assert all(o.bytes_read == 2 * o.dims[1] * 4 and o.bytes_written == o.dims[1] * 4 for o in acc)


# -- what autograd keeps for the backward --------------------------------------------------------------------
def _kept_per_layer(model: str, style: str, attention: str, b: int, s: int) -> float:
    from perfcast.workload.backward import SavedActivations
    from perfcast.workload.build import WorkloadSpec, build_workload
    from perfcast.workload.types import Mode

    spec = WorkloadSpec(Mode.TRAINING, b, s, dtype="bf16", style=style, attention=attention, optimizer="none")
    kept = SavedActivations()
    total = 0.0
    for op in build_workload(model, spec).phase(Phase.FORWARD):
        x = kept.add(op)
        if op.count > 1:  # the repeated transformer layer
            total += x
    return total


def test_kept_activations_follow_korthikanti_for_an_eager_gpt_layer() -> None:
    # Korthikanti et al. 2022, Sec. 4.1: s b h (34 + 5 a s / h) bytes per layer in 16 bits with dropout, for
    # explicit attention scores. GPT-2's eager GeLU (gelu_new, written out in PyTorch ops) keeps three more
    # s x 4h tensors (tanh's output, 0.5 x and 1 + tanh: 24 s b h beyond the GeLU input)
    b, s, h, a = 2, 1024, 1024, 16  # gpt2-medium
    assert _kept_per_layer("gpt2-medium", "hf", "eager", b, s) == s * b * h * (34 + 5 * a * s / h + 24)


def test_kept_activations_of_a_fused_layer_keep_no_scores() -> None:
    # FlashAttention keeps q, k, v (and its output, the next op's input) instead of s x s scores; the engine
    # graph of GPT-3 has no dropout inside its blocks, so Korthikanti's 34 s b h less the two 1-byte masks
    from perfcast.catalog.models import load_model

    b, s, h = 1, 2048, load_model("gpt3-xl").hidden_size
    assert _kept_per_layer("gpt3-xl", "engine", "flash", b, s) == s * b * h * 32


def test_linear_layers_reading_one_input_keep_it_once() -> None:
    from perfcast.workload.backward import SavedActivations

    g = _graph(DType.BF16)
    t, h = 128, 64
    ops = [g.norm("ln", "rmsnorm", t, h), g.linear("q", t, h, h), g.linear("k", t, h, 16), g.linear("v", t, h, 16)]
    kept = SavedActivations()
    assert [kept.add(o) for o in ops] == [t * h * 2, t * h * 2, 0.0, 0.0]  # the norm's input, its output once
    # a frozen base keeps nothing; its LoRA adapter keeps the input once, the up-projection A's narrow output
    base = g.linear("o", t, h, h).with_(meta=(("frozen", True),), params=0)
    down, up = g.linear("o.lora_a", t, h, 8), g.linear("o.lora_b", t, 8, h)
    kept = SavedActivations()
    assert [kept.add(o) for o in (g.pointwise("act", "silu", t * h), base, down, up)] == [
        t * h * 2, 0.0, t * h * 2, t * 8 * 2]


def test_an_op_that_keeps_its_output_hands_it_to_the_next() -> None:
    from perfcast.workload.backward import SavedActivations

    g = _graph(DType.FP32)
    t, h = 32, 64
    relu, fc = g.pointwise("relu", "relu", t * h), g.linear("fc", t, h, h)
    kept = SavedActivations()
    assert kept.add(relu) == t * h * 4 and kept.add(fc) == 0.0  # ReLU's output is fc's input, kept once
    drop = g.dropout("drop", t * h)  # a training graph
    assert drop is not None and SavedActivations().add(drop) == t * h  # dropout keeps its 1-byte mask


def test_a_product_with_a_broadcast_operand_keeps_that_small_operand() -> None:
    # mul(x, p) keeps both operands (derivatives.yaml: each gradient reads the other); when p is broadcast (the router's
    # probabilities weighting the experts' outputs, a norm's per-row scale) it is p's few bytes, not a second x
    from perfcast.workload.backward import SavedActivations

    g = _graph(DType.BF16)
    tokens, k, h = 64, 2, 32
    weighted = g.pointwise("unpermute_weighted_sum", "mul", tokens * k * h, inputs=1, extra_read_bytes=tokens * k * 4)
    assert SavedActivations().add(weighted) == tokens * k * h * 2 + tokens * k * 4
    both = g.pointwise("gate_mul", "mul", tokens * h, inputs=2)
    assert SavedActivations().add(both) == 2 * tokens * h * 2
    scaled = g.pointwise("norm.mul_weight", "mul", tokens * h, inputs=1, extra_read_bytes=h * 2, params=h)
    assert SavedActivations().add(scaled) == tokens * h * 2  # the weight is a parameter, not an activation


def test_the_loss_keeps_its_softmax_in_fp32() -> None:
    # Megatron's vocab-parallel cross entropy, torchtitan's and Hugging Face's losses upcast the logits to FP32
    from perfcast.workload.backward import SavedActivations
    from perfcast.workload.models.common import lm_loss

    g = _graph(DType.BF16)
    tokens, vocab = 16, 1000
    lm_loss(g, tokens, vocab)
    kept = SavedActivations()
    assert sum(kept.add(o) for o in g.ops) == tokens * vocab * 4
