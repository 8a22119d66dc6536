"""Unit tests of ``perfcast.workload.build``: (model, mode, batch, sequence, dtype) -> Workload."""

from __future__ import annotations

import pytest

from perfcast.catalog.models import load_model
from perfcast.dtypes import DType
from perfcast.errors import ConfigError, UnknownNameError, UnsupportedError
from perfcast.workload.build import WorkloadSpec, build_workload
from perfcast.workload.types import Mode, OpKind, Phase, Workload

# small or representative catalog models, one per builder
HF_MODELS = ["gpt2", "opt-toy-1layer", "bert-base", "switch-xl"]
DECODER_MODELS = ["llama-2-7b", "mixtral-8x7b", "deepseek-v3", "falcon-180b", "phi-2"]


def _gemm_flops(w: Workload, phase: Phase) -> float:
    return sum(o.flops * o.count for o in w.ops if o.kind is OpKind.GEMM and o.phase is phase)


@pytest.mark.parametrize("model", HF_MODELS + DECODER_MODELS)
def test_inference_has_only_forward_ops(model: str) -> None:
    w = build_workload(model, WorkloadSpec(Mode.INFERENCE, 2, 64))
    assert w.ops
    assert {o.phase for o in w.ops} == {Phase.FORWARD}
    assert w.flops > 0 and w.bytes > 0
    assert all(o.count >= 1 for o in w.ops)
    assert all(o.flops >= 0 and o.bytes_read >= 0 and o.bytes_written >= 0 for o in w.ops)


@pytest.mark.parametrize("model", HF_MODELS + ["llama-2-7b"])
def test_training_adds_backward_with_twice_the_forward_gemm_flops(model: str) -> None:
    """Each linear gets dX and dW, each bmm dA and dB: 2 x the forward's multiply FLOPs (bias adds excluded)."""
    w = build_workload(model, WorkloadSpec(Mode.TRAINING, 2, 64))
    fwd = [o for o in w.phase(Phase.FORWARD) if o.kind is OpKind.GEMM]
    bias_flops = sum(o.dims[1] * o.dims[3] * o.count for o in fwd if o.get("bias", False))
    assert w.phase(Phase.BACKWARD)
    assert _gemm_flops(w, Phase.BACKWARD) == pytest.approx(2 * (_gemm_flops(w, Phase.FORWARD) - bias_flops),
                                                           rel=1e-12)


def test_training_forward_equals_inference_forward_plus_training_only_ops() -> None:
    """The forward GEMMs of a training step are those of inference (dropout and loss add no GEMM)."""
    spec = dict(batch_size=2, seq_len=64)
    inf = build_workload("gpt2", WorkloadSpec(Mode.INFERENCE, **spec))
    train = build_workload("gpt2", WorkloadSpec(Mode.TRAINING, **spec))
    assert _gemm_flops(train, Phase.FORWARD) == _gemm_flops(inf, Phase.FORWARD)
    assert len(train.phase(Phase.FORWARD)) > len(inf.ops)


@pytest.mark.parametrize("model", ["gpt2", "bert-base", "opt-toy-1layer", "llama-2-7b"])
def test_dropout_only_in_training(model: str) -> None:
    inf = build_workload(model, WorkloadSpec(Mode.INFERENCE, 1, 32))
    train = build_workload(model, WorkloadSpec(Mode.TRAINING, 1, 32))
    assert not any(o.op == "dropout" for o in inf.ops)
    assert any(o.op == "dropout" for o in train.ops)
    # dropout backward follows every dropout forward
    assert sum(o.count for o in train.ops if o.op == "dropout") == \
        sum(o.count for o in train.ops if o.op == "dropout_backward")


@pytest.mark.parametrize(("optimizer", "op"), [("adam", "adam"), ("sgd", "sgd")])
def test_optimizer_op_present(optimizer: str, op: str) -> None:
    w = build_workload("gpt2", WorkloadSpec(Mode.TRAINING, 1, 32, optimizer=optimizer))
    opt = w.phase(Phase.OPTIMIZER)
    assert [o.op for o in opt] == [op]
    assert opt[0].count == 1 and opt[0].bytes > 0


def test_adam_moves_more_bytes_than_sgd() -> None:
    adam = build_workload("gpt2", WorkloadSpec(Mode.TRAINING, 1, 32, optimizer="adam")).phase(Phase.OPTIMIZER)[0]
    sgd = build_workload("gpt2", WorkloadSpec(Mode.TRAINING, 1, 32, optimizer="sgd")).phase(Phase.OPTIMIZER)[0]
    assert adam.dims == sgd.dims  # same parameters
    assert adam.bytes > sgd.bytes and adam.flops > sgd.flops


def test_optimizer_none_has_no_optimizer_op() -> None:
    w = build_workload("gpt2", WorkloadSpec(Mode.TRAINING, 1, 32, optimizer="none"))
    assert w.phase(Phase.OPTIMIZER) == ()
    assert w.phase(Phase.BACKWARD)


def test_loss_flag_adds_the_cross_entropy() -> None:
    with_loss = build_workload("gpt2", WorkloadSpec(Mode.TRAINING, 1, 32, loss=True))
    without = build_workload("gpt2", WorkloadSpec(Mode.TRAINING, 1, 32, loss=False))
    assert any(o.op == "cross_entropy" for o in with_loss.ops)
    assert not any(o.op == "cross_entropy" for o in without.ops)


def test_accumulate_grads_adds_one_kernel_per_parameter_tensor() -> None:
    plain = build_workload("gpt2", WorkloadSpec(Mode.TRAINING, 1, 32, accumulate_grads=False))
    acc = build_workload("gpt2", WorkloadSpec(Mode.TRAINING, 1, 32, accumulate_grads=True))
    assert not any(o.op == "accumulate_grad" for o in plain.ops)
    acc_ops = [o for o in acc.ops if o.op == "accumulate_grad"]
    assert acc_ops and all(o.phase is Phase.BACKWARD for o in acc_ops)
    # GPT-2 small: wte, wpe, lm_head (tied: grads add up), per layer 2 LN x 2 + 4 linears x (w, b); ln_f x 2
    assert sum(o.count for o in acc_ops) == 3 + 12 * (4 + 8) + 2


@pytest.mark.parametrize("kv_len", [1, 100, 2048])
def test_decode_uses_one_query_token_and_the_kv_length(kv_len: int) -> None:
    w = build_workload("llama-2-7b", WorkloadSpec(Mode.DECODE, 3, kv_len, dtype="fp16"))
    assert w.mode is Mode.DECODE and w.kv_len == kv_len
    attn = [o for o in w.ops if o.kind is OpKind.ATTENTION]
    assert attn
    for o in attn:
        batch, heads, kv_heads, q_len, keys, head_dim, _causal = o.dims
        assert (batch, q_len, keys) == (3, 1, kv_len)
    # one token per sequence through every projection, logits for one token per sequence
    assert all(o.dims[1] == 3 for o in w.ops if o.kind is OpKind.GEMM and o.op == "linear")


def test_prefill_logits_only_for_the_last_token() -> None:
    w = build_workload("llama-2-7b", WorkloadSpec(Mode.PREFILL, 2, 256, dtype="fp16"))
    (head,) = [o for o in w.ops if o.name.endswith("lm_head")]
    assert head.dims[1] == 2
    assert w.kv_len == 0


def test_decode_is_far_cheaper_than_prefill_of_the_same_context() -> None:
    decode = build_workload("llama-2-7b", WorkloadSpec(Mode.DECODE, 1, 1024, dtype="fp16"))
    prefill = build_workload("llama-2-7b", WorkloadSpec(Mode.PREFILL, 1, 1024, dtype="fp16"))
    assert prefill.flops > 100 * decode.flops


def test_flops_grow_with_batch_and_sequence() -> None:
    def flops(b: int, s: int) -> float:
        return build_workload("gpt2", WorkloadSpec(Mode.INFERENCE, b, s)).flops

    assert flops(2, 64) == pytest.approx(2 * flops(1, 64), rel=1e-9)  # every op scales with the batch
    assert flops(1, 128) > 2 * flops(1, 64)  # attention is quadratic in s


@pytest.mark.parametrize("dtype", [DType.FP32, DType.BF16, DType.FP16])
def test_dtype_sets_bytes_per_element(dtype: DType) -> None:
    w = build_workload("gpt2", WorkloadSpec(Mode.INFERENCE, 1, 64, dtype=dtype))
    ref = build_workload("gpt2", WorkloadSpec(Mode.INFERENCE, 1, 64, dtype=DType.FP32))
    assert w.dtype is dtype
    assert w.flops == ref.flops
    gemm = [o for o in w.ops if o.kind is OpKind.GEMM]
    ref_gemm = [o for o in ref.ops if o.kind is OpKind.GEMM]
    for a, b in zip(gemm, ref_gemm, strict=True):
        assert a.bytes == pytest.approx(b.bytes * dtype.bytes / 4.0)


def test_dtype_spelling_is_parsed() -> None:
    w = build_workload("gpt2", WorkloadSpec(Mode.INFERENCE, 1, 16, dtype="bfloat16"))  # type: ignore[arg-type]
    assert w.dtype is DType.BF16


def test_layer_ops_repeat_by_count_not_by_copies() -> None:
    """The IR of a deep model is as long as that of a shallow one: layers are a count."""
    small = build_workload("gpt2", WorkloadSpec(Mode.INFERENCE, 1, 32))
    xl = build_workload("gpt2-xl", WorkloadSpec(Mode.INFERENCE, 1, 32))
    assert len(small.ops) == len(xl.ops)
    assert max(o.count for o in small.ops) == load_model("gpt2").num_layers
    assert max(o.count for o in xl.ops) == load_model("gpt2-xl").num_layers


def test_fused_attention_replaces_eager_scores() -> None:
    eager = build_workload("gpt2", WorkloadSpec(Mode.INFERENCE, 1, 128, attention="eager"))
    sdpa = build_workload("gpt2", WorkloadSpec(Mode.INFERENCE, 1, 128, attention="sdpa"))
    assert any(o.op == "bmm" for o in eager.ops) and not any(o.kind is OpKind.ATTENTION for o in eager.ops)
    assert any(o.kind is OpKind.ATTENTION for o in sdpa.ops) and not any(o.op == "bmm" for o in sdpa.ops)
    assert sdpa.bytes < eager.bytes  # scores never reach DRAM


def test_engine_style_launches_fewer_kernels_than_hf() -> None:
    hf = build_workload("llama-2-7b", WorkloadSpec(Mode.INFERENCE, 1, 64, style="hf"))
    engine = build_workload("llama-2-7b", WorkloadSpec(Mode.INFERENCE, 1, 64, style="engine"))
    assert engine.num_kernels < hf.num_kernels
    assert engine.flops == pytest.approx(hf.flops, rel=0.05)


def test_switch_experts_sync_the_host() -> None:
    """HF Switch routes each expert's tokens with a boolean index (``nonzero``): a host op per expert."""
    w = build_workload("switch-xl", WorkloadSpec(Mode.INFERENCE, 1, 64))
    hosts = [o for o in w.ops if o.kind is OpKind.HOST]
    assert hosts and all(o.op == "nonzero" for o in hosts)
    assert w.num_kernels == sum(o.count for o in w.ops) - sum(o.count for o in hosts)


@pytest.mark.parametrize(("batch", "seq"), [(0, 64), (-1, 64), (1, 0), (1, -5)])
def test_non_positive_sizes_are_config_errors(batch: int, seq: int) -> None:
    with pytest.raises(ConfigError, match="positive integer"):
        build_workload("gpt2", WorkloadSpec(Mode.INFERENCE, batch, seq))


def test_absurd_batch_is_refused_before_the_flop_arithmetic_overflows() -> None:
    build_workload("gpt2", WorkloadSpec(Mode.INFERENCE, 2**31, 8))  # the largest accepted
    with pytest.raises(ConfigError, match=r"batch size 2147483649 is beyond what perfcast models"):
        build_workload("gpt2", WorkloadSpec(Mode.INFERENCE, 2**31 + 1, 8))


def test_sequence_beyond_max_positions_names_the_limit() -> None:
    message = r"1025 exceeds the 1024 learned positions of gpt2; use a sequence length in 1\.\.1024"
    with pytest.raises(ConfigError, match=message):
        build_workload("gpt2", WorkloadSpec(Mode.INFERENCE, 1, 1025))


@pytest.mark.parametrize(("field", "value", "allowed"), [
    ("style", "jax", "hf, engine"),
    ("attention", "ring", "eager, sdpa, flash"),
    ("optimizer", "lion", "adam, sgd, none"),
])
def test_unknown_choices_list_the_allowed_ones(field: str, value: str, allowed: str) -> None:
    spec = WorkloadSpec(Mode.TRAINING, 1, 16, **{field: value})
    with pytest.raises(ConfigError, match=allowed):
        build_workload("gpt2", spec)


@pytest.mark.parametrize("model", ["bert-base", "switch-xl"])
@pytest.mark.parametrize("mode", [Mode.PREFILL, Mode.DECODE])
def test_serving_modes_need_a_decoder(model: str, mode: Mode) -> None:
    with pytest.raises(UnsupportedError, match="decoder-only"):
        build_workload(model, WorkloadSpec(mode, 1, 16))


def test_unknown_model_is_unknown_name_error() -> None:
    with pytest.raises(UnknownNameError, match="gpt2"):
        build_workload("gtp2", WorkloadSpec(Mode.INFERENCE, 1, 16))


def test_unknown_dtype_is_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown dtype"):
        build_workload("gpt2", WorkloadSpec(Mode.INFERENCE, 1, 16, dtype="fp13"))  # type: ignore[arg-type]


def test_workload_is_deterministic_and_frozen() -> None:
    a = build_workload("opt-toy-1layer", WorkloadSpec(Mode.TRAINING, 2, 32))
    b = build_workload(load_model("opt-toy-1layer"), WorkloadSpec(Mode.TRAINING, 2, 32))
    assert a.ops == b.ops
    with pytest.raises(AttributeError):
        a.ops[0].flops = 0.0  # type: ignore[misc]
