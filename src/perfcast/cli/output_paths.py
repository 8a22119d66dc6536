"""Checks that a command's output files and folders can be written, made before the command does any work."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["check_output_folder", "check_output_paths", "refuse_overwrite"]


def _writable_folder(folder: Path, what: Path, *, create: bool) -> None:
    """``folder`` exists as a folder this process may write in (or, with ``create``, its first existing ancestor
    is); else one ConfigError naming ``what``, the output being checked."""
    from perfcast.errors import ConfigError

    here = folder
    while create and not here.exists() and here != here.parent:
        here = here.parent
    if not here.exists():
        raise ConfigError(f"{what}: the folder {folder} does not exist; create it first or choose another path")
    if not here.is_dir():
        raise ConfigError(f"{what}: {here} is a file, not a folder")
    if not os.access(here, os.W_OK | os.X_OK):
        raise ConfigError(f"{what}: cannot write in the folder {here} (permission denied)")


def check_output_paths(*paths: Path | None, force: bool, create_folders: bool = False) -> None:
    """Before any work: every output file (``None``: not asked for) can be written, in one ConfigError line for the
    first that cannot. Its folder must exist (``create_folders``: the command makes it, so the nearest existing
    folder above must be writable), be a folder and be writable; a file there is replaced only with ``--force``
    (``force``) and only if writable; a folder is never an output file; two outputs may not share a path.
    """
    from perfcast.errors import ConfigError

    seen: dict[Path, Path] = {}
    for path in paths:
        if path is None:
            continue
        key = Path(os.path.abspath(path))
        if key in seen:
            raise ConfigError(f"{path}: the same file is given for two outputs; choose one path per output")
        seen[key] = path
        if path.is_dir():
            raise ConfigError(f"{path} is a folder; give a file name (e.g. {path / 'out.json'})")
        _writable_folder(key.parent, path, create=create_folders)
        if path.exists() or path.is_symlink():
            if not force:
                raise ConfigError(f"{path} exists; pass --force to overwrite it")
            if not os.access(path, os.W_OK):
                raise ConfigError(f"{path} exists and is not writable (permission denied)")


# the name every command used before the folder checks; same function
refuse_overwrite = check_output_paths


def check_output_folder(folder: Path, *, protect: tuple[str, ...], force: bool) -> None:
    """Before any work: ``folder`` (created by the command if missing, in an existing writable parent) can take the
    files named in ``protect``; one of them already there is replaced only with ``--force``."""
    from perfcast.errors import ConfigError

    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"{folder} is a file; --out needs a folder")
    _writable_folder(folder if folder.exists() else Path(os.path.abspath(folder)).parent, folder, create=False)
    for name in protect:
        path = folder / name
        if path.exists() and not force:
            raise ConfigError(f"{path} exists; pass --force to overwrite it (or choose another --out folder)")
        if path.exists() and not os.access(path, os.W_OK):
            raise ConfigError(f"{path} exists and is not writable (permission denied)")
