"""CLI: ``perfcast train``: one JSON object with units in its keys, a Perfetto trace, bad plans as one
``error:`` line with exit code 2, and a plan that does not fit as a verdict with exit code 1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import does_not_fit, invoke, user_error, with_flags

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
    res = invoke([*SMALL, "--pp", "2", "--dp", "2", "--trace-out", str(out), "--json"])
    assert res.exit_code == 0, res.stderr
    assert json.loads(res.stdout)["trace_path"] == str(out)
    events = json.loads(out.read_text())["traceEvents"]
    complete = [e for e in events if e.get("ph") == "X"]
    assert complete and all(e["dur"] >= 0 for e in complete)
    assert {e["pid"] for e in complete} >= {0, 1}  # one process lane per pipeline stage
    before = out.read_text()
    line = user_error(invoke([*SMALL, "--trace-out", str(out)]))
    assert "--force" in line and out.read_text() == before
    assert invoke([*SMALL, "--trace-out", str(out), "--force", "--json"]).exit_code == 0


def test_train_keeps_the_readmes_trace_spelling_as_a_hidden_alias(tmp_path: Path) -> None:
    out = tmp_path / "step.json"
    assert invoke([*SMALL, "--trace", str(out), "--json"]).exit_code == 0 and out.is_file()
    help_text = invoke(["train", "--help"]).stdout
    assert "--trace-out" in help_text and "--trace " not in help_text
    line = user_error(invoke([*SMALL, "--trace", str(out), "--trace-out", str(tmp_path / "b.json"), "--force"]))
    assert "--trace-out" in line


def test_train_out_of_memory_is_a_verdict_with_the_breakdown() -> None:
    res = invoke(["train", "--model", "llama-2-70b", "--cluster", "dgx-a100", "--nodes", "1",
                              "--dp", "8", "--json"])
    assert "out of memory" in does_not_fit(res)
    data = json.loads(res.stdout)
    assert data["fits_in_memory"] is False and data["fits"] is False and data["verdict"] == "out_of_memory"
    assert data["memory_per_gpu_bytes"] > data["memory_capacity_bytes"] and data["step_time_s"] > 0
    assert data["memory_per_gpu_bytes"] == sum(v for k, v in data["memory_breakdown_bytes"].items()
                                               if k not in ("total_bytes", "capacity_bytes"))
    text = invoke(["train", "--model", "llama-2-70b", "--cluster", "dgx-a100", "--nodes", "1", "--dp", "8"])
    assert "out of memory" in does_not_fit(text)
    assert "OUT OF MEMORY" in text.stdout and "memory per GPU" in text.stdout


def test_train_fitting_plan_says_so() -> None:
    data = json.loads(invoke([*SMALL, "--json"]).stdout)
    assert data["fits"] is True and data["verdict"] == "fits"


def test_train_lora_reports_mfu_on_the_flops_it_executes() -> None:
    res = invoke(["train", "-m", "llama-2-7b", "-c", "dgx-a100", "--tp", "1", "--dp", "1", "--lora-rank", "16",
                  "--seq-len", "2048", "--micro-batch", "4", "--global-batch", "16", "--json"])
    data = json.loads(res.stdout)
    assert res.exit_code == 0 and data["fits"] is True
    assert data["mfu"] < 0.7 and "litgpt" in data["flops_convention"]


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
    (["--etp", "2"], "accepted: tp, 1"),
])
def test_train_bad_input_is_one_error_line(args: list[str], fragment: str) -> None:
    line = user_error(invoke(with_flags(["train"], SMALL[1:], args)))
    assert fragment in line.lower() if fragment.islower() else fragment in line, line


def test_train_without_parallel_degrees_fills_the_node() -> None:
    base = ["train", "-m", "llama-2-7b", "-c", "dgx-a100", "--seq-len", "2048", "--zero", "1", "--precision", "bf16"]
    data = json.loads(invoke([*base, "--json"]).stdout)
    assert data["num_gpus"] == 8 and data["plan"]["dp"] == 8 and data["chosen_by_default"] == ["dp"]
    assert data["tokens_per_step"] == 8 * 2048  # one sequence per data-parallel rank
    text = " ".join(invoke(base).stdout.split())
    assert "8 x a100-sxm-80gb" in text and "dp 8 (default: fills the 8 GPUs" in text
    # the GPUs left after tensor parallelism; --nodes scales it; a plan wider than a node takes whole nodes
    assert json.loads(invoke([*base, "--tp", "2", "--json"]).stdout)["plan"]["dp"] == 4
    two = json.loads(invoke([*base, "--nodes", "2", "--json"]).stdout)
    assert (two["num_gpus"], two["plan"]["dp"]) == (16, 16)
    wide = json.loads(invoke([*base, "--tp", "8", "--pp", "2", "--json"]).stdout)
    assert (wide["num_gpus"], wide["plan"]["dp"]) == (16, 1)
    # asking for one GPU still prices one GPU, and says so
    one = json.loads(invoke([*base, "--dp", "1", "--json"]).stdout)
    assert one["num_gpus"] == 1 and one["chosen_by_default"] == []


def test_train_default_dp_that_is_not_whole_is_one_error_line() -> None:
    line = user_error(invoke(["train", "-m", "gpt2", "-c", "dgx-a100", "--pp", "3", "--seq-len", "1024"]))
    assert "--dp left out" in line and "--dp 2 for 6 GPUs" in line


@pytest.mark.parametrize(("model", "cluster", "precision"), [
    ("llama-3-8b", "dgx-a100", "bf16"),   # torch_dtype bfloat16
    ("llama-2-7b", "dgx-a100", "fp16"),   # torch_dtype float16
    ("gpt2-medium", "dgx-a100", "fp32"),  # no torch_dtype: transformers loads fp32
])
def test_train_precision_defaults_to_the_checkpoints(model: str, cluster: str, precision: str) -> None:
    res = invoke(["train", "-m", model, "-c", cluster, "--dp", "1", "--seq-len", "1024", "--json"])
    data = json.loads(res.stdout)
    assert data["plan"]["precision"] == precision and "precision" in data["chosen_by_default"]
    asked = json.loads(invoke(["train", "-m", model, "-c", "dgx-h100", "--dp", "1", "--seq-len", "1024",
                               "--precision", "fp8", "--json"]).stdout)
    assert asked["plan"]["precision"] == "fp8" and asked["chosen_by_default"] == []  # fp8 only when asked


def test_train_text_says_which_precision_ran() -> None:
    res = invoke(["train", "-m", "llama-2-7b", "-c", "dgx-a100", "--dp", "1", "--micro-batch", "1"])
    assert "fp16 (the checkpoint's)" in " ".join(res.stdout.split())


@pytest.mark.parametrize(("args", "fragment"), [
    # each ran before and printed the plan's figures without the setting (or with another schedule than asked)
    (["--tp", "1", "--dp", "8", "--tp-overlap"], "needs tp > 1"),
    (["--cp-kind", "ulysses"], "needs cp > 1"),
    (["--pp", "2", "--dp", "2", "--schedule", "interleaved"], "give vp > 1"),
    (["--pp", "2", "--dp", "2", "--vp", "2", "--schedule", "gpipe"], "not gpipe"),
    (["--schedule", "gpipe"], "needs pp > 1"),
    (["--lora-targets", "q,v"], "give a lora rank > 0"),
    (["--moe-skew", "1"], "llama-2-7b is dense"),
    (["--capacity-factor", "1.25"], "llama-2-7b is dense"),
])
def test_train_setting_without_effect_in_the_plan_is_refused(args: list[str], fragment: str) -> None:
    assert fragment in user_error(invoke([*SMALL, *args]))


def test_train_says_when_the_config_names_no_dtype() -> None:
    """GPT-3 2.7B is a paper's shapes, not a checkpoint: its fp32 default was labelled "the checkpoint's"."""
    res = invoke(["train", "-m", "gpt3-2.7b", "-c", "dgx-a100", "--seq-len", "512", "--global-batch", "8"])
    assert "the config names no torch_dtype" in " ".join(res.stdout.replace("│", " ").split())
    assert "checkpoint's" not in res.stdout


def test_train_moe_a2a_overlap_without_experts_is_one_error_line() -> None:
    assert "needs ep > 1" in user_error(invoke([*SMALL, "--moe-a2a-overlap"]))


def test_train_moe_a2a_overlap_hides_expert_parallel_traffic() -> None:
    # Qwen3-30B-A3B with EP 16 over two DGX-H100 nodes: half of each dispatch crosses the network
    args = ["train", "--model", "qwen3-30b-a3b", "--cluster", "dgx-h100", "--nodes", "2", "--ep", "16", "--seq-len",
            "4096", "--global-batch", "256", "--precision", "fp8", "--zero", "1", "--json"]
    plain, hidden = (json.loads(invoke(a).stdout) for a in (args, [*args, "--moe-a2a-overlap"]))
    assert hidden["breakdown_s"]["compute_s"] == pytest.approx(plain["breakdown_s"]["compute_s"], rel=1e-9)
    assert 0 < hidden["breakdown_s"]["ep_comm_s"] < 0.5 * plain["breakdown_s"]["ep_comm_s"]
    assert hidden["step_time_s"] < plain["step_time_s"]
    assert hidden["comm_total_s"]["ep_comm_s"] == pytest.approx(plain["comm_total_s"]["ep_comm_s"], rel=1e-9)
    folded = json.loads(invoke([*args[:-1], "--etp", "1", "--json"]).stdout)
    assert folded["plan"]["etp"] == 1 and plain["plan"]["etp"] == "tp"
