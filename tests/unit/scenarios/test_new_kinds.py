"""Unit tests of the rlhf, serving_table and operator_table scenario kinds, and of the ok/oom/error status."""

from __future__ import annotations

import math

import pytest

from perfcast.datafiles import data_dir
from perfcast.errors import ConfigError
from perfcast.groundtruth.files import find_groundtruth
from perfcast.results.scenario import STATUSES, ScenarioResult
from perfcast.scenarios import load_scenario, run_scenario
from perfcast.scenarios.schema import scenario_from_dict
from perfcast.serving.experiments.rlhf import RLHFConfig, simulate_rlhf_iteration

GROUNDTRUTH = find_groundtruth(required=False)
needs_groundtruth = pytest.mark.skipif(GROUNDTRUTH is None, reason="ground truth not found (PERFCAST_GROUNDTRUTH)")

LLAMA_7B = {"actor": "llama-2-7b", "critic": "llama-2-7b", "reward": "llama-2-7b", "reference": "llama-2-7b",
            "cluster": "dgx-a100"}


def f(row: dict[str, object], key: str) -> float:
    return float(str(row[key]))


def _rlhf(**kw: object) -> dict[str, object]:
    config = {**LLAMA_7B, "prompts": 64, "prompt_tokens": 128, "generated_tokens": 64, **kw}
    return {"id": "x", "title": "t", "kind": "rlhf", "runs": [{"label": "r", "config": config}]}


# -- rlhf --------------------------------------------------------------------------------------------------------


def test_e1_iteration_is_the_sum_of_its_phases_and_fits() -> None:
    res = run_scenario(load_scenario("E1"))
    assert res.status == "ok" and len(res.rows) == 2
    for row in res.rows:
        parts = f(row, "reshard_s") + f(row, "generation_s") + f(row, "scoring_s") + f(row, "training_s")
        assert f(row, "iteration_time_s") == pytest.approx(parts)
        assert f(row, "scoring_s") == pytest.approx(sum(f(row, f"scoring_{r}_s")
                                                        for r in ("actor", "reference", "critic", "reward")))
        assert all(f(row, k) > 0 for k in ("generation_decode_s", "actor_train_s", "critic_train_s"))
        assert row["fits_in_memory"] is True and f(row, "memory_per_gpu_bytes") <= f(row, "memory_capacity_bytes")
    tp1, tp2 = res.rows
    # half the replicas with twice the prompts each: the same KV bytes per GPU, half the gathered weights
    assert f(tp2, "memory_kv_cache_bytes") == pytest.approx(f(tp1, "memory_kv_cache_bytes"))
    assert f(tp2, "memory_generation_weights_bytes") == pytest.approx(f(tp1, "memory_generation_weights_bytes") / 2)


def test_kv_cache_is_every_sequence_at_full_length() -> None:
    cfg = RLHFConfig(**LLAMA_7B, prompts=64, prompt_tokens=128, generated_tokens=64)  # type: ignore[arg-type]
    res = simulate_rlhf_iteration(cfg)
    per_token = 2 * 32 * 4096 * 2  # K and V, 32 layers, 4096 wide, bf16 (Llama-2-7B)
    assert res.memory.kv_cache_bytes == pytest.approx(64 / 8 * (128 + 64) * per_token)


def test_longer_responses_cost_more_generation_and_training() -> None:
    short = simulate_rlhf_iteration(RLHFConfig(**LLAMA_7B, prompts=64, prompt_tokens=128,  # type: ignore[arg-type]
                                               generated_tokens=64))
    long = simulate_rlhf_iteration(RLHFConfig(**LLAMA_7B, prompts=64, prompt_tokens=128,  # type: ignore[arg-type]
                                              generated_tokens=256))
    assert long.generation_decode_s > 3 * short.generation_decode_s
    assert long.training_s > short.training_s and long.scoring_total_s > short.scoring_total_s


def test_a_run_that_does_not_fit_is_an_oom_verdict_with_the_breakdown() -> None:
    # 4096-token sequences for 512 prompts: 64 sequences per replica hold 128 GiB of KV cache
    res = run_scenario(scenario_from_dict(_rlhf(prompts=512, prompt_tokens=512, generated_tokens=3584)))
    assert res.status == "oom"
    (row,) = res.rows
    assert row["fits_in_memory"] is False and row["memory_peak_phase"] == "generation"
    assert f(row, "memory_kv_cache_bytes") > f(row, "memory_capacity_bytes")
    (note,) = res.notes
    assert note.startswith("r: out of memory:") and "kv_cache" in note and "actor_states" in note


def test_rlhf_bad_input() -> None:
    with pytest.raises(ConfigError, match=r"key 'runs\.0\.config'.*mini_batches=3 must divide prompts=64"):
        scenario_from_dict(_rlhf(mini_batches=3))
    with pytest.raises(ConfigError, match=r"key 'runs\.0\.config\.zero'"):
        scenario_from_dict(_rlhf(zero=4))
    res = run_scenario(scenario_from_dict(_rlhf(generation_tp=3)))
    assert res.status == "error" and "generation_tp=3" in str(res.rows[0]["error"])


# -- status ------------------------------------------------------------------------------------------------------


def test_settle_gives_ok_oom_or_error() -> None:
    fits = {"status": "ok", "fits_in_memory": True}
    oom = {"status": "ok", "fits_in_memory": False, "label": "big", "memory_per_gpu_bytes": 100 * 2**30,
           "memory_capacity_bytes": 80 * 2**30, "memory_weights_bytes": 60 * 2**30}
    failed = {"status": "error", "error": "boom"}
    assert ScenarioResult("a", "t", "ok", rows=[fits, oom]).settle().status == "ok"
    both = ScenarioResult("a", "t", "ok", rows=[oom, failed]).settle()
    assert both.status == "oom"
    assert both.notes == ["big: out of memory: 100.0 GiB per GPU > 80.0 GiB (weights 60.0 GiB)"]
    assert ScenarioResult("a", "t", "ok", rows=[failed]).settle().status == "error"
    empty = ScenarioResult("a", "t", "ok").settle()
    assert empty.status == "error" and empty.error
    assert {ScenarioResult("a", "t", "ok", rows=[r]).settle().status for r in (fits, oom, failed)} <= set(STATUSES)


def test_a_scenario_that_fails_as_a_whole_is_an_error_result(monkeypatch: pytest.MonkeyPatch) -> None:
    import perfcast.scenarios.diffusion as diffusion

    def broken(run: object) -> dict[str, object]:
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(diffusion, "diffusion_row", broken)
    res = run_scenario(load_scenario("E4"))
    assert res.status == "error" and "internal error" in res.error and "ZeroDivisionError" in res.error


# -- published tables --------------------------------------------------------------------------------------------


@needs_groundtruth
def test_serving_table_rows_show_measured_predicted_and_error() -> None:
    sc = scenario_from_dict({"id": "R9s", "title": "t", "kind": "serving_table", "model_contains": "llama-2-7b",
                             "gpus": ["a100-sxm-80gb"], "num_requests": 60, "max_rows": 2})
    res = run_scenario(sc)
    assert res.status == "ok" and len(res.rows) == 2 and "2 of the" in res.notes[0]
    for row in res.rows:
        meas, pred = f(row, "measured_throughput_tokens_per_s"), f(row, "throughput_tokens_per_s")
        assert row["gpu"] == "a100-sxm-80gb" and meas > 0 and pred > 0
        assert f(row, "error_frac") == pytest.approx(pred / meas - 1)


@needs_groundtruth
def test_operator_table_compares_per_gpu_and_operator() -> None:
    sc = scenario_from_dict({"id": "R10s", "title": "t", "kind": "operator_table", "gpus": ["a40", "h100"],
                             "models": ["meta-llama__Llama-2-7b-hf"], "row_stride": 8})
    res = run_scenario(sc)
    assert res.status == "ok"
    assert any("no measurements for h100" in n for n in res.notes)
    ops = [row["op"] for row in res.rows]
    assert {"attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj", "mlp_act",
            "input_layernorm"} <= set(ops) and len(ops) == len(set(ops))
    for row in res.rows:
        assert f(row, "error_frac") == pytest.approx(f(row, "predicted_time_s") / f(row, "measured_time_s") - 1)
        assert 0 <= f(row, "median_ape_frac") and math.isfinite(f(row, "mape_frac"))


def test_published_tables_without_ground_truth_say_why(monkeypatch: pytest.MonkeyPatch) -> None:
    import perfcast.scenarios.published as published

    monkeypatch.setattr(published, "find_groundtruth", lambda required=True: None)
    for sid in ("R9", "R10"):
        res = run_scenario(load_scenario(sid))
        assert res.status == "error" and res.rows == [] and "PERFCAST_GROUNDTRUTH" in res.error


def test_shipped_scenarios_cover_the_new_ids() -> None:
    folder = data_dir("scenarios")
    for sid, kind in (("E1", "rlhf"), ("E4", "diffusion"), ("R9", "serving_table"), ("R10", "operator_table")):
        assert (folder / f"{sid}.yaml").is_file() and load_scenario(sid).kind == kind
