"""Locate and read the measured ground-truth tables (``shared/groundtruth``).

The tables are not shipped in the package. They are found, in order, at
``$PERFCAST_GROUNDTRUTH``, at ``shared/groundtruth`` in the current directory
or any parent of it (or of this package's source tree), or at
``/work/shared/groundtruth``.
"""

from __future__ import annotations

import csv
import gzip
import io
import os
from collections.abc import Iterator, Mapping
from pathlib import Path

from perfcast.compose.types import MemoryBreakdown
from perfcast.errors import ConfigError, DataError, PerfcastError

__all__ = ["ROW_ERRORS", "find_groundtruth", "memory_status", "open_table", "read_header", "read_rows", "row_number",
           "row_status"]

# what predicting one row can raise and still leave the table going: perfcast refusing the row (PerfcastError),
# or the row's cells not reading (a missing column, a cell that is not a number, a count of inf, or 0 where it
# divides); the row gets an "unsupported: ..." status instead of a prediction
_MALFORMED_ROW_ERRORS = (KeyError, ValueError, ZeroDivisionError, OverflowError)
ROW_ERRORS = (PerfcastError, *_MALFORMED_ROW_ERRORS)


def row_status(exc: Exception) -> str:
    """The status of a row whose prediction raised ``exc`` (one of :data:`ROW_ERRORS`)."""
    if isinstance(exc, PerfcastError):
        return f"unsupported: {exc}"
    return f"unsupported: malformed row ({exc})"


def row_number(row: Mapping[str, str], key: str, default: float | None = None) -> float:
    """The number in ``row``'s ``key`` cell; ``default`` when the cell is empty or absent (a one-line ConfigError
    when there is no default, or the cell is not a number)."""
    v = (row.get(key) or "").strip()
    if not v:
        if default is None:
            raise ConfigError(f"the row gives no {key}")
        return default
    try:
        return float(v)
    except ValueError:
        raise ConfigError(f"{key} {v!r} is not a number") from None


def memory_status(memory: MemoryBreakdown | None, kept: str) -> str:
    """A row's status from one GPU's memory: ``ok``, or the out-of-memory verdict whose parenthesis says what the
    row's predictions are (``kept``, e.g. "times for a configuration that does not fit")."""
    if memory is None or memory.fits:
        return "ok"
    gib = 2.0**30
    return (f"out of memory: needs {memory.total_bytes / gib:.1f} GiB per GPU of {memory.capacity_bytes / gib:.1f} "
            f"GiB ({kept})")


def find_groundtruth(required: bool = True) -> Path | None:
    """The ground-truth root, or None (or DataError when ``required``)."""
    env = os.environ.get("PERFCAST_GROUNDTRUTH")
    candidates: list[Path] = []
    if env:
        candidates.append(Path(env))
    for start in (Path.cwd(), Path(__file__).resolve()):
        for parent in (start, *start.parents):
            candidates.append(parent / "shared" / "groundtruth")
            candidates.append(parent / "groundtruth")
    candidates.append(Path("/work/shared/groundtruth"))
    for c in candidates:
        if (c / "README.md").is_file() and (c / "neusight").is_dir():
            return c
    if required:
        raise DataError(
            "cannot find the ground-truth tables (shared/groundtruth); set PERFCAST_GROUNDTRUTH to their folder"
        )
    return None


def open_table(path: str | Path) -> io.TextIOBase:
    """Open a CSV or CSV.gz as text."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"table {p} does not exist; give a CSV or CSV.gz file")
    if p.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(p, "rb"), encoding="utf-8", newline="")
    return p.open(encoding="utf-8", newline="")


def read_header(path: str | Path) -> list[str]:
    """The column names of a CSV/CSV.gz table."""
    with open_table(path) as fh:
        try:
            return next(csv.reader(fh))
        except StopIteration:
            raise ConfigError(f"{path}: empty table; expected a header row") from None
        except (csv.Error, UnicodeDecodeError, OSError, EOFError) as exc:
            raise ConfigError(f"{path}: malformed CSV ({exc.__class__.__name__}: {exc})") from None


def read_rows(path: str | Path) -> Iterator[dict[str, str]]:
    """Rows of a CSV/CSV.gz table as dicts of strings (empty string = missing)."""
    with open_table(path) as fh:
        reader = csv.DictReader(fh, restval="")  # a short row: its missing fields are empty (missing)
        line = 1
        try:
            for row in reader:
                line = reader.line_num
                if None in row:
                    raise ConfigError(f"{path}:{line}: row has more fields than the header")
                yield row
        except (csv.Error, UnicodeDecodeError, OSError, EOFError) as exc:
            raise ConfigError(f"{path}:{line}: malformed CSV ({exc.__class__.__name__}: {exc})") from None
