"""The shipped training scenarios: every file loads through the typed schema, every run predicts, and the
answers have the properties the design document asks of them."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

from perfcast.errors import ConfigError
from perfcast.groundtruth.files import find_groundtruth
from perfcast.scenarios import (
    CollectiveScenario,
    ScenarioResult,
    TrainingScenario,
    list_scenarios,
    load_scenario,
    run_scenario,
)
from perfcast.scenarios.training import BREAKDOWN_KEYS

TRAINING_IDS = ["T1.1", "T1.2", "T1.3", "T2.1", "T2.2", "T3.1", "T3.2", "T4.1", "T4.2", "T4.3", "T4.4", "R3", "R8"]
needs_groundtruth = pytest.mark.skipif(find_groundtruth(required=False) is None,
                                       reason="ground truth not found (set PERFCAST_GROUNDTRUTH)")


@cache
def result(sid: str) -> ScenarioResult:
    return run_scenario(load_scenario(sid))


def by_label(sid: str) -> dict[str, dict[str, object]]:
    return {str(r["label"]): r for r in result(sid).rows}


def f(row: dict[str, object], key: str) -> float:
    value = row[key]
    assert isinstance(value, (int, float)), (key, value)
    return float(value)


def test_every_shipped_scenario_loads_with_its_kind() -> None:
    scenarios = list_scenarios()
    ids = [s.id for s in scenarios]
    assert len(ids) == len(set(ids))
    assert set(TRAINING_IDS) | {"R7", "R2", "R11", "R1"} <= set(ids)
    assert ids.index("R2") < ids.index("R11") and ids.index("T1.1") < ids.index("R1")
    for sc in scenarios:
        if sc.id in TRAINING_IDS or sc.id == "R7":
            assert isinstance(sc, TrainingScenario)
        elif sc.id in ("R2", "R11"):
            assert isinstance(sc, CollectiveScenario)


@pytest.mark.parametrize("sid", TRAINING_IDS)
def test_every_run_predicts_a_consistent_step(sid: str) -> None:
    res = result(sid)
    sc = load_scenario(sid)
    assert isinstance(sc, TrainingScenario)
    fits = [bool(r["fits_in_memory"]) for r in res.rows]
    assert res.status == ("ok" if any(fits) else "oom") and res.kind == "training"
    assert len(res.rows) == len(sc.runs) and all(r["status"] == "ok" for r in res.rows), res.rows
    assert len([n for n in res.notes if "out of memory" in n]) == fits.count(False)
    for row in res.rows:
        step = f(row, "step_time_s")
        assert f(row, "step_time_low_s") < step < f(row, "step_time_high_s")
        # the exposed breakdown adds up to the step; hidden communication never exceeds the whole collective
        assert sum(f(row, k) for k in BREAKDOWN_KEYS) == pytest.approx(step, rel=1e-6)
        assert f(row, "comm_exposed_s") <= f(row, "comm_total_s") + 1e-12
        assert 0 < f(row, "mfu") <= f(row, "hfu") < 1
        assert 0 <= f(row, "bubble_frac") < 1
        assert row["fits_in_memory"] == (f(row, "memory_per_gpu_bytes") <= f(row, "memory_capacity_bytes"))


def test_t1_1_all_reduces_the_bf16_gradients_mostly_behind_the_backward() -> None:
    (row,) = result("T1.1").rows
    assert row["num_gpus"] == 8 and row["fits_in_memory"] is True
    assert f(row, "dp_comm_total_s") > 0
    assert f(row, "dp_comm_s") < f(row, "dp_comm_total_s")  # overlapped with the last backward


def test_t1_2_fsdp_shards_a_7b_model_into_a_few_gib() -> None:
    (row,) = result("T1.2").rows
    assert row["fits_in_memory"] is True and f(row, "recompute_s") > 0 and f(row, "fsdp_comm_total_s") > 0
    # ZeRO-3 over 32 GPUs: weights, gradients and optimizer states are a 32nd of an unsharded replica's
    assert f(row, "memory_weights_bytes") + f(row, "memory_optimizer_bytes") < 6.74e9 * 18 / 16


def test_t2_2_does_not_fit_and_says_why() -> None:
    (row,) = result("T2.2").rows
    assert row["status"] == "ok" and row["fits_in_memory"] is False
    assert f(row, "memory_per_gpu_bytes") > f(row, "memory_capacity_bytes")
    assert f(row, "tp_comm_s") > 0 and f(row, "mfu") > 0


def test_t2_1_tensor_parallel_all_reduces_are_exposed() -> None:
    (row,) = result("T2.1").rows
    assert row["num_gpus"] == 4 and f(row, "tp_comm_s") > 0 and f(row, "recompute_s") > 0


def test_t3_1_has_a_pipeline_bubble() -> None:
    (row,) = result("T3.1").rows
    assert row["microbatches"] == 16 and 0 < f(row, "bubble_frac") < 0.5 and f(row, "pp_send_total_s") > 0
    assert f(row, "stage_imbalance_frac") >= 0


def test_t3_2_interleaving_shrinks_the_bubble() -> None:
    rows = by_label("T3.2")
    plain, inter = rows["1F1B"], rows["interleaved (vp=2)"]
    assert inter["vp"] == 2 and inter["schedule"] == "interleaved" and plain["schedule"] == "1f1b"
    assert f(inter, "bubble_frac") < f(plain, "bubble_frac")
    assert f(inter, "pp_send_total_s") > f(plain, "pp_send_total_s")  # twice the stage boundaries


def test_t4_1_fp8_is_faster_than_bf16() -> None:
    rows = by_label("T4.1")
    assert f(rows["fp8"], "step_time_s") < f(rows["bf16 baseline"], "step_time_s")
    assert f(rows["fp8"], "peak_tflops") > f(rows["bf16 baseline"], "peak_tflops")  # MFU vs the FP8 peak


def test_t4_2_lora_fits_where_full_fine_tuning_does_not() -> None:
    rows = by_label("T4.2")
    lora, qlora, full = rows["LoRA r16 q,k,v,o"], rows["QLoRA r16 q,k,v,o (4-bit base)"], rows["full fine-tuning"]
    assert lora["fits_in_memory"] is True and qlora["fits_in_memory"] is True
    assert full["fits_in_memory"] is False and full["status"] == "ok"
    # rank 16 on q, k, v, o of 32 layers of width 4096: 32 * 4 * 16 * (4096 + 4096) adapter weights
    assert f(lora, "trainable_params") == pytest.approx(32 * 4 * 16 * (4096 + 4096), rel=1e-6)
    assert f(full, "trainable_params") > 6.5e9
    assert f(qlora, "memory_weights_bytes") < f(lora, "memory_weights_bytes")
    assert f(lora, "memory_optimizer_bytes") < 0.01 * f(full, "memory_optimizer_bytes")


def test_t4_3_context_parallel_runs_communicate_over_cp_not_tp() -> None:
    rows = by_label("T4.3")
    tp, ring, uly = rows["TP=8 + SP"], rows["CP=8 ring"], rows["CP=8 Ulysses"]
    assert f(tp, "tp_comm_total_s") > 0 and f(tp, "cp_comm_total_s") == 0
    for row in (ring, uly):
        assert row["cp"] == 8 and f(row, "cp_comm_total_s") > 0 and f(row, "tp_comm_total_s") == 0


def test_t4_4_router_skew_never_speeds_up_the_step() -> None:
    rows = [r for r in result("T4.4").rows]
    skews = [float(str(r["label"]).split()[-1]) for r in rows]
    assert skews == sorted(skews) and skews[0] == 0
    steps = [f(r, "step_time_s") for r in rows]
    assert all(a <= b * (1 + 1e-9) for a, b in zip(steps, steps[1:], strict=False))
    assert steps[-1] > steps[0]
    assert all(f(r, "ep_comm_total_s") > 0 for r in rows)


def test_r3_exposed_data_parallel_comm_grows_with_gpus() -> None:
    rows = result("R3").rows
    gpus = [int(str(r["num_gpus"])) for r in rows]
    assert gpus == [1, 2, 4, 8]
    exposed = [f(r, "dp_comm_s") for r in rows]
    total = [f(r, "dp_comm_total_s") for r in rows]
    assert exposed[0] == 0 and total[0] == 0
    assert all(a <= b for a, b in zip(exposed, exposed[1:], strict=False))
    assert all(a <= b for a, b in zip(total, total[1:], strict=False))


def test_r8_compares_with_the_published_figure() -> None:
    res = result("R8")
    assert res.headline()["with_measurement"] == 2
    for row in res.rows:
        assert row["num_gpus"] == 16384 and row["compared_metric"] == "tflops_per_gpu"
        assert f(row, "error_frac") == pytest.approx(f(row, "tflops_per_gpu") / f(row, "measured_tflops_per_gpu") - 1)
    rows = by_label("R8")
    assert f(rows["vp=2 (interleaved)"], "bubble_frac") < f(rows["vp=1 (1F1B)"], "bubble_frac")


@needs_groundtruth
def test_r7_predicts_the_sc21_rows_as_validate_does() -> None:
    from perfcast.groundtruth.training_tables import predict_row

    res = result("R7")
    assert res.status == "ok" and len(res.rows) == 10
    assert all(r["compared_metric"] == "hfu_tflops_per_gpu" for r in res.rows)
    gpus = [int(str(r["num_gpus"])) for r in res.rows]
    assert gpus == sorted(gpus) and gpus[0] == 32 and gpus[-1] == 3072
    root = find_groundtruth(required=False)
    assert root is not None
    import csv

    with (root / "published" / "training.csv").open(encoding="utf-8", newline="") as fh:
        first = next(r for r in csv.DictReader(fh) if "Megatron-LM (2021)" in r["framework"])
    direct = predict_row(first)
    assert f(res.rows[0], "step_time_s") == pytest.approx(direct.step_time_s)
    assert f(res.rows[0], "measured_hfu_tflops_per_gpu") == float(first["tflops_per_gpu"])
    assert res.headline()["mape_frac"] is not None


def test_r7_without_ground_truth_is_an_error_saying_why(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import perfcast.groundtruth.files as gt

    monkeypatch.setattr(gt, "find_groundtruth", lambda required=True: None)
    res = run_scenario(load_scenario("R7"))
    assert res.status == "error" and res.rows == [] and "PERFCAST_GROUNDTRUTH" in res.error


def test_a_bad_plan_key_names_the_key(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("id: b\ntitle: t\nkind: training\nruns:\n  - {model: gpt2, cluster: dgx-a100, "
                   "plan: {dp: 1, bogus: 2}}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"runs\.0\.plan\.bogus"):
        load_scenario(bad)
    unknown = tmp_path / "kind.yaml"
    unknown.write_text("id: k\ntitle: t\nkind: energy\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="model_latency, training, collective, serving"):
        load_scenario(unknown)


def test_an_impossible_plan_is_an_error_row_not_a_crash(tmp_path: Path) -> None:
    sc = tmp_path / "mixed.yaml"
    sc.write_text("id: m\ntitle: t\nkind: training\nruns:\n"
                  "  - {label: ok, model: gpt2, cluster: dgx-a100, plan: {dp: 2, seq_len: 128}}\n"
                  "  - {label: bad, model: gpt2, cluster: dgx-a100, plan: {tp: 5, seq_len: 128}}\n",
                  encoding="utf-8")
    res = run_scenario(load_scenario(sc))
    assert res.status == "ok"
    assert [r["status"] for r in res.rows] == ["ok", "error"]
    assert "tp" in str(res.rows[1]["error"])


@pytest.mark.parametrize("sid", TRAINING_IDS)
def test_shipped_training_runs_state_their_precision(sid: str) -> None:
    # scenarios.md: bf16 mixed precision unless said otherwise; the files say it, so the shared
    # checkpoint-dtype default (which a file leaving precision out gets) never moves the suite
    sc = load_scenario(sid)
    assert isinstance(sc, TrainingScenario)
    assert all("precision" in run.plan.model_fields_set for run in sc.runs)


def test_a_run_without_precision_trains_in_the_checkpoints_dtype() -> None:
    from perfcast.scenarios.schema import TrainingRun
    from perfcast.scenarios.training import run_plan

    plan = {"seq_len": 1024, "micro_batch": 1}
    assert run_plan(TrainingRun(model="llama-2-7b", cluster="dgx-a100", plan=plan)).precision == "fp16"
    assert run_plan(TrainingRun(model="llama-3-8b", cluster="dgx-a100", plan=plan)).precision == "bf16"
    assert run_plan(TrainingRun(model="gpt2", cluster="dgx-a100", plan=plan)).precision == "fp32"
    given = TrainingRun(model="llama-2-7b", cluster="dgx-a100", plan={**plan, "precision": "bf16"})
    assert run_plan(given) is given.plan


def test_r8_the_published_405b_plan_fits_the_h100s_it_ran_on() -> None:
    # Dubey et al. 2024 trained Llama 3.1 405B with this plan on 80 GB H100s: a model that calls it out of
    # memory is wrong (Korthikanti's activation count, sequence parallel: 34 s b h / t per layer)
    for row in result("R8").rows:
        assert row["fits_in_memory"] is True, row["memory_per_gpu_bytes"]
