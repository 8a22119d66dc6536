"""Run a local_cpu scenario (R6): models measured on this machine with PyTorch beside their prediction.

The prediction is on ``local-cpu``, the hardware entry ``perfcast calibrate`` fitted on microbenchmarks of
this CPU; the scenario never calibrates (that takes a minute): without the entry it is an ``error``
result saying to run ``perfcast calibrate``. Each row has ``measured_s``, ``predicted_s`` and
``error_frac`` = predicted / measured - 1.
"""

from __future__ import annotations

from perfcast.errors import PerfcastError
from perfcast.scenarios.result import ScenarioResult
from perfcast.scenarios.schema import LocalCpuScenario
from perfcast.validate.local import LocalCase, load_local_cpu, validate_local

__all__ = ["run_local_cpu_scenario"]


def run_local_cpu_scenario(sc: LocalCpuScenario) -> ScenarioResult:
    """Measure and predict every case (an error result when local-cpu is not calibrated)."""
    res = ScenarioResult(sc.id, sc.title, "ok", kind=sc.kind, notes=list(sc.notes))
    try:
        hw = load_local_cpu()
        rep = validate_local([LocalCase(c.model, c.batch_size, c.seq_len) for c in sc.cases], hardware=hw,
                             min_time_s=sc.min_time_s)
    except PerfcastError as exc:
        res.error = str(exc)
        return res.settle()
    for r in rep.results:
        res.rows.append({"label": r.case.label, "model": r.case.model, "batch_size": r.case.batch_size,
                         "seq_len": r.case.seq_len, "hardware": rep.hardware_id, "threads": rep.threads,
                         "measured_s": r.measured_s, "predicted_s": r.predicted_s, "error_frac": r.error_frac,
                         "status": "ok"})
    return res.settle()
