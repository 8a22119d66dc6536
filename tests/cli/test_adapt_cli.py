"""perfcast adapt and predict-batch --adapt end to end, on end-to-end tables whose 'measured' times are perfcast's
own predictions made 20 % slower (a device that runs 20 % below its datasheet)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from cli_helpers import invoke, parse_json, user_error

from perfcast.catalog.hardware import load_hardware
from perfcast.coefficients.bundle import resolve_calibration
from perfcast.groundtruth.tables import predict_table, recognize

_SLOWER = 1.2
_CONFIGS = [("bert_large", "inference", 8, 512), ("bert_large", "training", 2, 512),
            ("gpt2_large", "inference", 4, 1024), ("gpt2_large", "training", 1, 1024),
            ("opt_13", "inference", 2, 2048), ("bert_large", "inference", 16, 512), ("opt_13", "inference", 8, 2048)]


def _table(path: Path, configs: list[tuple[str, str, int, int]], device: str = "V100-PCIE-32GB") -> Path:
    rows = [{"device": device, "model": m, "mode": mode, "batch_size": str(b), "seq_len": str(s), "fused": "false",
             "parallelism": "none", "num_gpus": "1", "measured_ms": "1"} for m, mode, b, s in configs]
    pred = predict_table(recognize(list(rows[0])), rows, resolve_calibration(None))
    for r, t in zip(rows, pred.pred["measured_ms"], strict=True):
        r["measured_ms"] = f"{t * _SLOWER:.6f}"
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return path


def test_adapt_writes_hardware_yaml_that_predict_takes(tmp_path: Path) -> None:
    samples = _table(tmp_path / "samples.csv", _CONFIGS[:5])
    out = tmp_path / "v100-mine.yaml"
    data = parse_json(invoke(["adapt", str(samples), "-o", str(out), "--id", "v100-mine", "--json"]))
    (device,) = data["devices"]
    assert device["catalog_id"] == "v100-pcie-32gb" and device["id"] == "v100-mine" and device["fitted_rows"] == 5
    assert device["rms_log_error_after"] < 0.2 * device["rms_log_error_before"]
    hw = load_hardware(out)
    assert hw.id == "v100-mine" and hw.corrections is not None and "samples.csv" in hw.source[0]
    # the device is slower than its datasheet: both rates fall, most of the 20 % on the math units
    assert hw.corrections.matrix_throughput < 1.0 and hw.corrections.memory_bandwidth < 1.0
    args = ["predict", "-m", "bert-large", "-b", "16", "-s", "512", "--dtype", "fp32", "--json"]
    adapted = parse_json(invoke([*args, "-H", str(out)]))["step_time_s"]
    datasheet = parse_json(invoke([*args, "-H", "v100-pcie-32gb"]))["step_time_s"]
    assert adapted / datasheet == pytest.approx(_SLOWER, rel=0.03)


def test_adapt_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    samples = _table(tmp_path / "samples.csv", _CONFIGS[:3])
    out = tmp_path / "device.yaml"
    out.write_text("mine\n")
    assert "--force" in user_error(invoke(["adapt", str(samples), "-o", str(out)]))
    assert out.read_text() == "mine\n"
    res = invoke(["adapt", str(samples), "-o", str(out), "--force"])
    assert res.exit_code == 0, res.stderr
    assert res.stdout.startswith("v100-pcie-32gb: 3 measured rows (measured_ms) -> v100-pcie-32gb-adapted")
    assert load_hardware(out).id == "v100-pcie-32gb-adapted"


def test_bad_sample_tables_are_one_line_errors(tmp_path: Path) -> None:
    unknown = tmp_path / "unknown.csv"
    unknown.write_text("a,b\n1,2\n")
    assert "unrecognized table" in user_error(invoke(["adapt", str(unknown), "-o", str(tmp_path / "x.yaml")]))
    empty = _table(tmp_path / "empty.csv", _CONFIGS[:2])
    header, *lines = empty.read_text().splitlines()
    empty.write_text("\n".join([header, *(line.rsplit(",", 1)[0] + "," for line in lines)]) + "\n")  # unmeasured
    assert "no measured value" in user_error(invoke(["adapt", str(empty), "-o", str(tmp_path / "x.yaml")]))
    kernels = tmp_path / "gemm.csv"  # isolated kernels are priced without the corrected coefficients
    kernels.write_text("device,op,batch,m_rows,k_reduction,n_cols,latency_ms\n"
                       "V100-PCIE-32GB,linear,1,1024,1024,1024,0.5\n")
    assert "do not depend" in user_error(invoke(["adapt", str(kernels), "-o", str(tmp_path / "x.yaml")]))
    missing = tmp_path / "nope.csv"
    assert "does not exist" in user_error(invoke(["adapt", str(missing), "-o", str(tmp_path / "x.yaml")]))
    assert not (tmp_path / "x.yaml").exists()


def test_predict_batch_adapt_predicts_the_table_with_the_fitted_device(tmp_path: Path) -> None:
    samples = _table(tmp_path / "samples.csv", _CONFIGS[:5])
    table = _table(tmp_path / "table.csv", _CONFIGS[5:])
    plain = parse_json(invoke(["predict-batch", str(table), "-o", str(tmp_path / "plain.csv"), "--json"]))
    assert plain["targets"]["measured_ms"]["mape_frac"] == pytest.approx(1 - 1 / _SLOWER, rel=0.01)
    data = parse_json(invoke(["predict-batch", str(table), "-o", str(tmp_path / "out.csv"), "--adapt", str(samples),
                              "--json"]))
    assert data["adapted"][0]["catalog_id"] == "v100-pcie-32gb" and data["adapted"][0]["fitted_rows"] == 5
    assert data["targets"]["measured_ms"]["mape_frac"] < 0.03
    with (tmp_path / "out.csv").open() as fh:
        assert [r["device"] for r in csv.DictReader(fh)] == ["V100-PCIE-32GB", "V100-PCIE-32GB"]


def test_predict_batch_adapt_wants_samples_of_the_tables_kind(tmp_path: Path) -> None:
    table = _table(tmp_path / "table.csv", _CONFIGS[5:])
    other = tmp_path / "gemm.csv"
    other.write_text("device,op,batch,m_rows,k_reduction,n_cols,latency_ms\nV100-PCIE-32GB,linear,1,64,64,64,0.01\n")
    line = user_error(invoke(["predict-batch", str(table), "-o", str(tmp_path / "out.csv"), "--adapt", str(other)]))
    assert "neusight_gemm" in line and "neusight_e2e" in line
