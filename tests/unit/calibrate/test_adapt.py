"""Few-sample adaptation: the ridge Gauss-Newton fitter on synthetic samples, the corrections as the kernel and
composition layers apply them, and the table-driven fit on samples perfcast itself priced with known corrections."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest

from perfcast.calibrate.adapt import RIDGE, fit_corrections
from perfcast.catalog.corrections import DeviceCorrections
from perfcast.catalog.hardware import adapted_hardware, load_hardware
from perfcast.compose.predict import StepRequest, predict
from perfcast.errors import ConfigError, UnsupportedError
from perfcast.groundtruth.tables import predict_table, recognize
from perfcast.validate.adapt import adapted_entry, adapting, fit_samples, read_samples, row_devices

# synthetic runs: log pred = log base - a*log(matrix) - b*log(memory) + c*log(host), the shares a run spends on
# each (a compute-bound, a memory-bound, a host-bound and mixed runs)
_SHARES = np.array([[0.9, 0.1, 0.0], [0.2, 0.8, 0.0], [0.1, 0.1, 0.8], [0.6, 0.4, 0.0], [0.5, 0.3, 0.2]])
_BASE = np.array([1.0, 2.0, 0.5, 3.0, 1.5])


def _synthetic(shares: np.ndarray, base: np.ndarray):
    def predict_values(c: DeviceCorrections) -> np.ndarray:
        m = np.log(np.array(c.multipliers()))
        return base * np.exp(shares @ (m * np.array([-1.0, -1.0, 1.0])))

    return predict_values


def test_fit_recovers_known_multipliers_from_five_samples() -> None:
    predict_values = _synthetic(_SHARES, _BASE)
    truth = DeviceCorrections(matrix_throughput=1.3, memory_bandwidth=0.8, host_overhead=1.5)
    fit = fit_corrections(predict_values, predict_values(truth))
    for got, want in zip(fit.corrections.multipliers(), truth.multipliers(), strict=True):
        assert got == pytest.approx(want, rel=0.03)  # the prior shrinks each by a few percent at most
    assert fit.rms_log_before > 0.1 and fit.rms_log_after < 0.1 * fit.rms_log_before
    assert fit.fitted == ("matrix_throughput", "memory_bandwidth", "host_overhead") and fit.runs == 5


def test_without_prior_the_fit_is_exact_and_the_prior_pulls_toward_one() -> None:
    predict_values = _synthetic(_SHARES, _BASE)
    truth = DeviceCorrections(matrix_throughput=1.3, memory_bandwidth=0.8, host_overhead=1.5)
    exact = fit_corrections(predict_values, predict_values(truth), ridge=1e-12)
    assert exact.corrections.multipliers() == pytest.approx(truth.multipliers(), rel=1e-4)
    # one sample: three unknowns, one equation; the prior decides what the sample cannot
    one = fit_corrections(_synthetic(_SHARES[:1], _BASE[:1]), predict_values(truth)[:1])
    log_one = np.log(one.corrections.multipliers())
    assert abs(log_one[0]) < math.log(1.3)  # pulled toward 1
    assert one.corrections.host_overhead == 1.0 and one.fitted == ("matrix_throughput", "memory_bandwidth")
    # a stronger prior pulls further
    strong = fit_corrections(_synthetic(_SHARES[:1], _BASE[:1]), predict_values(truth)[:1], ridge=100 * RIDGE)
    assert abs(math.log(strong.corrections.matrix_throughput)) < abs(log_one[0])


def test_runs_share_one_weight_and_unmeasured_values_are_skipped() -> None:
    predict_values = _synthetic(_SHARES, _BASE)
    measured = predict_values(DeviceCorrections(matrix_throughput=1.2))
    measured[2] = np.nan
    fit = fit_corrections(predict_values, measured, runs=np.array([0, 0, 1, 2, 3]))
    assert fit.values == 4 and fit.runs == 3  # run 1 has no measured value left


def test_nothing_measured_or_nothing_sensitive_is_refused() -> None:
    predict_values = _synthetic(_SHARES, _BASE)
    with pytest.raises(ConfigError, match="nothing to adapt"):
        fit_corrections(predict_values, np.full(5, np.nan))
    with pytest.raises(UnsupportedError, match="do not depend"):
        fit_corrections(lambda _c: _BASE, _BASE * 1.1)


def _step(hw: object, mode: str = "inference") -> float:
    req = StepRequest(model="bert-large", hardware=hw, mode=mode, batch_size=4, seq_len=256,  # type: ignore[arg-type]
                      dtype="fp32", optimizer="none", loss=False)
    return predict(req).time_s


def test_no_corrections_or_unit_ones_predict_bit_identically() -> None:
    hw = load_hardware("v100-pcie-32gb")
    assert hw.corrections is None
    unit = hw.model_copy(update={"corrections": DeviceCorrections()})
    for mode in ("inference", "training"):
        assert _step(unit, mode) == _step(hw, mode)


def test_corrections_move_the_step_the_way_they_say() -> None:
    hw = load_hardware("v100-pcie-32gb")
    base = _step(hw)
    faster_math = _step(hw.model_copy(update={"corrections": DeviceCorrections(matrix_throughput=1.5)}))
    faster_memory = _step(hw.model_copy(update={"corrections": DeviceCorrections(memory_bandwidth=1.5)}))
    slower_host = _step(hw.model_copy(update={"corrections": DeviceCorrections(host_overhead=10.0)}))
    assert faster_math < faster_memory < base  # a large FP32 BERT spends most of its time in GEMMs
    assert slower_host > base


def _write_samples(path: Path, device: str, truth: DeviceCorrections) -> list[dict[str, str]]:
    """NeuSight-style end-to-end rows on ``device`` whose 'measured' times are perfcast's own with ``truth``."""
    configs = [("bert_large", "inference", 8, 512), ("bert_large", "training", 2, 512),
               ("gpt2_large", "inference", 4, 1024), ("gpt2_large", "training", 1, 1024),
               ("opt_13", "inference", 2, 2048), ("bert_large", "inference", 16, 512)]
    rows = [{"device": device, "model": m, "mode": mode, "batch_size": str(b), "seq_len": str(s), "fused": "false",
             "parallelism": "none", "num_gpus": "1", "measured_ms": "1"} for m, mode, b, s in configs]
    kind = recognize(list(rows[0]))
    name = load_hardware(device).id
    with adapted_hardware(lambda hw: hw.model_copy(update={"corrections": truth}) if hw.id == name else hw):
        pred = predict_table(kind, rows, _shipped())
    for r, t in zip(rows, pred.pred["measured_ms"], strict=True):
        r["measured_ms"] = f"{t:.6f}"
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return rows


def _shipped():  # noqa: ANN202
    from perfcast.coefficients.bundle import resolve_calibration

    return resolve_calibration(None)


def test_table_fit_reproduces_the_device_it_was_measured_on(tmp_path: Path) -> None:
    truth = DeviceCorrections(matrix_throughput=1.25, memory_bandwidth=1.25)
    path = tmp_path / "samples.csv"
    rows = _write_samples(path, "V100-PCIE-32GB", truth)
    samples = read_samples(path)
    assert row_devices(samples, _shipped()) == ["v100-pcie-32gb"] * len(rows)
    train = type(samples)(samples.kind, samples.header, samples.rows[:5], path)
    (device,) = fit_samples(train)
    assert device.catalog_id == "v100-pcie-32gb" and device.rows == 5
    assert device.corrections.matrix_throughput == pytest.approx(1.25, rel=0.05)
    with adapting([device]):  # the held-out sixth row, predicted with the fitted device
        held = predict_table(samples.kind, samples.rows[5:], _shipped()).pred["measured_ms"][0]
    assert held == pytest.approx(float(rows[5]["measured_ms"]), rel=0.02)
    entry = adapted_entry(device, train)
    assert entry.id == "v100-pcie-32gb-adapted" and entry.corrections == device.corrections
    assert "samples.csv" in entry.source[0] and entry.aliases == ()
    assert load_hardware("v100-pcie-32gb").corrections is None  # the catalog is untouched outside the block
