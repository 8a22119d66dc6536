"""Unit tests of layer 2 (``perfcast.compose``): one device's step, its parts and interval, the step request
and the one-GPU ``predict`` (a request over several GPUs: tests/unit/system/test_parallel_predict.py)."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from perfcast.catalog.hardware import load_hardware
from perfcast.coefficients.bundle import Calibration
from perfcast.coefficients.compose import load_compose_coefficients
from perfcast.coefficients.intervals import load_intervals
from perfcast.compose.predict import StepRequest, parse_parallelism, predict
from perfcast.compose.step import predict_step, simulate_queue
from perfcast.compose.types import OpTime, StepTime
from perfcast.dtypes import DType
from perfcast.errors import ConfigError, DataError
from perfcast.kernel.predict import KernelTime
from perfcast.workload.build import WorkloadSpec, build_workload
from perfcast.workload.types import Mode, Op, OpKind, Phase, Workload

CASES = [
    ("gpt2", "a100-pcie-40gb", Mode.INFERENCE, 4, 256, DType.FP32),
    ("gpt2", "v100-sxm2-32gb", Mode.TRAINING, 2, 128, DType.FP32),
    ("bert-large", "t4", Mode.INFERENCE, 2, 128, DType.FP16),
    ("switch-xl", "a100-pcie-40gb", Mode.TRAINING, 1, 64, DType.FP32),
    ("llama-2-7b", "h100-sxm-80gb", Mode.DECODE, 8, 2048, DType.BF16),
    ("mixtral-8x7b", "mi300x", Mode.PREFILL, 1, 1024, DType.BF16),
]
IDS = [f"{c[0]}-{c[2].value}-{c[1]}" for c in CASES]


def _workload(model: str, mode: Mode, b: int, s: int, dtype: DType) -> Workload:
    return build_workload(model, WorkloadSpec(mode, b, s, dtype=dtype))


@pytest.fixture(params=CASES, ids=IDS)
def step(request: pytest.FixtureRequest) -> tuple[Workload, StepTime]:
    model, hw, mode, b, s, dtype = request.param
    w = _workload(model, mode, b, s, dtype)
    return w, predict_step(w, hw)


# -- what a StepTime says about itself ---------------------------------------------------------------------
def test_interval_brackets_the_prediction(step: tuple[Workload, StepTime]) -> None:
    _, st = step
    assert 0 < st.low_s < st.time_s < st.high_s
    assert all(math.isfinite(x) for x in (st.low_s, st.time_s, st.high_s))


def test_phases_and_groups_sum_to_device_busy(step: tuple[Workload, StepTime]) -> None:
    w, st = step
    assert sum(st.by_phase_s.values()) == pytest.approx(st.device_busy_s, rel=1e-9)
    assert sum(st.by_group_s.values()) == pytest.approx(st.device_busy_s, rel=1e-9)
    assert set(st.by_phase_s) == {p.value for p in {o.phase for o in w.ops}}
    assert sum(t.total_s for t in st.ops) == pytest.approx(st.device_busy_s, rel=1e-9)


def test_wall_time_covers_device_and_host(step: tuple[Workload, StepTime]) -> None:
    """One device queue runs every kernel in turn, and one host thread dispatches them all."""
    _, st = step
    assert st.time_s >= st.device_busy_s
    assert st.time_s >= st.host_s
    assert st.time_s <= st.device_busy_s + st.host_s + 1.0e-3  # plus the fixed step overhead at most


def test_step_echoes_its_request_and_workload(step: tuple[Workload, StepTime]) -> None:
    w, st = step
    assert (st.model_id, st.mode, st.batch_size, st.seq_len, st.dtype) == \
        (w.model_id, w.mode.value, w.batch_size, w.seq_len, w.dtype.value)
    assert st.flops == w.flops and st.num_kernels == w.num_kernels
    assert st.parallelism == "none" and st.comm_s == 0.0
    assert len(st.ops) == len(w.ops)


def test_achieved_flops_below_peak(step: tuple[Workload, StepTime]) -> None:
    w, st = step
    hw = load_hardware(st.hardware_id)
    assert 0 < st.achieved_flops_per_s < hw.peak(w.dtype)


def test_top_ops_are_sorted_by_device_time(step: tuple[Workload, StepTime]) -> None:
    _, st = step
    top = st.top_ops(5)
    assert len(top) == min(5, len(st.ops))
    totals = [t.total_s for t in top]
    assert totals == sorted(totals, reverse=True)
    assert totals[0] == max(t.total_s for t in st.ops)


def test_keep_ops_false_drops_the_op_list() -> None:
    w = _workload("gpt2", Mode.INFERENCE, 1, 64, DType.FP32)
    full, slim = predict_step(w, "a100-pcie-40gb"), predict_step(w, "a100-pcie-40gb", keep_ops=False)
    assert slim.ops == () and slim.time_s == full.time_s


# -- frameworks, fusion and synchronization ------------------------------------------------------------------
@pytest.mark.parametrize(("model", "mode"), [("gpt2", Mode.INFERENCE), ("gpt2", Mode.TRAINING),
                                             ("switch-xl", Mode.INFERENCE), ("bert-base", Mode.TRAINING)])
@pytest.mark.parametrize("hw", ["a100-pcie-40gb", "h100-sxm-80gb", "t4"])
def test_cheaper_launches_are_never_slower(model: str, mode: Mode, hw: str) -> None:
    """CUDA graphs (no host time per kernel) <= compiled launches <= eager launches, same device time."""
    w = _workload(model, mode, 1, 64, DType.FP32)
    eager = predict_step(w, hw, framework="eager")
    compiled = predict_step(w, hw, framework="compiled")
    graph = predict_step(w, hw, framework="graph")
    assert graph.time_s <= compiled.time_s <= eager.time_s
    assert eager.device_busy_s == compiled.device_busy_s == graph.device_busy_s
    assert graph.host_s <= compiled.host_s <= eager.host_s


def test_unknown_framework_is_config_error() -> None:
    w = _workload("gpt2", Mode.INFERENCE, 1, 16, DType.FP32)
    with pytest.raises(ConfigError, match="eager, compiled, graph"):
        predict_step(w, "a100-pcie-40gb", framework="jit")


@pytest.mark.parametrize(("model", "mode", "b", "s"), [("gpt2", Mode.INFERENCE, 4, 512), ("bert-large", Mode.INFERENCE,
                                                                                          8, 512),
                                                       ("gpt2", Mode.TRAINING, 2, 512)])
@pytest.mark.parametrize("hw", ["a100-pcie-40gb", "v100-pcie-32gb", "mi100"])
def test_fusion_is_faster_and_launches_fewer_kernels(model: str, mode: Mode, b: int, s: int, hw: str) -> None:
    w = _workload(model, mode, b, s, DType.FP32)
    eager, fused = predict_step(w, hw), predict_step(w, hw, fused=True)
    assert fused.num_kernels < eager.num_kernels
    assert fused.bytes < eager.bytes
    assert fused.time_s < eager.time_s
    assert fused.flops == eager.flops and fused.fused and not eager.fused


def _host_op(count: int) -> Op:
    return Op(name="sync", op="nonzero", kind=OpKind.HOST, dims=(1,), dtype=DType.FP32, flops=0.0, bytes_read=0.0,
              bytes_written=0.0, count=count)


@pytest.mark.parametrize("position", [1, 10, 25, -3])
@pytest.mark.parametrize("framework", ["eager", "graph"])
def test_a_host_sync_never_shortens_the_step(position: int, framework: str) -> None:
    w = _workload("gpt2", Mode.INFERENCE, 2, 128, DType.FP32)
    ops = list(w.ops)
    at = position % len(ops)
    ops.insert(at, _host_op(ops[at].count))
    synced = replace(w, ops=tuple(ops))
    base = predict_step(w, "a100-pcie-40gb", framework=framework)
    # (with CUDA graphs the sync's own host cost overlaps the wait for the device: equal up to rounding)
    assert predict_step(synced, "a100-pcie-40gb", framework=framework).time_s >= base.time_s * (1 - 1e-12)


def test_switch_host_syncs_cost_time() -> None:
    """Switch's per-expert ``nonzero`` drains the device queue; without them the step is no longer."""
    w = _workload("switch-xl", Mode.INFERENCE, 1, 128, DType.FP32)
    assert any(o.kind is OpKind.HOST for o in w.ops)
    no_sync = replace(w, ops=tuple(o for o in w.ops if o.kind is not OpKind.HOST))
    assert predict_step(no_sync, "a100-pcie-40gb").time_s <= predict_step(w, "a100-pcie-40gb").time_s


def _times(entries: list[tuple[float, float, int, OpKind]]) -> list[OpTime]:
    out = []
    for kernel_s, host_s, count, kind in entries:
        op = Op(name="x", op="x", kind=kind, dims=(1, 1), dtype=DType.FP32, flops=0.0, bytes_read=0.0,
                bytes_written=0.0, count=count)
        out.append(OpTime(op=op, kernel=KernelTime(kernel_s, "memory", 0.0, 0.0), host_s=host_s))
    return out


def test_queue_host_bound_and_device_bound_limits() -> None:
    """A segment without syncs runs at the pace of its slower side: tiny kernels wait for the host (sum of
    dispatch times plus the last kernel), large kernels keep the device busy (sum of kernel times)."""
    host_bound = _times([(1e-6, 1e-5, 1, OpKind.VECTOR)] * 10)
    wall, host = simulate_queue(host_bound)
    assert host == pytest.approx(1e-4)
    assert wall == pytest.approx(1e-4 + 1e-6)
    device_bound = _times([(1e-3, 1e-5, 1, OpKind.GEMM)] * 10)
    wall, host = simulate_queue(device_bound)
    assert wall == pytest.approx(1e-2)
    assert host == pytest.approx(1e-4)


def test_queue_repeats_a_segment_count_times() -> None:
    one = simulate_queue(_times([(1e-3, 1e-5, 1, OpKind.GEMM), (2e-3, 1e-5, 1, OpKind.GEMM)]))
    many = simulate_queue(_times([(1e-3, 1e-5, 7, OpKind.GEMM), (2e-3, 1e-5, 7, OpKind.GEMM)]))
    assert many[0] == pytest.approx(7 * one[0])
    assert many[1] == pytest.approx(7 * one[1])


def test_queue_sync_exposes_the_host() -> None:
    """After a synchronization the device idles while the host dispatches the next kernel."""
    free = simulate_queue(_times([(1e-3, 1e-4, 1, OpKind.GEMM)] * 2))[0]
    synced = simulate_queue(_times([(1e-3, 1e-4, 1, OpKind.GEMM), (0.0, 1e-4, 1, OpKind.HOST),
                                    (1e-3, 1e-4, 1, OpKind.GEMM)]))[0]
    assert synced >= free + 1e-4 - 1e-12


def test_empty_queue_takes_no_time() -> None:
    assert simulate_queue([]) == (0.0, 0.0)


# -- predict(): the entry point and simple parallelism ---------------------------------------------------------
def test_predict_equals_predict_step_of_the_built_workload() -> None:
    req = StepRequest(model="gpt2", hardware="a100-pcie-40gb", mode=Mode.INFERENCE, batch_size=2, seq_len=128)
    w = _workload("gpt2", Mode.INFERENCE, 2, 128, DType.FP32)
    assert predict(req).time_s == pytest.approx(predict_step(w, "a100-pcie-40gb").time_s, rel=1e-12)


@pytest.mark.parametrize(("model", "hardware", "mode", "dtype"), [
    ("gpt2", "a100-pcie-40gb", Mode.INFERENCE, DType.FP32),      # no torch_dtype: fp32, as transformers loads it
    ("llama-2-7b", "a100-sxm-80gb", Mode.DECODE, DType.FP16),    # torch_dtype float16
    ("llama-3-8b", "h100-sxm-80gb", Mode.TRAINING, DType.BF16),  # torch_dtype bfloat16
    ("llama-3-8b", "t4", Mode.PREFILL, DType.FP16),              # a T4 has no bf16 math
])
def test_predict_dtype_defaults_to_the_checkpoints(model: str, hardware: str, mode: Mode, dtype: DType) -> None:
    req = StepRequest(model=model, hardware=hardware, mode=mode, batch_size=1, seq_len=64)
    assert req.dtype is None
    st = predict(req)
    assert st.dtype == dtype.value
    assert st == predict(replace(req, dtype=dtype))


def test_predict_is_deterministic() -> None:
    req = StepRequest(model="bert-base", hardware="l4", mode=Mode.TRAINING, batch_size=2, seq_len=64, dtype="fp16")
    assert predict(req) == predict(req)


def test_bigger_batch_takes_longer() -> None:
    def t(b: int) -> float:
        return predict(StepRequest(model="gpt2", hardware="a100-pcie-40gb", batch_size=b, seq_len=256)).time_s

    assert t(1) < t(4) < t(16)


def test_newer_gpu_is_faster_on_a_big_step() -> None:
    def t(hw: str) -> float:
        return predict(StepRequest(model="gpt2-large", hardware=hw, mode=Mode.TRAINING, batch_size=4,
                                   seq_len=1024, dtype="bf16" if hw != "v100-sxm2-32gb" else "fp16")).time_s

    assert t("h100-sxm-80gb") < t("a100-sxm-80gb") < t("v100-sxm2-32gb")


@pytest.mark.parametrize(("text", "kind", "degree"), [("none", "none", 1), ("", "none", 1), ("1", "none", 1),
                                                      ("DP4", "dp", 4), (" tp2 ", "tp", 2), ("pp8", "pp", 8)])
def test_parse_parallelism(text: str, kind: str, degree: int) -> None:
    p = parse_parallelism(text)
    assert (p.kind, p.degree) == (kind, degree)


@pytest.mark.parametrize("text", ["dp0", "tp", "ep4", "dp-2", "tp2pp2", "4"])
def test_parse_parallelism_rejects(text: str) -> None:
    with pytest.raises(ConfigError, match="use none, dpN, tpN or ppN"):
        parse_parallelism(text)


# -- intervals and composition coefficients are versioned files -------------------------------------------------
def test_intervals_have_a_step_kind_below_and_above_zero() -> None:
    table = load_intervals()
    lo, hi = table.bounds("step")
    assert lo < 0 < hi


def test_intervals_with_wrong_schema_are_data_error(tmp_path: Path) -> None:
    path = tmp_path / "intervals.json"
    path.write_text(json.dumps({"schema_version": 99, "kinds": {}}), encoding="utf-8")
    with pytest.raises(DataError, match="schema_version 99"):
        load_intervals(str(path))


def test_compose_coefficients_with_wrong_schema_are_data_error(tmp_path: Path) -> None:
    """Another schema version is refused by name, the version 1 files (with their link ``comm`` part) too."""
    raw = json.loads(load_compose_coefficients().to_json())
    raw["schema_version"] = 1
    path = tmp_path / "compose.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    with pytest.raises(DataError, match="schema_version"):
        load_compose_coefficients(path)


def test_slower_host_makes_eager_steps_longer(tmp_path: Path) -> None:
    """Host dispatch is an input: a 10x slower host lengthens a host-bound eager step."""
    raw = json.loads(load_compose_coefficients().to_json())
    raw["host"] = {k: v * 10 for k, v in raw["host"].items()}
    path = tmp_path / "compose.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    slow = load_compose_coefficients(path)
    w = _workload("gpt2", Mode.INFERENCE, 1, 16, DType.FP32)
    base = predict_step(w, "h100-sxm-80gb")
    cal = Calibration.shipped().with_compose(slow)
    assert predict_step(w, "h100-sxm-80gb", calibration=cal).time_s > 2 * base.time_s
    assert predict_step(w, "h100-sxm-80gb", calibration=cal, framework="graph").device_busy_s == base.device_busy_s


def test_phase_keys_are_phase_values() -> None:
    st = predict(StepRequest(model="gpt2", hardware="a100-pcie-40gb", mode=Mode.TRAINING, batch_size=1, seq_len=64))
    assert set(st.by_phase_s) == {Phase.FORWARD.value, Phase.BACKWARD.value, Phase.OPTIMIZER.value}
    assert st.by_phase_s["bwd"] > st.by_phase_s["fwd"]


def test_equal_workloads_share_one_priced_step_and_changed_ones_do_not() -> None:
    """The step cache keys on the workload's content: a copy (another object, the same ops) reuses the priced
    ops; a workload with one op changed is priced anew."""
    from perfcast.compose import step as step_module

    w = _workload("gpt2", Mode.INFERENCE, 3, 96, DType.FP16)
    first = predict_step(w, "a100-pcie-40gb")
    entries = len(step_module._TIMES)
    copy = replace(w, ops=tuple(w.ops))
    assert copy is not w and predict_step(copy, "a100-pcie-40gb").time_s == first.time_s
    assert len(step_module._TIMES) == entries
    bigger = replace(w, ops=tuple(replace(o, flops=o.flops * 64, bytes_read=o.bytes_read * 64) if i == 0 else o
                                  for i, o in enumerate(w.ops)))
    assert predict_step(bigger, "a100-pcie-40gb").device_busy_s > first.device_busy_s


def test_one_device_step_on_a_two_die_board_runs_with_its_sibling_idle() -> None:
    """A one-GPU request on one GCD of an MI250 prices the GCD alone on its board (its sibling idle, the board's
    power shared), which sustains a higher FP32 matrix clock than the GCD's half of the board power."""
    from perfcast.catalog.hardware import alone_on_board

    req = StepRequest(model="gpt2", hardware="mi250", mode=Mode.INFERENCE, batch_size=4, seq_len=512, dtype="fp32")
    st = predict(req)
    w = _workload("gpt2", Mode.INFERENCE, 4, 512, DType.FP32)
    gcd = load_hardware("mi250")
    assert st.time_s == pytest.approx(predict_step(w, alone_on_board(gcd)).time_s, rel=1e-12)
    assert st.time_s < predict_step(w, gcd).time_s
