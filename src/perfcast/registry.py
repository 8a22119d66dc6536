"""A generic plug-in registry: one instance per family (collective algorithms, pipeline schedules, ...).

Implementations register themselves by name where they are defined::

    ALGORITHMS: Registry[type[Algorithm]] = Registry("collective algorithm", list_hint="ring, tree, ...")

    @ALGORITHMS.register("ring")
    class Ring(Algorithm): ...

Names are the lowercase spellings users type in YAML and on the command line. Registering a
name twice is a bug and raises at import (vidur's registry skipped it silently); looking up an
unknown name raises :class:`~perfcast.errors.UnknownNameError` with the valid names and the
closest match.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from perfcast.errors import UnknownNameError, closest

__all__ = ["Registry"]

T = TypeVar("T")


class Registry(Generic[T]):
    """Named implementations of one plug-in family."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: register the decorated object under ``name`` (a duplicate raises ValueError)."""

        def deco(obj: T) -> T:
            self.add(name, obj)
            return obj

        return deco

    def add(self, name: str, obj: T) -> None:
        """Register ``obj`` under ``name``; a name may be registered once."""
        key = name.strip().lower()
        if not key or key != name:
            raise ValueError(f"{self.kind} names are lowercase without surrounding spaces (got {name!r})")
        if key in self._items:
            raise ValueError(f"{self.kind} {key!r} is already registered ({self._items[key]!r}); "
                             "names must be unique")
        self._items[key] = obj

    def get(self, name: str) -> T:
        """The implementation named ``name`` (case-insensitive; UnknownNameError lists the valid names)."""
        item = self._items.get(str(name).strip().lower())
        if item is None:
            err = UnknownNameError(self.kind, str(name), self._items)
            near = closest(str(name), self._items)
            err.message = f"unknown {self.kind} {name!r}; valid: {', '.join(self.names())}"
            if near:
                err.message += f" (closest: {near[0]})"
            raise err
        return item

    def names(self) -> list[str]:
        """Registered names in registration order."""
        return list(self._items)

    def items(self) -> list[tuple[str, T]]:
        """(name, implementation) pairs in registration order."""
        return list(self._items.items())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.strip().lower() in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)
