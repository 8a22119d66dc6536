"""``perfcast replay``: one JSON object with --json, a table without, --trace-out for Perfetto, and one
``error:`` line (exit 2) for bad input."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import invoke, invoke_main, parse_json, user_error

KERNEL = "void at::native::vectorized_elementwise_kernel<4, AddFunctor>"


def _trace(tmp_path: Path, *, steps: bool = True, device: str = "NVIDIA A100-SXM4-40GB") -> Path:
    """Two steps, each: a 100 us elementwise kernel launched, then a device synchronize (A100)."""
    events: list[dict[str, Any]] = []
    for i, t0 in enumerate((0.0, 200.0)):
        if steps:
            events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i + 1}", "pid": 1, "tid": 1,
                           "ts": t0, "dur": 150.0, "args": {}})
        corr = 2 * i + 1
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                       "ts": t0 + 10, "dur": 4.0, "args": {"correlation": corr}})
        events.append({"ph": "X", "cat": "kernel", "name": KERNEL, "pid": 0, "tid": 7, "ts": t0 + 15, "dur": 100.0,
                       "args": {"device": 0, "stream": 7, "correlation": corr}})
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "pid": 1, "tid": 1,
                       "ts": t0 + 20, "dur": 97.0, "args": {"correlation": corr + 1}})
    path = tmp_path / "trace.json.gz"
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        json.dump({"deviceProperties": [{"id": 0, "name": device}], "traceEvents": events}, fh)
    return path


def test_json_is_one_object_with_the_steps(tmp_path: Path) -> None:
    data = parse_json(invoke(["replay", str(_trace(tmp_path)), "--json"]))
    assert data["recorded_hardware"] == data["hardware"] == "a100-sxm-40gb"
    assert [s["name"] for s in data["steps"]] == ["ProfilerStep#1", "ProfilerStep#2"]
    assert data["step_time_s"] == pytest.approx(150e-6) and data["measured_step_time_s"] == pytest.approx(150e-6)
    assert data["whole_trace"] is False and data["host_time"] == "as recorded"


def test_hardware_reprices_and_dp_needs_no_nccl(tmp_path: Path) -> None:
    path = str(_trace(tmp_path))
    h100 = parse_json(invoke(["replay", path, "--hardware", "h100-sxm-80gb", "--json"]))
    assert h100["hardware"] == "h100-sxm-80gb" and h100["step_time_s"] < 150e-6  # a memory-bound kernel, 2x bandwidth
    assert h100["repriced"] == {"character: memory": 2}
    dp = parse_json(invoke(["replay", path, "--dp", "8", "--json"]))
    assert dp["target_world_size"] == 8 and dp["step_time_s"] == pytest.approx(150e-6)


def test_table_and_a_trace_without_steps(tmp_path: Path) -> None:
    res = invoke(["replay", str(_trace(tmp_path, steps=False))])
    assert res.exit_code == 0, res.stderr
    assert "whole trace" in res.stdout and "no ProfilerStep annotations" in res.stdout
    assert "median step:" in res.stdout


def test_trace_out_writes_perfetto_json_and_refuses_to_overwrite(tmp_path: Path) -> None:
    path, out = str(_trace(tmp_path)), tmp_path / "replayed.json"
    parse_json(invoke(["replay", path, "--trace-out", str(out), "--json"]))
    events = json.loads(out.read_text())["traceEvents"]
    assert {e["name"] for e in events if e.get("ph") == "X"} >= {"ProfilerStep#1", KERNEL, "cudaDeviceSynchronize"}
    line = user_error(invoke(["replay", path, "--trace-out", str(out)]))
    assert "exists; pass --force" in line
    assert invoke(["replay", path, "--trace-out", str(out), "--force"]).exit_code == 0


@pytest.mark.parametrize(("content", "message"), [
    (None, "does not exist"),
    ("not json", "not a readable JSON trace"),
    ('{"a": 1}', "not a PyTorch profiler (Kineto) trace"),
    ('{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": 0, "dur": 1}]}',
     "no kernels, copies or ProfilerStep"),
])
def test_bad_input_is_one_error_line(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "t.json"
    if content is not None:
        path.write_text(content)
    line = user_error(invoke_main(["replay", str(path)]))
    assert message in line


def test_an_unknown_device_refuses_hardware(tmp_path: Path) -> None:
    path = str(_trace(tmp_path, device="AMD Radeon Graphics"))
    line = user_error(invoke(["replay", path, "--hardware", "h100-sxm-80gb"]))
    assert "'AMD Radeon Graphics'" in line and "--from-hardware" in line
    data = parse_json(invoke(["replay", path, "--hardware", "h100-sxm-80gb", "--from-hardware", "mi250", "--json"]))
    assert data["recorded_hardware"] == "mi250"


# -- PyTorch execution traces (ExecutionTraceObserver JSON) -------------------------------------------------------
ET_DATA = Path(__file__).parents[1] / "unit" / "replay" / "data"


def test_execution_trace_json_is_one_object_like_a_kineto_replay() -> None:
    data = parse_json(invoke(["replay", str(ET_DATA / "mlp_et.json.gz"), "--hardware", "h100-sxm-80gb", "--json"]))
    assert data["input"] == "execution_trace" and data["hardware"] == "h100-sxm-80gb"
    assert [s["name"] for s in data["steps"]] == ["ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#3"]
    assert all(s["measured_s"] is None and s["predicted_s"] > 0 for s in data["steps"])
    assert data["step_time_s"] > 0 and data["measured_step_time_s"] is None and data["error_pct"] is None
    assert data["whole_trace"] is False and data["unknown_ops"] == 0
    assert sum(data["priced"].values()) == data["ops"] == 3 * 18


def test_execution_trace_with_its_kineto_trace_reports_measured_steps() -> None:
    res = invoke(["replay", str(ET_DATA / "mlp_et.json.gz"), "--hardware", "a100-sxm-80gb",
                  "--kineto", str(ET_DATA / "mlp_kineto.json.gz")])
    assert res.exit_code == 0, res.stderr
    assert "ProfilerStep#3" in res.stdout and "median step:" in res.stdout and "measured" in res.stdout
    data = parse_json(invoke(["replay", str(ET_DATA / "mlp_et.json.gz"), "--hardware", "a100-sxm-80gb",
                              "--kineto", str(ET_DATA / "mlp_kineto.json.gz"), "--json"]))
    assert all(s["measured_s"] > 0 for s in data["steps"]) and data["error_pct"] is not None


@pytest.mark.parametrize(("args", "message"), [
    ([], "give --hardware"),
    (["--hardware", "a100-sxm-80gb", "--trace-out", "x.json"], "--trace-out applies to a Kineto trace"),
])
def test_execution_trace_user_errors_are_one_line(args: list[str], message: str) -> None:
    line = user_error(invoke_main(["replay", str(ET_DATA / "mlp_et.json.gz"), *args]))
    assert message in line


def test_chakra_protobuf_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "trace.0.et"
    path.write_bytes(b"\x0a\x05\x31\x2e\x30\x2e\x30\x12\x00")
    line = user_error(invoke_main(["replay", str(path), "--hardware", "h100-sxm-80gb"]))
    assert "Chakra protobuf" in line and "ExecutionTraceObserver" in line
