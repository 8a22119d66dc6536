"""Reading the data files a user hands perfcast (JSON here, YAML in :mod:`perfcast.yamlio`), within bounds, and
versioned JSON data files (fitted coefficients, intervals): read one or refuse it in one line.

Every file is read whole, so it is bounded before it is read and after it is parsed; each bound is named:

- :data:`MAX_FILE_BYTES`: a file's size;
- :data:`MAX_NESTING`: how deeply lists and mappings nest;
- :data:`MAX_VALUES`: how many values a document holds once YAML aliases are expanded (a few lines of
  aliases can stand for billions of values);
- numbers are finite (``NaN``, ``Infinity``, ``1e400`` and YAML's ``.inf``/``.nan`` are refused).

A binary file is refused as not UTF-8 text.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from perfcast.errors import DataError, PerfcastError

__all__ = ["MAX_FILE_BYTES", "MAX_NESTING", "MAX_VALUES", "CanonicalJson", "check_data", "json_int",
           "load_versioned", "read_json", "read_text", "versioned_loader"]

M = TypeVar("M", bound=BaseModel)

# 64 MiB: ~60x the largest file perfcast writes itself (the suite's results.json, ~1.1 MB); parsed JSON takes
# about ten times its text in memory, so the bound keeps a read under a gigabyte
MAX_FILE_BYTES = 64 * 2**20
# 32 levels: Hugging Face configs nest 3 (text_config.rope_scaling.factor), scenario files and perfcast's own
# JSON 6 at most; deeper is not data perfcast reads (and Python's parsers recurse per level)
MAX_NESTING = 32
# 2 million values: ~10x the values of a 64 MiB JSON file of small numbers is more than any real input; an
# alias-expanded YAML document beyond it would take minutes and gigabytes to validate
MAX_VALUES = 2_000_000


def json_int(value: Any) -> int | None:
    """An integer read from a JSON value written by another tool: an int, an integral float or an integer string
    (``"0x1f"`` too); None for anything else (a bool, a fraction, text)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value, 0)
        except ValueError:
            return None
    return None


def read_text(path: Path, *, what: str, error: type[PerfcastError]) -> str:
    """The UTF-8 text of ``path`` (at most :data:`MAX_FILE_BYTES`), else ``error`` in one line."""
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise error(f"{path}: {size / 2**20:.0f} MiB is too large for a {what}; perfcast reads at most "
                        f"{MAX_FILE_BYTES // 2**20} MiB")
        with path.open("rb") as fh:
            data = fh.read(MAX_FILE_BYTES + 1)  # a file that grows while read (or a pipe) stays bounded too
    except OSError as exc:
        raise error(f"cannot read {what} {path}: {exc.strerror or type(exc).__name__}") from None
    if len(data) > MAX_FILE_BYTES:
        raise error(f"{path}: too large for a {what}; perfcast reads at most {MAX_FILE_BYTES // 2**20} MiB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not UTF-8 text (byte {exc.start}); a {what} is read as text") from None


def check_data(value: Any, *, where: str, error: type[PerfcastError]) -> None:
    """``value`` (parsed JSON or YAML) nests at most :data:`MAX_NESTING` levels, holds at most :data:`MAX_VALUES`
    values counted with repeats (a YAML alias counts each time it is used; each container is measured once, so
    this takes the time of the text, not of its expansion), does not contain itself, and its floats are finite."""
    memo: dict[int, tuple[int, int]] = {}  # id of a list or dict -> (values in it, levels below it)
    on_path: set[int] = set()

    def measure(item: Any, depth: int, key: str) -> tuple[int, int]:
        if depth > MAX_NESTING:
            raise error(f"{where}: nested more than {MAX_NESTING} levels deep (at {key[:60]}); perfcast reads at "
                        f"most {MAX_NESTING}")
        if isinstance(item, float) and not math.isfinite(item):
            raise error(f"{where}: {key or 'value'} is {item}; numbers must be finite")
        if not isinstance(item, (dict, list)):
            return 1, 0
        ident = id(item)
        if ident in on_path:
            raise error(f"{where}: {key} contains itself (a YAML alias inside its own anchor)")
        if ident not in memo:
            on_path.add(ident)
            pairs = item.items() if isinstance(item, dict) else enumerate(item)
            count, height = 1, 0
            for k, v in pairs:
                n, h = measure(v, depth + 1, f"{key}.{k}" if isinstance(item, dict) and key else
                               str(k) if isinstance(item, dict) else f"{key}[{k}]")
                count, height = count + n, max(height, h + 1)
                if count > MAX_VALUES:
                    raise error(f"{where}: more than {MAX_VALUES:,} values (YAML aliases counted each time they "
                                "are used); perfcast reads documents up to that size")
            on_path.discard(ident)
            memo[ident] = (count, height)
        count, height = memo[ident]
        if depth + height > MAX_NESTING:
            raise error(f"{where}: nested more than {MAX_NESTING} levels deep (at {key[:60] or 'the top'}); "
                        f"perfcast reads at most {MAX_NESTING}")
        return count, height

    measure(value, 0, "")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is beyond a 64-bit float")
    return value


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows; numbers must be finite")


def read_json(path: Path, *, what: str, error: type[PerfcastError]) -> Any:
    """Parse ``path`` as JSON within the module's bounds, else ``error`` in one line naming the bound."""
    text = read_text(path, what=what, error=error)
    try:
        raw = json.loads(text, parse_float=_finite_float, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise error(f"{path}: malformed {what}, not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except RecursionError:
        raise error(f"{path}: nested more than {MAX_NESTING} levels deep; perfcast reads at most "
                    f"{MAX_NESTING}") from None
    except ValueError as exc:  # a float beyond 64 bits, NaN/Infinity, an integer of thousands of digits
        raise error(f"{path}: {exc}") from None
    check_data(raw, where=str(path), error=error)
    return raw


def load_versioned(path: Path, model: type[M], *, version: int, what: str) -> M:
    """Parse ``path`` as ``model`` if its ``schema_version`` is ``version`` (else DataError: re-run the fit)."""
    raw = read_json(path, what=what, error=DataError)
    found = raw.get("schema_version") if isinstance(raw, dict) else None
    if found != version:
        raise DataError(f"{path}: {what} schema_version {found!r}, this perfcast reads {version}; "
                        "re-run `perfcast fit`")
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise DataError(f"{path}: field {'.'.join(map(str, err['loc']))}: {err['msg']}") from None


class CanonicalJson(BaseModel):
    """A data file's model that writes itself as canonical JSON (sorted keys, two-space indent)."""

    def to_json(self) -> str:
        """Canonical JSON text."""
        return json.dumps(self.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"


def versioned_loader(shipped: Path, model: type[M], *, version: int,
                     what: str) -> Callable[[str | Path | None], M]:
    """A loader of ``model`` files: ``load(None)`` is the shipped file ``shipped`` (read once and cached),
    ``load(path)`` reads ``path``; both go through :func:`load_versioned`."""

    @lru_cache(maxsize=1)
    def packaged() -> M:
        return load_versioned(shipped, model, version=version, what=what)

    def load(path: str | Path | None = None) -> M:
        if path is None:
            return packaged()
        return load_versioned(Path(path), model, version=version, what=what)

    return load
