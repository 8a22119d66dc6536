"""Where the shipped data files live: one tree, ``perfcast/data/<kind>/``, one folder per kind.

Every loader of a shipped file finds it here (``data_path("coefficients", "kernel.json")``); the tree holds no
code. ``perfcast/data/README.md`` lists each kind with the schema that validates it and where its numbers come
from.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

__all__ = ["DATA_KINDS", "data_dir", "data_path"]

DATA_KINDS: tuple[str, ...] = (
    "accelerators",  # spatial accelerator architectures and their mappings (perfcast.accel)
    "clusters",  # multi-GPU systems: nodes, fabrics, NICs (perfcast.system.cluster)
    "coefficients",  # fitted or stated model coefficients, versioned JSON (kernel, compose, system, serving)
    "engines",  # serving-engine profiles: scheduling defaults and their sources (perfcast.serving.engines)
    "defaults",  # values filled in where an input leaves them out (Hugging Face config-class defaults)
    "hardware",  # one device per file (perfcast.catalog.hardware)
    "models",  # Hugging Face config.json plus a sidecar naming its source (perfcast.catalog.models)
    "presets",  # published workloads and runs used as named inputs (MLPerf, published training plans)
    "scenarios",  # the suite's scenario files (perfcast.scenarios.schema)
    "traces",  # request-length traces for the serving simulator (perfcast.serving.sources.traces)
)
"""The kinds of shipped data, one folder each."""


def data_dir(kind: str) -> Path:
    """The folder of ``kind`` (one of :data:`DATA_KINDS`) in the installed package."""
    if kind not in DATA_KINDS:
        raise ValueError(f"unknown data kind {kind!r}; one of {', '.join(DATA_KINDS)}")
    return Path(str(resources.files("perfcast") / "data" / kind))


def data_path(kind: str, *parts: str) -> Path:
    """The path of a shipped file of ``kind``: ``data_path("coefficients", "kernel.json")``."""
    return data_dir(kind).joinpath(*parts)
