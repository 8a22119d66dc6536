"""Versioned JSON data files (fitted coefficients, intervals): read one or refuse it in one line."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from perfcast.errors import DataError

__all__ = ["CanonicalJson", "load_versioned", "versioned_loader"]

M = TypeVar("M", bound=BaseModel)


def load_versioned(path: Path, model: type[M], *, version: int, what: str) -> M:
    """Parse ``path`` as ``model`` if its ``schema_version`` is ``version`` (else DataError: re-run the fit)."""
    try:
        raw: Any = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise DataError(f"cannot read {what} {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    found = raw.get("schema_version") if isinstance(raw, dict) else None
    if found != version:
        raise DataError(f"{path}: {what} schema_version {found!r}, this perfcast reads {version}; "
                        "re-run `perfcast fit`")
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise DataError(f"{path}: field {'.'.join(map(str, err['loc']))}: {err['msg']}") from None


class CanonicalJson(BaseModel):
    """A data file's model that writes itself as canonical JSON (sorted keys, two-space indent)."""

    def to_json(self) -> str:
        """Canonical JSON text."""
        return json.dumps(self.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"


def versioned_loader(package: str, filename: str, model: type[M], *, version: int,
                     what: str) -> Callable[[str | Path | None], M]:
    """A loader of ``model`` files: ``load(None)`` is the package's own ``filename`` (read once and
    cached), ``load(path)`` reads ``path``; both go through :func:`load_versioned`."""

    @lru_cache(maxsize=1)
    def packaged() -> M:
        return load_versioned(Path(str(resources.files(package) / filename)), model, version=version, what=what)

    def load(path: str | Path | None = None) -> M:
        if path is None:
            return packaged()
        return load_versioned(Path(path), model, version=version, what=what)

    return load
