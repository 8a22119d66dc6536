"""Data set length presets (dataset:<name>) and engine profiles chosen by release."""

from __future__ import annotations

import numpy as np
import pytest

from perfcast.errors import ConfigError, UnknownNameError
from perfcast.serving.config import WorkloadConfig
from perfcast.serving.engines import engine_for_version
from perfcast.serving.sources.datasets import dataset_names, dataset_trace, load_dataset
from perfcast.serving.sources.traces import load_trace


def test_a_preset_draws_its_published_means_and_a_workload_recentres_the_outputs() -> None:
    assert "dataset:sharegpt" in dataset_names()
    share = load_trace("dataset:sharegpt")
    preset = load_dataset("sharegpt")
    assert np.mean(share.prompt_tokens) == pytest.approx(preset.input.mean_tokens, rel=0.01)
    assert share.prompt_tokens.max() <= preset.input.max_tokens
    mine = dataset_trace("dataset:sharegpt", output_mean_tokens=450, output_max_tokens=1024)
    assert np.mean(mine.output_tokens) == pytest.approx(450, rel=0.01) and mine.output_tokens.max() <= 1024
    assert np.array_equal(mine.prompt_tokens, share.prompt_tokens)
    with pytest.raises(UnknownNameError):
        load_trace("dataset:alpaca-eval")
    with pytest.raises(ConfigError, match="mean"):
        dataset_trace("dataset:sharegpt", output_mean_tokens=900, output_max_tokens=800)


def test_output_means_need_a_data_set_preset() -> None:
    with pytest.raises(ConfigError, match="dataset"):
        WorkloadConfig(prompt_tokens=100, output_tokens=100, output_tokens_mean=50)


def test_a_release_picks_the_profile_of_its_engine_family() -> None:
    assert engine_for_version("vllm", "0.5.4").id == "vllm-0.5"
    assert engine_for_version("vllm", "v0.11.2").id == "vllm"
    with pytest.raises(ConfigError):
        engine_for_version("vllm", "latest")
