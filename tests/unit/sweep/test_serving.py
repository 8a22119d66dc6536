"""The serving search: every deployment of the budget tried, ranked by goodput per GPU."""

from __future__ import annotations

from typing import Any

import pytest

from perfcast.errors import ConfigError
from perfcast.results.serialize import to_json
from perfcast.serving.config import ServingConfig, WorkloadConfig
from perfcast.sweep.serving import search_serving

BASE = ServingConfig(model="llama-2-7b", hardware="a100-sxm-80gb", slo_ttft_s=2.0, slo_tpot_s=0.1,
                     workload=WorkloadConfig(prompt_tokens=512, output_tokens=64))


def test_deployments_are_ranked_by_goodput_per_gpu() -> None:
    res = search_serving(BASE, 2, schedulers=("vllm", "sarathi"), chunk_sizes=(512,), max_num_seqs=(64,),
                         requests_per_replica=30)
    assert {(c.tp, c.replicas) for c in res.candidates} == {(1, 2), (2, 1)}
    assert len(res.candidates) == 4 and res.simulations >= 4
    good = [c.goodput_per_gpu for c in res.feasible]
    assert good == sorted(good, reverse=True) and good[0] > 0
    assert to_json(res.summary(2))["best"][0]["gpus"] == 2


def test_a_serving_search_needs_an_slo() -> None:
    with pytest.raises(ConfigError, match="needs an SLO"):
        search_serving(BASE.model_copy(update={"slo_ttft_s": None, "slo_tpot_s": None}), 2)


def test_the_result_is_the_same_whatever_the_worker_count() -> None:
    # two chains (one per max_num_seqs) of two deployments each, the second guided by the first's answer
    kw: dict[str, Any] = {"schedulers": ("vllm", "sarathi"), "chunk_sizes": (512,), "max_num_seqs": (8, 16),
                          "requests_per_replica": 30}
    one, two = search_serving(BASE, 1, workers=1, **kw), search_serving(BASE, 1, workers=2, **kw)
    views = []
    for res in (one, two):
        view = to_json(res.summary(4))
        view.pop("search_time_s")
        views.append(view)
    assert views[0] == views[1] and views[0]["configs_feasible"] == 4
    assert [c.check for c in one.candidates] == [c.check for c in two.candidates]
