"""CLI: ``perfcast serve --workload mlperf:<benchmark>:<scenario>``: the benchmark's model by default, the
scenario's figures under their metric names, and one-line errors for names that are not presets."""

from __future__ import annotations

import pytest
from cli_helpers import invoke, parse_json, user_error

from perfcast.serving.sources.mlperf import load_benchmark


def test_offline_workload_json_names_the_scenario_figures() -> None:
    data = parse_json(invoke(["serve", "--workload", "mlperf:gptj:offline", "--hardware", "h100-sxm-80gb",
                              "--num-requests", "120", "--json"]))
    assert data["model"] == load_benchmark("gptj").model and data["mlperf_workload"] == "mlperf:gptj:offline"
    for key in ("tokens_per_s_total", "samples_per_s_total", "ttft_ms_p99", "tpot_ms_p99"):
        assert data[f"mlperf_offline_{key}"] > 0
    # a request count given: the figures are that run's; GPT-J's tokens are LoadGen's inferred 69 per sample
    assert data["mlperf_offline_samples_per_s_total"] == pytest.approx(data["throughput_requests_per_s"])
    assert data["mlperf_offline_tokens_per_s_total"] == pytest.approx(
        data["mlperf_offline_samples_per_s_total"] * load_benchmark("gptj").inferred_tokens_per_sample)
    assert data["requests_completed"] == 120 and data["mlperf_limits_met"] is True
    assert data["mlperf_official_queries"] == 120


def test_gptj_decodes_four_beams_unless_a_beam_width_is_given() -> None:
    base = ["serve", "--workload", "mlperf:gptj:offline", "--hardware", "h100-sxm-80gb", "--num-requests", "200",
            "--json"]
    beams, greedy = parse_json(invoke(base)), parse_json(invoke([*base, "--beam-width", "1"]))
    assert beams["mlperf_num_beams"] == 4 and greedy["mlperf_num_beams"] == 1
    assert beams["requests_completed"] == greedy["requests_completed"] == 200
    # four rows per request decode: fewer output tokens per second from the same GPU
    assert beams["mlperf_offline_tokens_per_s_total"] < 0.8 * greedy["mlperf_offline_tokens_per_s_total"]


def test_server_workload_reports_the_highest_load_meeting_the_limits() -> None:
    data = parse_json(invoke(["serve", "--workload", "mlperf:llama3.1-8b:interactive", "--hardware", "h100",
                              "--scheduler", "orca", "--max-num-seqs", "512", "--num-requests", "400", "--json"]))
    limits = load_benchmark("llama3.1-8b").scenarios["interactive"]
    assert data["mlperf_limits"]["tpot_p99_s"] == limits.tpot_p99_s and data["mlperf_limits_met"] is True
    # LoadGen's completed samples per second: the official run's queries over the time to its last completion
    n, run_s = data["mlperf_official_queries"], data["mlperf_official_run_s"]
    assert data["mlperf_interactive_samples_per_s_total"] == pytest.approx(n / run_s)
    assert n / data["max_qps"] < run_s < n / data["max_qps"] + 60.0
    assert data["mlperf_interactive_tpot_ms_p99"] <= limits.tpot_p99_s * 1e3  # type: ignore[operator]
    # the p99s reported are the steady state's the load was judged on
    tails = {t["metric"]: t["p99_s"] for t in data["steady_state"]["tails"]}
    assert tails["ttft"] * 1e3 == pytest.approx(data["mlperf_interactive_ttft_ms_p99"])
    failing = [c["qps"] for c in data["qps_evaluated"] if not c["met"]]
    assert failing and min(failing) > data["max_qps"]


def test_text_output_prints_the_scenario_table() -> None:
    res = invoke(["serve", "--workload", "mlperf:gptj:server", "--hardware", "h100-sxm-80gb", "--num-requests",
                  "60", "--qps", "5"])
    assert res.exit_code == 0, res.stderr
    assert "mlperf:gptj:server" in res.stdout and "limits met" in res.stdout and "E2E p99" in res.stdout


@pytest.mark.parametrize("args, expected", [
    (["--workload", "mlperf:nope:server"], "accepted: llama2-70b"),
    (["--workload", "mlperf:gptj:interactive"], "accepted: offline, server"),
    (["--workload", "llama2-70b"], "mlperf:<benchmark>:<scenario>"),
    (["--workload", "mlperf:gptj:server", "--trace", "arxiv_summarization"], "drop --trace"),
    (["--workload", "mlperf:gptj:offline", "--qps", "3"], "--qps does not apply"),
    ([], "--model is required"),
])
def test_bad_workloads_are_one_line_errors(args: list[str], expected: str) -> None:
    line = user_error(invoke(["serve", "--hardware", "h100-sxm-80gb", *args]))
    assert expected in line
