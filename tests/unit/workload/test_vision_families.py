"""Vision-language families (Qwen2-VL, Qwen2.5-VL, Mistral 3, LLaVA-NeXT): the priced image, its tokens, the tower's
graph and what is refused. Counts against transformers are in :mod:`test_reference_transformers`."""

from __future__ import annotations

from typing import Any

import pytest

from perfcast.catalog.models import from_hf_config, load_model
from perfcast.catalog.normalize_vision import llava_next_image_tokens
from perfcast.dtypes import parse_dtype
from perfcast.errors import CatalogError, UnsupportedError
from perfcast.workload.graph import Graph
from perfcast.workload.models.vision import build_vision_encoder, window_sizes
from perfcast.workload.types import OpKind

PINPOINTS = [(336, 672), (672, 336), (672, 672), (1008, 336), (336, 1008)]


def _raw(model: str, **changes: Any) -> dict[str, Any]:
    return {**load_model(model).hf_config, **changes}


def _ops(model: str | dict[str, Any], images: int = 1) -> dict[str, Any]:
    cfg = load_model(model) if isinstance(model, str) else from_hf_config(model, model_id="custom")
    assert cfg.vision is not None
    g = Graph(parse_dtype("bf16"))
    build_vision_encoder(g, cfg.vision, images)
    return {op.name: op for op in g.ops}


@pytest.mark.parametrize(("model", "tokens"), [("qwen2-vl-7b", 256), ("qwen2.5-vl-7b", 256),
                                               ("mistral-small-3.1-24b", 272), ("llava-next-llama3-8b", 2928)])
def test_the_default_image_becomes_the_stated_tokens(model: str, tokens: int) -> None:
    vis = load_model(model).vision
    assert vis is not None and vis.num_image_tokens == tokens


def test_a_config_image_size_prices_another_image() -> None:
    cfg = from_hf_config(_raw("qwen2-vl-7b", image_size=896), model_id="custom")
    assert cfg.vision is not None and cfg.vision.num_image_tokens == (896 // 28) ** 2
    assert from_hf_config(_raw("qwen2-vl-7b"), model_id="custom").num_params() == cfg.num_params()  # no table


def test_an_image_size_of_partial_patches_is_refused() -> None:
    with pytest.raises(CatalogError, match="multiple of 28"):
        from_hf_config(_raw("qwen2-vl-7b", image_size=450), model_id="custom")


def test_llava_next_tiles_follow_the_best_pinpoint() -> None:
    assert llava_next_image_tokens(672, 336, 14, PINPOINTS) == (5, 576 + 48 * 49)
    # a 336 px image fits the 336 x 672 grid best (first of the two that keep every pixel); the padded half of the
    # grid's columns is unpadded away: 24 rows of 24 + a newline
    assert llava_next_image_tokens(336, 336, 14, PINPOINTS) == (3, 576 + 24 * 25)


def test_qwen2_5_windows_cover_the_grid() -> None:
    assert window_sizes(32, 8) == {64: 16}
    assert window_sizes(20, 8) == {64: 4, 32: 4, 16: 1}  # 8 + 8 + 4 per side
    assert sum(size * n for size, n in window_sizes(37, 8).items()) == 37 * 37


def test_qwen2_5_attends_in_windows_except_the_full_blocks() -> None:
    ops = _ops("qwen2.5-vl-7b")
    full = next(op for name, op in ops.items() if name.startswith("vision.layers.") and name.endswith("attention"))
    window = next(op for name, op in ops.items() if name.startswith("vision.window_layers.")
                  and name.endswith("attention"))
    assert (full.count, window.count) == (4, 28)
    assert full.dims[:1] == (1,) and window.dims[:1] == (16,)  # 1 span of 1024 patches, 16 windows of 64


def test_the_merger_runs_on_merged_tokens() -> None:
    qwen = _ops("qwen2-vl-7b")
    assert qwen["vision.projector0"].dims[1:4] == (256, 5120, 5120)
    pixtral = _ops("mistral-small-3.1-24b")
    assert pixtral["vision.merging_layer"].dims[1:4] == (256, 4096, 1024)
    assert pixtral["vision.projector0"].dims[1:4] == (256, 1024, 5120)  # the row breaks are not projected


def test_llava_next_runs_every_tile_through_clip() -> None:
    ops = _ops("llava-next-llama3-8b", images=2)
    assert ops["vision.patch_embed"].dims[1] == 2 * 5 * 576
    assert ops["vision.projector0"].dims[1] == 2 * 5 * 576


def test_the_qwen_patch_embedding_reads_two_frames() -> None:
    assert _ops("qwen2-vl-7b")["vision.patch_embed"].dims[1:4] == (1024, 3 * 2 * 14 * 14, 1280)
    assert all(op.kind is not OpKind.ATTENTION or op.dims[3] == 1024 for op in _ops("qwen2-vl-7b").values())


def test_another_tower_is_refused_naming_it() -> None:
    raw = _raw("mistral-small-3.1-24b")
    with pytest.raises(UnsupportedError, match="siglip_vision_model"):
        from_hf_config({**raw, "vision_config": {**raw["vision_config"], "model_type": "siglip_vision_model"}},
                       model_id="custom")


@pytest.mark.parametrize(("model", "change", "what"), [
    ("llava-next-llama3-8b", {"vision_feature_select_strategy": "full"}, "vision_feature_select_strategy"),
    ("mistral-small-3.1-24b", {"vision_feature_layer": [-1, -2]}, "vision_feature_layer"),
])
def test_unmodelled_options_are_refused(model: str, change: dict[str, Any], what: str) -> None:
    with pytest.raises(UnsupportedError, match=what):
        from_hf_config(_raw(model, **change), model_id="custom")


def test_m_rope_is_read_as_rope_with_the_configured_context() -> None:
    cfg = load_model("qwen2.5-vl-7b")
    assert (cfg.position, cfg.max_positions, cfg.qkv_bias, cfg.out_bias) == ("rotary", 128000, True, False)
