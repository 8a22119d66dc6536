"""Unit tests of ``perfcast.compose.fusion``: compiler fusion of pointwise chains."""

from __future__ import annotations

import pytest

from perfcast.compose.fusion import fuse_chains
from perfcast.dtypes import DType
from perfcast.workload.build import WorkloadSpec, build_workload
from perfcast.workload.graph import Graph
from perfcast.workload.types import Mode, OpKind, Workload


def _kernels(ops: list) -> int:
    return sum(o.count for o in ops if o.kind is not OpKind.HOST)


def _bytes(ops: list) -> float:
    return sum(o.bytes * o.count for o in ops)


@pytest.mark.parametrize(("model", "mode"), [
    ("gpt2", Mode.INFERENCE), ("gpt2", Mode.TRAINING), ("bert-large", Mode.INFERENCE),
    ("opt-toy-1layer", Mode.TRAINING), ("switch-xl", Mode.INFERENCE), ("llama-2-7b", Mode.INFERENCE),
])
def test_fused_workload_has_fewer_kernels_and_bytes(model: str, mode: Mode) -> None:
    w: Workload = build_workload(model, WorkloadSpec(mode, 2, 128))
    fused = fuse_chains(w.ops)
    assert _kernels(fused) < _kernels(list(w.ops))
    assert _bytes(fused) < _bytes(list(w.ops))
    # fusion moves no work: FLOPs are kept, and GEMMs/attention/host ops pass through unchanged
    assert sum(o.flops * o.count for o in fused) == pytest.approx(w.flops, rel=1e-12)
    heavy = [o for o in w.ops if o.kind is not OpKind.VECTOR]
    assert [o for o in fused if o.kind is not OpKind.VECTOR] == heavy


def test_gelu_new_chain_becomes_one_kernel_reading_once_writing_once() -> None:
    """GPT-2's NewGELU is 8 eager kernels; fused it reads x once and writes y once."""
    g = Graph(DType.FP32)
    from perfcast.workload.models.common import activation

    activation(g, "act", "gelu_new", 1000)
    assert len(g.ops) == 8
    (fused,) = fuse_chains(g.ops)
    assert fused.op == "fused_pointwise"
    assert fused.get("fused_ops") == 8
    assert fused.bytes == 2 * 1000 * 4
    assert fused.flops == sum(o.flops for o in g.ops)


def test_chain_around_a_reduction_is_that_reduction() -> None:
    g = Graph(DType.FP16)
    chain = g.new_chain("softmax")
    g.pointwise("scale", "divu", 4096, chain=chain, fused_bytes=4096 * 2)
    g.reduction("softmax", "softmax", 64, 64, chain=chain, fused_bytes=4096 * 2)
    (fused,) = fuse_chains(g.ops)
    assert fused.op == "softmax" and fused.dims == (64, 64) and fused.get("reduce") is True
    assert fused.bytes == 2 * 4096 * 2


def test_single_op_chain_is_left_as_is() -> None:
    g = Graph(DType.FP32)
    op = g.pointwise("act", "gelu", 100, chain=g.new_chain("act"))
    (out,) = fuse_chains(g.ops)
    assert out.chain is None and out.bytes == op.bytes and out.op == "gelu"


def test_chains_do_not_fuse_across_counts_or_other_ops() -> None:
    g = Graph(DType.FP32)
    chain = g.new_chain("c")
    g.pointwise("a", "mulu", 100, chain=chain, fused_bytes=400)
    with g.scope("layer", count=4):
        g.pointwise("b", "addu", 100, chain=chain, fused_bytes=400)
    g.linear("fc", 10, 10, 10)
    g.pointwise("c", "tanh", 100, chain=chain, fused_bytes=400)
    out = fuse_chains(g.ops)
    assert [o.op for o in out] == ["mulu", "addu", "linear", "tanh"]


def test_unchained_ops_keep_their_order() -> None:
    g = Graph(DType.FP32)
    g.linear("a", 4, 4, 4)
    g.pointwise("b", "gelu", 16)
    g.linear("c", 4, 4, 4)
    assert [o.name for o in fuse_chains(g.ops)] == ["a", "b", "c"]
