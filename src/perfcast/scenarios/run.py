"""Run a scenario: predict each of its runs on each of its devices, beside the measurement if known."""

from __future__ import annotations

import csv
from dataclasses import dataclass, field

from perfcast.catalog.hardware import load_hardware
from perfcast.catalog.models import load_model
from perfcast.compose.predict import StepRequest, predict
from perfcast.errors import PerfcastError
from perfcast.scenarios.schema import Scenario
from perfcast.workload.types import Mode

__all__ = ["ScenarioResult", "run_scenario"]


@dataclass
class ScenarioResult:
    """One scenario's rows: a dict per (run, device) with metrics in base units."""

    id: str
    title: str
    status: str
    rows: list[dict[str, object]] = field(default_factory=list)
    error: str = ""

    def headline(self) -> dict[str, object]:
        """The scenario's summary metrics."""
        errs = [abs(float(str(r["error_frac"]))) for r in self.rows if r.get("error_frac") is not None]
        ok = [r for r in self.rows if r["status"] == "ok"]
        return {
            "predictions": len(ok),
            "with_measurement": len(errs),
            "mape_frac": round(sum(errs) / len(errs), 4) if errs else None,
        }


def _measured(sc: Scenario) -> dict[tuple[str, str, str, int, int, bool], float]:
    if not sc.groundtruth:
        return {}
    from perfcast.validate.groundtruth import find_groundtruth

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
    """Predict every (run, device) pair; one failure does not stop the others."""
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
    if any(r["status"] != "ok" for r in res.rows):
        res.status = "error" if all(r["status"] != "ok" for r in res.rows) else "ok"
    return res
