"""The serving scenario kind: R4 runs both schedulers to completion and reports each expected ordering; the LLM
suite's serving scenarios (I1-I5, E2, E3) give the numbers their physics implies."""

from __future__ import annotations

import pytest

from perfcast.errors import ConfigError
from perfcast.report.results import serving_table
from perfcast.results.scenario import ScenarioResult
from perfcast.scenarios import load_scenario, run_scenario
from perfcast.scenarios.schema import scenario_from_dict


def test_r4_runs_both_schedulers_and_judges_each_ordering() -> None:
    res = run_scenario(load_scenario("R4"))
    assert res.status == "ok" and res.kind == "serving"
    rows = {r["label"]: r for r in res.rows}
    assert rows["vllm"]["requests_completed"] == 200 and rows["sarathi"]["requests_completed"] == 50
    # chunked prefill keeps decodes flowing: Sarathi's TPOT tail is below vLLM's, and over the same first 50
    # requests so is its TTFT tail (VIDUR's findings)
    assert float(str(rows["sarathi"]["tpot_s.p99"])) < float(str(rows["vllm"]["tpot_s.p99"]))
    assert float(str(rows["sarathi"]["ttft_s.p99"])) < float(str(rows["vllm"]["ttft_s.p99"]))
    assert len(res.notes) == 2 and all("reproduced" in n and "NOT" not in n for n in res.notes)


def test_a_serving_scenario_with_a_bad_key_names_it() -> None:
    raw = {"id": "X", "title": "t", "kind": "serving",
           "runs": [{"label": "a", "config": {"model": "llama-2-7b", "hardware": "a100", "schedular": "vllm"}}]}
    with pytest.raises(ConfigError, match="schedular"):
        scenario_from_dict(raw)


# -- the LLM suite's serving scenarios (I1-I5, E2, E3) ---------------------------------------------------------

_RESULTS: dict[str, ScenarioResult] = {}


def _run(sid: str) -> dict[str, dict[str, object]]:
    """The scenario's rows by label (each scenario simulated once per test session)."""
    if sid not in _RESULTS:
        _RESULTS[sid] = run_scenario(load_scenario(sid))
    res = _RESULTS[sid]
    assert res.status == "ok" and res.kind == "serving", res.error
    assert not any("NOT reproduced" in n or "cannot compare" in n for n in res.notes), res.notes
    return {str(r["label"]): r for r in res.rows}


def _f(row: dict[str, object], key: str) -> float:
    v = row[key]
    assert isinstance(v, (int, float)) and not isinstance(v, bool), (key, v)
    return float(v)


@pytest.mark.parametrize(("sid", "prompt", "output"), [("I1.1", 512, 128), ("I1.2", 2048, 256),
                                                       ("I1.3", 1024, 256)])
def test_i1_one_request_alone_splits_e2e_into_ttft_and_decode_steps(sid: str, prompt: int, output: int) -> None:
    (row,) = _run(sid).values()
    assert row["requests_completed"] == 1 and row["preemptions"] == 0
    ttft, tpot, e2e = _f(row, "ttft_s.p50"), _f(row, "tpot_s.p50"), _f(row, "e2e_s.p50")
    assert 0 < tpot < ttft < e2e
    assert e2e == pytest.approx(ttft + (output - 1) * tpot, rel=1e-9)
    assert _f(row, "max_concurrent_sequences") * (prompt + output) <= _f(row, "kv_blocks_per_engine") * 16


def test_i1_3_tp4_splits_the_70b_weights_over_four_gpus() -> None:
    (row,) = _run("I1.3").values()
    assert row["tensor_parallel_size"] == 4
    assert _f(row, "weight_bytes_per_replica") == pytest.approx(4 * _f(row, "weight_bytes_per_gpu"))


def test_i2_1_tail_ttft_grows_with_qps_and_throughput_follows_the_load() -> None:
    rows = _run("I2.1")
    runs = [rows[f"qps{q}"] for q in (1, 2, 4, 8)]
    # splitwise_conv has conversations longer than Llama-2's 4096 positions: refused (as vLLM does), not cut
    assert all(r["requests_completed"] + r["requests_rejected"] == 1000 for r in runs)
    assert all(0 < _f(r, "requests_rejected") < 100 for r in runs)
    ttft = [_f(r, "ttft_s.p99") for r in runs]
    assert ttft == sorted(ttft) and len(set(ttft)) == 4
    tput = [_f(r, "throughput_tokens_per_s") for r in runs]
    assert tput == sorted(tput)
    assert tput[1] == pytest.approx(2 * tput[0], rel=0.1)  # below saturation the output rate follows QPS
    assert _f(rows["qps8"], "kv_utilization_frac.mean") > _f(rows["qps1"], "kv_utilization_frac.mean")


def test_i2_2_sarathi_keeps_the_tpot_tail_below_vllm_on_the_same_arrivals() -> None:
    rows = _run("I2.2")
    vllm, sarathi = rows["vllm"], rows["sarathi"]
    assert vllm["requests_total"] == sarathi["requests_total"] == 300
    assert _f(sarathi, "tpot_s.p99") < _f(vllm, "tpot_s.p99")
    assert _f(sarathi, "throughput_tokens_per_s") == pytest.approx(_f(vllm, "throughput_tokens_per_s"), rel=0.05)


def test_i2_3_max_qps_meets_the_slo_above_the_row_load() -> None:
    rows = _run("I2.3")
    at8, best = rows["qps8"], rows["max-qps"]
    assert _f(at8, "ttft_s.p99") < 2.0 and _f(at8, "tpot_s.p99") < 0.1
    assert _f(best, "max_qps") > 8 and best["qps"] == best["max_qps"]
    assert _f(best, "qps_loads_tried") > 2
    assert _f(best, "ttft_s.p99") <= 2.0 and _f(best, "tpot_s.p99") <= 0.1
    # every request served or refused for its length (splitwise_conv has conversations beyond 4096 tokens)
    assert best["requests_completed"] + best["requests_rejected"] == best["requests_total"]
    # judged in steady state: far more than the row's 300 requests, below the saturated throughput
    assert _f(best, "qps_search_requests") > 300 and _f(best, "max_qps") < _f(best, "saturated_requests_per_s")
    assert _f(best, "throughput_tokens_per_s") > _f(at8, "throughput_tokens_per_s")


def test_i3_1_gqa_stores_a_quarter_of_the_kv_and_batches_more_sequences() -> None:
    rows = _run("I3.1")
    mha, gqa = rows["llama2-4k"], rows["llama3-4k"]
    assert _f(mha, "kv_bytes_per_token") == 4 * _f(gqa, "kv_bytes_per_token")
    assert _f(gqa, "max_concurrent_sequences") > 3 * _f(mha, "max_concurrent_sequences")
    assert _f(gqa, "throughput_tokens_per_s") > _f(mha, "throughput_tokens_per_s")
    # Llama-2-7B fp16: 2 (K, V) x 32 layers x 4096 x 2 bytes
    assert _f(rows["llama2-4k"], "kv_bytes_per_token") == 2 * 32 * 4096 * 2
    # the 32k run is Llama-3.1-8B (Llama-2-7B's 4096 positions refuse 32k): same KV per token as Llama-3-8B
    assert _f(rows["llama3-32k"], "kv_bytes_per_token") == _f(gqa, "kv_bytes_per_token")
    assert _f(rows["llama3-32k"], "max_concurrent_sequences") < _f(gqa, "max_concurrent_sequences")
    assert "llama2-32k" not in rows


def test_i3_2_smaller_blocks_fragment_less_and_every_run_preempts() -> None:
    rows = _run("I3.2")
    for mode in ("recompute", "swap"):
        frag = [_f(rows[f"{mode}-{b}"], "kv_fragmentation_mean_frac") for b in (8, 16, 32)]
        assert frag[0] < frag[1] < frag[2]
    for row in rows.values():
        assert _f(row, "preemptions") > 0 and _f(row, "kv_utilization_frac.mean") > 0.8
        assert row["requests_completed"] == 200
    assert rows["swap-16"]["preemption_mode"] == "swap" and rows["recompute-8"]["block_size"] == 8


def test_i4_1_colocation_slows_both_models_against_running_alone() -> None:
    rows = _run("I4.1")
    for mode in ("ts", "mps"):
        for model, alone in (("llama-2-7b", "llama"), ("mistral-7b", "mistral")):
            row = rows[f"{mode}-{alone}"]
            assert row["model"] == model and row["alone_run"] == alone
            assert _f(row, "slowdown_x.tpot") > 1 and _f(row, "slowdown_x.e2e") > 1
            assert _f(row, "slowdown_x.tpot") == pytest.approx(
                _f(row, "tpot_s.mean") / _f(rows[alone], "tpot_s.mean"))
            assert 0 < _f(row, "gpu_busy_frac") < 1
    assert rows["ts-llama"]["colocated_with"] == "ts-mistral" and rows["mps-mistral"]["colocation"] == "shared"
    # half the memory: the co-located Llama holds fewer sequences than alone
    assert _f(rows["ts-llama"], "max_concurrent_sequences") < _f(rows["llama"], "max_concurrent_sequences")


def test_i5_1_accepted_tokens_per_step_rise_with_the_acceptance_rate() -> None:
    rows = _run("I5.1")
    assert _f(rows["plain"], "spec_tokens_per_step") == 0 and "speedup_x.tpot" not in rows["plain"]
    steps = []
    for a in (0.6, 0.75, 0.9):
        row = rows[f"spec-{a}"]
        expected = (1 - a**5) / (1 - a)  # k = 4 proposals accepted until the first rejection, plus one
        assert _f(row, "spec_tokens_per_step") == pytest.approx(expected, rel=0.1)
        steps.append(_f(row, "spec_tokens_per_step"))
        assert row["baseline"] == "plain"
    assert steps == sorted(steps)
    assert _f(rows["spec-0.9"], "speedup_x.tpot") > 1.5
    assert _f(rows["spec-0.9"], "speedup_x.tpot") > _f(rows["spec-0.6"], "speedup_x.tpot")


def test_i5_2_ttft_falls_as_the_prefix_hit_ratio_rises() -> None:
    rows = _run("I5.2")
    runs = [rows[k] for k in ("hit0", "hit0.5", "hit0.9")]
    hits = [_f(r, "prefix_hit_frac") for r in runs]
    assert hits[0] == 0 and hits[0] < hits[1] < hits[2] <= 2000 / 2256
    # request-level hit ratio (token hits / the shared share of the prompt) near the scenario's 0.5 and 0.9
    assert hits[1] * 2256 / 2000 == pytest.approx(0.5, abs=0.1)
    assert hits[2] * 2256 / 2000 == pytest.approx(0.9, abs=0.05)
    ttft = [_f(r, "ttft_s.mean") for r in runs]
    assert ttft[0] > ttft[1] > ttft[2]
    assert _f(runs[0], "prefix_cache_bytes") == 0
    # 20 system prompts of 2000 tokens at 512 KiB per token
    assert _f(runs[2], "prefix_cache_bytes") == 20 * 2000 * 2 * 32 * 4096 * 2


def test_i5_3_w4a16_fits_one_a100_where_fp16_does_not() -> None:
    rows = _run("I5.3")
    assert rows["fp16-1gpu"]["status"] == "error" and "GiB" in str(rows["fp16-1gpu"]["error"])
    w4, fp16 = rows["w4a16-a100"], rows["fp16-a100x2"]
    assert _f(w4, "weight_bytes_per_replica") < 0.3 * _f(fp16, "weight_bytes_per_replica")
    assert _f(w4, "weight_bytes_per_gpu") < 0.5 * _f(w4, "gpu_memory_bytes") < _f(fp16, "weight_bytes_per_replica")
    assert _f(fp16, "weight_bytes_per_replica") > _f(fp16, "gpu_memory_bytes")
    for label in ("w8a8-h100", "fp8-h100"):
        assert rows[label]["hardware"] == "h100-sxm-80gb"
        assert rows[label]["requests_completed"] + rows[label]["requests_rejected"] == 100  # over-long: refused
        assert _f(rows[label], "weight_bytes_per_gpu") < _f(rows[label], "gpu_memory_bytes")


def test_i5_4_the_kv_handover_is_faster_over_nvlink_than_infiniband() -> None:
    rows = _run("I5.4")
    assert _f(rows["colocated"], "kv_transfer_mean_s") == 0
    ib, nvl = _f(rows["disagg-ib"], "kv_transfer_mean_s"), _f(rows["disagg-nvlink"], "kv_transfer_mean_s")
    assert 0 < nvl < ib
    # the bytes are the same: the transfer minus the link latency scales with 1 / bandwidth
    assert (ib - 100e-6) / (nvl - 100e-6) == pytest.approx(9.0, rel=1e-6)
    for row in rows.values():
        assert row["requests_completed"] == 300 and 0 < _f(row, "goodput_requests_per_s") <= 6.5


def test_e2_retrieval_share_is_a_fraction_of_e2e() -> None:
    rows = _run("E2")
    assert _f(rows["no-retrieval"], "retrieval_share_frac") == 0
    ann, exact = _f(rows["ann"], "retrieval_share_frac"), _f(rows["exact"], "retrieval_share_frac")
    assert 0 < ann < exact < 1
    assert _f(rows["ann"], "retrieval_mean_s") == pytest.approx(0.05, rel=0.15)
    assert _f(rows["exact"], "retrieval_mean_s") == pytest.approx(1.0, rel=0.05)
    assert _f(rows["exact"], "e2e_s.mean") > _f(rows["no-retrieval"], "e2e_s.mean") + 0.5


def test_e3_an_image_raises_ttft_over_the_same_text_prompt() -> None:
    rows = _run("E3")
    img, txt = rows["image"], rows["text-only"]
    assert _f(img, "ttft_s.p50") > _f(txt, "ttft_s.p50") and _f(img, "ttft_s.p99") > _f(txt, "ttft_s.p99")
    # the 576 image tokens join the prompt: fewer sequences fit the KV cache
    assert _f(img, "max_concurrent_sequences") < _f(txt, "max_concurrent_sequences")


def _serving(runs: list[dict[str, object]], **extra: object) -> dict[str, object]:
    return {"id": "X", "title": "t", "kind": "serving", "runs": runs, **extra}


_CFG = {"model": "llama-2-7b", "hardware": "a100-sxm-80gb"}


@pytest.mark.parametrize(("raw", "match"), [
    (_serving([{"label": "a", "config": _CFG}, {"label": "a", "config": _CFG}]), "unique"),
    (_serving([{"label": "a", "config": _CFG, "baseline": "b"}]), "baseline"),
    (_serving([{"label": "a", "config": _CFG, "search_max_qps": True}]), "SLO"),
    (_serving([{"label": "a", "config": _CFG}],
              expected=[{"metric": "ttft_s.p99", "lower": "a", "higher": "z", "source": "s"}]), "'z'"),
    (_serving([{"label": "a", "config": _CFG, "colocate": _CFG, "colocate_label": "a"}]), "unique"),
])
def test_a_serving_scenario_with_bad_runs_says_why(raw: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        scenario_from_dict(raw)


@pytest.mark.parametrize(("width", "tables"), [(80, 4), (100, 3), (200, 2)])
def test_serving_table_packs_the_runs_into_tables_as_wide_as_the_console(width: int, tables: int) -> None:
    from rich.console import Console

    rows: list[dict[str, object]] = [
        {"label": f"a-rather-long-label-{i}", "status": "ok", "ttft_s.p50": 0.1, "ttft_s.p99": 1.5,
         "tpot_s.p50": 0.02, "tpot_s.p99": 0.05, "e2e_s.p50": 3.0, "e2e_s.p99": 12.0, "requests_completed": 100,
         "requests_total": 100, "throughput_tokens_per_s": 1234.5, "preemptions": i, "block_size": 8 * (i + 1),
         "kv_utilization_frac.mean": 0.9, "kv_fragmentation_mean_frac": 0.01} for i in range(7)]
    res = ScenarioResult("X", "t", "ok", rows=rows, kind="serving")
    console = Console(width=width, record=True)
    console.print(serving_table(res))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= width
    assert all(f"a-rather-long-label-{i}" in text for i in range(7))  # whole labels, never cut
    assert f"X: serving runs ({tables}/{tables})" in text  # at most six runs per table however wide
    assert "KV fragmentation" in text and "preemptions/request" in text and "1,234" in text
    assert "slowdown" not in text and "retrieval" not in text  # quantities no run has stay out
