"""validate --local's summary: signed errors, MAPE per model and overall, keys with units (no timing)."""

from __future__ import annotations

import json

import pytest

from perfcast.groundtruth.local import LocalCase, LocalResult, LocalValidation
from perfcast.results.serialize import to_json


def test_summary_reports_every_row_and_mape_per_model() -> None:
    rows = (LocalResult(LocalCase("bert-base", 1, 64), measured_s=0.200, predicted_s=0.220),
            LocalResult(LocalCase("bert-base", 1, 128), measured_s=0.400, predicted_s=0.360),
            LocalResult(LocalCase("resnet-50", 1), measured_s=0.100, predicted_s=0.105))
    rep = LocalValidation(hardware_id="local-cpu", threads=1, results=rows)
    assert rows[1].error_frac == pytest.approx(-0.10)
    assert rep.mape_frac("bert-base") == pytest.approx(0.10)
    assert rep.mape_frac() == pytest.approx((0.10 + 0.10 + 0.05) / 3)
    d = json.loads(json.dumps(to_json(rep)))
    assert [c["measured_s"] for c in d["cases"]] == [0.2, 0.4, 0.1]  # no row is dropped
    assert set(d["mape_frac_by_model"]) == {"bert-base", "resnet-50"}
    assert d["threads"] == 1 and rows[2].case.label == "resnet-50 b=1"
