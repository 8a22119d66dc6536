"""CLI: ``perfcast serve``: one JSON object with units in its keys, the timeline and per-request outputs, and bad
input as one ``error:`` line with exit code 2."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from cli_helpers import does_not_fit, invoke, parse_json, user_error, with_flags
from typer.testing import Result

BASE = ["serve", "--model", "llama-2-7b", "--hardware", "a100-sxm-80gb", "--qps", "2", "--num-requests", "40",
        "--trace", "arxiv_summarization", "--seed", "42"]


def test_serve_json_has_the_issue_keys() -> None:
    data = parse_json(invoke([*BASE, "--json"]))
    for key in ("ttft_s", "tpot_s", "e2e_s"):
        assert set(data[key]) >= {"mean", "p50", "p90", "p99"}
    for key in ("requests_completed", "preemptions", "throughput_requests_per_s", "throughput_tokens_per_s",
                "goodput_requests_per_s", "kv_utilization_frac"):
        assert key in data
    assert data["requests_completed"] == 40 and data["ttft_s"]["p99"] >= data["ttft_s"]["p50"] > 0


def test_goodput_without_an_slo_is_not_applicable() -> None:
    data = parse_json(invoke([*BASE, "--json"]))
    assert data["goodput_requests_per_s"] is None and data["slo_attainment_frac"] is None
    assert "n/a" in invoke(BASE).stdout
    with_slo = parse_json(invoke([*BASE, "--slo-ttft-p99", "1000", "--json"]))
    assert with_slo["goodput_requests_per_s"] == pytest.approx(with_slo["throughput_requests_per_s"])
    assert with_slo["slo_attainment_frac"] == 1.0


@pytest.mark.parametrize(("hardware", "flags", "dtype"), [
    ("h100", [], "bf16"),  # the checkpoint's torch_dtype
    ("v100", [], "fp16"),  # no bf16 math on a V100: served in fp16, as vLLM's --dtype auto
    ("h100", ["--dtype", "fp16"], "fp16"),
])
def test_dtype_defaults_to_the_checkpoint_and_the_output_says_which_ran(hardware: str, flags: list[str],
                                                                         dtype: str) -> None:
    args = ["serve", "-m", "llama-3.1-8b", "-H", hardware, "--tp", "2", "--prompt-tokens", "100",
            "--output-tokens", "10", "-n", "8", *flags]
    data = parse_json(invoke([*args, "--json"]))
    assert data["dtype"] == dtype and data["tensor_parallel_size"] == 2
    assert dtype in invoke(args).stdout


def test_tp_spellings_agree() -> None:
    runs = [parse_json(invoke([*BASE, flag, "2", "--json"])) for flag in ("--tp", "-tp", "--tensor-parallel-size")]
    assert runs[0] == runs[1] == runs[2] and runs[0]["tensor_parallel_size"] == 2


def test_over_long_requests_are_rejected_and_counted() -> None:
    args = [*BASE, "--max-model-len", "2048"]  # arxiv_summarization has longer papers
    data = parse_json(invoke([*args, "--json"]))
    (reason,) = data["rejection_reasons"]
    assert reason["reason"] == "prompt + output tokens exceed the maximum context length (2048 tokens)"
    assert data["requests_rejected"] == reason["requests"] > 0
    assert data["requests_completed"] + data["requests_rejected"] == 40
    assert "requests rejected" in invoke(args).stdout
    line = user_error(invoke([*BASE, "--max-model-len", "8192"]))
    assert "above llama-2-7b's maximum context length of 4096 tokens" in line
    line = user_error(invoke([*BASE[:9], "--prompt-tokens", "4000", "--output-tokens", "200"]))
    assert "no request can be served: all 40 were rejected" in line and "maximum context length is 4096" in line


def _does_not_fit(res: Result) -> str:
    """Exit 1, no traceback, one ``does not fit:`` line on stderr; returns it."""
    assert res.exit_code == 1, (res.stdout, res.stderr)
    assert "Traceback" not in res.stdout + res.stderr
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("does not fit: "), res.stderr
    return lines[0]


@pytest.mark.parametrize(("args", "fragment", "usable_frac"), [
    (["--model", "llama-2-70b"], "needs 128.5 GiB of weights per GPU at tp=1, pp=1", 0.9),  # above 72 GiB usable
    (["--gpu-memory-utilization", "0.17", "--trace", "splitwise_code", "--max-num-batched-tokens", "8192",
      "--prompt-tokens", "3000", "--output-tokens", "1000"], "too few for one request of the workload", 0.17),
])
def test_a_deployment_that_does_not_fit_is_a_verdict_with_its_memory(args: list[str], fragment: str,
                                                                      usable_frac: float) -> None:
    res = invoke([*with_flags(["serve"], BASE[1:], args), "--json"])
    line = _does_not_fit(res)
    assert fragment in line
    data = json.loads(res.stdout)
    assert data["fits"] is False and fragment in data["verdict"]
    for key in ("memory_gpu_bytes", "memory_usable_bytes", "memory_weights_bytes", "memory_activations_peak_bytes",
                "memory_kv_cache_bytes"):
        assert data[key] >= 0
    assert data["memory_usable_bytes"] == pytest.approx(usable_frac * data["memory_gpu_bytes"])
    text = invoke(with_flags(["serve"], BASE[1:], args))
    _does_not_fit(text)
    assert "DOES NOT FIT" in text.stdout and "activations peak" in text.stdout


def test_a_deployment_that_fits_says_so_with_its_memory() -> None:
    data = parse_json(invoke([*BASE, "--json"]))
    assert data["fits"] is True and data["verdict"] == "fits"
    assert data["memory_weights_bytes"] + data["memory_activations_peak_bytes"] + data["memory_kv_cache_bytes"] <= (
        data["memory_usable_bytes"])
    assert "memory per GPU" in invoke(BASE).stdout


def test_serve_text_and_outputs(tmp_path: Path) -> None:
    timeline, requests = tmp_path / "timeline.json", tmp_path / "requests.csv"
    res = invoke([*BASE, "--scheduler", "sarathi", "--chunk-size", "512", "--trace-out", str(timeline),
                  "--requests-out", str(requests)])
    assert res.exit_code == 0, res.stderr
    assert "TTFT" in res.stdout and "goodput" in res.stdout
    events = json.loads(timeline.read_text())["traceEvents"]
    assert any(e.get("cat") == "iteration" for e in events) and any(e.get("cat") == "request" for e in events)
    rows = list(csv.DictReader(requests.open()))
    assert len(rows) == 40 and all(r["status"] == "completed" for r in rows)
    before = requests.read_text()
    assert "--force" in user_error(invoke([*BASE, "--requests-out", str(requests)]))
    assert requests.read_text() == before


SEARCH = ["serve", "--model", "llama-2-7b", "--hardware", "a100-sxm-80gb", "--max-num-seqs", "16",
          "--prompt-tokens", "256", "--output-tokens", "64", "--find-max-qps"]


def test_find_max_qps_answers_a_load_sustained_in_steady_state_and_names_its_workload() -> None:
    data = parse_json(invoke([*SEARCH, "--slo-ttft-p99", "0.5", "--slo-tpot-p99", "0.03", "--json"]))
    assert 0 < data["max_qps"] < data["saturated_requests_per_s"]
    steady = data["steady_state"]
    assert steady["met"] and steady["qps"] == data["max_qps"]
    for tail in steady["tails"]:  # each p99, with its error margin, within its bound
        assert tail["p99_s"] + data["steady_state_rule"]["z"] * tail["stderr_s"] <= tail["slo_s"]
    failing = [c["qps"] for c in data["qps_evaluated"] if not c["met"]]
    assert failing and min(failing) > data["max_qps"]
    for c in data["qps_evaluated"]:  # how long each load was simulated
        assert c["num_requests"] >= 1000 and c["simulated_s"] > c["warmup_s"] > 0
    w = data["workload"]
    assert w["lengths"] == "fixed" and w["arrival"] == "poisson" and w["num_requests"] == steady["num_requests"]
    assert w["prompt_tokens"]["mean"] == 256 and w["output_tokens"]["max"] == 64
    assert w["offered_requests_per_s"] == pytest.approx(data["max_qps"], rel=1e-9)
    text = invoke([*SEARCH, "--slo-ttft-p99", "0.5", "--slo-tpot-p99", "0.03"]).stdout
    assert "max QPS sustained" in text and "QPS search" in text and "saturated throughput" in text
    assert "fixed 256 prompt + 64 output tokens" in text


def test_find_max_qps_with_no_load_meeting_the_slo_is_a_verdict() -> None:
    res = invoke([*SEARCH, "--slo-ttft-p99", "0.0001", "--json"])
    assert res.exit_code == 1 and "Traceback" not in res.stderr
    assert res.stderr.startswith("does not fit: no load down to") and len(res.stderr.splitlines()) == 1
    data = json.loads(res.stdout)
    assert data["max_qps"] == 0 and data["qps_search_verdict"] in res.stderr


def test_malformed_trace_names_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("prompt_tokens,output_tokens\n10,5\nten,5\n")
    line = user_error(invoke([*BASE[:-4], "--trace", str(bad)]))
    assert "bad.csv" in line and "line 3" in line


@pytest.mark.parametrize(("args", "fragment"), [
    (["--scheduler", "fcfs"], "valid: "),
    (["--tensor-parallel-size", "3"], "tp=3"),
    (["--quantization", "int3"], "--quantization"),
    (["--qps", "-1"], "--qps"),
    (["--trace", "nope"], "arxiv_summarization"),
    (["--beam-width", "0"], "--beam-width"),
    (["--beam-width", "2", "--speculative-model", "llama-2-7b", "--num-speculative-tokens", "3"], "beam search"),
])
def test_serve_bad_input_is_one_error_line(args: list[str], fragment: str) -> None:
    line = user_error(invoke(with_flags(["serve"], BASE[1:], args)))
    assert fragment in line, line


def test_a_single_request_at_a_rate_prints_the_rate_asked() -> None:
    # one arrival has no gap, so no realized rate: the table says the rate asked (the fuzz found a crash here)
    res = invoke(["serve", "-m", "llama-2-7b", "-H", "h100", "-n", "1", "--qps", "1", "--prompt-tokens", "64",
                  "--output-tokens", "8"])
    assert res.exit_code == 0, res.stderr
    assert "1 requests/s asked" in " ".join(res.stdout.split())


@pytest.mark.parametrize(("args", "fragment"), [
    # vLLM refuses a draft model without --num-speculative-tokens; perfcast ran without speculation
    (["--speculative-model", "llama-3.2-1b"], "needs --num-speculative-tokens"),
    (["--spec-acceptance-rate", "0.2"], "--spec-acceptance-rate 0.2"),
    (["--burstiness", "4"], "add --arrival gamma"),  # poisson gaps: the burstiness was dropped
    (["--chunk-size", "128"], "--chunk-size 128"),  # vllm without chunked prefill has no chunk
    (["--scheduler", "orca", "--enable-chunked-prefill"], "scheduler orca has its own policy"),
    (["--kv-transfer-bandwidth", "1"], "add --num-prefill-replicas"),
    (["--num-prefixes", "8"], "add --shared-prefix-tokens"),
    (["--retrieval-latency-cv", "2"], "add --retrieval-latency"),
    (["--colocation", "shared"], "add --colocate-model"),
    (["--colocate-memory-frac", "0.3"], "add --colocate-model"),
])
def test_a_serve_flag_that_would_have_no_effect_is_refused(args: list[str], fragment: str) -> None:
    """Each of these ran before and printed the plain deployment's figures, the flag silently dropped."""
    line = user_error(invoke([*BASE, *args]))
    assert fragment in line, line


def test_serve_flags_in_their_own_combination_still_run() -> None:
    res = invoke([*BASE, "--arrival", "gamma", "--burstiness", "2", "--scheduler", "sarathi", "--chunk-size", "256",
                  "--json"])
    assert res.exit_code == 0, res.stderr
    assert parse_json(res)["workload"]["burstiness_cv"] == 2.0


FIXED = ["serve", "-m", "llama-2-7b", "-H", "h100", "--prompt-tokens", "512", "--output-tokens", "128", "--json"]


def test_a_short_run_above_what_the_deployment_sustains_says_overload() -> None:
    """40 QPS on a deployment that completes ~28 requests/s saturated: 200 requests fit in its batch (TTFT p99
    ~80 ms), 10,000 requests see a p99 of ~95 s. The short run's figures are printed with the verdict."""
    data = parse_json(invoke([*FIXED, "--qps", "40", "-n", "200"]))
    assert data["load_verdict"] == "overload"
    assert 20 < data["saturated_requests_per_s"] < 40
    assert data["steady_state"]["verdict"] == "overload" and data["ttft_s"]["p99"] < 1.0
    text = invoke([*FIXED[:-1], "--qps", "40", "-n", "200"])
    assert "OVERLOAD (40 requests/s asked" in text.stdout


def test_a_load_the_deployment_sustains_says_so_with_its_steady_state_tail() -> None:
    data = parse_json(invoke([*FIXED, "--qps", "10", "-n", "200"]))
    assert data["load_verdict"] == "sustained"
    steady = data["steady_state"]
    assert steady["num_requests"] >= 1000 and set(steady["p99_s"]) == {"ttft", "tpot", "e2e"}
    # an SLO the short run meets but the steady state does not is called out
    slo = parse_json(invoke([*FIXED, "--qps", "20", "-n", "200", "--slo-ttft-p99", "0.05"]))
    assert slo["load_verdict"] == "misses_slo" and slo["steady_state"]["reason"].startswith("ttft p99 above")


def test_runs_without_a_rate_have_no_load_verdict() -> None:
    for flags in ([], ["--max-concurrency", "8"]):
        assert "load_verdict" not in parse_json(invoke([*FIXED, "-n", "50", *flags]))


def test_serve_says_what_auto_resolved_to_for_the_weights_and_the_kv_cache() -> None:
    """-q fp8 also stores the KV cache in fp8 (TensorRT-LLM's FP8 checkpoints), unlike vLLM's --quantization fp8
    with kv_cache_dtype auto: the output names the cache's dtype instead of leaving it implied."""
    plain = parse_json(invoke([*FIXED, "-n", "20"]))
    assert plain["kv_cache_dtype"] == "fp16" and plain["weights_format"] == "none"
    fp8 = parse_json(invoke([*FIXED, "-n", "20", "-q", "fp8"]))
    assert fp8["kv_cache_dtype"] == "fp8" and fp8["weights_format"].startswith("fp8")
    kept = parse_json(invoke([*FIXED, "-n", "20", "-q", "fp8", "--kv-cache-dtype", "fp16"]))
    assert kept["kv_cache_dtype"] == "fp16" and kept["kv_blocks_per_engine"] < fp8["kv_blocks_per_engine"]


def test_find_max_qps_with_a_qps_and_trace_arrivals_without_a_trace_are_refused() -> None:
    # the search set its own loads: the --qps asked for was dropped without a word
    assert "searches the load" in user_error(invoke([*BASE, "--find-max-qps", "--slo-ttft-p99", "1"]))
    line = user_error(invoke([*FIXED, "--arrival", "trace"]))
    assert "--arrival trace takes the arrival times of a trace: give --trace" in line


def test_a_cluster_of_another_gpu_is_refused() -> None:
    """A100s with the MI300X platform's xGMI fabric were priced without a word."""
    line = user_error(invoke([*FIXED, "-H", "a100-sxm-80gb", "--tp", "2", "--cluster", "mi300x", "-n", "10"]))
    assert "cluster mi300x is a node of mi300x, not a100-sxm-80gb" in line
    assert parse_json(invoke([*FIXED, "-H", "a100", "--tp", "2", "--cluster", "dgx-a100", "-n", "10"]))


def test_a_context_whose_batch_leaves_no_kv_room_names_max_model_len() -> None:
    # Llama-4-Scout's 10M-token context sets the token budget without chunked prefill: its activation peak alone
    # exceeds the GPU, and the answer says which flag lowers it (it named only more parallelism before)
    args = ["serve", "-m", "llama-4-scout", "-H", "h100", "--tp", "8", "--prompt-tokens", "1000", "--output-tokens",
            "100", "-n", "10"]
    line = does_not_fit(invoke(args))
    assert "a batch of 10,485,760 tokens" in line and "--max-model-len" in line
    assert invoke([*args, "--max-model-len", "32768"]).exit_code == 0


def test_explain_breaks_the_iterations_time_down_by_part() -> None:
    text = invoke([*BASE, "--explain"]).output
    assert "iteration time by part" in text
    for label in ("linear layers", "attention (prefill)", "attention (decode)", "CPU overhead", "total"):
        assert label in text
    data = parse_json(invoke([*BASE, "--explain", "--json"]))
    parts = data["iteration_breakdown_s"]
    assert set(parts) >= {"linear_s", "attention_prefill_s", "attention_decode_s", "lm_head_s", "communication_s",
                          "cpu_overhead_s", "total_s"}
    assert parts["linear_s"] > 0 and parts["attention_decode_s"] > 0
    assert parts["total_s"] == pytest.approx(sum(v for k, v in parts.items() if k != "total_s"))
    # the model's parts are the run's GPU time: explaining does not change a figure
    plain = parse_json(invoke([*BASE, "--json"]))
    assert "iteration_breakdown_s" not in plain
    assert {k: v for k, v in data.items() if k != "iteration_breakdown_s"} == plain


def test_explain_does_not_combine_with_a_colocated_model() -> None:
    assert "--explain" in user_error(invoke([*BASE, "--explain", "--colocate-model", "llama-2-7b"]))


def test_engine_profile_sets_the_scheduling_flags_and_explicit_flags_win() -> None:
    from perfcast.cli.serve import _engine_fields

    unset = dict.fromkeys(("scheduler", "max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill",
                           "chunk_size", "gpu_memory_utilization"))
    sg = _engine_fields("sglang", "llama-3.1-8b", "h100-sxm-80gb", 1, "auto", unset)
    assert (sg["engine"], sg["scheduler"], sg["chunk_size"]) == ("sglang", "sglang", 8192)
    # a scheduler given explicitly takes the profile's token budget as its own kind of budget
    v0 = _engine_fields("sglang", "llama-3.1-8b", "h100-sxm-80gb", 1, "auto", unset | {"scheduler": "vllm"})
    assert (v0["scheduler"], v0["max_num_batched_tokens"], v0["chunk_size"]) == ("vllm", 8192, 512)
    mine = _engine_fields("vllm", "llama-3.1-8b", "h100-sxm-80gb", 1, "auto", unset | {"chunk_size": 1024,
                                                                                        "max_num_seqs": 64})
    assert (mine["chunk_size"], mine["max_num_seqs"]) == (1024, 64)
    plain = _engine_fields(None, "llama-3.1-8b", "h100-sxm-80gb", 1, "auto", unset)
    assert (plain["engine"], plain["scheduler"], plain["chunk_size"], plain["max_num_seqs"]) == ("vllm", "vllm", 512,
                                                                                                 256)
