"""CLI: ``perfcast search``: one JSON object with the issue's keys, ``--out`` never overwriting, and bad input as
one ``error:`` line with exit code 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import invoke, parse_json, user_error

SMALL = ["search", "--model", "llama-3-8b", "--cluster", "dgx-h100", "--gpus", "16", "--seq-len", "4096",
         "--global-batch", "64", "--cp", "1,2", "--vp", "1,2", "--micro-batch", "1,2", "--top", "3"]


def test_search_json_has_the_issue_keys() -> None:
    data = parse_json(invoke([*SMALL, "--price-per-gpu-hour", "3", "--json"]))
    for key in ("plans_evaluated", "plans_feasible", "objective", "best", "pareto", "search_time_s", "rejected"):
        assert key in data, key
    assert len(data["best"]) == 3 and data["objective"] == "tflops"
    for key in ("tp", "pp", "dp", "cp", "ep", "vp", "micro_batch", "recompute", "zero", "tflops_per_gpu",
                "step_time_s", "memory_per_gpu_gib", "cost_usd_per_step", "exact_tflops_per_gpu"):
        assert key in data["best"][0], key
    assert data["plans_feasible"] <= data["plans_evaluated"] <= data["plans_enumerated"]


def test_search_text_and_out_file(tmp_path: Path) -> None:
    out = tmp_path / "s.search.json"
    res = invoke([*SMALL, "--out", str(out)])
    assert res.exit_code == 0, res.stderr
    assert "Pareto front" in res.stdout and "evaluated" in res.stdout
    assert json.loads(out.read_text())["best"]
    line = user_error(invoke([*SMALL, "--out", str(out)]))
    assert "--force" in line
    assert invoke([*SMALL, "--out", str(out), "--force", "--json"]).exit_code == 0


@pytest.mark.parametrize(("changes", "needle"), [
    (["--model", "no-such-model"], "unknown model"),
    (["--gpus", "12"], "multiple of 8"),
    (["--global-batch", "1", "--cp", "1", "--tp", "1", "--pp", "1"], "global batch constraint"),
    (["--objective", "speed"], "objective"),
    (["--tp", "two"], "--tp"),
    (["--zero", "4"], "--zero"),
    (["--max-memory-fraction", "1.5"], "--max-memory-fraction"),
    (["--backend", "mpi"], "backend"),
])
def test_bad_input_is_one_error_line(changes: list[str], needle: str) -> None:
    args = list(SMALL)
    for flag, value in zip(changes[::2], changes[1::2], strict=True):
        if flag in args:
            args[args.index(flag) + 1] = value
        else:
            args += [flag, value]
    assert needle in user_error(invoke(args))


def test_no_feasible_plan_names_memory() -> None:
    line = user_error(invoke(["search", "--model", "llama-3-405b", "--cluster", "dgx-h100", "--gpus", "8",
                              "--seq-len", "8192", "--global-batch", "8"]))
    assert "memory constraint" in line and "GiB" in line


def test_serving_search() -> None:
    data = parse_json(invoke(["search", "--serve", "--model", "llama-2-7b", "--hardware", "a100-sxm-80gb",
                              "--gpus", "2", "--slo-ttft-p99", "2", "--slo-tpot-p99", "0.1", "--prompt-tokens", "512",
                              "--output-tokens", "64", "--schedulers", "vllm", "--max-num-seqs", "64",
                              "--requests-per-replica", "30", "--json"]))
    assert data["configs_evaluated"] == 2 and data["simulations"] >= 2
    assert data["best"][0]["goodput_requests_per_s_per_gpu"] > 0


def test_serving_search_needs_hardware() -> None:
    assert "--hardware" in user_error(invoke(["search", "--serve", "--model", "llama-2-7b", "--gpus", "2"]))


def test_serving_search_takes_tp_and_refuses_one_that_does_not_divide() -> None:
    base = ["search", "--serve", "-m", "llama-2-7b", "-H", "a100-sxm-80gb", "--gpus", "2", "--slo-ttft-p99", "2",
            "--prompt-tokens", "256", "--output-tokens", "64", "--schedulers", "vllm", "--max-num-seqs", "64",
            "--requests-per-replica", "20"]
    data = parse_json(invoke([*base, "--tp", "2", "--json"]))
    assert {r["tp"] for r in data["best"]} == {2}
    assert "tp=3 does not divide" in user_error(invoke([*base, "--tp", "3"]))


@pytest.mark.parametrize("args, needle", [
    (["--serve", "-H", "h100", "--slo-ttft-p99", "1", "--pp", "2"], "--pp applies to a training search"),
    (["-c", "dgx-h100", "--global-batch", "8", "--slo-ttft-p99", "1"], "--slo-ttft-p99 applies to a serving search"),
    (["-c", "dgx-h100", "--global-batch", "8", "--requests-per-replica", "5"], "--requests-per-replica applies to"),
    (["--serve", "-H", "h100", "--slo-ttft-p99", "1", "--requests-per-replica", "10000000"], "1 to 1,000,000"),
    (["--serve", "-H", "h100", "--slo-ttft-p99", "1", "--max-num-seqs", "64,1000000000"], "at most 65,536"),
    (["-c", "dgx-h100", "--global-batch", "8", "--workers", "2"], "--workers applies to a serving search"),
    (["--serve", "-H", "h100", "--slo-ttft-p99", "1", "--workers", "0"], "--workers must be 1 to 256"),
])
def test_a_flag_of_the_other_kind_of_search_is_refused_not_ignored(args: list[str], needle: str) -> None:
    assert needle in user_error(invoke(["search", "-m", "llama-2-7b", "--gpus", "8", *args]))


def test_the_training_search_names_the_precision_it_priced() -> None:
    """train defaults to the checkpoint's dtype (fp16 for llama-2-70b); the search prices bf16 unless asked, and
    says so instead of leaving it implied."""
    assert parse_json(invoke([*SMALL, "--json"]))["precision"] == "bf16"
    assert parse_json(invoke([*SMALL, "--precision", "fp16", "--json"]))["precision"] == "fp16"
    assert "bf16 (--precision)" in " ".join(invoke(SMALL).stdout.split())


def test_the_serving_search_refuses_a_cluster_of_another_gpu() -> None:
    args = ["search", "--serve", "-m", "llama-2-7b", "-H", "a100", "--cluster", "dgx-h100", "--gpus", "2",
            "--slo-ttft-p99", "1"]
    assert "--cluster dgx-h100 is a node of h100-sxm-80gb, not a100-sxm-80gb" in user_error(invoke(args))


def test_the_training_search_tries_several_recipes_and_both_expert_layouts() -> None:
    data = parse_json(invoke([*SMALL, "--precision", "bf16,fp8", "--json"]))
    assert data["precision"] == "bf16,fp8" and data["rejected"]["precision"] == 0
    assert {r["precision"] for r in data["best"] + data["pareto"]} <= {"bf16", "fp8"} and "etp" not in data["best"][0]
    assert "bf16,fp8 (--precision)" in " ".join(invoke([*SMALL, "--precision", "bf16,fp8"]).stdout.split())
    moe = ["search", "--model", "mixtral-8x7b", "--cluster", "dgx-h100", "--gpus", "16", "--seq-len", "4096",
           "--global-batch", "64", "--tp", "2,4", "--pp", "1", "--cp", "1", "--vp", "1", "--micro-batch", "1",
           "--zero", "1", "--top", "2"]
    whole = parse_json(invoke([*moe, "--etp", "1", "--json"]))
    assert {r["etp"] for r in whole["best"]} == {1}
    assert "etp1" in invoke([*moe, "--etp", "1"]).stdout


@pytest.mark.parametrize(("args", "needle"), [
    (["--etp", "2"], "--etp: '2' must list tp"),
    (["--precision", "nvfp4"], "the precision constraint (the GPU must run the precision recipe"),
    (["--precision", "bf16,bf16"], "listed twice"),
    (["--precision", "fp4"], "precision"),
])
def test_bad_precision_and_etp_flags_are_one_line(args: list[str], needle: str) -> None:
    assert needle in user_error(invoke([*SMALL, *args]))


def test_etp_is_a_training_flag() -> None:
    args = ["search", "--serve", "-m", "llama-2-7b", "-H", "h100", "--gpus", "8", "--slo-ttft-p99", "1", "--etp", "1"]
    assert "--etp applies to a training search" in user_error(invoke(args))
