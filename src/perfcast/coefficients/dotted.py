"""Read and write one coefficient of a coefficient file's raw dict by its dotted path (``"gemm.power.static"``).

The fitting stages (:mod:`perfcast.validate.fit`, :mod:`perfcast.validate.fit_collectives`) name the
coefficients they fit this way, and the kernel coefficients' held-out folds store them by these names.
"""

from __future__ import annotations

from typing import Any

__all__ = ["get_path", "set_path"]


def set_path(raw: dict[str, Any], dotted: str, value: float) -> None:
    """Set ``raw[a][b][c] = value`` for ``dotted = "a.b.c"``."""
    keys = dotted.split(".")
    node = raw
    for k in keys[:-1]:
        node = node[k]
    node[keys[-1]] = float(value)


def get_path(raw: dict[str, Any], dotted: str) -> float:
    """``raw[a][b][c]`` as a float, for ``dotted = "a.b.c"``."""
    node: Any = raw
    for k in dotted.split("."):
        node = node[k]
    return float(node)
