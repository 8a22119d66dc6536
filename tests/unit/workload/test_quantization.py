"""A checkpoint's quantization reaches the inference workload: honoured by default, run as the GPU runs it."""

from __future__ import annotations

import pytest

from perfcast.catalog import load_hardware, load_model
from perfcast.catalog.models import ModelConfig, from_hf_config
from perfcast.catalog.params import count_params
from perfcast.dtypes import DType
from perfcast.errors import ConfigError, UnsupportedError
from perfcast.serving.iteration import kv_cache_dtype, weight_bytes_per_gpu
from perfcast.workload.build import WorkloadSpec, build_workload
from perfcast.workload.quantization import checkpoint_scheme, resolve_quantization
from perfcast.workload.transforms import quantize_weights
from perfcast.workload.types import Mode, Op, OpKind


def _linears(ops: tuple[Op, ...] | list[Op], part: str) -> list[Op]:
    return [o for o in ops if o.kind is OpKind.GEMM and o.op == "linear" and part in o.name]


def test_the_checkpoints_scheme() -> None:
    assert checkpoint_scheme(load_model("deepseek-v3")) == "fp8"
    assert checkpoint_scheme(load_model("gpt-oss-120b")) == "mxfp4"
    assert checkpoint_scheme(load_model("llama-2-7b")) == "none"


def test_fp8_weights_run_fp8_math_on_h100_and_weight_only_on_a100() -> None:
    cfg = load_model("deepseek-v3")
    h100 = resolve_quantization(cfg, "auto", load_hardware("h100-sxm-80gb"))
    a100 = resolve_quantization(cfg, "auto", load_hardware("a100-sxm-80gb"))
    assert h100.scheme == a100.scheme == "fp8"
    assert not h100.weight_only and a100.weight_only
    assert "weight-only w8a16 on a100-sxm-80gb, which has no FP8 math" in a100.label
    assert h100.checkpoint is cfg.quantization


def test_deepseek_v3_decode_uses_fp8_gemms_on_h100_and_16_bit_gemms_on_fp8_weights_on_a100() -> None:
    cfg = load_model("deepseek-v3")
    by_gpu = {}
    for gpu in ("h100-sxm-80gb", "a100-sxm-80gb"):
        quant = resolve_quantization(cfg, "auto", load_hardware(gpu))
        w = build_workload(cfg, WorkloadSpec(Mode.DECODE, 4, 1024, dtype=DType.BF16, quantization=quant))
        by_gpu[gpu] = _linears(w.ops, ".mlp.experts.")[0]
        assert w.quantization == quant.label
    fp8, w8a16 = by_gpu["h100-sxm-80gb"], by_gpu["a100-sxm-80gb"]
    assert fp8.dtype is DType.FP8
    assert w8a16.dtype is DType.BF16 and w8a16.get("weight_dtype") == "fp8"
    _, _, k, n = w8a16.dims
    # E4M3 weights + one fp32 scale per 128x128 block, on both GPUs
    assert fp8.weight_bytes == w8a16.weight_bytes == pytest.approx(k * n * (1 + 4 / 128**2))


def test_gpt_oss_quantizes_its_experts_only_in_mxfp4() -> None:
    cfg = load_model("gpt-oss-120b")
    w = build_workload(cfg, WorkloadSpec(Mode.PREFILL, 1, 256, dtype=DType.BF16))
    plain = build_workload(cfg, WorkloadSpec(Mode.PREFILL, 1, 256, dtype=DType.BF16, quantization="none"))
    for q, p in zip(_linears(w.ops, ""), _linears(plain.ops, ""), strict=True):
        if ".experts." in q.name:
            _, _, k, n = q.dims
            assert q.get("weight_dtype") == "fp4" and q.dtype is DType.BF16  # weight-only into 16-bit GEMMs
            assert q.weight_bytes == pytest.approx(k * n * (0.5 + 1 / 32))
        else:  # attention, router, LM head stay 16-bit
            assert q == p
    assert w.quantization.startswith("mxfp4")


def test_an_explicit_scheme_is_a_checkpoint_quantized_that_way() -> None:
    cfg = load_model("gpt-oss-20b")
    none = resolve_quantization(cfg, "none")
    assert none.scheme == "none" and none.checkpoint is None
    ops = build_workload(cfg, WorkloadSpec(Mode.PREFILL, 1, 64, dtype=DType.BF16, quantization="none")).ops
    assert all(o.get("weight_dtype") in (None, "bf16") for o in ops)


def test_training_runs_in_its_precision_and_says_so() -> None:
    w = build_workload("gpt-oss-20b", WorkloadSpec(Mode.TRAINING, 1, 64, dtype=DType.BF16))
    assert all(o.get("weight_dtype") in (None, "bf16") for o in w.ops)
    assert w.quantization == "none (training runs in bf16, not the checkpoint's mxfp4 (MoE experts))"


def test_mxfp4_needs_experts() -> None:
    with pytest.raises(UnsupportedError, match="mxfp4 quantizes the MoE experts"):
        resolve_quantization(load_model("llama-2-7b"), "mxfp4")


def test_an_unknown_scheme_lists_the_choices() -> None:
    with pytest.raises(ConfigError, match="auto, none, w4a16, w8a16, w8a8, fp8, fp4, mxfp4"):
        resolve_quantization(load_model("llama-2-7b"), "int3")


def test_grouped_expert_gemms_count_every_experts_weights() -> None:
    # a grouped GEMM (dims[0] experts) stores every expert's quantized weights
    op = Op(name="moe_layers.mlp.experts.down_proj", op="linear", kind=OpKind.GEMM, dims=(8, 4, 256, 128),
            dtype=DType.BF16, flops=2.0 * 8 * 4 * 256 * 128, bytes_read=8 * 256 * 128 * 2.0,
            bytes_written=8 * 4 * 128 * 2.0, weight_bytes=8 * 256 * 128 * 2.0, meta=(("weight_dtype", "bf16"),))
    (w4,) = quantize_weights([op], "w4a16")
    (mx,) = quantize_weights([op], "mxfp4")
    assert w4.weight_bytes == 8 * 256 * 128 * (0.5 + 2 / 128)
    assert mx.weight_bytes == 8 * 256 * 128 * (0.5 + 1 / 32)


# --- NVIDIA ModelOpt checkpoints (FP8, NVFP4) -----------------------------------------------------------------

_NVFP4 = {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16, "kv_cache_quant_algo": "FP8",
          "exclude_modules": ["lm_head"]}
# NVFP4 by definition: an E2M1 value (4 bits) per weight + one E4M3 scale (8 bits) per 16 weights
_NVFP4_BYTES = 4 / 8 + 1 / 16


def _nvfp4_llama() -> ModelConfig:
    raw = {**load_model("llama-2-7b").hf_config, "quantization_config": _NVFP4}
    return from_hf_config(raw, model_id="llama-2-7b-nvfp4")


def test_modelopt_and_quark_checkpoints_map_to_the_fp8_and_fp4_schemes() -> None:
    assert checkpoint_scheme(load_model("nvidia/Llama-3.3-70B-Instruct-FP8")) == "fp8"
    assert checkpoint_scheme(load_model("amd/Llama-3.3-70B-Instruct-FP8-KV")) == "fp8"
    assert checkpoint_scheme(_nvfp4_llama()) == "fp4"


def test_modelopt_fp8_runs_fp8_gemms_on_h100_with_one_byte_per_weight_and_weight_only_on_a100() -> None:
    cfg = load_model("nvidia/Llama-3.3-70B-Instruct-FP8")
    by_gpu = {}
    for gpu in ("h100-sxm-80gb", "a100-sxm-80gb"):
        quant = resolve_quantization(cfg, "auto", load_hardware(gpu))
        w = build_workload(cfg, WorkloadSpec(Mode.DECODE, 4, 1024, dtype=DType.BF16, quantization=quant))
        by_gpu[gpu] = _linears(w.ops, ".mlp.down_proj")[0]
    fp8, w8a16 = by_gpu["h100-sxm-80gb"], by_gpu["a100-sxm-80gb"]
    assert fp8.dtype is DType.FP8 and w8a16.dtype is DType.BF16 and w8a16.get("weight_dtype") == "fp8"
    _, _, k, n = fp8.dims
    assert fp8.weight_bytes == w8a16.weight_bytes == k * n * 1.0  # E4M3, one fp32 scale per tensor


def test_nvfp4_runs_fp4_gemms_on_blackwell_and_weight_only_where_there_is_no_fp4_math() -> None:
    cfg = _nvfp4_llama()
    b200 = resolve_quantization(cfg, "auto", load_hardware("b200-sxm-180gb"))
    h100 = resolve_quantization(cfg, "auto", load_hardware("h100-sxm-80gb"))
    assert b200.scheme == h100.scheme == "fp4"
    assert not b200.weight_only and h100.weight_only
    assert "weight-only w4a16 on h100-sxm-80gb, which has no FP4 math" in h100.label
    ops = {}
    for name, quant in (("b200", b200), ("h100", h100)):
        w = build_workload(cfg, WorkloadSpec(Mode.DECODE, 4, 1024, dtype=DType.BF16, quantization=quant))
        ops[name] = _linears(w.ops, ".mlp.down_proj")[0]
    assert ops["b200"].dtype is DType.FP4
    assert ops["h100"].dtype is DType.BF16 and ops["h100"].get("weight_dtype") == "fp4"
    _, _, k, n = ops["b200"].dims
    assert ops["b200"].weight_bytes == ops["h100"].weight_bytes == pytest.approx(k * n * _NVFP4_BYTES)


def test_a_modelopt_or_quark_models_weight_bytes_quantize_the_blocks_and_keep_the_embeddings_16_bit() -> None:
    fp8 = load_model("nvidia/Llama-3.3-70B-Instruct-FP8")
    quark = load_model("amd/Llama-3.3-70B-Instruct-FP8-KV")
    nvfp4 = _nvfp4_llama()
    for cfg, per_weight in ((fp8, 1.0), (quark, 1.0), (nvfp4, _NVFP4_BYTES)):
        count = count_params(cfg)
        outer = 2 * count.embedding  # the token table and the untied LM head, bf16
        block = count.total - outer
        assert weight_bytes_per_gpu(cfg, tp=1, dtype=DType.BF16) == pytest.approx(block * per_weight + outer * 2)


def test_kv_cache_quant_algo_sets_the_kv_cache_dtype_under_auto() -> None:
    fp8 = load_model("nvidia/Llama-3.3-70B-Instruct-FP8")
    plain = load_model("llama-3.3-70b")
    assert kv_cache_dtype(None, "auto", DType.BF16, fp8.quantization) is DType.FP8
    assert kv_cache_dtype(None, "auto", DType.BF16, _nvfp4_llama().quantization) is DType.FP8
    assert kv_cache_dtype(None, "auto", DType.BF16, load_model("amd/Llama-3.3-70B-Instruct-FP8-KV").quantization) \
        is DType.FP8
    assert kv_cache_dtype(None, "auto", DType.BF16, plain.quantization) is DType.BF16
    assert kv_cache_dtype(DType.BF16, "auto", DType.BF16, fp8.quantization) is DType.BF16  # an explicit dtype wins
    assert kv_cache_dtype(None, "none", DType.BF16, fp8.quantization) is DType.BF16  # not the checkpoint's format
