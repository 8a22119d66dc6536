"""The GPU a ground-truth row names: its ``gpu_id``, with the row's own GPU memory where the row states one.

A row that states its GPU memory (a ``gpu_memory_gib`` column; else ``gpu_memory_gib_catalog``, as
serving_online.csv has; else ``gpu_memory_GB``, as the energy tables have) is priced with that memory when it is
not the catalog entry's: the row's id gets a memory override (``h100-sxm-80gb@94gb``, see
:mod:`perfcast.catalog.hardware`). The figures are the vendors' labels, which round the memory the part enables
(GH200's "144 GB" is 141 GiB enabled), so a figure within ``LABEL_TOLERANCE`` of the catalog's memory names the
catalog part itself; all three columns are read as GiB, like the catalog reads a label. An empty cell states no
memory.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from perfcast.catalog.hardware import load_hardware, with_memory
from perfcast.errors import ConfigError

__all__ = ["LABEL_TOLERANCE", "MEMORY_COLUMNS", "row_gpu_id"]

# the columns that state a row's GPU memory in GiB (vendor labels), the first one the row fills wins
MEMORY_COLUMNS = ("gpu_memory_gib", "gpu_memory_gib_catalog", "gpu_memory_GB")
# a label this close to the catalog's memory is the catalog part (GH200 144 GB vs 141 GiB enabled is 2.1 %);
# the nearest distinct variants of one GPU differ by 6 % or more (B200 180 vs 192 GB)
LABEL_TOLERANCE = 0.05


def row_gpu_id(row: Mapping[str, str], column: str = "gpu_id") -> str:
    """The hardware name of ``row``: its ``column`` as written, or, when one of :data:`MEMORY_COLUMNS` states a
    memory more than :data:`LABEL_TOLERANCE` away from the catalog entry's, that entry's id with the row's memory
    as an override (``<id>@<GiB>gb``)."""
    gpu = (row.get(column) or "").strip()
    if not gpu:
        raise ConfigError(f"the row gives no {column}")
    filled = [(c, row[c].strip()) for c in MEMORY_COLUMNS if (row.get(c) or "").strip()]
    if not filled:
        return gpu
    name, text = filled[0]
    try:
        memory_gib = float(text)
    except ValueError:
        memory_gib = math.nan
    if not (math.isfinite(memory_gib) and memory_gib > 0):
        raise ConfigError(f"{name} {text!r} is not a positive number of GiB")
    hw = load_hardware(gpu)
    if abs(memory_gib * 2**30 / hw.memory_bytes - 1.0) <= LABEL_TOLERANCE:
        return gpu
    return with_memory(hw, round(memory_gib, 6) * 2**30).id
