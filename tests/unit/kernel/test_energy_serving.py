"""Energy of a serving run (``perfcast.serving.energy``), priced after the run from what the simulation counted:
every GPU draws at least its static power for the whole run and at most its TDP; a lightly loaded deployment
spends more per output token (small batches re-read the weights, and it idles) than a saturated one."""

from __future__ import annotations

import pytest

from perfcast.catalog.hardware import load_hardware
from perfcast.kernel.energy import power_model
from perfcast.serving import ServingConfig, WorkloadConfig, simulate_serving

pytestmark = pytest.mark.unit


def _run(qps: float | None, tp: int = 1):
    wl = WorkloadConfig(num_requests=60, qps=qps, prompt_tokens=256, output_tokens=128, seed=3)
    return simulate_serving(ServingConfig(model="llama-2-7b", hardware="h100-sxm-80gb", tensor_parallel_size=tp,
                                          workload=wl))


def test_serving_energy_is_between_static_and_tdp() -> None:
    res = _run(4.0, tp=2)
    e = res.energy()
    hw = load_hardware("h100-sxm-80gb")
    assert e.num_gpus == 2 and e.output_tokens == int(res.generated_tokens.sum()) > 0
    assert power_model(hw).static_W < e.avg_power_per_gpu_W <= hw.tdp_W
    assert e.energy_J == pytest.approx(e.busy_energy_J + e.idle_energy_J)
    assert e.energy_per_output_token_J == pytest.approx(e.energy_J / e.output_tokens)
    data = res.as_dict()
    assert data["energy_J"] == e.energy_J and data["avg_power_per_gpu_W"] == e.avg_power_per_gpu_W


def test_a_lightly_loaded_deployment_spends_more_per_token() -> None:
    light, busy = _run(0.5).energy(), _run(None).energy()
    assert light.energy_per_output_token_J > 2 * busy.energy_per_output_token_J
    assert light.avg_power_per_gpu_W < busy.avg_power_per_gpu_W
