"""CLI: ``perfcast train``: one JSON object with units in its keys, a Perfetto trace, and bad plans as one
``error:`` line with exit code 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import invoke, user_error, with_flags

pytestmark = pytest.mark.cli

SMALL = ["train", "--model", "llama-2-7b", "--cluster", "dgx-a100", "--nodes", "1", "--tp", "2", "--dp", "4",
         "--seq-len", "2048", "--micro-batch", "1", "--global-batch", "32", "--recompute", "selective", "--zero", "1"]


def test_train_json_has_the_issue_keys() -> None:
    res = invoke([*SMALL, "--json"])
    assert res.exit_code == 0, res.stderr
    assert len(res.stdout.strip().splitlines()) == 1
    data = json.loads(res.stdout)
    for key in ("step_time_s", "tokens_per_s_per_gpu", "tflops_per_gpu", "mfu", "hfu", "memory_per_gpu_bytes",
                "breakdown_s"):
        assert key in data, key
    assert data["step_time_s"] > 0 and 0 < data["mfu"] <= data["hfu"] < 1
    # the throughput keys agree with each other: tokens per step / step time / GPUs
    assert data["tokens_per_s_per_gpu"] == pytest.approx(32 * 2048 / data["step_time_s"] / 8, rel=1e-6)
    assert sum(data["breakdown_s"].values()) == pytest.approx(data["step_time_s"], rel=1e-6)


def test_train_text_names_the_convention() -> None:
    res = invoke(SMALL)
    assert res.exit_code == 0, res.stderr
    assert "Megatron" in res.stdout and "memory per GPU" in res.stdout and "tokens/s per GPU" in res.stdout


def test_train_writes_a_perfetto_trace_and_never_overwrites(tmp_path: Path) -> None:
    out = tmp_path / "step.json"
    res = invoke([*SMALL, "--pp", "2", "--dp", "2", "--trace", str(out), "--json"])
    assert res.exit_code == 0, res.stderr
    events = json.loads(out.read_text())["traceEvents"]
    complete = [e for e in events if e.get("ph") == "X"]
    assert complete and all(e["dur"] >= 0 for e in complete)
    assert {e["pid"] for e in complete} >= {0, 1}  # one process lane per pipeline stage
    before = out.read_text()
    line = user_error(invoke([*SMALL, "--trace", str(out)]))
    assert "--force" in line and out.read_text() == before
    assert invoke([*SMALL, "--trace", str(out), "--force", "--json"]).exit_code == 0


def test_train_out_of_memory_is_a_verdict_with_the_breakdown() -> None:
    res = invoke(["train", "--model", "llama-2-70b", "--cluster", "dgx-a100", "--nodes", "1",
                              "--dp", "8", "--json"])
    assert res.exit_code == 2
    data = json.loads(res.stdout)
    assert data["fits_in_memory"] is False and data["memory_per_gpu_bytes"] > data["memory_capacity_bytes"]
    assert data["memory_per_gpu_bytes"] == sum(v for k, v in data["memory_breakdown_bytes"].items()
                                               if k not in ("total_bytes", "capacity_bytes"))
    assert "out of memory" in user_error(res)


@pytest.mark.parametrize(("args", "fragment"), [
    (["--tp", "3"], "tp=3"),                                   # does not divide 32 heads
    (["--tp", "2", "--pp", "5"], "pp=5 must divide the 32 layers"),
    (["--dp", "8"], "tp*pp*dp*cp"),                            # 2*8 = 16 != 8 GPUs
    (["--global-batch", "30"], "divisible by micro_batch*dp"),
    (["--ep", "2"], "dense"),
    (["--recompute", "sometimes"], "--recompute"),
    (["--zero", "4"], "--zero"),
    (["--model", "llama-9"], "unknown model"),
    (["--cluster", "dgx-h10"], "closest known: dgx-h100"),
])
def test_train_bad_input_is_one_error_line(args: list[str], fragment: str) -> None:
    line = user_error(invoke(with_flags(["train"], SMALL[1:], args)))
    assert fragment in line.lower() if fragment.islower() else fragment in line, line
