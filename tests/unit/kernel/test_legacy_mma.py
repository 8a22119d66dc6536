"""FlashAttention-2 on Hopper (``perfcast.kernel.legacy_mma``): only tensor-core attention on compute capability
9.0 and later is slowed, by the stated 1.5x, with its energy priced again at the longer time; the eager PyTorch
step (SDPA's flash backend) and the vLLM 0.5 engine (vllm-flash-attn 2) take it, CUDA graphs and newer engines
do not."""

from __future__ import annotations

import pytest

from perfcast.catalog.hardware import load_hardware
from perfcast.coefficients.kernel import load_coefficients
from perfcast.compose.predict import StepRequest, predict
from perfcast.dtypes import DType
from perfcast.kernel.legacy_mma import FA2_LEGACY_MMA_SLOWDOWN, fa2_attention, legacy_mma_slowdown
from perfcast.kernel.predict import price_ops
from perfcast.serving.engines import load_engine
from perfcast.workload.types import Op, OpKind


def _ops(dtype: DType) -> list[Op]:
    s, h, d, b = 4096, 16, 64, 8
    attn = Op(name="attn", op="sdpa", kind=OpKind.ATTENTION, dims=(b, h, s, s, d), dtype=dtype,
              flops=4.0 * b * h * s * s * d, bytes_read=3.0 * b * h * s * d * dtype.bytes,
              bytes_written=b * h * s * d * dtype.bytes)
    gemm = Op(name="proj", op="linear", kind=OpKind.GEMM, dims=(1, b * s, h * d, h * d), dtype=dtype,
              flops=2.0 * b * s * (h * d) ** 2, bytes_read=(b * s + h * d) * h * d * dtype.bytes,
              bytes_written=b * s * h * d * dtype.bytes)
    return [attn, gemm]


@pytest.mark.parametrize(("hw_id", "dtype", "factor"), [
    ("h100-sxm-80gb", DType.BF16, FA2_LEGACY_MMA_SLOWDOWN), ("b200-sxm-180gb", DType.FP16, FA2_LEGACY_MMA_SLOWDOWN),
    ("a100-sxm-40gb", DType.BF16, 1.0), ("h100-sxm-80gb", DType.FP32, 1.0), ("mi300x", DType.BF16, 1.0)])
def test_only_tensor_core_attention_on_hopper_and_later_is_slowed(hw_id: str, dtype: DType, factor: float) -> None:
    hw, co = load_hardware(hw_id), load_coefficients()
    assert legacy_mma_slowdown(hw, dtype) == factor
    ops = _ops(dtype)
    native = price_ops(ops, hw, co)
    fa2 = fa2_attention(ops, native, hw, co)
    assert fa2[0].time_s == pytest.approx(native[0].time_s * factor)
    assert fa2[1] == native[1]  # a GEMM is cuBLAS's, native
    if factor > 1.0:
        # the same FLOPs over a longer time: more static and active energy, lower power
        assert fa2[0].energy_J > native[0].energy_J
        assert fa2[0].energy_J / fa2[0].time_s < native[0].energy_J / native[0].time_s


def test_eager_step_takes_fa2_and_cuda_graphs_do_not() -> None:
    def attention_s(framework: str) -> float:
        st = predict(StepRequest(model="gpt2", hardware="h100-sxm-80gb", batch_size=8, seq_len=1024, dtype="bf16",
                                 attention="flash", framework=framework))
        return sum(t.total_s for t in st.ops if t.op.kind is OpKind.ATTENTION)

    assert attention_s("eager") == pytest.approx(FA2_LEGACY_MMA_SLOWDOWN * attention_s("graph"))


def test_engine_profiles_name_their_attention_kernels() -> None:
    assert load_engine("vllm-0.5").attention_kernels == "fa2"
    assert load_engine("vllm").attention_kernels == "native"
