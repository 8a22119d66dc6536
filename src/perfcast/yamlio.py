"""Safe YAML reading: the C-accelerated safe loader when PyYAML has it, else the pure-Python one.

Both construct only plain data (no arbitrary objects), exactly like ``yaml.safe_load``.
"""

from __future__ import annotations

from pathlib import Path
from typing import IO, Any

import yaml
from pydantic import BaseModel, ValidationError

__all__ = ["load_model_file", "safe_load", "validation_message"]

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def safe_load(stream: str | IO[str]) -> Any:
    """Parse one YAML document into plain Python data (safe constructors only)."""
    return yaml.load(stream, Loader=_LOADER)  # noqa: S506 - a safe loader


def validation_message(exc: ValidationError, root: type[BaseModel] | None = None) -> str:
    """One line naming the first invalid key and what is wrong (and, for an unknown key, what is accepted)."""
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"]) or "(root)"
    msg = f"key {where}: {err['msg']}"
    if err["type"] == "extra_forbidden" and root is not None:
        model: type[BaseModel] = root
        for part in err["loc"][:-1]:
            field = model.model_fields.get(str(part))
            annotation: Any = field.annotation if field else None
            inner = getattr(annotation, "__args__", (annotation,))[0]
            if isinstance(inner, type) and issubclass(inner, BaseModel):
                model = inner
        msg += f"; accepted keys: {', '.join(model.model_fields)}"
    return msg


def load_model_file(path: Path, model: type[BaseModel], *, what: str, error: type[Exception]) -> Any:
    """Read a YAML mapping from ``path`` and validate it as ``model``; failures raise ``error`` in one line."""
    try:
        raw = safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise error(f"{path}: cannot read {what} ({exc.__class__.__name__})") from None
    if not isinstance(raw, dict):
        raise error(f"{path}: a {what} must be a YAML mapping of keys")
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise error(f"{path}: {validation_message(exc, model)}") from None
