"""Repricing a trace for another device or data-parallel size: the ratio's direction per kernel class, the
rule for kernels without a shape, NCCL by the collective model, and what is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from replay_traces import TraceBuilder

from perfcast.catalog.hardware import load_hardware
from perfcast.errors import ConfigError
from perfcast.kernel.legacy_mma import FA2_LEGACY_MMA_SLOWDOWN
from perfcast.replay.graph import build_graph
from perfcast.replay.kineto import GpuOp, parse_kineto
from perfcast.replay.reprice import FIXED_S, Repricing, classify, reprice
from perfcast.replay.run import recorded_hardware, replay_trace

GEMM = "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_tn_align4>(Params)"


def _gemm_trace(device: str = "NVIDIA A100-SXM4-40GB") -> TraceBuilder:
    tb = TraceBuilder(device)
    tb.step(1, 0, 3000)
    tb.cpu_op("aten::mm", 5, 20, dims=[[4096, 4096], [4096, 4096]])
    tb.kernel(GEMM, 20, 2000, launch_ts=10)
    tb.call("cudaDeviceSynchronize", 30, 1992)
    return tb


def _durations(tb: TraceBuilder, recorded: str, target: str, world: int = 1, new_world: int = 1) -> dict[str, float]:
    trace = parse_kineto(tb.data())
    g = build_graph(trace)
    how = Repricing(load_hardware(recorded), load_hardware(target), world, new_world)
    durations, _ = reprice(g, trace, how)
    return {n.name: durations[n.index] for n in g.nodes if n.gpu is not None}


def test_kernel_classes_by_name() -> None:
    def cls(name: str, kind: str = "kernel") -> str:
        return classify(GpuOp(name, kind, 0, 7, 0.0, 1e-6, None))

    assert cls(GEMM) == "gemm" and cls("ampere_sgemm_128x64_nn") == "gemm"
    assert cls("sm80_xmma_fprop_implicit_gemm_indexed_tf32f32") == "conv"
    assert cls("flash_fwd_kernel<Flash_fwd_kernel_traits<128>>") == "attention"
    assert cls("void at::native::vectorized_elementwise_kernel<4, AddFunctor>") == "elementwise"
    assert cls("void at::native::reduce_kernel<512, 1>") == "reduction"
    assert cls("void splitKreduce_kernel<float>") == "reduction"
    assert cls("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)") == "nccl"
    assert cls("Memcpy DtoD (Device -> Device)", "memcpy") == "memcpy"
    assert cls("my_custom_kernel") == "unknown"


def test_a_gemm_is_shorter_on_a_faster_gpu_and_longer_on_a_slower_one() -> None:
    tb = _gemm_trace()
    faster = _durations(tb, "a100-sxm-40gb", "h100-sxm-80gb")[GEMM]
    slower = _durations(tb, "a100-sxm-40gb", "v100-sxm2-32gb")[GEMM]
    same = _durations(tb, "a100-sxm-40gb", "a100-sxm-40gb")[GEMM]
    assert faster < 2000e-6 < slower
    assert same == pytest.approx(2000e-6)
    # a 4096^3 TF32 GEMM is compute-bound: the ratio is near the devices' TF32 (H100) / FP32 (V100) peak ratios
    a100, h100, v100 = (load_hardware(h) for h in ("a100-sxm-40gb", "h100-sxm-80gb", "v100-sxm2-32gb"))
    assert 2000e-6 / faster == pytest.approx(h100.peak_flops_per_s.tf32 / a100.peak_flops_per_s.tf32, rel=0.35)
    assert slower / 2000e-6 > 2.0  # V100 has no TF32: the GEMM runs in FP32 there


def test_the_shape_comes_from_the_launching_operator() -> None:
    small, big = TraceBuilder(), TraceBuilder()
    for tb, n in ((small, 256), (big, 8192)):
        tb.step(1, 0, 3000)
        tb.cpu_op("aten::mm", 5, 20, dims=[[n, n], [n, n]])
        tb.kernel(GEMM, 20, 100, launch_ts=10)
    r_small = _durations(small, "a100-sxm-40gb", "h100-sxm-80gb")[GEMM] / 100e-6
    r_big = _durations(big, "a100-sxm-40gb", "h100-sxm-80gb")[GEMM] / 100e-6
    assert r_big < r_small < 1.0  # a big GEMM gains more from H100's tensor cores than a latency-bound small one


def test_kernels_without_shapes_follow_their_class_character() -> None:
    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    tb.kernel("void at::native::vectorized_elementwise_kernel<4, AddFunctor>", 15, 100, launch_ts=10)
    tb.kernel("ampere_sgemm_128x64_nn", 116, 100, launch_ts=20)
    tb.kernel("my_custom_kernel", 217, 100, launch_ts=30)
    d = _durations(tb, "a100-sxm-40gb", "h100-sxm-80gb")
    a100, h100 = load_hardware("a100-sxm-40gb"), load_hardware("h100-sxm-80gb")
    clock = a100.boost_clock_hz / h100.boost_clock_hz
    bw = a100.memory_bandwidth_Bps / h100.memory_bandwidth_Bps
    fp32 = a100.peak_flops_per_s.fp32 / h100.peak_flops_per_s.fp32
    rest = 100e-6 - FIXED_S
    got = [d[k] for k in ("void at::native::vectorized_elementwise_kernel<4, AddFunctor>", "ampere_sgemm_128x64_nn",
                          "my_custom_kernel")]
    assert got == pytest.approx([FIXED_S * clock + rest * r for r in (bw, fp32, (bw * fp32) ** 0.5)])


def test_nccl_repriced_for_a_larger_data_parallel_group() -> None:
    tb = TraceBuilder(world_size=8)
    tb.step(1, 0, 3000)
    tb.cpu_op("nccl:all_reduce", 8, 10, dims=[[64 * 2**20]], types=["float"], cat="user_annotation")
    tb.kernel("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", 20, 1500, launch_ts=10, stream=21)
    tb.call("cudaDeviceSynchronize", 30, 1492)
    name = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"
    wider = _durations(tb, "a100-sxm-40gb", "a100-sxm-40gb", 8, 64)[name]
    same = _durations(tb, "a100-sxm-40gb", "a100-sxm-40gb", 8, 8)[name]
    assert same == pytest.approx(1500e-6)
    assert wider > 1500e-6  # 64 GPUs over eight nodes: the network is slower than NVLink inside one


def test_an_unknown_device_refuses_hardware_but_takes_from_hardware(tmp_path: Path) -> None:
    path = _gemm_trace("Mystery GPU 9000").write(tmp_path / "t.json.gz")
    assert recorded_hardware("Mystery GPU 9000") is None
    with pytest.raises(ConfigError, match="'Mystery GPU 9000'.*--from-hardware"):
        replay_trace(path, hardware="h100-sxm-80gb")
    result = replay_trace(path, hardware="h100-sxm-80gb", from_hardware="a100-sxm-40gb")
    assert result.recorded_hardware == "a100-sxm-40gb" and result.hardware == "h100-sxm-80gb"
    assert result.replayed.step_time_s < result.replayed.measured_step_time_s
    own = replay_trace(path)  # on its own GPU nothing is needed
    assert own.hardware is None and own.replayed.step_time_s == pytest.approx(3000e-6)


def test_recorded_device_names_resolve_through_catalog_aliases() -> None:
    assert recorded_hardware("Tesla V100-SXM2-32GB").id == "v100-sxm2-32gb"  # type: ignore[union-attr]
    assert recorded_hardware("NVIDIA A100-SXM4-40GB").id == "a100-sxm-40gb"  # type: ignore[union-attr]


def test_a_format_the_target_lacks_is_refused() -> None:
    from perfcast.errors import UnsupportedError

    tb = TraceBuilder("NVIDIA A100-SXM4-40GB")
    tb.step(1, 0, 3000)
    tb.cpu_op("aten::mm", 5, 20, dims=[[4096, 4096], [4096, 4096]], types=["c10::BFloat16", "c10::BFloat16"])
    tb.kernel("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_tn", 20, 2000, launch_ts=10)
    with pytest.raises(UnsupportedError, match="bf16"):
        _durations(tb, "a100-sxm-40gb", "v100-sxm2-32gb")
    assert _durations(tb, "a100-sxm-40gb", "h100-sxm-80gb")["ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_tn"] < 2e-3


def test_an_ampere_attention_kernel_stays_fa2_on_hopper() -> None:
    # the same shapes, one FlashAttention-2 kernel (mma.sync) and one Hopper-native (FlashAttention-3) kernel:
    # only the first keeps Ampere's instructions on the H100, at legacy_mma's slowdown
    fa2, fa3 = "flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 64, 4, bf16>>", "flash::FlashAttnFwdSm90<bf16>"
    tb = TraceBuilder()
    tb.step(1, 0, 3000)
    for name, at in ((fa2, 0), (fa3, 1000)):
        tb.cpu_op("aten::_flash_attention_forward", at + 5, 20, dims=[[8, 2048, 16, 64], [8, 2048, 16, 64]],
                  types=["c10::BFloat16", "c10::BFloat16"])
        tb.kernel(name, at + 20, 500, launch_ts=at + 10)
    d = _durations(tb, "a100-sxm-40gb", "h100-sxm-80gb")
    assert d[fa3] < d[fa2] == pytest.approx(FA2_LEGACY_MMA_SLOWDOWN * d[fa3])
    back = _durations(tb, "a100-sxm-40gb", "a100-sxm-80gb")  # Ampere to Ampere: no slowdown either way
    assert back[fa2] == pytest.approx(back[fa3])
