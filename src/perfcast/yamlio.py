"""Safe YAML reading: the C-accelerated safe loader when PyYAML has it, else the pure-Python one.

Both construct only plain data (no arbitrary objects), exactly like ``yaml.safe_load``.
"""

from __future__ import annotations

from typing import IO, Any

import yaml

__all__ = ["safe_load"]

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def safe_load(stream: str | IO[str]) -> Any:
    """Parse one YAML document into plain Python data (safe constructors only)."""
    return yaml.load(stream, Loader=_LOADER)  # noqa: S506 - a safe loader
