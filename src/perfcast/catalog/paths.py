"""Where catalog files live: the package's own data plus the user catalog folders."""

from __future__ import annotations

import os
from pathlib import Path

from perfcast.datafiles import data_dir

__all__ = ["DEFAULT_USER_CATALOG", "catalog_dirs", "normalize_name", "user_catalog_roots"]

# the user catalog when PERFCAST_CATALOG is not set; `perfcast calibrate` writes its hardware entry here
DEFAULT_USER_CATALOG = "~/.perfcast/catalog"


def user_catalog_roots() -> list[Path]:
    """The user catalog folders, each holding ``hardware/`` and ``models/``: the entries of ``PERFCAST_CATALOG``
    (os.pathsep-separated) when it is set, else :data:`DEFAULT_USER_CATALOG`. ``perfcast calibrate`` writes into
    the first, so what it writes is what the catalog reads."""
    roots = [r for r in os.environ.get("PERFCAST_CATALOG", "").split(os.pathsep) if r.strip()]
    return [Path(r).expanduser() for r in roots or [DEFAULT_USER_CATALOG]]


def catalog_dirs(kind: str) -> list[Path]:
    """Directories holding ``kind`` ("hardware" or "models") files: package data first, then each user catalog
    folder's ``kind`` subdirectory that exists (:func:`user_catalog_roots`)."""
    dirs = [data_dir(kind)]
    for root in user_catalog_roots():
        candidate = root / kind
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
