"""PyTorch execution traces: the op-tree walk (one price per outermost modelled op, unknown leaves memory-bound,
views free), the step split, both schemas, format detection and the eager-step prediction."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from execution_traces import MLP_ET, MLP_KINETO, TRANSFORMER_ET, EtBuilder, scalar, tensor, tensor_list

from perfcast.capture.execution_ops import execution_trace_steps
from perfcast.capture.execution_trace import load_execution_trace, parse_execution_trace, read_trace_json
from perfcast.catalog.hardware import load_hardware
from perfcast.errors import ConfigError, UnsupportedError
from perfcast.replay.execution import replay_execution_trace
from perfcast.replay.kineto import KinetoTrace
from perfcast.replay.run import load_trace
from perfcast.workload.types import OpKind, Phase


def _steps(b: EtBuilder):  # noqa: ANN202 - (steps, whole_trace)
    return execution_trace_steps(parse_execution_trace(b.data()))


@pytest.mark.parametrize("flat", [False, True], ids=["schema-1.1", "schema-1.0.1-flat"])
def test_linear_with_its_addmm_child_is_one_gemm(flat: bool) -> None:
    b = EtBuilder(flat=flat)
    b.linear(None, 64, 256, 512)
    (step,), whole = _steps(b)
    assert whole and step.name == "whole trace"
    assert [(o.kind, o.dims) for o in step.ops] == [(OpKind.GEMM, (1, 64, 256, 512))]
    assert step.priced == {"kernel model": 1} and step.unknown_ops == 0
    assert step.ops[0].flops == 2 * 64 * 256 * 512


def test_matmul_convolution_embedding_and_pooling_take_their_recorded_shapes_and_values() -> None:
    b = EtBuilder()
    b.op("aten::matmul", None, (tensor(8, 16, 32), tensor(32, 64)), (tensor(8, 16, 64),))
    ints = "GenericList[Int,Int]"  # stride, padding, dilation, transposed, output_padding, groups
    b.op("aten::convolution", None, (tensor(2, 3, 32, 32), tensor(16, 3, 3, 3), tensor(16), scalar([2, 2], ints),
                                     scalar([1, 1], ints), scalar([1, 1], ints), scalar(False, "Bool"),
                                     scalar([0, 0], ints), scalar(1)), (tensor(2, 16, 16, 16),))
    b.op("aten::embedding", None, (tensor(1000, 64), tensor(4, 10, dtype="long int")), (tensor(4, 10, 64),))
    bwd = b.annotation("autograd::engine::evaluate_function: EmbeddingBackward0")
    b.op("aten::embedding_dense_backward", bwd, (tensor(4, 10, 64), tensor(4, 10, dtype="long int"), scalar(1000),
                                                 scalar(-1), scalar(False, "Bool")), (tensor(1000, 64),))
    b.op("aten::max_pool2d", None, (tensor(2, 16, 16, 16), scalar([2, 2], ints), scalar([], "GenericList[]"),
                                    scalar([0, 0], ints)), (tensor(2, 16, 8, 8),))
    (step,), _ = _steps(b)
    mm, conv, emb, *emb_bwd, pool = step.ops
    assert pool.kind is OpKind.POOL and pool.dims == (2, 16, 16, 2, 2)  # an empty stride is the kernel size
    assert mm.dims == (1, 128, 32, 64)  # x @ W: the batch folds into the rows, one mm
    assert conv.kind is OpKind.CONV and conv.dims == (2, 3, 16, 3, 32, 2, 1, 1)  # stride 2, padding 1
    assert emb.kind is OpKind.EMBEDDING and emb.dims == (40, 64, 1000)
    assert emb_bwd and all(o.phase is Phase.BACKWARD for o in emb_bwd) and step.unknown_ops == 0


def test_views_and_annotations_cost_nothing() -> None:
    b = EtBuilder()
    b.op("aten::view", None, (tensor(8, 4), scalar([32], "GenericList[Int]")), (tensor(32),))
    b.op("aten::t", None, (tensor(8, 4),), (tensor(4, 8),))
    b.op("record_param_comms", None, (tensor(8, 4),), (tensor(8, 4),))
    b.op("aten::contiguous", None, (tensor(8, 4),), (tensor(8, 4),))  # already contiguous: no child, no copy
    b.annotation("## forward ##")
    b.op("torch::autograd::AccumulateGrad", None, (tensor(8, 4),), operator=False)  # an autograd node, no schema
    with pytest.raises(ConfigError, match="no operator of the execution trace launches device work"):
        replay_execution_trace(parse_execution_trace(b.data()), hardware="a100-sxm-80gb")


def test_unknown_leaf_is_memory_bound_on_its_bytes_and_counted() -> None:
    b = EtBuilder()
    b.op("aten::my_custom_op", None, (tensor(16, 32), tensor(32)), (tensor(16, 32),))
    wrapper = b.op("aten::mystery_wrapper", None, (tensor(16, 32),), (tensor(16, 32),))
    b.op("aten::relu", wrapper, (tensor(16, 32),), (tensor(16, 32),))  # an unknown op with children: walked
    (step,), _ = _steps(b)
    unknown, relu = step.ops
    assert step.unknown == ("aten::my_custom_op",) and step.priced == {"kernel model": 1, "unknown: memory-bound": 1}
    assert unknown.kind is OpKind.VECTOR and unknown.flops == 0
    assert unknown.bytes_read == (16 * 32 + 32) * 4 and unknown.bytes_written == 16 * 32 * 4
    assert relu.op == "relu"


def test_steps_split_on_profiler_step_nodes_and_backward_is_its_own_phase() -> None:
    b = EtBuilder()
    for i in range(2):
        step = b.annotation(f"ProfilerStep#{i + 1}")
        b.linear(step, 32, 64, 128)
        bwd = b.annotation("autograd::engine::evaluate_function: AddmmBackward0", step)
        node = b.op("AddmmBackward0", bwd, operator=False)
        b.op("aten::mm", node, (tensor(32, 128), tensor(128, 64)), (tensor(32, 64),))
        opt = b.annotation("Optimizer.step#SGD.step", step)
        b.op("aten::add_", opt, (tensor(128, 64), tensor(128, 64), scalar(1)), (tensor(128, 64),))
    steps, whole = _steps(b)
    assert not whole and [s.name for s in steps] == ["ProfilerStep#1", "ProfilerStep#2"]
    for s in steps:
        assert s.training
        assert [o.phase for o in s.ops] == [Phase.FORWARD, Phase.BACKWARD, Phase.OPTIMIZER]
        assert s.ops[1].dims == (1, 32, 128, 64)


def test_another_threads_ops_join_the_step_that_was_running() -> None:
    b = EtBuilder()
    s1 = b.annotation("ProfilerStep#1")
    b.linear(s1, 8, 16, 16)
    other = b._raw(90, "[pytorch|profiler|execution_trace|thread]", 1, [], [], "", 2)
    b.next_id = 10
    b.op("aten::mm", other, (tensor(8, 16), tensor(16, 16)), (tensor(8, 16),), tid=2)  # autograd thread, id 10
    b.next_id = 20
    s2 = b.annotation("ProfilerStep#2")
    b.linear(s2, 8, 16, 16)
    steps, _ = _steps(b)
    assert [len(s.ops) for s in steps] == [2, 1]


def test_collective_takes_its_group_from_record_param_comms() -> None:
    b = EtBuilder()
    ar = b.op("c10d::allreduce_", None, (tensor_list((1024, 1024)),))
    b.op("record_param_comms", ar, (scalar(0), scalar("pg"), scalar("allreduce"), scalar(8)))
    (step,), _ = _steps(b)
    (op,) = step.ops
    assert op.kind is OpKind.COMM and op.op == "all_reduce" and op.dims == (1024 * 1024 * 4, 8)
    one_gpu = EtBuilder()
    one_gpu.op("c10d::allreduce_", None, (tensor(1024, 1024),))
    with pytest.raises(UnsupportedError, match="records no group size; give --world-size"):
        replay_execution_trace(parse_execution_trace(one_gpu.data()), hardware="h100-sxm-80gb")
    alone = replay_execution_trace(parse_execution_trace(one_gpu.data()), hardware="h100-sxm-80gb", world_size=1)
    eight = replay_execution_trace(parse_execution_trace(one_gpu.data()), hardware="h100-sxm-80gb", world_size=8)
    assert eight.step_time_s > alone.step_time_s  # a 4 MiB all-reduce over 8 GPUs takes time; over 1 none


def test_host_device_copy_runs_at_the_pcie_link_bandwidth() -> None:
    b = EtBuilder()
    to = b.op("aten::to", None, (tensor(1024, 1024, device="cpu"),), (tensor(1024, 1024),))
    b.op("aten::copy_", to, (tensor(1024, 1024), tensor(1024, 1024, device="cpu")), (tensor(1024, 1024),))
    b.op("aten::copy_", None, (tensor(1024, 1024), tensor(1024, 1024)), (tensor(1024, 1024),))  # on the device
    (step,), _ = _steps(b)
    assert [o.op for o in step.ops] == ["h2d_copy", "copy_"]
    r = replay_execution_trace(parse_execution_trace(b.data()), hardware="h100-sxm-80gb")
    pcie = load_hardware("h100-sxm-80gb").interconnect.pcie_bidir_bandwidth_Bps
    assert pcie and r.step_time_s > 4 * 2**20 / (pcie / 2)


def test_recorded_mlp_trace_gemm_flops_in_closed_form() -> None:
    """make_execution_traces.py's MLP: batch 64, 256 -> 512 -> 10. Per step the forward runs the two layers'
    GEMMs, the backward dX and dW of the second and only dW of the first (its input needs no gradient):
    2 * (64*256*512 * 2 + 64*512*10 * 3) FLOPs."""
    steps, whole = execution_trace_steps(load_execution_trace(MLP_ET))
    assert not whole and [s.name for s in steps] == ["ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#3"]
    for s in steps:
        gemm = [o for o in s.ops if o.kind is OpKind.GEMM]
        assert [o.phase for o in gemm] == [Phase.FORWARD] * 2 + [Phase.BACKWARD] * 3
        assert sum(o.flops for o in gemm) == 2 * (64 * 256 * 512 * 2 + 64 * 512 * 10 * 3)
        assert sum(1 for o in s.ops if o.phase is Phase.OPTIMIZER) == 4  # SGD: one add_ per parameter


def test_recorded_transformer_trace_prices_attention_and_its_backward() -> None:
    (s, *_), _ = execution_trace_steps(load_execution_trace(TRANSFORMER_ET))
    attention = [o for o in s.ops if o.kind is OpKind.ATTENTION]
    assert [o.op for o in attention] == ["attention", "attention_backward"]
    assert attention[0].dims[:6] == (4, 4, 4, 64, 64, 32) and attention[0].get("training") is True
    assert s.unknown == ("aten::mse_loss_backward",)  # the one leaf of unknown kind


def test_kineto_of_the_same_run_gives_measured_steps_by_record_function_id() -> None:
    r = replay_execution_trace(MLP_ET, hardware="h100-sxm-80gb", kineto=MLP_KINETO)
    assert all(s.measured_s is not None and s.measured_s > 0 for s in r.steps)
    a100 = replay_execution_trace(MLP_ET, hardware="a100-sxm-80gb")
    assert a100.measured_step_time_s is None and a100.step_time_s > 0
    with pytest.raises(ConfigError, match="not a trace of the same run"):
        replay_execution_trace(TRANSFORMER_ET, hardware="a100-sxm-80gb", kineto=MLP_KINETO)


def test_format_detection_and_one_line_errors(tmp_path: Path) -> None:
    assert isinstance(load_trace(MLP_KINETO), KinetoTrace)
    assert load_trace(MLP_ET).schema.startswith("1.1")  # type: ignore[union-attr]
    chakra = tmp_path / "trace.0.et"
    chakra.write_bytes(b"\x0a\x05\x31\x2e\x30\x2e\x30\x12\x00")  # a protobuf GlobalMetadata-like message
    binary = tmp_path / "trace.bin"
    binary.write_bytes(b"\x08\x01\x12\x04abcd\x00\x01")
    for path in (chakra, binary):
        with pytest.raises(ConfigError, match="Chakra protobuf execution trace") as exc:
            read_trace_json(path)
        assert "\n" not in str(exc.value)
    text = tmp_path / "t.json"
    text.write_text("not json")
    with pytest.raises(ConfigError, match="not a readable JSON trace"):
        load_trace(text)
    text.write_text('{"nodes": []}')
    with pytest.raises(ConfigError, match="nor a PyTorch execution trace"):
        load_trace(text)
    with pytest.raises(ConfigError, match="give --hardware"):
        replay_execution_trace(MLP_ET, hardware=None)


def test_gzip_and_plain_read_alike(tmp_path: Path) -> None:
    b = EtBuilder()
    b.linear(None, 4, 8, 8)
    plain = b.write(tmp_path / "et.json")
    packed = tmp_path / "et.json.gz"
    with gzip.open(packed, "wb") as fh:
        fh.write(plain.read_bytes())
    assert load_execution_trace(plain).nodes == load_execution_trace(packed).nodes


def test_faster_device_predicts_a_faster_step() -> None:
    a100 = replay_execution_trace(TRANSFORMER_ET, hardware="a100-sxm-80gb")
    t4 = replay_execution_trace(TRANSFORMER_ET, hardware="t4")
    assert t4.step_time_s > a100.step_time_s > 0
    assert a100.to_dict()["priced"] == {"kernel model": 177, "unknown: memory-bound": 3}


def test_recorded_here_with_torch(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from make_execution_traces import record

    et, kineto = record("mlp", tmp_path, steps=2)
    r = replay_execution_trace(et, hardware="a100-sxm-80gb", kineto=kineto)
    assert [s.name for s in r.steps] == ["ProfilerStep#1", "ProfilerStep#2"]
    assert all(s.measured_s for s in r.steps) and not r.unknown
    assert r.to_dict()["ops"] == 2 * 18


def test_nodes_without_a_recorded_root_are_the_top_of_the_tree() -> None:
    b = EtBuilder()
    b.linear(None, 4, 8, 8)
    data = b.data()
    data["nodes"] = [n for n in data["nodes"] if not n["name"].startswith("[pytorch")]  # roots cut off
    (step,), whole = execution_trace_steps(parse_execution_trace(data))
    assert whole and [o.kind for o in step.ops] == [OpKind.GEMM]
