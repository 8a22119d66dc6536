"""The default dtype's description: "the checkpoint's" only when the config names that dtype."""

from __future__ import annotations

import pytest

from perfcast.catalog.defaults import default_dtype, describe_default_dtype
from perfcast.catalog.hardware import load_hardware
from perfcast.catalog.models import load_model


@pytest.mark.parametrize(("model", "hardware", "engine", "words"), [
    ("llama-2-7b", "h100", False, "the checkpoint's"),
    ("llama-3-8b", "v100", False, "the checkpoint's bf16 run in fp16: v100-sxm2-32gb has no bf16 math"),
    ("gpt3-2.7b", "a100", False, "the config names no torch_dtype: transformers' fp32 default"),  # a paper's shapes
    ("gpt2", "h100", True, "the config names no torch_dtype: fp16, as a serving engine runs fp32"),
    ("gpt-oss-20b", "h100", False, "the quantized checkpoint's unquantized tensors"),
])
def test_the_default_dtype_says_where_it_comes_from(model: str, hardware: str, engine: bool, words: str) -> None:
    cfg, hw = load_model(model), load_hardware(hardware)
    assert describe_default_dtype(cfg, default_dtype(cfg, hw, engine=engine), hw) == words
