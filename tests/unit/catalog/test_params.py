"""Parameter counts of catalog models against the sizes their authors publish.

Every expected number below is a published figure (model card, paper table, or
the parameter count the Hugging Face Hub reads from the safetensors files),
cited next to it; none was produced by perfcast.
"""

from __future__ import annotations

import pytest

from perfcast.catalog import load_model
from perfcast.catalog.params import ParamCount, count_params

# Published sizes are rounded (to 3 significant digits at best) and some count a head or pooler that
# perfcast leaves out (see perfcast.catalog.params); 2% covers both without hiding a wrong shape, which
# moves a count by far more (one missing MLP matrix in a Llama is ~20%).
PUBLISHED_TOLERANCE = 0.02

B = 1e9
M = 1e6

TOTALS = [
    # (model, published total parameters, source)
    pytest.param("gpt2", 124 * M, id="gpt2-124M-openai-community/gpt2-model-card"),
    pytest.param("gpt2-large", 774 * M, id="gpt2-large-774M-model-card"),
    # Devlin et al. 2019 (arXiv:1810.04805) Sec. 3: BERT-LARGE total parameters 340M (incl. pooler)
    pytest.param("bert-large", 340 * M, id="bert-large-340M-BERT-paper-sec3"),
    # Zhang et al. 2022 (arXiv:2205.01068) Table 1: OPT-1.3B
    pytest.param("opt-1.3b", 1.3 * B, id="opt-1.3b-OPT-paper-table1"),
    # Hub safetensors parameter counts shown on the model pages
    pytest.param("llama-2-7b", 6.74 * B, id="llama-2-7b-6.74B-hub-safetensors"),
    pytest.param("llama-2-70b", 68.98 * B, id="llama-2-70b-68.98B-hub-safetensors"),
    pytest.param("llama-3-8b", 8.03 * B, id="llama-3-8b-8.03B-hub-safetensors"),
    pytest.param("llama-3.1-405b", 405.9 * B, id="llama-3.1-405b-405.9B-hub-safetensors"),
    pytest.param("mistral-7b", 7.24 * B, id="mistral-7b-7.24B-hub-safetensors"),
    # microsoft/phi-2: the model card says "2.7 billion"; the Hub safetensors count is 2.78B
    pytest.param("phi-2", 2.78 * B, id="phi-2-2.78B-hub-safetensors"),
    # EleutherAI/gpt-j-6b model card: n_parameters 6,053,381,344
    pytest.param("gpt-j-6b", 6_053_381_344, id="gpt-j-6b-model-card"),
    # Almazrouei et al. 2023 (arXiv:2311.16867): Falcon-180B
    pytest.param("falcon-180b", 180 * B, id="falcon-180b-Falcon-paper"),
    # Brown et al. 2020 (arXiv:2005.14165) Table 2.1: GPT-3 175B
    pytest.param("gpt3-175b", 175 * B, id="gpt3-175b-GPT-3-paper-table2.1"),
    # NVIDIA 2024 Nemotron-4 340B technical report (arXiv:2406.11704)
    pytest.param("nemotron-4-340b", 340 * B, id="nemotron-4-340b-tech-report"),
    # llava-hf/llava-1.5-7b-hf Hub safetensors count (text model + CLIP ViT-L/14-336 + projector)
    pytest.param("llava-1.5-7b", 7.06 * B, id="llava-1.5-7b-7.06B-hub-safetensors"),
    # Hub safetensors parameter counts shown on the model pages (google/gemma-2-9b, microsoft/Phi-3-mini-4k-instruct,
    # microsoft/phi-4, allenai/OLMo-2-1124-7B, ibm-granite/granite-3.0-8b-base)
    pytest.param("gemma-2-9b", 9.24 * B, id="gemma-2-9b-9.24B-hub-safetensors"),
    pytest.param("phi-3-mini-4k", 3.82 * B, id="phi-3-mini-4k-3.82B-hub-safetensors"),
    pytest.param("phi-4", 14.7 * B, id="phi-4-14.7B-hub-safetensors"),
    pytest.param("olmo-2-7b", 7.30 * B, id="olmo-2-7b-7.30B-hub-safetensors"),
    pytest.param("granite-3-8b", 8.17 * B, id="granite-3-8b-8.17B-hub-safetensors"),
    # CohereForAI/c4ai-command-r-v01 model card: 35 billion parameters
    pytest.param("command-r", 35 * B, id="command-r-35B-model-card"),
    # Qwen/Qwen3-8B and Qwen/Qwen3-32B model cards: 8.2B and 32.8B parameters
    pytest.param("qwen3-8b", 8.2 * B, id="qwen3-8b-model-card"),
    pytest.param("qwen3-32b", 32.8 * B, id="qwen3-32b-model-card"),
    # Touvron et al. 2023, LLaMA (arXiv:2302.13971) Table 2: 6.7B and 13.0B
    pytest.param("llama-7b", 6.7 * B, id="llama-7b-LLaMA-paper-table2"),
    pytest.param("llama-13b", 13.0 * B, id="llama-13b-LLaMA-paper-table2"),
    # Biderman et al. 2023, Pythia (arXiv:2304.01373) Table 1: 12B total 11,846,072,320
    pytest.param("pythia-12b", 11_846_072_320, id="pythia-12b-Pythia-paper-table1"),
    # Gemma Team 2024 (arXiv:2403.08295) Table 2: 7B = 786,825,216 embedding + 7,751,248,896 non-embedding;
    # 2B = 524,550,144 + 1,981,884,416 (CodeGemma keeps these architectures)
    pytest.param("codegemma-7b", 786_825_216 + 7_751_248_896, id="codegemma-7b-Gemma-paper-table2"),
    pytest.param("codegemma-2b", 524_550_144 + 1_981_884_416, id="codegemma-2b-Gemma-paper-table2"),
    # BigScience 2022, BLOOM (arXiv:2211.05100) Table 3 / bigscience/bloom-7b1 model card: 7,069,016,064 parameters
    pytest.param("bloom-7b1", 7_069_016_064, id="bloom-7b1-model-card"),
    # Hub safetensors parameter counts shown on the model pages
    pytest.param("gemma-2-2b", 2.61 * B, id="gemma-2-2b-2.61B-hub-safetensors"),
    pytest.param("gemma-2-27b", 27.2 * B, id="gemma-2-27b-27.2B-hub-safetensors"),
    pytest.param("starcoder2-3b", 3.03 * B, id="starcoder2-3b-3.03B-hub-safetensors"),
    pytest.param("starcoder2-7b", 7.17 * B, id="starcoder2-7b-7.17B-hub-safetensors"),
    pytest.param("mistral-7b-v0.3", 7.25 * B, id="mistral-7b-v0.3-7.25B-hub-safetensors"),
    pytest.param("mistral-nemo-12b", 12.2 * B, id="mistral-nemo-12.2B-hub-safetensors"),
    pytest.param("codellama-70b", 69.0 * B, id="codellama-70b-69B-hub-safetensors"),
    pytest.param("llava-1.5-13b", 13.4 * B, id="llava-1.5-13b-13.4B-hub-safetensors"),
    # mistral.ai/news/mistral-large-2407: 123 billion parameters
    pytest.param("mistral-large-2407", 123 * B, id="mistral-large-2407-announcement"),
    # Abdin et al., Phi-3 Technical Report (arXiv:2404.14219) Sec. 2: phi-3-medium 14B
    pytest.param("phi-3-medium-4k", 14 * B, id="phi-3-medium-14B-tech-report"),
    # Narayanan et al. SC'21 (arXiv:2104.04473) Table 1: the 1T row
    pytest.param("GPT-1T (hidden 25600, 128 layers, vocab 51200)", 1000 * B, id="synthetic-GPT-1T-SC21-table1"),
]

MOE = [
    # (model, published total, published active per token, source)
    # mistral.ai/news/mixtral-of-experts: "46.7B total parameters but only uses 12.9B parameters per token"
    pytest.param("mixtral-8x7b", 46.7 * B, 12.9 * B, id="mixtral-8x7b-mistral-announcement"),
    # mistral.ai/news/mixtral-8x22b: 141B total, 39B active
    pytest.param("mixtral-8x22b-instruct", 141 * B, 39 * B, id="mixtral-8x22b-mistral-announcement"),
    # Qwen/Qwen3-30B-A3B model card: 30.5B total, 3.3B activated
    pytest.param("qwen3-30b-a3b", 30.5 * B, 3.3 * B, id="qwen3-30b-a3b-model-card"),
    # Qwen/Qwen3-235B-A22B model card: 235B total, 22B activated
    pytest.param("qwen3-235b-a22b", 235 * B, 22 * B, id="qwen3-235b-a22b-model-card"),
    # DeepSeek-V3 technical report (arXiv:2412.19437) abstract: 671B total, 37B activated per token
    pytest.param("deepseek-v3", 671 * B, 37 * B, id="deepseek-v3-tech-report"),
    # Meta Llama 4 announcement / model card: Scout 109B total, 17B active (total includes the vision encoder)
    pytest.param("llama-4-scout", 109 * B, 17 * B, id="llama-4-scout-model-card"),
    # Meta Llama 4 announcement / model card: Maverick 400B total, 17B active
    pytest.param("llama-4-maverick", 400 * B, 17 * B, id="llama-4-maverick-model-card"),
]


def _close(actual: float, expected: float) -> bool:
    return abs(actual - expected) <= PUBLISHED_TOLERANCE * expected


@pytest.mark.parametrize(("name", "expected"), TOTALS)
def test_total_matches_published(name: str, expected: float) -> None:
    total = count_params(load_model(name)).total
    assert _close(total, expected), f"{name}: {total / B:.3f}B vs published {expected / B:.3f}B"


@pytest.mark.parametrize(("name", "expected_total", "expected_active"), MOE)
def test_moe_total_and_active_match_published(name: str, expected_total: float, expected_active: float) -> None:
    count = count_params(load_model(name))
    assert _close(count.total, expected_total), f"{name} total {count.total / B:.2f}B"
    assert _close(count.active, expected_active), f"{name} active {count.active / B:.2f}B"


@pytest.mark.parametrize(
    ("name", "expected_total", "expected_active_without_embedding"),
    [
        # OpenAI gpt-oss model card (Aug 2025), Table 1: 116.83B total, 5.13B active; 20.91B / 3.61B.
        # The card's active figure counts the unembedding but not the input embedding table.
        pytest.param("gpt-oss-120b", 116.83 * B, 5.13 * B, id="gpt-oss-120b-model-card-table1"),
        pytest.param("gpt-oss-20b", 20.91 * B, 3.61 * B, id="gpt-oss-20b-model-card-table1"),
    ],
)
def test_gpt_oss_matches_model_card(name: str, expected_total: float, expected_active_without_embedding: float) -> None:
    count = count_params(load_model(name))
    assert _close(count.total, expected_total)
    assert _close(count.active - count.embedding, expected_active_without_embedding)


# MiniMaxAI/MiniMax-M2 model card: "230 billion total parameters with 10 billion active". transformers has no
# MiniMaxM2 class to compare with, so the card's rounded figures are the check: the total within the published
# tolerance, the active count (the card's "10 billion", one significant figure) within 5% once the input embedding
# table (a lookup, not a matrix product: 0.6B) is left out, as the gpt-oss card does.
MINIMAX_M2_ACTIVE_TOLERANCE = 0.05


def test_minimax_m2_matches_its_model_card() -> None:
    count = count_params(load_model("MiniMaxAI/MiniMax-M2"))
    assert _close(count.total, 230 * B)
    assert count.active - count.embedding == pytest.approx(10 * B, rel=MINIMAX_M2_ACTIVE_TOLERANCE)


def test_minimax_m2_layer_is_full_gqa_with_projection_qk_norms_and_256_sigmoid_experts() -> None:
    cfg = load_model("minimax-m2")
    assert (cfg.num_layers, cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim) == (62, 3072, 48, 8, 128)
    assert cfg.rotary_frac == 0.5 and cfg.qk_norm == "rmsnorm" and cfg.qk_norm_span == "projection"
    assert cfg.moe is not None
    assert (cfg.moe.num_experts, cfg.moe.experts_per_token, cfg.moe.expert_intermediate_size) == (256, 8, 1536)
    assert cfg.moe.router_bias and cfg.moe.num_shared_experts == 0 and cfg.sliding_window is None
    # one layer by hand: q/k/v/o, the two projection-wide QK norms, 256 experts of 3 matrices, router + bias,
    # two RMSNorms
    q, kv = 48 * 128, 8 * 128
    layer = 3072 * (q + 2 * kv) + q * 3072 + (q + kv) + 256 * 3 * 3072 * 1536 + 3072 * 256 + 256 + 2 * 3072
    assert count_params(cfg).total == 62 * layer + 2 * 200064 * 3072 + 3072  # untied head, final norm


def test_exact_count_gpt2() -> None:
    # GPT2LMHeadModel.from_pretrained("gpt2").num_parameters() = 124,439,808 (tied LM head counted once)
    assert count_params(load_model("gpt2")).total == 124_439_808


def test_exact_count_llama_2_7b() -> None:
    # transformers LlamaForCausalLM for meta-llama/Llama-2-7b-hf: num_parameters() = 6,738,415,616
    # (the Hub page rounds it to 6.74B)
    assert count_params(load_model("llama-2-7b")).total == 6_738_415_616


def test_dense_models_are_fully_active() -> None:
    count = count_params(load_model("llama-2-7b"))
    assert count.active == count.total
    assert count.vision == 0


def test_embedding_part_is_token_plus_position_table() -> None:
    # GPT-2 small: wte 50257 x 768 + wpe 1024 x 768, by the config alone
    assert count_params(load_model("gpt2")).embedding == 50257 * 768 + 1024 * 768


def test_untied_head_adds_one_vocab_matrix() -> None:
    tied = load_model("gpt2")
    untied = tied.model_copy(update={"tie_word_embeddings": False})
    assert count_params(untied).total - count_params(tied).total == 50257 * 768


def test_moe_active_counts_top_k_routed_experts() -> None:
    cfg = load_model("mixtral-8x7b")
    h, inner, experts, top_k, layers = 4096, 14336, 8, 2, 32  # Mixtral paper Table 1
    one_expert = 3 * h * inner  # gate, up, down; no biases
    count = count_params(cfg)
    assert count.total - count.active == layers * (experts - top_k) * one_expert


def test_deepseek_v3_has_three_dense_layers_and_a_shared_expert() -> None:
    cfg = load_model("deepseek-v3")
    assert cfg.moe is not None and cfg.mla is not None
    assert cfg.moe.num_moe_layers(cfg.num_layers) == 61 - 3
    assert (cfg.moe.num_shared_experts, cfg.moe.num_experts, cfg.moe.experts_per_token) == (1, 256, 8)
    assert cfg.mla.kv_lora_rank == 512 and cfg.mla.q_lora_rank == 1536


def test_llama4_maverick_alternates_dense_and_moe_layers() -> None:
    cfg = load_model("llama-4-maverick")
    assert cfg.moe is not None
    assert [cfg.moe.is_moe_layer(i) for i in range(4)] == [False, True, False, True]
    assert cfg.intermediate_size == 16384 and cfg.moe.expert_intermediate_size == 8192
    assert cfg.nope_layers[:2] == (3, 7)
    assert cfg.attention_type(0) == "chunked" and cfg.attention_type(3) == "full"
    assert cfg.attention_window(0) == 8192


def test_gpt_oss_alternates_sliding_and_full_attention() -> None:
    cfg = load_model("gpt-oss-120b")
    assert [cfg.attention_type(i) for i in range(4)] == ["sliding", "full", "sliding", "full"]
    assert cfg.attention_window(0) == 128 and cfg.attention_window(1) is None
    assert cfg.attention_sinks and cfg.moe is not None and cfg.moe.expert_bias


def test_qwen_72b_mlp_branch_is_half_the_config_intermediate_size() -> None:
    # vidur/configs/models.json: Qwen/Qwen-72B mlp_hidden_dim 24576 (config.json intermediate_size 49152)
    cfg = load_model("qwen-72b")
    assert cfg.intermediate_size == 24576 and cfg.gated_mlp
    assert cfg.qkv_bias and not cfg.out_bias and not cfg.mlp_bias


def test_param_count_is_frozen() -> None:
    count = ParamCount(total=2, active=1, embedding=1)
    with pytest.raises(AttributeError):
        count.total = 3  # type: ignore[misc]
