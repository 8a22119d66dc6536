"""Unit and property tests of ``perfcast.workload.sharding``: Megatron tensor parallelism on an op list."""

from __future__ import annotations

import signal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfcast.catalog.models import load_model
from perfcast.dtypes import DType
from perfcast.errors import ConfigError
from perfcast.workload.build import WorkloadSpec, build_workload
from perfcast.workload.sharding import check_tp, shard_tp
from perfcast.workload.types import Mode, Op, OpKind, Phase


def _sharded_flops(ops: list[Op] | tuple[Op, ...]) -> float:
    return sum(o.flops * o.count for o in ops if o.tp_split != "none" and o.kind is not OpKind.COMM)


@pytest.mark.parametrize(("model", "tp"), [("llama-2-7b", 2), ("llama-2-7b", 4), ("llama-2-7b", 8),
                                           ("opt-toy-1layer", 2), ("opt-toy-1layer", 8)])
@pytest.mark.parametrize("mode", [Mode.INFERENCE, Mode.TRAINING])
def test_sharded_flops_times_degree_equal_unsharded(model: str, tp: int, mode: Mode) -> None:
    """Every split op does 1/tp of the work on each GPU; replicated ops (norms, router) are unchanged.

    (Vocabularies and widths here divide by tp: Llama-2 32000, toy OPT 50272.)
    """
    w = build_workload(model, WorkloadSpec(mode, 2, 64, optimizer="none"))
    sharded = shard_tp(w.ops, tp)
    assert _sharded_flops(sharded) * tp == pytest.approx(_sharded_flops(w.ops), rel=1e-9)
    replicated = [o for o in w.ops if o.tp_split == "none"]
    assert replicated == [o for o in sharded if o.tp_split == "none" and o.kind is not OpKind.COMM]


def test_tp1_is_identity() -> None:
    w = build_workload("gpt2", WorkloadSpec(Mode.INFERENCE, 1, 32))
    assert shard_tp(w.ops, 1) == list(w.ops)


def test_all_reduce_after_each_row_parallel_linear() -> None:
    """Megatron: one all-reduce of the (tokens x hidden) activations after the attention output and the
    MLP down projection of every layer, plus one after the vocab-parallel embedding."""
    b, s, h = 2, 64, 4096
    w = build_workload("llama-2-7b", WorkloadSpec(Mode.INFERENCE, b, s, dtype="fp16"))
    sharded = shard_tp(w.ops, 4)
    comm = [o for o in sharded if o.kind is OpKind.COMM]
    assert all(o.op == "all_reduce" and o.dims[1] == 4 for o in comm)
    per_layer = [o for o in comm if o.count == 32]
    assert len(per_layer) == 2
    assert all(o.dims[0] == b * s * h * 2 for o in per_layer)  # fp16 activations
    assert sum(o.count for o in comm) == 2 * 32 + 1


def test_comm_follows_its_gemm() -> None:
    w = build_workload("gpt2", WorkloadSpec(Mode.INFERENCE, 1, 32))
    sharded = shard_tp(w.ops, 2)
    for i, o in enumerate(sharded):
        if o.kind is OpKind.COMM and o.phase is Phase.FORWARD and o.count > 1:
            prev = sharded[i - 1]
            assert prev.kind is OpKind.GEMM and prev.tp_split == "row"


def test_column_and_row_splits_shard_the_right_dimension() -> None:
    w = build_workload("llama-2-7b", WorkloadSpec(Mode.INFERENCE, 1, 16, dtype="fp16", style="engine"))
    by_name = {o.name.split(".")[-1]: o for o in shard_tp(w.ops, 4)}
    orig = {o.name.split(".")[-1]: o for o in w.ops}
    qkv, o_proj = by_name["qkv_proj"], by_name["o_proj"]
    assert qkv.dims[3] == orig["qkv_proj"].dims[3] // 4 and qkv.dims[2] == orig["qkv_proj"].dims[2]  # column
    assert o_proj.dims[2] == orig["o_proj"].dims[2] // 4 and o_proj.dims[3] == orig["o_proj"].dims[3]  # row
    attn = by_name["attention"]
    assert attn.dims[1] == 32 // 4 and attn.dims[2] == 32 // 4
    assert by_name["lm_head"].dims[3] == 32000 // 4  # vocab
    assert qkv.params * 4 == orig["qkv_proj"].params


def test_uneven_vocab_rounds_up() -> None:
    """GPT-2's 50257-token head over tp=2: each GPU holds ceil(50257/2) columns, never fewer FLOPs."""
    w = build_workload("gpt2", WorkloadSpec(Mode.INFERENCE, 1, 32))
    (head,) = [o for o in shard_tp(w.ops, 2) if o.name.endswith("lm_head")]
    assert head.dims[3] == 25129
    (orig,) = [o for o in w.ops if o.name.endswith("lm_head")]
    assert head.flops * 2 >= orig.flops


# -- property: any GEMM with dims divisible by tp ----------------------------------------------------------
@st.composite
def gemm_ops(draw: st.DrawFn) -> tuple[Op, int]:
    tp = draw(st.sampled_from([1, 2, 4, 8]))
    split = draw(st.sampled_from(["column", "row", "vocab", "heads"]))
    op_name = "bmm" if split == "heads" else "linear"
    b = draw(st.integers(1, 16)) * (tp if op_name == "bmm" else 1)
    m = draw(st.integers(1, 4096))
    k = draw(st.integers(1, 512)) * tp
    n = draw(st.integers(1, 512)) * tp
    flops = 2.0 * b * m * k * n
    op = Op(name="x", op=op_name, kind=OpKind.GEMM, dims=(b, m, k, n), dtype=DType.BF16, flops=flops,
            bytes_read=float(b * (m * k + k * n) * 2), bytes_written=float(b * m * n * 2),
            count=draw(st.integers(1, 96)), tp_split=split, params=k * n)
    return op, tp


@pytest.mark.property
@settings(max_examples=200, deadline=None)
@given(gemm_ops())
def test_property_sharded_gemm_flops_times_tp_equal_unsharded(case: tuple[Op, int]) -> None:
    op, tp = case
    out = shard_tp([op], tp)
    (sharded,) = [o for o in out if o.kind is OpKind.GEMM]
    assert sharded.flops * tp == pytest.approx(op.flops, rel=1e-12)
    assert sharded.count == op.count
    assert sharded.bytes_read <= op.bytes_read
    comm = [o for o in out if o.kind is OpKind.COMM]
    assert len(comm) == (1 if tp > 1 and op.tp_split == "row" else 0)


@pytest.mark.property
@settings(max_examples=100, deadline=None)
@given(st.integers(1, 10_000), st.integers(1, 10_000), st.sampled_from([2, 3, 4, 8]),
       st.sampled_from(["column", "heads"]))
def test_property_vector_ops_shrink_by_tp(rows: int, cols: int, tp: int, split: str) -> None:
    op = Op(name="v", op="gelu", kind=OpKind.VECTOR, dims=(rows, cols), dtype=DType.FP16, flops=12.0 * rows * cols,
            bytes_read=2.0 * rows * cols, bytes_written=2.0 * rows * cols, tp_split=split)
    (sharded,) = shard_tp([op], tp)
    assert sharded.flops * tp == pytest.approx(op.flops)
    assert sharded.bytes * tp == pytest.approx(op.bytes)


# -- check_tp -------------------------------------------------------------------------------------------------
def test_check_tp_accepts_divisors() -> None:
    cfg = load_model("llama-2-70b")
    for tp in (1, 2, 4, 8, 16, 32, 64):
        check_tp(cfg, tp)


def test_check_tp_names_the_valid_choices() -> None:
    """The house example: one line with the offending value, the model and the allowed degrees."""
    cfg = load_model("llama-2-70b")
    with pytest.raises(ConfigError) as info:
        check_tp(cfg, 6)
    assert str(info.value) == (
        "tp=6 must divide num_attention_heads=64 (llama-2-70b); use tp in {1, 2, 4, 8, 16, 32, 64}"
    )


def test_check_tp_gpt2_twelve_heads() -> None:
    with pytest.raises(ConfigError, match=r"use tp in \{1, 2, 3, 4, 6, 12\}"):
        check_tp(load_model("gpt2"), 5)


def test_check_tp_kv_heads_must_divide_or_be_divided() -> None:
    """Falcon-180B: 232 query heads, 8 KV heads. tp=29 divides 232 but neither divides nor is a multiple
    of 8, so the KV heads cannot be split or replicated evenly; 232 itself is a multiple of 8."""
    cfg = load_model("falcon-180b")
    assert (cfg.num_heads, cfg.num_kv_heads) == (232, 8)
    with pytest.raises(ConfigError, match=r"num_key_value_heads=8.*use tp in \{1, 2, 4, 8, 232\}"):
        check_tp(cfg, 29)
    check_tp(cfg, 8)


@pytest.mark.parametrize("tp", [0, -2])
def test_check_tp_rejects_non_positive(tp: int) -> None:
    with pytest.raises(ConfigError, match=">= 1"):
        check_tp(load_model("gpt2"), tp)


def test_check_tp_error_is_fast_for_absurd_head_counts() -> None:
    """A malformed config with 10**12 heads gets its one-line error at once (the suggestions stop at 4096)."""
    cfg = load_model("gpt2").model_copy(update={"num_heads": 10**12, "num_kv_heads": 10**12})

    def expire(_signum: int, _frame: object) -> None:
        raise TimeoutError("check_tp took more than 10 s")

    previous = signal.signal(signal.SIGALRM, expire) if hasattr(signal, "SIGALRM") else None
    if previous is not None:
        signal.alarm(10)  # fail rather than hang the suite if the divisor search loops over 10**12 heads
    try:
        with pytest.raises(ConfigError, match=r"tp=7 must divide num_attention_heads=1000000000000"):
            check_tp(cfg, 7)
    finally:
        if previous is not None:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)
