"""Public data sets as request-length presets (``dataset:<name>``: ShareGPT, HumanEval+, LLaVA-Instruct).

``data/presets/datasets.yaml`` gives, per data set, the distribution of its prompts' lengths and of its
reference responses' lengths, each a lognormal truncated to ``[min_tokens, max_tokens]`` with a published or
stated mean (:class:`~perfcast.serving.sources.mlperf.LengthDistribution`, the form of the MLPerf presets). No
data set ships with perfcast: the lengths are a synthetic table of ``synthetic_rows`` quantiles of each
distribution, outputs shuffled against prompts (drawn independently), sampled per request like a trace's rows.

A model answers with lengths of its own. :func:`dataset_trace` takes the mean (and the cap, e.g. the request's
``max_tokens``) of the output lengths to simulate, keeping the preset's spread: a measured model's mean
response length, or a guess. Every number's basis is in the YAML.
"""

from __future__ import annotations

import functools

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from perfcast.datafiles import data_path
from perfcast.errors import CatalogError, ConfigError, UnknownNameError
from perfcast.serving.sources.mlperf import LengthDistribution
from perfcast.serving.sources.trace import Trace
from perfcast.yamlio import load_model_file

__all__ = ["PREFIX", "DatasetPreset", "dataset_names", "dataset_trace", "is_dataset_name", "load_dataset"]

PREFIX = "dataset"


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DatasetPreset(_Frozen):
    """One data set's prompt and reference-response lengths (tokens)."""

    dataset: str = Field(min_length=1, description="what the data set is")
    prompts: int | None = Field(default=None, ge=1, description="how many prompts the data set holds (None: a "
                                "sample of a large set, as many as a run asks)")
    input: LengthDistribution
    output: LengthDistribution


class _Presets(_Frozen):
    synthetic_rows: int = Field(ge=16, le=1 << 20)
    datasets: dict[str, DatasetPreset] = Field(min_length=1)


@functools.cache
def _presets() -> _Presets:
    out: _Presets = load_model_file(data_path("presets", "datasets.yaml"), _Presets, what="data set presets",
                                    error=CatalogError)
    return out


def dataset_names() -> tuple[str, ...]:
    """The presets' names, as ``dataset:<name>``."""
    return tuple(f"{PREFIX}:{n}" for n in sorted(_presets().datasets))


def is_dataset_name(name: str) -> bool:
    """Whether ``name`` asks for a data set preset (``dataset:<name>``)."""
    return name.startswith(f"{PREFIX}:")


def load_dataset(name: str) -> DatasetPreset:
    """The preset ``dataset:<name>`` (or the bare ``<name>``)."""
    key = name.split(":", 1)[1] if is_dataset_name(name) else name
    found = _presets().datasets.get(key)
    if found is None:
        raise UnknownNameError("data set preset", name, list(dataset_names()))
    return found


def dataset_trace(name: str, *, output_mean_tokens: float | None = None,
                  output_max_tokens: int | None = None) -> Trace:
    """The synthetic length table of ``dataset:<name>``: its prompts, and outputs of the preset's spread with
    mean ``output_mean_tokens`` (tokens; the reference responses' mean when None) truncated at
    ``output_max_tokens`` (the preset's cap when None)."""
    return _trace(name if is_dataset_name(name) else f"{PREFIX}:{name}", output_mean_tokens, output_max_tokens)


@functools.lru_cache(maxsize=256)
def _trace(name: str, mean: float | None, cap: int | None) -> Trace:
    preset = load_dataset(name)
    out = preset.output
    update: dict[str, object] = {}
    if cap is not None:
        update |= {"max_tokens": int(cap), "max_basis": "the workload's cap"}
    if mean is not None:
        update |= {"mean_tokens": float(mean), "mean_basis": "the workload's mean"}
    if update:
        try:
            out = LengthDistribution.model_validate(out.model_dump() | update)
        except ValueError as exc:
            raise ConfigError(f"{name}: output lengths of mean {mean} and cap {cap} are not a length distribution "
                              f"(the mean must lie between {out.min_tokens} and the cap): {exc}") from None
    n = _presets().synthetic_rows
    prompt = preset.input.quantiles(n)
    output = out.quantiles(n)[np.random.default_rng(0).permutation(n)]
    for arr in (prompt, output):
        arr.flags.writeable = False
    source = f"perfcast data set preset {name} ({preset.dataset}): synthetic lengths from data/presets/datasets.yaml"
    if mean is not None or cap is not None:
        source += f", outputs of mean {out.mean_tokens:g} capped at {out.max_tokens}"
    return Trace(name=name, prompt_tokens=prompt, output_tokens=output, arrival_s=None, source=source)
