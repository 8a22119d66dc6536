"""Where catalog files live: the package's own data plus user directories."""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

__all__ = ["catalog_dirs", "normalize_name"]


def catalog_dirs(kind: str) -> list[Path]:
    """Directories holding ``kind`` ("hardware" or "models") files, package data first.

    User directories come from ``PERFCAST_CATALOG`` (os.pathsep-separated), each
    holding ``hardware/`` and ``models/`` subdirectories.
    """
    dirs = [Path(str(resources.files("perfcast.catalog") / "data" / kind))]
    for root in os.environ.get("PERFCAST_CATALOG", "").split(os.pathsep):
        if root.strip():
            candidate = Path(root).expanduser() / kind
            if candidate.is_dir():
                dirs.append(candidate)
    return dirs


def normalize_name(name: str) -> str:
    """Lower-case, with spaces, underscores and slashes folded to dashes, for id/alias lookup."""
    out = name.strip().lower()
    for ch in (" ", "_", "/"):
        out = out.replace(ch, "-")
    while "--" in out:
        out = out.replace("--", "-")
    return out
