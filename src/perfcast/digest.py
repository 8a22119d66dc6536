"""Content digests: cache keys that name what a value holds, not where it lives in memory.

``id()`` is no key: CPython reuses the id of a freed object, so a cache keyed on it can hand a new object
another's result. :func:`content_digest` is the sha256 of a value's content (a pydantic model's JSON, a frozen
dataclass's repr), computed once per live object: the memo holds the object, so its id stays its own while the
entry lives. Two objects with equal content share one digest, and so share cache entries. For a hashable frozen
value made afresh on a hot path (a sharded workload), :func:`content_key` is cheaper: the value itself as the
key, its hash computed once per object, equality decided by content.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Hashable
from typing import Any

from pydantic import BaseModel

__all__ = ["ContentKey", "content_digest", "content_key", "json_digest"]


def json_digest(data: Any) -> str:
    """sha256 (hex) of ``data``'s canonical JSON (sorted keys, no spaces): stable across processes."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


_MEMO: dict[int, tuple[object, str]] = {}  # id -> (the object, held so its id is not reused; its digest)
_MEMO_LIMIT = 4096


def content_digest(value: object) -> str:
    """sha256 (hex) of ``value``'s content, once per object: a pydantic model's canonical JSON, else its repr
    (frozen dataclasses of numbers, strings, enums and tuples, whose repr is exact). Meant for frozen values:
    an object changed in place after its first digest keeps the old one."""
    hit = _MEMO.get(id(value))
    if hit is not None and hit[0] is value:
        return hit[1]
    if isinstance(value, BaseModel):
        digest = json_digest(value.model_dump(mode="json"))
    else:
        digest = hashlib.sha256(f"{type(value).__qualname__}:{value!r}".encode()).hexdigest()
    if len(_MEMO) >= _MEMO_LIMIT:
        _MEMO.clear()
    _MEMO[id(value)] = (value, digest)
    return digest


class ContentKey:
    """A dict key standing for a hashable value's content: its hash computed once, equal to the key of any equal
    value (the same object compares at once)."""

    __slots__ = ("_hash", "value")

    def __init__(self, value: Hashable) -> None:
        self.value = value
        self._hash = hash(value)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ContentKey) and (other.value is self.value or bool(other.value == self.value))


_KEYS: dict[int, ContentKey] = {}  # id -> the key, which holds its object, so the id is not reused while it lives


def content_key(value: Hashable) -> ContentKey:
    """The :class:`ContentKey` of ``value``, once per object."""
    hit = _KEYS.get(id(value))
    if hit is not None and hit.value is value:
        return hit
    key = ContentKey(value)
    if len(_KEYS) >= _MEMO_LIMIT:
        _KEYS.clear()
    _KEYS[id(value)] = key
    return key
