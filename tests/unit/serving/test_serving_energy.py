"""Energy of a serving run (``perfcast.serving.energy``), priced after the run from what its iterations summed:
every GPU draws its static power for the whole run and at most its TDP; the ops' dynamic energy is the kernel
layer's; a decode stretch sums what its iterations one by one would; idle GPUs cost their static power."""

from __future__ import annotations

from dataclasses import fields, replace

import pytest

from perfcast.catalog.hardware import load_hardware
from perfcast.coefficients.bundle import Calibration
from perfcast.kernel.energy import power_model
from perfcast.results.serialize import to_json
from perfcast.serving import ServingConfig, WorkloadConfig, simulate_serving
from perfcast.serving.clock import IterationClock
from perfcast.serving.deployment import build_deployment
from perfcast.serving.energy import EnergyCounts


def _cfg(qps: float | None, tp: int = 1, **extra: object) -> ServingConfig:
    wl = WorkloadConfig(num_requests=60, qps=qps, prompt_tokens=256, output_tokens=128, seed=3)
    return ServingConfig(model="llama-2-7b", hardware="h100-sxm-80gb", tensor_parallel_size=tp, workload=wl,
                         **extra)  # type: ignore[arg-type]


def _counts(c: EnergyCounts) -> dict[str, float]:
    return {f.name: getattr(c, f.name) for f in fields(c) if isinstance(getattr(c, f.name), float)}


def test_serving_energy_is_between_static_and_tdp() -> None:
    res = simulate_serving(_cfg(4.0, tp=2))
    e = res.energy()
    hw = load_hardware("h100-sxm-80gb")
    assert e.num_gpus == 2 and e.output_tokens == int(res.generated_tokens.sum()) > 0
    assert power_model(hw, Calibration.shipped().kernel).static_W < e.avg_power_per_gpu_W <= hw.tdp_W
    assert e.energy_per_output_token_J == pytest.approx(e.energy_J / e.output_tokens)
    data = to_json(res)
    assert data["energy_J"] == e.energy_J and data["avg_power_per_gpu_W"] == e.avg_power_per_gpu_W


@pytest.mark.parametrize("tp", [1, 2])
def test_serving_energy_is_the_sum_of_its_parts(tp: int) -> None:
    res = simulate_serving(_cfg(4.0, tp=tp))
    e, counts = res.energy(), res.energy_counts
    assert counts is not None and not e.power_limited
    pm = power_model(counts.hardware, counts.coeffs)
    span = float(res.finish_s.max())
    assert e.duration_s == span
    # static power of every GPU while its kernels run (the iterations less the engine's CPU work), idle power for
    # the rest of the run, the priced ops' dynamic energy on each tensor-parallel GPU, active power during the
    # collectives
    busy = tp * (res.gpu_time_s - counts.cpu_s)
    assert 0 < counts.cpu_s < res.gpu_time_s
    assert e.static_J == pytest.approx(pm.static_W * busy, rel=1e-12)
    assert e.dynamic_J == pytest.approx((counts.dynamic_J + counts.attention_dynamic_J()) * tp, rel=1e-12)
    assert e.comm_J == pytest.approx(pm.active_W * counts.comm_s * tp, rel=1e-12)
    assert (e.comm_J > 0) == (tp > 1)
    assert e.idle_energy_J == pytest.approx(pm.idle_W * (tp * span - busy), rel=1e-9)
    assert e.energy_J == pytest.approx(e.static_J + e.idle_energy_J + e.dynamic_J + e.comm_J, rel=1e-12)
    assert e.energy_J == pytest.approx(e.busy_energy_J + e.idle_energy_J, rel=1e-12)
    # every part is there: linear layers and head, both attention calls
    assert counts.dynamic_J > 0 and counts.prefill_attention_flops > 0 and counts.decode_attention_bytes > 0
    assert counts.prefill_attention_s + counts.decode_attention_s < res.gpu_time_s


def test_more_gpus_held_idle_cost_their_idle_energy() -> None:
    res = simulate_serving(_cfg(4.0))
    e = res.energy()
    assert res.energy_counts is not None
    pm = power_model(res.energy_counts.hardware, res.energy_counts.coeffs)
    # the same iterations on a deployment of three replicas: two more GPUs draw idle power for the whole run
    held = replace(res, config=res.config.model_copy(update={"num_replicas": 3})).energy()
    assert held.dynamic_J == e.dynamic_J and held.busy_energy_J == pytest.approx(e.busy_energy_J, rel=1e-12)
    assert held.energy_J - e.energy_J == pytest.approx(2 * pm.idle_W * e.duration_s, rel=1e-9)
    assert held.energy_per_output_token_J > e.energy_per_output_token_J


def test_a_stretch_sums_the_energy_of_its_iterations_one_by_one() -> None:
    dep = build_deployment(_cfg(None, tp=2, pipeline_parallel_size=2), Calibration.shipped())
    num, ctx, k = 24, 24 * 300, 40

    def clock() -> IterationClock:
        return IterationClock(dep.model, pp=2, scale=1.0, extra_s=0.0, block_bytes=dep.kv_block_bytes)

    stretch, steps = clock(), clock()
    j, _, gpu_s = stretch.stretch(0.0, num, ctx, k, float("inf"), float("-inf"))
    assert j == k
    one_by_one = sum(steps.stage_s(0, 0.0, 0, 0, num, ctx + i * num, num) for i in range(k)) * 2
    assert gpu_s == pytest.approx(one_by_one, rel=1e-12)
    a, b = _counts(stretch.energy_counts()), _counts(steps.energy_counts())
    assert a["decode_attention_flops"] > 0 and a["comm_s"] > 0 and a["prefill_attention_s"] == 0
    for name, value in b.items():
        assert a[name] == pytest.approx(value, rel=1e-9, abs=1e-15), name


@pytest.mark.parametrize("extra", [{}, {"pipeline_parallel_size": 2}], ids=["pp1", "pp2"])
def test_a_run_of_stretches_prices_the_energy_of_iterating_one_by_one(extra: dict[str, object]) -> None:
    cfg = _cfg(2.0, **extra)
    fast, slow = simulate_serving(cfg), simulate_serving(cfg, keep_events=True)  # events: one by one
    assert fast.iterations == slow.iterations
    assert fast.energy_counts is not None and slow.energy_counts is not None
    a, b = _counts(fast.energy_counts), _counts(slow.energy_counts)
    for name, value in b.items():
        assert a[name] == pytest.approx(value, rel=1e-9), name
    assert fast.energy().energy_J == pytest.approx(slow.energy().energy_J, rel=1e-9)


def test_a_lightly_loaded_deployment_spends_more_per_token() -> None:
    light, busy = simulate_serving(_cfg(0.5)).energy(), simulate_serving(_cfg(None)).energy()
    assert light.energy_per_output_token_J > 2 * busy.energy_per_output_token_J
    assert light.avg_power_per_gpu_W < busy.avg_power_per_gpu_W
