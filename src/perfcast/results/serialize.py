"""One serializer for perfcast's result values: :func:`to_json` turns a typed result into plain JSON data.

Keys come from field names, and field names carry their units (``time_s``, ``weights_bytes``, ``energy_J``), so a
result type states its JSON by being written down. :func:`to_json` walks:

- dataclasses: their fields in declaration order, then the properties the class names in ``JSON_EXTRA``; a class
  whose JSON interleaves fields and properties names them all, in order, in ``JSON_ORDER`` instead;
- a value with a ``json_view()`` method: the value it returns (a result whose JSON is a summary of it);
- pydantic models: ``model_dump(mode="json")``;
- enums: their value; numpy scalars and arrays: Python numbers and lists; tuples, lists and sets: lists;
  mappings: objects (enum keys by value).

A field says how its JSON differs from its name with :func:`json_field` metadata: another key, left out, left
out when None, or its object's keys merged into the parent's (``flatten``). A class that sets
``JSON_NAN_NULL = True`` writes its own NaN floats as ``null``. Floats stay floats and ints stay ints, so a
value's JSON is what it was when the same dict was written by hand. The module imports nothing beyond the standard
library (the CLI imports it at start-up).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from enum import Enum
from typing import Any

__all__ = ["JsonField", "json_field", "to_json"]

_KEY = "json"  # the field-metadata key json_field() fills


@dataclasses.dataclass(frozen=True, slots=True)
class JsonField:
    """How one field appears in JSON: under ``key`` (default: the field's name), not at all (``skip``), not
    when None (``omit_none``), or as its object's keys merged into the parent object (``flatten``)."""

    key: str | None = None
    skip: bool = False
    omit_none: bool = False
    flatten: bool = False


_PLAIN = JsonField()


def json_field(*, key: str | None = None, skip: bool = False, omit_none: bool = False,
               flatten: bool = False) -> dict[str, JsonField]:
    """Metadata for ``dataclasses.field(metadata=...)``: see :class:`JsonField`."""
    return {_KEY: JsonField(key=key, skip=skip, omit_none=omit_none, flatten=flatten)}


def to_json(value: object) -> Any:
    """``value`` as JSON-ready data (dicts with str keys, lists, str, int, float, bool, None); see the module
    docstring. Anything else is a TypeError naming its type."""
    return _convert(value, nan_null=False)


def _convert(value: object, *, nan_null: bool) -> Any:
    if value is None or isinstance(value, (bool, str)) and not isinstance(value, Enum):
        return value
    if isinstance(value, Enum):
        return _convert(value.value, nan_null=nan_null)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return None if nan_null and math.isnan(value) else float(value)
    if type(value).__module__ == "numpy" and hasattr(value, "tolist"):  # a scalar or an array, without importing numpy
        return _convert(value.tolist(), nan_null=nan_null)
    view = getattr(value, "json_view", None)
    if callable(view):
        return to_json(view())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _object(value)
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    if isinstance(value, Mapping):
        return {_key(k): _convert(v, nan_null=nan_null) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_convert(v, nan_null=nan_null) for v in value]
    raise TypeError(f"to_json: cannot write a {type(value).__name__} as JSON")


def _key(key: object) -> str:
    if isinstance(key, Enum):
        return str(key.value)
    if isinstance(key, str):
        return key
    raise TypeError(f"to_json: a mapping key must be a str or an enum, not {type(key).__name__}")


def _object(value: Any) -> dict[str, Any]:
    """A dataclass instance's fields (and declared properties) under their keys."""
    cls = type(value)
    metas = {f.name: f.metadata.get(_KEY, _PLAIN) for f in dataclasses.fields(value)}
    order = getattr(cls, "JSON_ORDER", None)
    names = order if order is not None else (*metas, *getattr(cls, "JSON_EXTRA", ()))
    nan_null = bool(getattr(cls, "JSON_NAN_NULL", False))
    out: dict[str, Any] = {}
    for name in names:
        meta = metas.get(name, _PLAIN)
        if meta.skip:
            continue
        item = getattr(value, name)
        if item is None and (meta.omit_none or meta.flatten):
            continue
        data = _convert(item, nan_null=nan_null)
        if meta.flatten:
            if not isinstance(data, dict):
                raise TypeError(f"to_json: {cls.__name__}.{name} is flattened but is not an object")
            out.update(data)
        else:
            out[meta.key or name] = data
    return out
