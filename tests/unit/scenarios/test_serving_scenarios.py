"""The serving scenario kind: R4 runs both schedulers to completion and reports each expected ordering."""

from __future__ import annotations

import pytest

from perfcast.errors import ConfigError
from perfcast.scenarios import load_scenario, run_scenario
from perfcast.scenarios.schema import scenario_from_dict


def test_r4_runs_both_schedulers_and_judges_each_ordering() -> None:
    res = run_scenario(load_scenario("R4"))
    assert res.status == "ok" and res.kind == "serving"
    rows = {r["label"]: r for r in res.rows}
    assert rows["vllm"]["requests_completed"] == 200 and rows["sarathi"]["requests_completed"] == 50
    # chunked prefill keeps decodes flowing: Sarathi's TPOT tail is below vLLM's (VIDUR's finding)
    assert float(str(rows["sarathi"]["tpot_s.p99"])) < float(str(rows["vllm"]["tpot_s.p99"]))
    assert len(res.notes) == 2 and all("reproduced" in n for n in res.notes)


def test_a_serving_scenario_with_a_bad_key_names_it() -> None:
    raw = {"id": "X", "title": "t", "kind": "serving",
           "runs": [{"label": "a", "config": {"model": "llama-2-7b", "hardware": "a100", "schedular": "vllm"}}]}
    with pytest.raises(ConfigError, match="schedular"):
        scenario_from_dict(raw)
