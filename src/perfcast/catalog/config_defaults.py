"""Hugging Face config-class defaults, per model_type: ``data/defaults/hf_config_defaults.yaml``.

A config.json leaves out the keys whose value is its class's default; the normalizers fill those in from this
file (each family with its source: transformers 5.x ``configuration_<family>.py``, or the configuration file a
remote-code checkpoint ships with).
"""

from __future__ import annotations

import functools
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, RootModel

from perfcast.datafiles import data_path
from perfcast.errors import CatalogError
from perfcast.yamlio import load_model_file

__all__ = ["ConfigDefaults", "FamilyDefaults", "load_config_defaults"]


class FamilyDefaults(BaseModel):
    """The defaults of one model_type and where they come from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str = Field(min_length=1, description="the configuration file the values are read from")
    defaults: dict[str, Any] = Field(min_length=1, description="config key -> its class default")


class ConfigDefaults(RootModel[dict[str, FamilyDefaults]]):
    """The whole file: model_type -> its defaults."""


@functools.cache
def load_config_defaults() -> dict[str, FamilyDefaults]:
    """The shipped defaults by model_type, read once (CatalogError naming the file and key if malformed)."""
    data: ConfigDefaults = load_model_file(data_path("defaults", "hf_config_defaults.yaml"), ConfigDefaults,
                                           what="Hugging Face config defaults", error=CatalogError)
    return dict(data.root)
