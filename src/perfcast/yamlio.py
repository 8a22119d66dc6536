"""Safe YAML reading: the C-accelerated safe loader when PyYAML has it, else the pure-Python one.

Both construct only plain data (no arbitrary objects), exactly like ``yaml.safe_load``. A user's file is read
with :func:`read_yaml`, within the bounds of :mod:`perfcast.jsonio` (size, nesting, values once aliases are
expanded, finite numbers, UTF-8 text).
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import IO, Any

import yaml
from pydantic import BaseModel, ValidationError

from perfcast.errors import PerfcastError
from perfcast.jsonio import MAX_NESTING, check_data, read_text

__all__ = ["load_model_file", "read_yaml", "safe_load", "validation_message"]

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def safe_load(stream: str | IO[str]) -> Any:
    """Parse one YAML document into plain Python data (safe constructors only)."""
    return yaml.load(stream, Loader=_LOADER)  # noqa: S506 - a safe loader


def read_yaml(path: Path, *, what: str, error: type[PerfcastError]) -> Any:
    """Parse ``path`` as one YAML document within :mod:`perfcast.jsonio`'s bounds, else ``error`` in one line."""
    text = read_text(path, what=what, error=error)
    try:
        raw = safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" (line {mark.line + 1}: {getattr(exc, 'problem', '') or type(exc).__name__})" if mark else ""
        raise error(f"{path}: cannot read {what}: not valid YAML{line}") from None
    except RecursionError:
        raise error(f"{path}: nested more than {MAX_NESTING} levels deep; perfcast reads at most "
                    f"{MAX_NESTING}") from None
    check_data(raw, where=str(path), error=error)
    return raw


def _model_at(root: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel]:
    """The pydantic model that holds the key at ``loc`` (list indices and optional wrappers skipped)."""
    model = root
    for part in loc:
        field = model.model_fields.get(str(part))
        if field is None:
            continue  # a list index or a dict key: the same model further down
        stack: list[Any] = [field.annotation]
        while stack:
            ann = stack.pop()
            if isinstance(ann, type) and issubclass(ann, BaseModel):
                model = ann
                break
            stack.extend(getattr(ann, "__args__", ()))
    return model


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def validation_message(exc: ValidationError, root: type[BaseModel] | None = None) -> str:
    """One line naming the invalid key, what is wrong, and what is accepted.

    An unknown key is reported before any other error (a misspelt key also makes the key it stands for
    missing) with the keys accepted at that place and the closest one; a value of the wrong type or range
    with pydantic's statement of what is expected and the value given.
    """
    errors = exc.errors()
    err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    loc = tuple(err["loc"])
    where = ".".join(str(p) for p in loc) or "(root)"
    if err["type"] == "extra_forbidden":
        msg = f"key {where!r}: unknown key"
        if root is not None:
            accepted = list(_model_at(root, loc[:-1]).model_fields)
            close = difflib.get_close_matches(str(loc[-1]), accepted, n=1)
            msg += f" (did you mean {close[0]!r}?)" if close else ""
            msg += f"; accepted keys are {', '.join(accepted)}"
        return msg
    if err["type"] == "missing":
        return f"key {where!r}: required key missing"
    detail = err["msg"][0].lower() + err["msg"][1:] if err["msg"] else "invalid value"
    given = f" (got {_shown(err['input'])})" if "input" in err and not isinstance(err["input"], dict) else ""
    return f"key {where!r}: {detail}{given}"


def load_model_file(path: Path, model: type[BaseModel], *, what: str, error: type[PerfcastError]) -> Any:
    """Read a YAML mapping from ``path`` and validate it as ``model``; failures raise ``error`` in one line."""
    raw = read_yaml(path, what=what, error=error)
    if not isinstance(raw, dict):
        raise error(f"{path}: a {what} must be a YAML mapping of keys")
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise error(f"{path}: {validation_message(exc, model)}") from None
