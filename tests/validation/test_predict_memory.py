"""Validation: every run NeuSight measured end to end is predicted to fit its GPU (those runs ran), with
``predict``'s memory model (:mod:`perfcast.compose.memory`). Rows: neusight/e2e.csv and e2e_extra.csv,
requested as ``perfcast predict-batch`` requests them (FP32, no optimizer step, gradients accumulated)."""

from __future__ import annotations

import csv

import pytest

from perfcast.compose.predict import StepRequest
from perfcast.groundtruth.files import find_groundtruth
from perfcast.system.predict import predict
from perfcast.workload.types import Mode

ROOT = find_groundtruth(required=False)
if ROOT is None:
    pytest.skip("ground truth not found: set PERFCAST_GROUNDTRUTH to the shared/groundtruth folder",
                allow_module_level=True)
assert ROOT is not None


def _runs() -> list[dict[str, str]]:
    rows: dict[tuple[str, ...], dict[str, str]] = {}
    for name in ("e2e.csv", "e2e_extra.csv"):
        path = ROOT / "neusight" / name
        if path.is_file():
            with path.open(newline="", encoding="utf-8") as fh:
                for r in csv.DictReader(fh):
                    key = tuple(r.get(k, "") for k in ("device", "model", "mode", "batch_size", "seq_len", "fused",
                                                       "parallelism", "pp_microbatches"))
                    rows.setdefault(key, r)
    return list(rows.values())


RUNS = _runs()


@pytest.mark.parametrize("row", RUNS, ids=[f"neusight/e2e {r['device']} {r['model']} {r['mode']} b{r['batch_size']} "
                                           f"s{r['seq_len']} {r.get('parallelism') or 'none'}" for r in RUNS])
def test_measured_runs_are_predicted_to_fit(row: dict[str, str]) -> None:
    mb = row.get("pp_microbatches", "")
    st = predict(StepRequest(
        model=row["model"], hardware=row["device"], mode=Mode(row["mode"]), batch_size=int(float(row["batch_size"])),
        seq_len=int(float(row["seq_len"])), fused=row.get("fused", "false").lower() == "true",
        parallelism=row.get("parallelism") or "none", microbatches=int(float(mb)) if mb else None,
        optimizer="none", loss=False, accumulate_grads=True, dtype="fp32"))
    assert st.memory is not None
    assert st.memory.fits, {k: v / 2**30 for k, v in st.memory.parts().items()}
