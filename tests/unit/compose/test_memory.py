"""One GPU's memory at the peak of a predicted step (``perfcast.compose.memory``): each part against a count
that can be done on paper, sharding, and the verdict."""

from __future__ import annotations

import pytest

from perfcast.catalog.models import load_model
from perfcast.catalog.params import count_params
from perfcast.compose.memory import COMM_BUFFER_BYTES, CUDA_CONTEXT_BYTES, FRAGMENTATION_FRAC
from perfcast.compose.predict import StepRequest
from perfcast.compose.types import MemoryBreakdown
from perfcast.system.predict import predict
from perfcast.workload.types import Mode


def _memory(**kw: object) -> MemoryBreakdown:
    st = predict(StepRequest(**kw))  # type: ignore[arg-type]
    assert st.memory is not None
    return st.memory


def test_weights_are_the_checkpoint_once_in_the_dtype_that_runs() -> None:
    for model, dtype in (("llama-2-7b", "fp16"), ("gpt2", "fp32")):
        m = _memory(model=model, hardware="a100-sxm-80gb", seq_len=64, dtype=dtype)
        # gpt2's LM head is tied to the token embedding: stored once
        assert m.weights_bytes == pytest.approx(count_params(load_model(model)).total * (2 if dtype == "fp16" else 4),
                                                rel=1e-3)
        assert m.kv_cache_bytes == m.gradients_bytes == m.optimizer_bytes == m.comm_buffers_bytes == 0


def test_an_moe_model_holds_every_expert_although_decode_runs_two() -> None:
    decode = _memory(model="mixtral-8x7b", hardware="h100-sxm-80gb", mode=Mode.DECODE, seq_len=512, dtype="bf16")
    assert decode.weights_bytes == pytest.approx(2 * count_params(load_model("mixtral-8x7b")).total, rel=1e-3)


def test_kv_cache_is_batch_times_context_of_every_layers_k_and_v() -> None:
    b, ctx, layers, kv_dim = 16, 4096, 32, 32 * 128  # Llama-2-7B: 32 layers, 32 KV heads of 128
    for mode in (Mode.DECODE, Mode.PREFILL):
        m = _memory(model="llama-2-7b", hardware="a100-sxm-80gb", mode=mode, batch_size=b, seq_len=ctx)
        assert m.kv_cache_bytes == 2 * layers * kv_dim * b * ctx * 2  # K and V in fp16
    gqa = _memory(model="llama-3-8b", hardware="a100-sxm-80gb", mode=Mode.DECODE, batch_size=b, seq_len=ctx)
    assert gqa.kv_cache_bytes == 2 * 32 * (8 * 128) * b * ctx * 2  # 8 KV heads


def test_training_adds_gradients_adam_states_and_saved_activations() -> None:
    cfg = load_model("llama-2-7b")
    params = count_params(cfg).total
    inference = _memory(model=cfg, hardware="h100-sxm-80gb", batch_size=1, seq_len=1024, dtype="bf16")
    train = _memory(model=cfg, hardware="h100-sxm-80gb", mode=Mode.TRAINING, batch_size=1, seq_len=1024,
                    dtype="bf16")
    assert train.gradients_bytes == pytest.approx(2 * params, rel=1e-3)
    # Adam: two fp32 moments and an fp32 master copy of bf16 weights, 12 bytes per parameter
    assert train.optimizer_bytes == pytest.approx(12 * params, rel=1e-3)
    assert train.activations_bytes > 10 * inference.activations_bytes
    sgd = _memory(model=cfg, hardware="h100-sxm-80gb", mode=Mode.TRAINING, batch_size=1, seq_len=1024, dtype="bf16",
                  optimizer="sgd")
    assert sgd.optimizer_bytes == 0 and sgd.gradients_bytes == train.gradients_bytes
    assert not train.fits  # 16 bytes per parameter of a 6.7B model is more than 80 GB


def test_overheads_are_the_stated_figures() -> None:
    m = _memory(model="gpt2", hardware="a100-sxm-80gb", seq_len=64)
    tensors = m.weights_bytes + m.kv_cache_bytes + m.activations_bytes + m.gradients_bytes + m.optimizer_bytes
    assert m.context_bytes == CUDA_CONTEXT_BYTES
    assert m.fragmentation_bytes == pytest.approx(FRAGMENTATION_FRAC * tensors)
    assert m.total_bytes == pytest.approx(sum(m.parts().values()))
    dp = _memory(model="gpt2", hardware="a100-sxm-80gb", seq_len=64, batch_size=4, parallelism="dp4")
    assert dp.comm_buffers_bytes == COMM_BUFFER_BYTES


def test_tensor_and_pipeline_parallelism_split_the_weights_and_the_cache() -> None:
    kw = dict(model="llama-2-13b", hardware="a100-sxm-80gb", mode=Mode.DECODE, batch_size=8, seq_len=2048)
    one, tp4, pp4 = _memory(**kw), _memory(**kw, parallelism="tp4"), _memory(**kw, parallelism="pp4")
    assert tp4.kv_cache_bytes == pytest.approx(one.kv_cache_bytes / 4)
    assert tp4.weights_bytes == pytest.approx(one.weights_bytes / 4, rel=0.02)  # norms are replicated
    # 40 layers over 4 stages; the most loaded stage also holds the embedding and the head (conservative)
    assert pp4.kv_cache_bytes == pytest.approx(one.kv_cache_bytes / 4)
    assert one.weights_bytes / 4 < pp4.weights_bytes < one.weights_bytes / 4 * 1.1


def test_verdict_follows_the_device_memory() -> None:
    small = _memory(model="llama-2-70b", hardware="t4")
    assert not small.fits and small.total_bytes > small.capacity_bytes
    assert _memory(model="llama-2-70b", hardware="h100-sxm-80gb", parallelism="tp4").fits
