"""Unit tests of the per-op energy model (``perfcast.kernel.energy``) and its step, training and serving sums.

Invariants: an op's energy is at least the static power times its time and its mean power at most TDP; a
compute-bound op draws more than a memory-bound one of the same duration; a lower-TDP part of the same chip
draws less; energy adds up over ops, steps and tokens. Sanity against public figures: a large BF16 GEMM holds
an H100 SXM (700 W) near its power limit, a batch-16 decode GEMV well below it. The model shares its
constants with the sustained-clock model: a datapath saturated at its sustained clock spends exactly the
clock model's budget. The energy model says what it was fitted on (measured GPU power) and what stays a prior.
"""

from __future__ import annotations

import json

import pytest

from perfcast.catalog.hardware import list_hardware, load_hardware, with_power_limit
from perfcast.catalog.models import load_model
from perfcast.coefficients.bundle import Calibration
from perfcast.coefficients.kernel import Coefficients, load_coefficients
from perfcast.compose.predict import StepRequest
from perfcast.dtypes import DType
from perfcast.kernel.energy import ENERGY_STATUS, op_energy, ops_energy, power_model
from perfcast.kernel.power import datapath, energy_per_flop_J, full_power_peak, sustained_clock_frac
from perfcast.kernel.predict import KernelTime, predict_ops
from perfcast.system.plan import ParallelPlan
from perfcast.system.predict import predict
from perfcast.system.training import simulate_training
from perfcast.workload.graph import Graph
from perfcast.workload.types import Op

KERNEL = Calibration.shipped().kernel


def _ops() -> list[Op]:
    g = Graph(DType.BF16)
    return [g.linear("gemm_large", 8192, 8192, 8192), g.linear("gemm_mid", 2048, 4096, 4096),
            g.linear("decode_gemv", 16, 8192, 8192), g.bmm("bmm", 32, 512, 128, 512),
            Graph(DType.FP32).linear("fp32_gemm", 2048, 2048, 2048)]


GPUS = [hw for hw in list_hardware() if hw.kind == "gpu"]


@pytest.mark.parametrize("hw", GPUS, ids=lambda h: h.id)
def test_energy_is_between_static_and_tdp(hw) -> None:
    ops = _ops()
    supported = [o for o in ops if o.dtype.value in hw.supported_dtypes() or o.dtype is DType.FP32]
    kernels = predict_ops(supported, hw)
    pm = power_model(hw, KERNEL)
    for op, kt, e in zip(supported, kernels, ops_energy(supported, kernels, hw, KERNEL), strict=True):
        assert e.energy_J >= pm.static_W * kt.time_s * (1 - 1e-12), op.name
        assert e.avg_power_W <= hw.tdp_W * (1 + 1e-12), op.name
        assert e.energy_J == pytest.approx(e.static_J + e.dynamic_J)
        assert e.dynamic_J >= 0


def test_compute_bound_draws_more_than_memory_bound_at_equal_time() -> None:
    hw = load_hardware("h100-sxm-80gb")
    gemm, gemv = _ops()[0], _ops()[2]
    k_gemm, k_gemv = predict_ops([gemm, gemv], hw)
    assert (k_gemm.bound, k_gemv.bound) == ("compute", "memory")
    t = 1e-3  # the same duration for both, at the work each does per second
    scaled_gemm = KernelTime(t, "compute", k_gemm.flops * t / k_gemm.time_s, k_gemm.bytes * t / k_gemm.time_s)
    scaled_gemv = KernelTime(t, "memory", k_gemv.flops * t / k_gemv.time_s, k_gemv.bytes * t / k_gemv.time_s)
    assert op_energy(gemm, scaled_gemm, hw, KERNEL).energy_J > 1.15 * op_energy(gemv, scaled_gemv, hw, KERNEL).energy_J


def test_a_lower_tdp_part_of_the_same_chip_draws_less() -> None:
    gemm = _ops()[0]
    powers = {}
    for hid in ("h100-sxm-80gb", "h100-sxm-96gb-500w", "h100-pcie-80gb"):
        hw = load_hardware(hid)
        powers[hid] = op_energy(gemm, predict_ops([gemm], hw)[0], hw, KERNEL).avg_power_W
    assert powers["h100-sxm-80gb"] > powers["h100-sxm-96gb-500w"] > powers["h100-pcie-80gb"]


def test_public_sanity_h100_gemm_near_tdp_and_decode_well_below() -> None:
    # an H100 SXM's 700 W is the limit large dense GEMMs run against (its boost clock throttles under
    # tensor-core load); a small-batch decode GEMV streams weights and leaves the tensor cores idle
    hw = load_hardware("h100-sxm-80gb")
    gemm, _, gemv = _ops()[:3]
    kg, kv = predict_ops([gemm, gemv], hw)
    pg, pv = op_energy(gemm, kg, hw, KERNEL).avg_power_W, op_energy(gemv, kv, hw, KERNEL).avg_power_W
    assert 0.8 * hw.tdp_W <= pg <= hw.tdp_W
    assert pv < 0.85 * hw.tdp_W


def _with_power(**changes: float) -> Coefficients:
    raw = json.loads(load_coefficients().to_json())
    raw["power"].update(changes)
    return Coefficients.model_validate(raw)


@pytest.mark.parametrize("hid", ["b200-sxm-180gb", "h100-pcie-80gb", "a100-sxm-80gb", "mi300x"])
def test_a_saturated_datapath_spends_the_clock_models_budget(hid: str) -> None:
    # one source of constants: with no active share, a kernel running the tensor datapath at its full
    # sustained rate draws static + datapath + DRAM power = TDP where the clock throttles, <= TDP where not
    hw = load_hardware(hid)
    co = _with_power(active_frac=0.0)
    path = datapath(hw, DType.BF16)
    x = sustained_clock_frac(hw, path, co)
    t = 1e-3
    flops = full_power_peak(hw, path) * x * t
    pm = power_model(hw, co)
    power = pm.busy_energy_J(t, flops, flops / pm.flop_per_dram_byte, energy_per_flop_J(hw, path, co), x) / t
    if x < 1.0:
        assert power == pytest.approx(hw.tdp_W, rel=1e-6)
    else:
        assert power <= hw.tdp_W


def test_a_power_limited_op_is_capped_and_flagged() -> None:
    hw = load_hardware("h100-sxm-80gb")
    gemm = _ops()[0]
    kt = predict_ops([gemm], hw)[0]
    fast = KernelTime(kt.time_s / 4, "compute", kt.flops, kt.bytes)  # four times the FLOP rate it can sustain
    e = op_energy(gemm, fast, hw, KERNEL)
    assert e.power_limited and e.avg_power_W == pytest.approx(hw.tdp_W)
    # at the time it takes, the measured-power fit puts a saturated BF16 GEMM on an H100 at its 700 W limit (as
    # large GEMMs run there); under a higher limit it is not capped
    at_own = op_energy(gemm, kt, hw, KERNEL)
    assert at_own.avg_power_W >= 0.9 * hw.tdp_W
    roomy = with_power_limit(hw, 2 * hw.tdp_W)
    assert not op_energy(gemm, kt, roomy, KERNEL).power_limited


def test_predict_ops_prices_energy_beside_time() -> None:
    """The kernel layer prices each op's energy with its time: what ops_energy gives at that time, bit for bit."""
    hw = load_hardware("h100-sxm-80gb")
    ops = [t.op for t in predict(StepRequest("gpt2", hw, mode="training", batch_size=2, seq_len=256)).ops]
    kernels = predict_ops(ops, hw)
    for kt, e in zip(kernels, ops_energy(ops, kernels, hw, KERNEL), strict=True):
        assert (kt.energy_J, kt.dynamic_J) == (e.energy_J, e.dynamic_J)
    assert all(kt.dynamic_J > 0 for kt in kernels if kt.time_s > 0 and kt.bound not in ("host", "comm"))


def test_a_kernel_priced_by_hand_gets_the_same_energy() -> None:
    """kernel_dynamic_J (a time from rates, as serving prices attention) is predict_ops' dynamic energy for the
    same time, FLOPs and bytes; summed kernels of one kind and bound price as their sum."""
    from perfcast.kernel.energy import kernel_dynamic_J

    hw = load_hardware("h100-sxm-80gb")
    ops = [t.op for t in predict(StepRequest("gpt2", hw, batch_size=2, seq_len=256)).ops]
    attn = next(o for o in ops if o.kind.value == "gemm" and o.op == "bmm")  # attention scores, eager
    kt = predict_ops([attn], hw)[0]
    one = kernel_dynamic_J(attn.kind, attn.dtype, time_s=kt.time_s, flops=kt.flops, bytes_=kt.bytes, bound=kt.bound,
                           hw=hw, coeffs=KERNEL)
    assert one == kt.dynamic_J
    two = kernel_dynamic_J(attn.kind, attn.dtype, time_s=2 * kt.time_s, flops=2 * kt.flops, bytes_=2 * kt.bytes,
                           bound=kt.bound, hw=hw, coeffs=KERNEL)
    assert two == pytest.approx(2 * one, rel=1e-12)


def test_step_energy_adds_its_ops_and_idle_gaps() -> None:
    step = predict(StepRequest("gpt2", "a100-sxm-80gb", batch_size=4, seq_len=512))
    hw = load_hardware("a100-sxm-80gb")
    pm = power_model(hw, KERNEL)
    ops_j = sum(e.energy_J * t.op.count for t, e in
                zip(step.ops, ops_energy([t.op for t in step.ops], [t.kernel for t in step.ops], hw, KERNEL),
                    strict=True))
    gaps = step.time_s - step.device_busy_s
    assert step.energy_J == pytest.approx(ops_j + pm.idle_W * gaps, rel=1e-9)
    assert sum(step.energy_by_group_J.values()) == pytest.approx(ops_j, rel=1e-9)
    assert pm.static_W <= step.avg_power_W <= hw.tdp_W


def test_data_parallel_step_energy_counts_every_gpu() -> None:
    one = predict(StepRequest("gpt2", "a100-sxm-80gb", batch_size=4, seq_len=512))
    four = predict(StepRequest("gpt2", "a100-sxm-80gb", batch_size=16, seq_len=512, parallelism="dp4"))
    # inference: each of four GPUs runs the one-GPU step
    assert four.energy_J == pytest.approx(4 * one.energy_J, rel=1e-9)
    assert four.avg_power_W == pytest.approx(one.avg_power_W, rel=1e-9)


def test_training_energy_scales_with_the_work_of_a_step() -> None:
    base = dict(tp=2, dp=4, seq_len=2048, micro_batch=1, recompute="selective", zero=1)
    small = simulate_training("llama-2-7b", "dgx-a100", ParallelPlan(**base, global_batch=32))
    large = simulate_training("llama-2-7b", "dgx-a100", ParallelPlan(**base, global_batch=64))
    assert large.energy_per_step_J == pytest.approx(2 * small.energy_per_step_J, rel=0.1)
    assert large.energy_per_token_J == pytest.approx(small.energy_per_token_J, rel=0.1)
    hw = load_hardware("a100-sxm-80gb")
    assert power_model(hw, KERNEL).static_W < small.avg_power_per_gpu_W <= hw.tdp_W
    assert small.energy_per_step_J == pytest.approx(small.energy_per_gpu_J * 8)
    assert sum(small.energy_breakdown_J.values()) == pytest.approx(small.energy_per_gpu_J)


def test_training_energy_sums_the_ops_the_step_priced() -> None:
    """One GPU, two micro-batches, no recompute: static power over its kernels, idle power over the rest of the step,
    every priced op's dynamic energy (per micro-batch, and the optimizer step) and active power over the exposed
    communication (none here)."""
    from perfcast.coefficients.compose import load_compose_coefficients
    from perfcast.system.layers import micro_batch_costs
    from perfcast.system.training import optimizer_kernel

    plan = ParallelPlan(micro_batch=2, global_batch=4, seq_len=512)
    res = simulate_training("gpt2", "dgx-a100", plan)
    hw = load_hardware("a100-sxm-80gb")
    co = load_coefficients()
    costs = micro_batch_costs(load_model("gpt2"), plan, hw, co, load_compose_coefficients())
    per_mb = sum(p.count * (p.fwd_matrix_J + p.fwd_other_J + p.bwd_matrix_J + p.bwd_other_J) for p in costs.parts)
    trainable = sum(p.count * p.trainable_params for p in costs.parts)
    dynamic = 2 * per_mb + optimizer_kernel(trainable, plan, hw, co).dynamic_J
    pm = power_model(hw, KERNEL)
    assert res.breakdown_s["dp_comm_s"] == 0.0
    idle_s = res.energy_breakdown_J["idle_J"] / pm.idle_W  # the step less its kernels (and exposed communication)
    assert 0 < idle_s < res.step_time_s
    assert res.energy_per_gpu_J == pytest.approx(pm.static_W * (res.step_time_s - idle_s) + pm.idle_W * idle_s
                                                 + dynamic, rel=1e-9)


def test_pipeline_bubbles_lower_the_mean_power() -> None:
    dense = simulate_training("llama-2-7b", "dgx-a100", ParallelPlan(pp=4, dp=2, micro_batch=1, global_batch=64,
                                                                     seq_len=2048, zero=1))
    bubbly = simulate_training("llama-2-7b", "dgx-a100", ParallelPlan(pp=4, dp=2, micro_batch=1, global_batch=8,
                                                                      seq_len=2048, zero=1))
    assert bubbly.bubble_frac > dense.bubble_frac
    assert bubbly.avg_power_per_gpu_W < dense.avg_power_per_gpu_W


def test_the_model_states_what_is_fitted_and_what_is_a_prior() -> None:
    assert "fitted" in ENERGY_STATUS and "measured GPU power" in ENERGY_STATUS and "priors" in ENERGY_STATUS
    note = load_coefficients().fitted_on["power"]
    assert "idle_frac and active_frac fitted on measured GPU power" in note and "priors" in note
