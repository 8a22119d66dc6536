"""The CPU fit recovers the rates that generated synthetic microbenchmark times (no timing involved)."""

from __future__ import annotations

import pytest

from perfcast.calibrate.bench import suite_of
from perfcast.calibrate.fit import Measurement, fit_cpu, measurement_op
from perfcast.calibrate.machine import MachineInfo, build_hardware
from perfcast.catalog.cpu import CpuEfficiency
from perfcast.errors import DataError
from perfcast.kernel.cpu import cpu_op_times

INFO = MachineInfo(name="test CPU", vendor="test", cores=4, clock_hz=2.5e9, l1d_bytes_per_core=48 * 2**10,
                   l2_bytes_total=8 * 2**20, l3_bytes=32 * 2**20, memory_bytes=16 * 2**30, vector_lanes_fp32=16)
TRUE = CpuEfficiency(threads=4, gemm_fixed_s=20e-6, gemm_m0=16.0, gemm_n0=4.0, gemm_k0=32.0,
                     cache_bandwidth_Bps=80e9, cache_bytes=2**21, vector_fixed_s=3e-6,
                     op_factor={"stream": 1.0, "transcendental": 2.5, "reduction": 3.0, "pool": 20.0, "gather": 1.5},
                     conv_efficiency=0.7, conv_pointwise_efficiency=1.0, conv_fixed_s=20e-6,
                     attention_efficiency=0.6, attention_fixed_s=20e-6, page_fault_s=1.5e-6,
                     attention_causal_factor=1.9, conv_m0=64.0, conv_n0=32.0, conv_k0=8.0,
                     gemm_in_out_factor=1.3)
PEAK = 300e9
DRAM = 15e9


def _synthetic() -> list[Measurement]:
    hw = build_hardware(INFO, peak_fp32_flops_per_s=PEAK, memory_bandwidth_Bps=DRAM, efficiency=TRUE)
    ops = [(fam, measurement_op(fam, op, dims)) for fam, op, dims in suite_of(quick=False)]
    times, _ = cpu_op_times([o for _, o in ops], hw)
    return [Measurement(fam, o, float(t)) for (fam, o), t in zip(ops, times, strict=True)]


def test_fit_recovers_the_generating_rates() -> None:
    fit = fit_cpu(_synthetic(), INFO, threads=4)
    e = fit.efficiency
    assert fit.peak_fp32_flops_per_s == pytest.approx(PEAK, rel=0.15)
    assert e.cache_bandwidth_Bps == pytest.approx(80e9, rel=0.1)
    assert e.op_factor["reduction"] == pytest.approx(3.0, rel=0.15)
    assert e.conv_efficiency == pytest.approx(0.7, rel=0.15)
    assert e.attention_efficiency == pytest.approx(0.6, rel=0.15)
    assert e.page_fault_s == pytest.approx(1.5e-6, rel=0.01)
    assert e.attention_causal_factor == pytest.approx(1.9, rel=0.05)
    assert e.gemm_in_out_factor == pytest.approx(1.3, rel=0.05)
    assert (e.conv_m0, e.conv_n0, e.conv_k0) == (64.0, 32.0, 8.0)
    assert max(e.fit_error_frac.values()) < 0.1
    assert e.threads == 4


def test_fitted_hardware_predicts_through_the_kernel_layer() -> None:
    from perfcast.compose.step import predict_step
    from perfcast.workload.build import WorkloadSpec, build_workload
    from perfcast.workload.types import Mode

    hw = fit_cpu(_synthetic(), INFO, threads=4).hardware(INFO)
    w = build_workload("bert-base", WorkloadSpec(Mode.INFERENCE, 1, 128, attention="sdpa"))
    st = predict_step(w, hw)
    assert st.time_s >= w.flops / hw.peak_flops_per_s.fp32  # never faster than the fitted peak
    assert {t.kernel.bound for t in st.ops} >= {"compute"}


def test_only_outputs_the_allocator_maps_anew_pay_for_fresh_pages() -> None:
    from perfcast.dtypes import DType
    from perfcast.kernel.cpu import fresh_pages_time_s
    from perfcast.workload.types import Op, OpKind

    hw = build_hardware(INFO, peak_fp32_flops_per_s=PEAK, memory_bandwidth_Bps=DRAM, efficiency=TRUE)
    big = 64 * 2**20

    def op(name: str, written: float) -> Op:
        return Op(name, name, OpKind.VECTOR, (1, int(written) // 4), DType.FP32, 0.0, written, written)

    assert fresh_pages_time_s(op("add", big), hw) == pytest.approx(big / 4096 * 1.5e-6)
    assert fresh_pages_time_s(op("add_", big), hw) == 0.0  # in place: no new tensor
    assert fresh_pages_time_s(op("add", 16 * 2**20), hw) == 0.0  # below 32 MiB the heap reuses freed blocks


def test_missing_family_is_a_data_error() -> None:
    ms = [m for m in _synthetic() if m.family != "conv"]
    with pytest.raises(DataError, match="conv"):
        fit_cpu(ms, INFO, threads=4)


def test_inference_batchnorm_streams_and_training_batchnorm_reduces() -> None:
    from perfcast.kernel.cpu import op_class

    assert op_class("batchnorm", inputs=1) == "stream"  # eval: scale and shift with the running statistics
    assert op_class("batchnorm", inputs=2) == "reduction"  # training: batch statistics first
    assert op_class("layernorm", inputs=1) == "reduction"


def test_gpt2_conv1d_weights_take_the_in_out_factor_on_a_cpu() -> None:
    from perfcast.compose.step import predict_step
    from perfcast.workload.build import WorkloadSpec, build_workload
    from perfcast.workload.types import Mode, OpKind

    w = build_workload("gpt2", WorkloadSpec(Mode.INFERENCE, 1, 64, attention="sdpa"))
    layouts = {o.name.split(".")[-1]: o.get("weight_layout") for o in w.ops if o.kind is OpKind.GEMM}
    assert layouts["c_fc"] == "in_out" and layouts["lm_head"] == "out_in"
    slow = TRUE.model_copy(update={"gemm_in_out_factor": 2.0})
    times = [predict_step(w, build_hardware(INFO, peak_fp32_flops_per_s=PEAK, memory_bandwidth_Bps=DRAM,
                                            efficiency=e), keep_ops=True) for e in (TRUE, slow)]
    fc = [[t for t in st.ops if t.op.name.endswith("c_fc")][0].kernel.time_s for st in times]
    head = [[t for t in st.ops if t.op.name.endswith("lm_head")][0].kernel.time_s for st in times]
    assert fc[1] > 1.3 * fc[0]  # compute-bound at 64 rows: most of the factor shows
    assert head[1] == head[0]  # nn.Linear's layout is untouched


def test_a_quick_calibration_keeps_the_gemm_shape_constants_for_convolutions() -> None:
    hw = build_hardware(INFO, peak_fp32_flops_per_s=PEAK, memory_bandwidth_Bps=DRAM, efficiency=TRUE)
    ops = [(fam, measurement_op(fam, op, dims)) for fam, op, dims in suite_of(quick=True)]
    times, _ = cpu_op_times([o for _, o in ops], hw)
    e = fit_cpu([Measurement(f, o, float(t)) for (f, o), t in zip(ops, times, strict=True)], INFO, threads=4).efficiency
    assert sum(f == "conv" for f, _ in ops) < 10  # too few convolutions for three constants and two efficiencies
    assert (e.conv_m0, e.conv_n0, e.conv_k0) == (None, None, None)
