"""Hugging Face configs perfcast does not model faithfully are refused, never priced as another architecture;
a rotary model's context follows its rope_scaling; a quantization_config is read into a typed value or refused."""

from __future__ import annotations

from typing import Any

import pytest

from perfcast.catalog.models import ModelConfig, check_context, from_hf_config, load_model
from perfcast.catalog.normalize import supported_model_types
from perfcast.errors import ConfigError, UnsupportedError

TINY: dict[str, Any] = {"hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 100,
                        "intermediate_size": 128, "max_position_embeddings": 512}


def _load(**fields: Any) -> ModelConfig:
    return from_hf_config({**TINY, **fields}, model_id="custom")


def _refusal(**fields: Any) -> str:
    with pytest.raises(UnsupportedError) as err:
        _load(**fields)
    message = str(err.value)
    assert "\n" not in message and message.startswith("custom: ")
    return message


# --- model_type -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("model_type", ["banana", "olmoe", "rwkv", "phi3small", "deepseek_v32", ""])
def test_an_unmodelled_model_type_is_refused_with_the_supported_list(model_type: str) -> None:
    message = _refusal(model_type=model_type)
    if model_type:
        assert f"model_type {model_type!r} is not modelled by perfcast" in message
    assert "supported" in message and "llama, llama4" in message and "switch_transformers" in message


def test_a_config_without_a_model_type_is_refused() -> None:
    message = _refusal()
    assert "no model_type" in message and ", ".join(supported_model_types()) in message


def test_the_supported_list_holds_every_family_and_the_diffusers_networks() -> None:
    names = supported_model_types()
    assert names == sorted(names)
    assert {"llama", "gpt2", "bert", "deepseek_v3", "gpt_oss", "unet_2d_condition", "autoencoder_kl"} <= set(names)
    assert "olmoe" not in names and "rwkv" not in names


def test_a_diffusers_config_is_recognised_by_its_class_name() -> None:
    raw = dict(load_model("sd-1.5-vae").hf_config)
    raw.pop("model_type")
    assert from_hf_config(raw, model_id="vae").model_type == "autoencoder_kl"


# --- vision towers --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("model_type", ["qwen3_vl", "mllama", "paligemma"])
def test_a_multimodal_model_type_names_its_vision_tower(model_type: str) -> None:
    message = _refusal(model_type=model_type)
    assert message == (f"custom: {model_type}'s vision tower is not supported; supported: clip_vision_model "
                       "(llava), llama4_vision_model (llama4), qwen2_vl (qwen2_vl), qwen2_5_vl (qwen2_5_vl), "
                       "pixtral (mistral3)")


def test_an_unknown_model_type_with_a_vision_config_is_a_vision_refusal() -> None:
    assert "vision tower" in _refusal(model_type="gemma3", vision_config={"model_type": "siglip_vision_model"})


def test_a_llava_with_a_siglip_tower_is_refused() -> None:
    message = _refusal(model_type="llava", vision_config={"model_type": "siglip_vision_model"},
                       text_config={"model_type": "llama", **TINY})
    assert "siglip_vision_model" in message and "clip_vision_model (llava)" in message


def test_a_llava_with_a_clip_tower_loads() -> None:
    cfg = _load(model_type="llava", vision_config={"model_type": "clip_vision_model"},
                text_config={"model_type": "llama", **TINY})
    assert cfg.vision is not None and cfg.vision.model_type == "clip_vision_model"


# --- keys of another architecture -----------------------------------------------------------------------------


@pytest.mark.parametrize(("model_type", "key", "value", "feature"), [
    ("llama", "num_local_experts", 8, "mixture-of-experts layers"),
    ("mistral", "kv_lora_rank", 512, "multi-head latent attention"),
    ("qwen2", "vision_config", {"hidden_size": 64}, "a vision tower"),
    ("gpt2", "add_cross_attention", True, "cross-attention"),
    ("llama", "parallel_attn", True, "a parallel attention + MLP block"),
    ("llama", "ssm_state_size", 128, "state-space (Mamba) layers"),
])
def test_keys_of_another_architecture_are_refused_not_dropped(model_type: str, key: str, value: Any,
                                                              feature: str) -> None:
    message = _refusal(model_type=model_type, **{key: value})
    assert f"{key}=" in message and feature in message and "refused rather than dropped" in message


def test_bert_relative_positions_and_mpt_expert_mlps_are_refused() -> None:
    bert = _refusal(model_type="bert", position_embedding_type="relative_key")
    assert "position_embedding_type='relative_key'" in bert
    mpt = {"d_model": 64, "n_heads": 4, "n_layers": 1, "max_seq_len": 512}
    assert "ffn_type='mb_moe'" in _refusal(model_type="mpt", ffn_config={"ffn_type": "mb_moe"}, **mpt)


def test_falsy_foreign_keys_are_no_feature() -> None:
    cfg = _load(model_type="llama", num_local_experts=0, add_cross_attention=False, is_encoder_decoder=False)
    assert cfg.moe is None


def test_per_layer_sliding_attention_in_a_llama_is_refused() -> None:
    message = _refusal(model_type="llama", layer_types=["sliding_attention"], sliding_window=128)
    assert "layer_types ['sliding_attention']" in message


def test_every_layer_full_attention_is_a_plain_llama() -> None:
    assert _load(model_type="llama", layer_types=["full_attention"]).sliding_window is None


# --- context limit --------------------------------------------------------------------------------------------


def test_a_rotary_models_context_is_its_max_position_embeddings() -> None:
    cfg = load_model("llama-2-7b")
    assert cfg.max_positions == 4096
    check_context(cfg, 4096)
    with pytest.raises(ConfigError, match=r"^sequence length 100000 exceeds the 4096-token context of llama-2-7b; "
                                          r"use a sequence length in 1\.\.4096$"):
        check_context(cfg, 100_000)


@pytest.mark.parametrize(("scaling", "limit"), [
    ({"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}, 131072),
    ({"rope_type": "linear", "factor": 8.0}, 8 * 512),  # no original: max_position_embeddings is the original
    ({"type": "dynamic", "factor": 2.0}, 1024),
    ({"rope_type": "llama3", "factor": 32.0, "original_max_position_embeddings": 8192}, 512),  # mpe is the window
    ({"rope_type": "default"}, 512),
])
def test_rope_scaling_sets_the_extended_context(scaling: dict[str, Any], limit: int) -> None:
    # Qwen2Config's num_key_value_heads defaults to 32: a 4-head config names its own
    assert _load(model_type="qwen2", num_key_value_heads=4, rope_scaling=scaling).max_positions == limit


def test_transformers_5_rope_parameters_count_too() -> None:
    cfg = _load(model_type="llama", rope_parameters={"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e6,
                                                      "original_max_position_embeddings": 1024})
    assert cfg.max_positions == 4096


def test_an_unknown_rope_scaling_type_is_refused() -> None:
    assert "rope_scaling type 'mrope' is not supported" in _refusal(model_type="llama", rope_scaling={"type": "mrope"})


def test_llama_3_1_reaches_128k_and_relative_positions_are_unbounded_but_for_perfcasts_own_bound() -> None:
    assert load_model("llama-3.1-8b").max_positions == 131072
    switch = load_model("switch-xl")
    assert switch.position == "relative" and switch.max_positions == 2**20
    with pytest.raises(ConfigError, match="relative positions, no limit in its config"):
        check_context(switch, 2**20 + 1)


def test_images_have_no_token_context() -> None:
    check_context(load_model("resnet-50"), 512)  # a CNN's seq_len is its image side


# --- quantization_config --------------------------------------------------------------------------------------


def test_deepseek_v3_is_block_scaled_fp8() -> None:
    q = load_model("deepseek-v3").quantization
    assert q is not None and q.method == "fp8" and q.weight_format == "fp8_e4m3"
    assert q.weight_block_size == (128, 128) and q.activation_scheme == "dynamic"
    assert q.bytes_per_weight(7168) == 1.0 + 4.0 / (128 * 128)  # E4M3 + an fp32 scale per 128x128 block


def test_gpt_oss_is_mxfp4_on_its_experts_only() -> None:
    q = load_model("gpt-oss-120b").quantization
    assert q is not None and q.method == "mxfp4" and q.experts_only
    assert "model.layers.*.self_attn" in q.modules_to_not_convert
    assert q.bytes_per_weight(2880) == 0.5 + 1.0 / 32  # 4 bits + an 8-bit scale per 32 values


@pytest.mark.parametrize(("quant", "bits", "per_weight"), [
    ({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}, 4,
     0.5 + (2.0 + 0.5) / 128),
    ({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False}, 4, 0.5 + 2.5 / 128),
    ({"quant_method": "gptq", "bits": 8, "group_size": 32}, 8, 1.0 + 3.0 / 32),
    ({"quant_method": "gptq", "bits": 4, "group_size": -1}, 4, 0.5 + 2.5 / 4096),  # one group per output channel
])
def test_awq_and_gptq_keep_their_group_scales(quant: dict[str, Any], bits: int, per_weight: float) -> None:
    q = _load(model_type="llama", quantization_config=quant).quantization
    assert q is not None and q.weight_bits == bits
    assert q.bytes_per_weight(4096) == pytest.approx(per_weight)  # a 4096-wide input: whole groups


@pytest.mark.parametrize(("quant", "what"), [
    ({"quant_method": "bitsandbytes", "load_in_4bit": True}, "quant_method 'bitsandbytes'"),
    ({"load_in_8bit": True}, "quant_method 'bitsandbytes'"),
    ({"quant_method": "compressed-tensors", "config_groups": {}}, "quant_method 'compressed-tensors'"),
    ({"quant_method": "gptq", "bits": 3}, "bits=3"),
    ({"quant_method": "awq", "bits": 8}, "bits=8"),
    ({"quant_method": "fp8", "fmt": "e5m2"}, "fmt='e5m2'"),
    ({"quant_method": "gptq", "bits": 4, "modules_to_not_convert": ["mlp.down_proj"]}, "mlp.down_proj"),
    ({"quant_method": "mxfp4"}, "MoE experts only"),
    ({"quant_method": "modelopt", "quant_algo": "W4A8_AWQ"}, "quant_algo='W4A8_AWQ'"),
    ({"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 32}, "group_size=32"),
    ({"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_quant_algo": "NVFP4"},
     "kv_cache_quant_algo='NVFP4'"),
    ({"quant_method": "modelopt", "quant_algo": "FP8", "exclude_modules": ["model.layers.0.mlp"]},
     "model.layers.0.mlp"),
])
def test_quantization_perfcast_cannot_map_is_refused_in_one_line(quant: dict[str, Any], what: str) -> None:
    message = _refusal(model_type="llama", quantization_config=quant)
    assert what in message
    assert message.endswith("supported: fp8 (e4m3, per-tensor or block-scaled), mxfp4 (MoE experts only, as "
                            "gpt-oss), awq (4-bit), gptq (4- or 8-bit), modelopt (FP8 or NVFP4, optional FP8 KV "
                            "cache), quark (per-tensor FP8 weights and activations, optional FP8 KV cache)")


def test_routers_embeddings_and_the_head_may_stay_unquantized() -> None:
    quant = {"quant_method": "awq", "bits": 4, "modules_to_not_convert": ["lm_head", "model.embed_tokens", "gate"]}
    assert _load(model_type="llama", quantization_config=quant).quantization is not None


def test_mxfp4_on_a_model_with_dense_mlps_is_refused() -> None:
    raw = dict(load_model("deepseek-v3").hf_config)  # 3 dense layers and a shared expert
    raw["quantization_config"] = load_model("gpt-oss-20b").hf_config["quantization_config"]
    with pytest.raises(UnsupportedError, match="MLPs are not all routed experts"):
        from_hf_config(raw, model_id="custom")


# ModelOpt (TensorRT Model Optimizer) checkpoints: quant_algo FP8 = E4M3 weights with one fp32 scale per tensor;
# NVFP4 = E2M1 weights (4 bits) with one E4M3 scale (1 byte) per 16 elements and one fp32 scale per tensor (its
# 4 bytes per matrix left out); kv_cache_quant_algo FP8 = an E4M3 KV cache.
@pytest.mark.parametrize(("quant", "fmt", "per_weight", "kv"), [
    ({"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_quant_algo": "FP8", "exclude_modules": ["lm_head"]},
     "fp8_e4m3", 1.0, "fp8"),
    ({"quant_method": "modelopt", "quant_algo": "FP8"}, "fp8_e4m3", 1.0, None),
    ({"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16, "kv_cache_quant_algo": "FP8",
      "exclude_modules": ["lm_head"]}, "nvfp4", 0.5 + 1.0 / 16, "fp8"),
    # hf_quant_config.json's layout: the fields under `quantization`
    ({"quant_method": "modelopt", "producer": {"name": "modelopt"},
      "quantization": {"quant_algo": "NVFP4", "group_size": 16, "kv_cache_quant_algo": None}}, "nvfp4",
     0.5 + 1.0 / 16, None),
])
def test_modelopt_fp8_and_nvfp4_bytes_and_kv_cache(quant: dict[str, Any], fmt: str, per_weight: float,
                                                    kv: str | None) -> None:
    q = _load(model_type="llama", quantization_config=quant).quantization
    assert q is not None and q.method == "modelopt" and q.weight_format == fmt
    assert q.weight_bits == (8 if fmt == "fp8_e4m3" else 4)
    assert q.bytes_per_weight(4096) == pytest.approx(per_weight)
    assert q.kv_cache_dtype == kv


def test_deepseek_v32_is_refused_naming_its_sparse_attention() -> None:
    # DeepSeek-V3.2: each query attends to the top-2048 keys a lightning indexer picks (DSA); priced as dense MLA
    # it would be wrong at long contexts, so it is refused with that reason
    message = _refusal(model_type="deepseek_v32", index_topk=2048)
    assert "model_type 'deepseek_v32' is not modelled by perfcast" in message
    assert "DeepSeek Sparse Attention (DSA)" in message and "top-2048" in message


def test_a_known_checkpoint_of_an_unmodelled_architecture_is_refused_by_name() -> None:
    with pytest.raises(UnsupportedError) as err:
        load_model("RWKV/rwkv-raven-7b")
    assert str(err.value).startswith("RWKV/rwkv-raven-7b: model_type 'rwkv' is not modelled by perfcast: ")
    with pytest.raises(UnsupportedError, match="a llama checkpoint perfcast does not model: .*vocabulary"):
        load_model("Neutralzz/BiLLa-7B-SFT")


_QUARK_FP8 = {"dtype": "fp8_e4m3", "qscheme": "per_tensor", "is_dynamic": False}


def test_quark_per_tensor_fp8_with_its_kv_cache_group() -> None:
    q = load_model("amd/Llama-3.3-70B-Instruct-FP8-KV").quantization
    assert q is not None and q.method == "quark" and q.weight_format == "fp8_e4m3"
    assert q.activation_scheme == "static" and q.kv_cache_dtype == "fp8"
    assert q.bytes_per_weight(8192) == 1.0  # E4M3, one fp32 scale per tensor
    plain = {"quant_method": "quark", "global_quant_config": {"weight": _QUARK_FP8, "input_tensors": _QUARK_FP8}}
    no_kv = _load(model_type="llama", quantization_config=plain).quantization
    assert no_kv is not None and no_kv.kv_cache_dtype is None


@pytest.mark.parametrize(("quant", "what"), [
    ({"quant_method": "quark", "global_quant_config": {"weight": {"dtype": "fp4", "qscheme": "per_group"},
                                                       "input_tensors": None}}, "'weight': 'fp4'"),
    ({"quant_method": "quark", "global_quant_config": {"weight": _QUARK_FP8, "input_tensors": None}},
     "'input_tensors': None"),
    ({"quant_method": "quark", "global_quant_config": {"weight": _QUARK_FP8, "input_tensors": _QUARK_FP8},
      "layer_quant_config": {"*down_proj": {"weight": {"dtype": "int8", "qscheme": "per_channel"}}}},
     "layer_quant_config['*down_proj']"),
    ({"quant_method": "quark", "global_quant_config": {"weight": _QUARK_FP8, "input_tensors": _QUARK_FP8},
      "export": {"kv_cache_group": ["*k_proj"]}}, "kv_cache_group ['*k_proj']"),
])
def test_quark_forms_other_than_per_tensor_fp8_are_refused(quant: dict[str, Any], what: str) -> None:
    message = _refusal(model_type="llama", quantization_config=quant)
    assert what in message and "quark (per-tensor FP8 weights and activations, optional FP8 KV cache)" in message
