"""build_workload's memo keys on the model's content, not on the object's id."""

from __future__ import annotations

import gc

from perfcast.catalog.models import load_model
from perfcast.workload.build import WorkloadSpec, build_workload
from perfcast.workload.types import Mode


def test_equal_configs_share_one_workload_and_changed_ones_do_not() -> None:
    cfg = load_model("gpt2")
    spec = WorkloadSpec(Mode.INFERENCE, 2, 128)
    first = build_workload(cfg, spec)
    assert build_workload(cfg.model_copy(), spec) is first
    wider = cfg.model_copy(update={"intermediate_size": 2 * cfg.intermediate_size})
    assert build_workload(wider, spec).flops > first.flops


def test_a_freed_config_cannot_answer_for_a_new_one() -> None:
    """Configs built, priced and freed in turn (ids may be reused) each get their own workload."""
    cfg = load_model("gpt2")
    spec = WorkloadSpec(Mode.INFERENCE, 1, 64)
    flops = []
    for factor in (1, 2, 3):
        one = cfg.model_copy(update={"intermediate_size": factor * cfg.intermediate_size})
        flops.append(build_workload(one, spec).flops)
        del one
        gc.collect()
    assert flops[0] < flops[1] < flops[2]
