"""Run a scenario: predict each of its runs, beside the measurement if known.

``model_latency`` scenarios run here (each run on each device); ``training`` and
``collective`` scenarios run in :mod:`perfcast.scenarios.training` and
:mod:`perfcast.scenarios.collective`.
"""

from __future__ import annotations

import csv
import traceback
from pathlib import Path

from perfcast.catalog.hardware import load_hardware
from perfcast.catalog.models import load_model
from perfcast.compose.predict import StepRequest
from perfcast.errors import PerfcastError
from perfcast.results.scenario import ScenarioResult
from perfcast.scenarios.collective import run_collective_scenario
from perfcast.scenarios.schema import (
    AccelScenario,
    CollectiveScenario,
    DiffusionScenario,
    LatencyScenario,
    LocalCpuScenario,
    OperatorTableScenario,
    RLHFScenario,
    Scenario,
    SearchScenario,
    ServingScenario,
    ServingTableScenario,
    TrainingScenario,
)
from perfcast.scenarios.search import run_search_scenario
from perfcast.scenarios.serving import run_serving_scenario
from perfcast.scenarios.training import run_training_scenario
from perfcast.system.predict import predict
from perfcast.workload.types import Mode

__all__ = ["ScenarioResult", "run_scenario"]


def _measured(sc: LatencyScenario) -> dict[tuple[str, str, str, int, int, bool], float]:
    if not sc.groundtruth:
        return {}
    from perfcast.groundtruth.files import find_groundtruth

    root = find_groundtruth(required=False)
    if root is None or not (root / sc.groundtruth).exists():
        return {}
    out = {}
    with (root / sc.groundtruth).open(encoding="utf-8", newline="") as fh:
        for r in csv.DictReader(fh):
            if r.get("parallelism", "none") not in ("none", ""):
                continue
            try:
                key = (load_hardware(r["device"]).id, load_model(r["model"]).id, r["mode"], int(r["batch_size"]),
                       int(r["seq_len"]), r.get("fused", "false").lower() == "true")
            except PerfcastError:
                continue
            out[key] = float(r["measured_ms"]) * 1e-3
    return out


def run_scenario(sc: Scenario) -> ScenarioResult:
    """Predict every run of the scenario (every (run, device) pair for model latency); one failure does not
    stop the others, and a scenario that fails as a whole is an ``error`` result saying why (a suite goes on)."""
    try:
        return _dispatch(sc)
    except PerfcastError as exc:
        return ScenarioResult(sc.id, sc.title, "error", error=str(exc), kind=sc.kind)
    except Exception as exc:  # noqa: BLE001 - a bug: this scenario's error, with where it happened
        tb = traceback.extract_tb(exc.__traceback__)[-1]
        where = f"{Path(tb.filename).name}:{tb.lineno}"
        return ScenarioResult(sc.id, sc.title, "error", kind=sc.kind,
                              error=f"internal error at {where} ({type(exc).__name__}: {exc}); please report it")


def _dispatch(sc: Scenario) -> ScenarioResult:
    if isinstance(sc, TrainingScenario):
        return run_training_scenario(sc)
    if isinstance(sc, CollectiveScenario):
        return run_collective_scenario(sc)
    if isinstance(sc, ServingScenario):
        return run_serving_scenario(sc)
    if isinstance(sc, SearchScenario):
        return run_search_scenario(sc)
    if isinstance(sc, RLHFScenario):
        from perfcast.scenarios.rlhf import run_rlhf_scenario

        return run_rlhf_scenario(sc)
    if isinstance(sc, DiffusionScenario):
        from perfcast.scenarios.diffusion import run_diffusion_scenario

        return run_diffusion_scenario(sc)
    if isinstance(sc, ServingTableScenario):
        from perfcast.scenarios.published import run_serving_table_scenario

        return run_serving_table_scenario(sc)
    if isinstance(sc, AccelScenario):
        from perfcast.scenarios.accel import run_accel_scenario

        return run_accel_scenario(sc)
    if isinstance(sc, LocalCpuScenario):
        from perfcast.scenarios.local_cpu import run_local_cpu_scenario

        return run_local_cpu_scenario(sc)
    if isinstance(sc, OperatorTableScenario):
        from perfcast.scenarios.published import run_operator_table_scenario

        return run_operator_table_scenario(sc)
    return _run_latency(sc)


def _run_latency(sc: LatencyScenario) -> ScenarioResult:
    measured = _measured(sc)
    res = ScenarioResult(sc.id, sc.title, "ok")
    for run in sc.runs:
        for hw in sc.hardware:
            row: dict[str, object] = {"model": run.model, "hardware": hw, "mode": run.mode,
                                      "batch_size": run.batch_size, "seq_len": run.seq_len, "fused": run.fused}
            try:
                st = predict(StepRequest(model=run.model, hardware=hw, mode=Mode(run.mode), batch_size=run.batch_size,
                                         seq_len=run.seq_len, dtype=sc.dtype, fused=run.fused,
                                         parallelism=run.parallelism, optimizer=sc.optimizer, loss=False,
                                         accumulate_grads=True))
                row.update(status="ok", step_time_s=st.time_s, step_time_low_s=st.low_s, step_time_high_s=st.high_s)
                key = (load_hardware(hw).id, load_model(run.model).id, run.mode, run.batch_size, run.seq_len,
                       run.fused)
                if key in measured:
                    row["measured_step_time_s"] = measured[key]
                    row["error_frac"] = st.time_s / measured[key] - 1.0
            except PerfcastError as exc:
                row.update(status="error", error=str(exc))
            res.rows.append(row)
    return res.settle()
