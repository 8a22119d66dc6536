"""Contract: every GPU a ground-truth table names resolves in the hardware catalog, with the row's memory.

Walks every CSV table under the ground-truth folder (published, energy, serving_online, neusight, vidur: whatever
is visible) and reads its GPU columns: the id columns must resolve (through
:func:`perfcast.groundtruth.gpus.row_gpu_id`, so a row that states its GPU memory gets it), a descriptive name must
resolve to the row's own device unless it is free text, and a row that states its memory is priced with it
(issue 18: a table that names a memory variant must not be refused). The model names of the same tables are
checked by test_model_catalog.
"""

from __future__ import annotations

import csv
import gzip
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import pytest

from perfcast.catalog.hardware import base_hardware_id, load_hardware
from perfcast.groundtruth.files import find_groundtruth
from perfcast.groundtruth.gpus import LABEL_TOLERANCE, MEMORY_COLUMNS, row_gpu_id

GROUNDTRUTH = find_groundtruth(required=False)
needs_groundtruth = pytest.mark.skipif(
    GROUNDTRUTH is None,
    reason="ground truth not found (set PERFCAST_GROUNDTRUTH, or place shared/groundtruth above the repo)",
)

# columns naming the row's GPU by catalog id (the first the table has is the row's GPU), and descriptive names
ID_COLUMNS = ("gpu_id", "device")
NAME_COLUMNS = ("gpu", "gpu_name", "device_name", "hw_label_in_source")
# names that are not catalog aliases and carry no parenthesised qualifier, each with why it is free text
FREE_TEXT_NAMES = {
    "DGX-H100": "a system, not a GPU: the row's gpu_id names the GPU",
    "NVIDIA GH200 SXM": "the MAMF table's label, which does not say which GH200 memory variant (see gh200-96gb notes)",
}


@dataclass(frozen=True)
class GpuRef:
    """One distinct combination of GPU columns in one table."""

    table: str
    id_column: str
    row: tuple[tuple[str, str], ...]  # the GPU, name and memory columns of the row

    def cells(self) -> dict[str, str]:
        return dict(self.row)

    def __str__(self) -> str:
        return f"{self.table}: " + ", ".join(f"{k}={v!r}" for k, v in self.row if v)


def _tables(root: Path) -> list[Path]:
    return sorted([*root.rglob("*.csv"), *root.rglob("*.csv.gz")])


@lru_cache(maxsize=1)
def _refs() -> tuple[GpuRef, ...]:
    """Every distinct GPU reference of every table (the memory and name columns with it)."""
    assert GROUNDTRUTH is not None
    out: list[GpuRef] = []
    for path in _tables(GROUNDTRUTH):
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8", newline="") as fh:  # type: ignore[operator]
            reader = csv.reader(fh)
            header = next(reader, [])
            id_column = next((c for c in ID_COLUMNS if c in header), None)
            if id_column is None:
                continue
            wanted = [c for c in (id_column, *NAME_COLUMNS, *MEMORY_COLUMNS) if c in header]
            index = [header.index(c) for c in wanted]
            seen = {tuple(row[i].strip() if i < len(row) else "" for i in index) for row in reader}
        table = str(path.relative_to(GROUNDTRUTH))
        out += [GpuRef(table, id_column, tuple(zip(wanted, values, strict=True))) for values in sorted(seen)]
    return tuple(out)


@needs_groundtruth
def test_the_walk_finds_the_tables_that_name_gpus() -> None:
    tables = {r.table.split("/")[0] for r in _refs()}
    assert {"published", "energy", "serving_online", "neusight", "vidur"} <= tables, sorted(tables)
    assert any(any(k in MEMORY_COLUMNS and v for k, v in r.row) for r in _refs()), "no memory column found"


@needs_groundtruth
def test_every_gpu_id_resolves_with_the_rows_memory() -> None:
    missing = []
    for ref in _refs():
        cells = ref.cells()
        if not cells[ref.id_column]:
            missing.append(f"{ref}: no {ref.id_column}")
            continue
        try:
            load_hardware(row_gpu_id(cells, ref.id_column))
        except Exception as exc:  # noqa: BLE001 - report every miss at once
            missing.append(f"{ref}: {exc}")
    assert not missing, "\n".join(missing)


@needs_groundtruth
def test_a_stated_memory_is_the_memory_priced() -> None:
    wrong = []
    for ref in _refs():
        cells = ref.cells()
        stated = next((cells[c] for c in MEMORY_COLUMNS if cells.get(c)), "")
        if not stated:
            continue
        priced_gib = load_hardware(row_gpu_id(cells, ref.id_column)).memory_bytes / 2**30
        if abs(priced_gib / float(stated) - 1.0) > LABEL_TOLERANCE:
            wrong.append(f"{ref}: priced with {priced_gib:.1f} GiB")
    assert not wrong, "\n".join(wrong)


@needs_groundtruth
def test_every_gpu_name_is_the_rows_device_or_free_text() -> None:
    """A descriptive name resolves to the row's own catalog entry, unless it qualifies itself in parentheses
    ("NVIDIA A100 (memory not stated)") or is listed in FREE_TEXT_NAMES."""
    wrong = []
    for ref in _refs():
        cells = ref.cells()
        device = base_hardware_id(load_hardware(row_gpu_id(cells, ref.id_column)).id)
        for column in NAME_COLUMNS:
            name = cells.get(column, "")
            if not name or name in FREE_TEXT_NAMES:
                continue
            try:
                named = load_hardware(name).id
            except Exception as exc:  # noqa: BLE001 - free text is checked below
                if "(" not in name:
                    wrong.append(f"{ref}: {column} {name!r} does not resolve ({exc})")
                continue
            if named != device:
                wrong.append(f"{ref}: {column} {name!r} is {named}, but the row's GPU is {device}")
    assert not wrong, "\n".join(wrong)


@needs_groundtruth
def test_free_text_names_are_still_in_the_tables() -> None:
    names = {v for r in _refs() for k, v in r.row if k in NAME_COLUMNS}
    assert set(FREE_TEXT_NAMES) <= names, f"stale FREE_TEXT_NAMES entries: {sorted(set(FREE_TEXT_NAMES) - names)}"
