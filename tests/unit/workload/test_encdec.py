"""T5 (v1.0 and v1.1 / FLAN-T5): normalization, parameters and the encoder-decoder workload.

Counts against transformers itself are in :mod:`test_reference_transformers`; here the structure: what the
config says (gated GELU or ReLU, d_kv, tied head) reaches the graph, and what is not modelled is refused.
"""

from __future__ import annotations

import pytest

from perfcast.catalog.models import from_hf_config, load_model
from perfcast.errors import CatalogError, UnsupportedError
from perfcast.workload.build import WorkloadSpec, build_workload
from perfcast.workload.types import Mode, OpKind


def _gemms(model: str, seq: int = 64) -> dict[str, tuple[int, ...]]:
    spec = WorkloadSpec(mode=Mode.INFERENCE, batch_size=1, seq_len=seq)
    return {op.name: op.dims for op in build_workload(model, spec).ops if op.kind is OpKind.GEMM}


def test_flan_t5_is_gated_gelu_with_an_untied_head() -> None:
    cfg = load_model("flan-t5-xl")
    assert (cfg.kind, cfg.num_layers, cfg.num_decoder_layers) == ("encoder-decoder", 24, 24)
    assert (cfg.gated_mlp, cfg.activation, cfg.tie_word_embeddings) == (True, "gelu_new", False)
    gemms = _gemms("flan-t5-xl")
    assert {n.rsplit(".", 1)[-1] for n in gemms} >= {"wi_0", "wi_1", "wo", "q", "k", "v", "o", "lm_head"}
    assert not any(n.endswith(".wi") for n in gemms)


def test_t5_v1_0_is_relu_with_a_tied_head() -> None:
    cfg = load_model("t5-base")
    assert (cfg.gated_mlp, cfg.activation, cfg.tie_word_embeddings) == (False, "relu", True)
    gemms = _gemms("t5-base")
    assert any(n.endswith(".wi") for n in gemms) and not any(n.endswith(".wi_0") for n in gemms)


def test_cross_attention_reads_the_encoder_output() -> None:
    gemms = _gemms("t5-base", seq=64)
    k = next(dims for n, dims in gemms.items() if "cross_attn" in n and n.endswith(".k"))
    assert k[1:] == (64, 768, 768)  # 64 encoder tokens of d_model -> heads x d_kv
    assert any("decoder" in n and "cross_attn" in n for n in gemms)
    assert not any("encoder" in n and "cross_attn" in n for n in gemms)


def test_d_kv_sets_the_attention_width() -> None:
    raw = {**load_model("t5-base").hf_config, "d_kv": 32}  # 12 heads of 32 = 384, not d_model
    cfg = from_hf_config(raw, model_id="t5-narrow-heads")
    assert (cfg.head_dim, cfg.q_dim) == (32, 384)
    base = load_model("t5-base").num_params()
    per_attention = 4 * 768 * (768 - 384)  # q, k, v, o each lose 768 x 384
    assert base - cfg.num_params() == per_attention * (12 + 2 * 12)  # encoder self; decoder self and cross


def test_the_t5_base_parameters_are_the_papers_220m() -> None:
    assert load_model("t5-base").num_params() == pytest.approx(220e6, rel=0.02)  # Raffel et al., Table 14


def test_fastchat_t5_is_priced_as_flan_t5_xl() -> None:
    assert load_model("lmsys/fastchat-t5-3b-v1.0").id == "flan-t5-xl"


@pytest.mark.parametrize("proj", ["gated-swish-x", "relu-gated"])
def test_a_malformed_feed_forward_proj_is_refused(proj: str) -> None:
    with pytest.raises(CatalogError, match="feed_forward_proj"):
        from_hf_config({**load_model("t5-base").hf_config, "feed_forward_proj": proj}, model_id="bad")


def test_an_unmodelled_t5_activation_is_refused() -> None:
    with pytest.raises(UnsupportedError, match="feed_forward_proj"):
        from_hf_config({**load_model("t5-base").hf_config, "feed_forward_proj": "gated-mish"}, model_id="bad")


def test_decoder_only_modes_refuse_t5() -> None:
    with pytest.raises(UnsupportedError, match="encoder-decoder"):
        build_workload("flan-t5-xl", WorkloadSpec(mode=Mode.DECODE, batch_size=1, seq_len=64))
