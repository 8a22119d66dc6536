"""The perfcast error tree.

Every error a user can cause is a ``PerfcastError``; the CLI prints its one-line
message (and hint) and exits with code 2. Anything else is a bug and keeps its
traceback.

::

    PerfcastError            base; message + optional .hint
      ConfigError            input invalid or inconsistent
        UnknownNameError     not in a catalog or registry; lists the closest choices
      CatalogError           a data file fails its schema or lacks its source
      UnsupportedError       valid input outside what perfcast models; never extrapolated
      DataError              ground truth or coefficients missing or of the wrong schema
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = [
    "CatalogError",
    "ConfigError",
    "DataError",
    "PerfcastError",
    "UnknownNameError",
    "UnsupportedError",
    "closest",
]


class PerfcastError(Exception):
    """Base of every error a user can cause; ``str(err)`` is one line."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


class ConfigError(PerfcastError):
    """Input that is invalid or inconsistent (bad batch size, TP not dividing heads...)."""


class UnknownNameError(ConfigError):
    """A name that is not in a catalog or registry."""

    def __init__(
        self,
        kind: str,
        name: str,
        choices: Iterable[str],
        *,
        list_command: str | None = None,
        hint: str | None = None,
    ) -> None:
        options = sorted(set(choices))
        near = closest(name, options)
        if near:
            message = f"unknown {kind} {name!r}; closest known: {', '.join(near)}"
        else:
            message = f"unknown {kind} {name!r}; known: {', '.join(options[:8])}"
            if len(options) > 8:
                message += f" and {len(options) - 8} more"
        if list_command:
            message += f" (all: `{list_command}`)"
        super().__init__(message, hint=hint)
        self.kind = kind
        self.name = name
        self.choices = options


class CatalogError(PerfcastError):
    """A catalog data file that fails its schema or lacks a source."""


class UnsupportedError(PerfcastError):
    """Valid input that perfcast does not model (it refuses rather than invents)."""


class DataError(PerfcastError):
    """Ground truth or coefficient files missing, unreadable or of the wrong schema."""


def closest(name: str, choices: Iterable[str], n: int = 3) -> list[str]:
    """Return up to ``n`` choices closest to ``name`` (case-insensitive)."""
    options = list(choices)
    lowered = {c.lower(): c for c in options}
    key = name.lower()
    hits = difflib.get_close_matches(key, list(lowered), n=n, cutoff=0.5)
    if not hits:
        hits = [c for c in lowered if key and (key in c or c in key)][:n]
    return [lowered[h] for h in hits]
