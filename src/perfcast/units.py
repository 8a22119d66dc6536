"""Units: SI inside perfcast, conversions only at the edges (CLI, reports).

Inside the code every quantity is in a base unit named in its identifier:
``time_s``, ``bytes``, ``flops``, ``bandwidth_Bps``, ``peak_flops_per_s``,
``energy_J``, ``power_W``. This module parses and formats human spellings
("80GB", "1MiB", "1.5 TB/s") at the edge.
"""

from __future__ import annotations

import math
import re

from perfcast.errors import ConfigError

__all__ = [
    "GB",
    "GiB",
    "KB",
    "KiB",
    "MB",
    "MiB",
    "TB",
    "format_bytes",
    "format_time",
    "parse_bytes",
]

KB = 1e3
MB = 1e6
GB = 1e9
TB = 1e12
KiB = 2.0**10
MiB = 2.0**20
GiB = 2.0**30

_BYTE_UNITS = {
    "": 1.0,
    "b": 1.0,
    "kb": KB,
    "mb": MB,
    "gb": GB,
    "tb": TB,
    "kib": KiB,
    "mib": MiB,
    "gib": GiB,
    "tib": 2.0**40,
    "k": KiB,
    "m": MiB,
    "g": GiB,
}
_BYTES_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([a-z]*)\s*$", re.IGNORECASE)


def parse_bytes(text: str | int | float) -> float:
    """Parse "1MB", "64MiB", "2e6" or a number into bytes (decimal for MB, binary for MiB)."""
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        match = _BYTES_RE.match(text)
        if not match or match.group(2).lower() not in _BYTE_UNITS:
            raise ConfigError(
                f"cannot read {text!r} as a size; use a number with an optional unit "
                "(B, KB, MB, GB, TB, KiB, MiB, GiB)"
            )
        value = float(match.group(1)) * _BYTE_UNITS[match.group(2).lower()]
    if not math.isfinite(value):
        raise ConfigError(f"size {text!r} is not a finite number of bytes")
    if value < 0:
        raise ConfigError(f"size {text!r} is negative; sizes are >= 0 bytes")
    return value


def format_bytes(num_bytes: float) -> str:
    """Format bytes with a binary unit, e.g. 1.50 GiB."""
    value = float(num_bytes)
    for unit, scale in (("TiB", 2.0**40), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if abs(value) >= scale:
            return f"{value / scale:.2f} {unit}"
    return f"{value:.0f} B"


def format_time(time_s: float) -> str:
    """Format seconds with a readable unit (s, ms, us)."""
    if time_s >= 1.0:
        return f"{time_s:.3f} s"
    if time_s >= 1e-3:
        return f"{time_s * 1e3:.3f} ms"
    return f"{time_s * 1e6:.2f} us"
