"""Request-length traces: per-request prompt and output token counts, optionally with arrival times.

Three traces ship with perfcast (gzip copies of Vidur's ``data/processed_traces``, MIT licence; see
``data/traces/README.md``):

=======================  ========  ==============  =====================================================
short name               rows      arrival times   content
=======================  ========  ==============  =====================================================
``arxiv_summarization``  28,257    no              arXiv summarization, Llama-2 tokenizer, total <= 4096
``splitwise_code``       8,819     yes (1 hour)    Azure LLM inference trace 2023, code service
``splitwise_conv``       19,366    yes (1 hour)    Azure LLM inference trace 2023, conversation service
=======================  ========  ==============  =====================================================

``load_trace`` also reads a user CSV or CSV.gz with a header row. Accepted columns (first match wins):

* prompt tokens: ``num_prefill_tokens``, ``prompt_tokens`` or ``input_len`` (integer >= 1);
* output tokens: ``num_decode_tokens``, ``output_tokens`` or ``output_len`` (integer >= 1);
* optional arrival time in seconds: ``arrived_at``, ``arrival_s`` or ``arrival_time_s`` (finite, >= 0,
  non-decreasing down the file).

Other columns are ignored. Token counts written as integral floats (``"12.0"``) are accepted. Blank lines
are skipped. Every malformed row raises a one-line ``ConfigError`` naming the file and the 1-based line
number (the header is line 1).

The arrays of a ``Trace`` are read-only (shipped traces are cached and shared between callers).
"""

from __future__ import annotations

import csv
import functools
import gzip
import io
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from perfcast.datafiles import data_dir, data_path
from perfcast.errors import CatalogError, ConfigError, UnknownNameError
from perfcast.serving.sources.datasets import dataset_trace, is_dataset_name
from perfcast.serving.sources.mlperf import is_mlperf_name, preset_trace
from perfcast.serving.sources.trace import Trace
from perfcast.yamlio import load_model_file

__all__ = ["TRACE_NAMES", "ShippedTrace", "Trace", "TraceIndex", "load_trace", "shipped_traces"]


class ShippedTrace(BaseModel):
    """One shipped trace file and where it comes from (an entry of ``data/traces/index.yaml``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    file: str = Field(min_length=1, description="the file in data/traces")
    upstream: str = Field(min_length=1, description="the upstream file it is a gzip copy of")
    rows: int = Field(ge=1, description="requests (data rows after the header)")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="sha256 of the uncompressed upstream file")
    source: str = Field(min_length=1, description="what a loaded trace says it came from")


class TraceIndex(BaseModel):
    """``data/traces/index.yaml``: the shipped traces by short name."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    traces: dict[str, ShippedTrace] = Field(min_length=1)


@functools.cache
def shipped_traces() -> dict[str, ShippedTrace]:
    """The shipped traces by short name, read once from ``data/traces/index.yaml``."""
    index: TraceIndex = load_model_file(data_path("traces", "index.yaml"), TraceIndex, what="trace index",
                                        error=CatalogError)
    return dict(index.traces)


TRACE_NAMES: tuple[str, ...] = tuple(sorted(shipped_traces()))
"""Short names of the shipped traces, accepted by ``load_trace``."""

_PROMPT_COLUMNS = ("num_prefill_tokens", "prompt_tokens", "input_len")
_OUTPUT_COLUMNS = ("num_decode_tokens", "output_tokens", "output_len")
_ARRIVAL_COLUMNS = ("arrived_at", "arrival_s", "arrival_time_s")


def load_trace(name_or_path: str | Path) -> Trace:
    """Load a shipped trace by short name (see ``TRACE_NAMES``), an MLPerf preset's synthetic lengths
    (``mlperf:<benchmark>``, see :mod:`perfcast.serving.sources.mlperf`), a data set preset's
    (``dataset:<name>``, :mod:`perfcast.serving.sources.datasets`) or a user CSV / CSV.gz by path."""
    if isinstance(name_or_path, str) and name_or_path in shipped_traces():
        return _load_shipped(name_or_path)
    if isinstance(name_or_path, str) and is_mlperf_name(name_or_path):
        return preset_trace(name_or_path)
    if isinstance(name_or_path, str) and is_dataset_name(name_or_path):
        return dataset_trace(name_or_path)
    path = Path(name_or_path)
    if path.is_file():
        return _read_trace(path, name=_stem(path), source=str(path))
    text = str(name_or_path)
    looks_like_path = isinstance(name_or_path, Path) or "/" in text or "\\" in text or "." in text
    if looks_like_path:
        raise ConfigError(
            f"trace file {text} does not exist; give a CSV or CSV.gz file or one of {', '.join(TRACE_NAMES)}"
        )
    err = UnknownNameError("trace", text, TRACE_NAMES)
    err.message += "; or give the path of a CSV or CSV.gz file"
    raise err


@functools.cache
def _load_shipped(name: str) -> Trace:
    entry = shipped_traces()[name]
    return _read_trace(data_dir("traces") / entry.file, name=name, source=entry.source)


def _stem(path: Path) -> str:
    name = path.name
    for suffix in (".csv.gz", ".gz", ".csv"):
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


def _open_text(path: Path) -> TextIO:
    if path.name.endswith(".gz"):
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8-sig", newline="")
    return path.open(encoding="utf-8-sig", newline="")


def _pick(header: Sequence[str], accepted: tuple[str, ...]) -> int | None:
    for column in accepted:
        if column in header:
            return header.index(column)
    return None


def _read_trace(path: Path, *, name: str, source: str) -> Trace:
    try:
        with _open_text(path) as handle:
            reader = csv.reader(handle)
            prompt, output, arrival = _parse_rows(reader, path)
    except OSError as exc:  # unreadable file or a corrupt gzip stream
        raise ConfigError(f"cannot read trace {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"trace {path} is not UTF-8 text; give a CSV or CSV.gz file") from None
    except csv.Error as exc:
        raise ConfigError(f"{path}: not a valid CSV ({exc})") from None
    if not prompt:
        raise ConfigError(f"trace {path} has no rows after its header; give at least one request")
    prompt_arr = np.asarray(prompt, dtype=np.int64)
    output_arr = np.asarray(output, dtype=np.int64)
    arrival_arr = None if arrival is None else np.asarray(arrival, dtype=np.float64)
    for arr in (prompt_arr, output_arr, arrival_arr):
        if arr is not None:
            arr.flags.writeable = False
    return Trace(name=name, prompt_tokens=prompt_arr, output_tokens=output_arr, arrival_s=arrival_arr, source=source)


def _parse_rows(reader: Any, path: Path) -> tuple[list[int], list[int], list[float] | None]:
    header_row = next(reader, None)
    if header_row is None:
        raise ConfigError(f"trace {path} is empty; it needs a header row and one row per request")
    header = [h.strip() for h in header_row]
    i_prompt = _pick(header, _PROMPT_COLUMNS)
    i_output = _pick(header, _OUTPUT_COLUMNS)
    i_arrival = _pick(header, _ARRIVAL_COLUMNS)
    for index, accepted, what in ((i_prompt, _PROMPT_COLUMNS, "prompt"), (i_output, _OUTPUT_COLUMNS, "output")):
        if index is None:
            raise ConfigError(
                f"{path}: no {what}-token column; accepted: {', '.join(accepted)} (found: {', '.join(header)})"
            )
    assert i_prompt is not None and i_output is not None
    width = max(i for i in (i_prompt, i_output, i_arrival) if i is not None) + 1
    prompt: list[int] = []
    output: list[int] = []
    arrival: list[float] | None = None if i_arrival is None else []
    previous_s = -math.inf
    for row in reader:
        line = reader.line_num
        if not row or all(not cell.strip() for cell in row):
            continue
        if len(row) < width:
            raise ConfigError(f"{path}, line {line}: {len(row)} fields, expected at least {width} like the header")
        prompt.append(_tokens(row[i_prompt], header[i_prompt], path, line))
        output.append(_tokens(row[i_output], header[i_output], path, line))
        if arrival is not None:
            assert i_arrival is not None
            time_s = _seconds(row[i_arrival], header[i_arrival], path, line)
            if time_s < previous_s:
                raise ConfigError(
                    f"{path}, line {line}: {header[i_arrival]}={time_s!r} is earlier than the previous row's "
                    f"{previous_s!r}; arrival times must be non-decreasing"
                )
            previous_s = time_s
            arrival.append(time_s)
    return prompt, output, arrival


def _tokens(text: str, column: str, path: Path, line: int) -> int:
    cell = text.strip()
    try:
        value = int(cell)
    except ValueError:
        try:
            as_float = float(cell)
        except ValueError:
            as_float = math.nan
        if not (math.isfinite(as_float) and as_float.is_integer()):
            raise ConfigError(f"{path}, line {line}: {column}={cell!r} is not an integer token count") from None
        value = int(as_float)
    if value < 1:
        kind = "negative" if value < 0 else "zero"
        raise ConfigError(f"{path}, line {line}: {column}={value} is {kind}; token counts must be >= 1")
    return value


def _seconds(text: str, column: str, path: Path, line: int) -> float:
    cell = text.strip()
    try:
        value = float(cell)
    except ValueError:
        raise ConfigError(f"{path}, line {line}: {column}={cell!r} is not a number of seconds") from None
    if not math.isfinite(value) or value < 0:
        raise ConfigError(f"{path}, line {line}: {column}={cell!r} must be a finite time >= 0 s")
    return value
