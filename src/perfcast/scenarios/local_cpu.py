"""Run a local_cpu scenario (R6): models measured on this machine with PyTorch beside their prediction.

The prediction is on ``local-cpu``, the hardware entry ``perfcast calibrate`` fits on microbenchmarks of
this CPU. When this machine has no such entry yet, the scenario first runs the quick calibration
(``perfcast calibrate --quick``, seconds) and writes it where ``perfcast calibrate`` does, the user catalog;
a note says so. Each row has ``measured_s``, ``predicted_s`` and ``error_frac`` = predicted / measured - 1.
"""

from __future__ import annotations

from perfcast.errors import ConfigError, PerfcastError
from perfcast.groundtruth.local import LocalCase, load_local_cpu, validate_local
from perfcast.results.scenario import ScenarioResult
from perfcast.scenarios.schema import LocalCpuScenario

__all__ = ["run_local_cpu_scenario"]


def _calibrated_here(res: ScenarioResult) -> None:
    """The quick calibration into the user catalog (``calibrate --quick``), with a note naming the file."""
    from perfcast.calibrate.machine import default_path
    from perfcast.calibrate.write import calibrate_to

    path = default_path()
    try:
        hw, benchmarks = calibrate_to(path, quick=True)
    except OSError as exc:
        raise ConfigError(f"local-cpu is not calibrated and its calibration cannot be written to {path} "
                          f"({exc.strerror}); run `perfcast calibrate --out FILE` and set PERFCAST_CATALOG") from None
    assert hw.cpu is not None
    res.notes.append(f"this machine had no local-cpu calibration: ran the quick one (`perfcast calibrate --quick`, "
                     f"{benchmarks} benchmarks, {hw.cpu.threads} threads) into {path}; `perfcast calibrate --force` "
                     "runs the full one")


def run_local_cpu_scenario(sc: LocalCpuScenario) -> ScenarioResult:
    """Measure and predict every case (calibrating this machine quickly first if it never was)."""
    res = ScenarioResult(sc.id, sc.title, "ok", kind=sc.kind, notes=list(sc.notes))
    try:
        try:
            hw = load_local_cpu()
        except ConfigError:  # not calibrated on this machine
            _calibrated_here(res)
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
