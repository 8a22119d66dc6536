"""Typed scenario files: the same schema checks the shipped suite and a user's own file."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from perfcast.errors import ConfigError, UnknownNameError
from perfcast.yamlio import load_model_file

__all__ = ["LatencyRun", "Scenario", "list_scenarios", "load_scenario"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LatencyRun(_Strict):
    """One model step to predict on every scenario device."""

    model: str
    mode: Literal["inference", "training", "prefill", "decode"] = "inference"
    batch_size: int = Field(gt=0)
    seq_len: int = Field(gt=0)
    fused: bool = False
    parallelism: str = "none"


class Scenario(_Strict):
    """A scenario: an id, what it asks, and the runs that answer it."""

    id: str
    title: str
    kind: Literal["model_latency"]
    groundtruth: str | None = Field(default=None, description="table (relative to shared/groundtruth) to compare with")
    dtype: str = "fp32"
    optimizer: Literal["adam", "sgd", "none"] = "adam"
    hardware: list[str] = Field(min_length=1)
    runs: list[LatencyRun] = Field(min_length=1)


def _scenario_dir() -> Path:
    return Path(str(resources.files("perfcast.scenarios")))


def load_scenario(name: str | Path) -> Scenario:
    """Load a shipped scenario by id, or a user's YAML file by path (raises ConfigError with file and key)."""
    text = str(name)
    path = Path(text)
    if not text.endswith((".yaml", ".yml")):
        ids = {p.stem: p for p in _scenario_dir().glob("*.yaml")}
        if text not in ids:
            raise UnknownNameError("scenario", text, ids.keys())
        path = ids[text]
    if not path.is_file():
        raise ConfigError(f"scenario file {path} does not exist")
    scenario: Scenario = load_model_file(path, Scenario, what="scenario", error=ConfigError)
    return scenario


def list_scenarios() -> list[Scenario]:
    """Every shipped scenario, sorted by id."""
    return [load_scenario(p) for p in sorted(_scenario_dir().glob("*.yaml"))]
