"""TensorRT-LLM's FP8 context FMHA: prefill attention over an FP8 KV cache runs on the FP8 tensor cores."""

from __future__ import annotations

import pytest

from perfcast.dtypes import DType
from perfcast.serving import IterationModel, PrefillChunk

LONG_PREFILL = [PrefillChunk(new_tokens=8192, context_tokens=16384)]  # compute-bound: 8192 queries x 16k keys
DECODE = dict(num_decode=64, decode_context_tokens=64 * 4096)


def _model(engine: str, hardware: str = "h100-sxm-80gb", **kw: object) -> IterationModel:
    return IterationModel("llama-3.1-8b", hardware, dtype=DType.FP16, engine=engine, **kw)  # type: ignore[arg-type]


def test_trtllm_prefill_attention_over_an_fp8_cache_runs_at_the_fp8_rate() -> None:
    trt = _model("trtllm", quantization="fp8")
    vllm = _model("vllm", quantization="fp8")
    assert trt.fp8_context_attention and not vllm.fp8_context_attention
    ratio = trt.breakdown(LONG_PREFILL).attention_prefill_s / vllm.breakdown(LONG_PREFILL).attention_prefill_s
    # compute-bound: the time scales with the 16-bit : FP8 peak ratio (1/2 on H100), plus fixed kernel costs
    peak_ratio = trt.hw.peak(DType.FP16) / trt.hw.peak(DType.FP8)
    assert peak_ratio == pytest.approx(0.5, rel=0.01)
    assert peak_ratio <= ratio < peak_ratio * 1.1


def test_decode_attention_and_the_rest_of_the_iteration_are_unchanged() -> None:
    trt = _model("trtllm", quantization="fp8").breakdown(**DECODE)  # type: ignore[arg-type]
    vllm = _model("vllm", quantization="fp8").breakdown(**DECODE)  # type: ignore[arg-type]
    assert trt.attention_decode_s == vllm.attention_decode_s
    assert trt.linear_s == vllm.linear_s and trt.lm_head_s == vllm.lm_head_s


@pytest.mark.parametrize("case", ["16-bit cache", "no fp8 tensor cores"])
def test_16_bit_context_attention_otherwise(case: str) -> None:
    """A 16-bit KV cache, or a GPU without FP8 math (A100, whose FP8 cache is only storage), keeps 16-bit FMHA."""
    hw = "h100-sxm-80gb" if case == "16-bit cache" else "a100-sxm-80gb"
    kv = None if case == "16-bit cache" else DType.FP8
    trt, vllm = _model("trtllm", hw, kv_dtype=kv), _model("vllm", hw, kv_dtype=kv)
    assert not trt.fp8_context_attention
    assert trt.breakdown(LONG_PREFILL).attention_prefill_s == vllm.breakdown(LONG_PREFILL).attention_prefill_s
