"""Unit tests of ``perfcast.serving.sources.traces``: shipped traces, user CSVs and their one-line errors."""

from __future__ import annotations

import csv
import gzip
from pathlib import Path

import numpy as np
import pytest

from perfcast.errors import ConfigError, UnknownNameError
from perfcast.groundtruth.files import find_groundtruth
from perfcast.serving.sources.traces import TRACE_NAMES, Trace, load_trace

# row counts from the Vidur README / MANIFEST (the shipped copies must match them)
EXPECTED_ROWS = {"arxiv_summarization": 28_257, "splitwise_code": 8_819, "splitwise_conv": 19_366}
UPSTREAM = {
    "arxiv_summarization": "arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv",
    "splitwise_code": "splitwise_code.csv",
    "splitwise_conv": "splitwise_conv.csv",
}


def test_trace_names_are_the_three_shipped_traces() -> None:
    assert TRACE_NAMES == ("arxiv_summarization", "splitwise_code", "splitwise_conv")


@pytest.mark.parametrize("name", TRACE_NAMES)
def test_shipped_trace_loads_with_positive_integer_lengths(name: str) -> None:
    trace = load_trace(name)
    assert isinstance(trace, Trace)
    assert trace.name == name
    assert trace.num_requests == EXPECTED_ROWS[name]
    assert trace.prompt_tokens.shape == trace.output_tokens.shape == (EXPECTED_ROWS[name],)
    assert trace.prompt_tokens.dtype == np.int64 and trace.output_tokens.dtype == np.int64
    assert trace.prompt_tokens.min() >= 1 and trace.output_tokens.min() >= 1
    assert "Vidur" in trace.source and "MIT" in trace.source


def test_arxiv_has_no_arrivals_and_totals_within_4096() -> None:
    trace = load_trace("arxiv_summarization")
    assert trace.arrival_s is None
    assert int((trace.prompt_tokens + trace.output_tokens).max()) <= 4096  # the upstream filter


@pytest.mark.parametrize("name", ["splitwise_code", "splitwise_conv"])
def test_splitwise_arrivals_start_at_zero_and_never_decrease(name: str) -> None:
    trace = load_trace(name)
    assert trace.arrival_s is not None
    assert trace.arrival_s.dtype == np.float64
    assert trace.arrival_s.shape == trace.prompt_tokens.shape
    assert trace.arrival_s[0] == 0.0
    assert bool(np.all(np.diff(trace.arrival_s) >= 0))
    assert 3000 < trace.arrival_s[-1] <= 3600  # one hour of traffic


@pytest.mark.parametrize("name", TRACE_NAMES)
def test_shipped_trace_matches_groundtruth_csv(name: str) -> None:
    root = find_groundtruth(required=False)
    if root is None:
        pytest.skip("ground truth not available")
    path = root / "vidur" / "traces" / UPSTREAM[name]
    if not path.is_file():
        pytest.skip(f"{path} not available")
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    trace = load_trace(name)
    assert trace.num_requests == len(rows)
    np.testing.assert_array_equal(trace.prompt_tokens, [int(r["num_prefill_tokens"]) for r in rows])
    np.testing.assert_array_equal(trace.output_tokens, [int(r["num_decode_tokens"]) for r in rows])
    if "arrived_at" in rows[0]:
        assert trace.arrival_s is not None
        np.testing.assert_array_equal(trace.arrival_s, [float(r["arrived_at"]) for r in rows])


def test_shipped_traces_are_cached_and_read_only() -> None:
    a = load_trace("splitwise_code")
    assert load_trace("splitwise_code") is a
    assert a.arrival_s is not None
    for arr in (a.prompt_tokens, a.output_tokens, a.arrival_s):
        with pytest.raises(ValueError):
            arr[0] = 1


def _write(path: Path, text: str) -> Path:
    if path.name.endswith(".gz"):
        with gzip.open(path, "wt", encoding="utf-8", newline="") as handle:
            handle.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("header", "has_arrival"),
    [
        ("prompt_tokens,output_tokens", False),
        ("input_len,output_len,arrival_s", True),
        ("arrival_time_s,extra,num_prefill_tokens,num_decode_tokens", True),
    ],
)
def test_user_csv_with_alternative_column_names(tmp_path: Path, header: str, has_arrival: bool) -> None:
    columns = header.split(",")
    values = {
        "prompt_tokens": ["10", "20", "30"], "input_len": ["10", "20", "30"], "num_prefill_tokens": ["10", "20", "30"],
        "output_tokens": ["1", "2", "3"], "output_len": ["1", "2", "3"], "num_decode_tokens": ["1", "2", "3"],
        "arrival_s": ["0.5", "0.5", "2.25"], "arrival_time_s": ["0.5", "0.5", "2.25"], "extra": ["x", "y", "z"],
    }
    lines = [header] + [",".join(values[c][i] for c in columns) for i in range(3)]
    trace = load_trace(_write(tmp_path / "mine.csv", "\n".join(lines) + "\n"))
    assert trace.name == "mine"
    assert trace.source == str(tmp_path / "mine.csv")
    np.testing.assert_array_equal(trace.prompt_tokens, [10, 20, 30])
    np.testing.assert_array_equal(trace.output_tokens, [1, 2, 3])
    if has_arrival:
        assert trace.arrival_s is not None
        np.testing.assert_array_equal(trace.arrival_s, [0.5, 0.5, 2.25])
    else:
        assert trace.arrival_s is None


def test_user_csv_gz_given_as_string_path(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.csv.gz", "arrived_at,num_prefill_tokens,num_decode_tokens\n0,5,6\n1.5,7.0,8\n\n")
    trace = load_trace(str(path))
    assert trace.name == "t"
    np.testing.assert_array_equal(trace.prompt_tokens, [5, 7])  # "7.0" is an integral float: accepted
    np.testing.assert_array_equal(trace.output_tokens, [6, 8])
    assert trace.arrival_s is not None
    np.testing.assert_array_equal(trace.arrival_s, [0.0, 1.5])


@pytest.mark.parametrize(
    ("body", "line", "fragment"),
    [
        ("1,2\n3,x\n", 3, "'x' is not an integer"),
        ("1,2\n2.5,4\n", 3, "'2.5' is not an integer"),
        ("1,2\n3,4\n-3,4\n", 4, "is negative"),
        ("1,0\n", 2, "num_decode_tokens=0 is zero"),
        ("0,5\n", 2, "num_prefill_tokens=0 is zero"),
        ("1,2\n3\n", 3, "1 fields, expected at least 2"),
    ],
)
def test_malformed_row_names_file_and_line(tmp_path: Path, body: str, line: int, fragment: str) -> None:
    path = _write(tmp_path / "bad.csv", "num_prefill_tokens,num_decode_tokens\n" + body)
    with pytest.raises(ConfigError) as info:
        load_trace(path)
    message = str(info.value)
    assert f"{path}, line {line}:" in message
    assert fragment in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("body", "line", "fragment"),
    [
        ("0,1,1\n2,1,1\n1,1,1\n", 4, "earlier than the previous"),
        ("0,1,1\nsoon,1,1\n", 3, "'soon' is not a number of seconds"),
        ("-1,1,1\n", 2, "must be a finite time >= 0 s"),
        ("nan,1,1\n", 2, "must be a finite time >= 0 s"),
    ],
)
def test_malformed_arrival_names_file_and_line(tmp_path: Path, body: str, line: int, fragment: str) -> None:
    path = _write(tmp_path / "bad.csv.gz", "arrived_at,prompt_tokens,output_tokens\n" + body)
    with pytest.raises(ConfigError, match=fragment) as info:
        load_trace(path)
    assert f"{path}, line {line}:" in str(info.value)


@pytest.mark.parametrize(
    ("header", "missing", "accepted"),
    [
        ("output_tokens,arrived_at", "prompt", "num_prefill_tokens, prompt_tokens, input_len"),
        ("prompt_tokens,tokens_out", "output", "num_decode_tokens, output_tokens, output_len"),
    ],
)
def test_missing_column_lists_accepted_names(tmp_path: Path, header: str, missing: str, accepted: str) -> None:
    path = _write(tmp_path / "cols.csv", header + "\n1,2\n")
    with pytest.raises(ConfigError) as info:
        load_trace(path)
    message = str(info.value)
    assert f"no {missing}-token column" in message
    assert accepted in message
    assert header.replace(",", ", ") in message  # what was found


def test_empty_file_and_header_only(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is empty"):
        load_trace(_write(tmp_path / "empty.csv", ""))
    with pytest.raises(ConfigError, match="has no rows after its header"):
        load_trace(_write(tmp_path / "header.csv", "prompt_tokens,output_tokens\n"))


def test_corrupt_gzip_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "broken.csv.gz"
    path.write_bytes(b"not gzip at all")
    with pytest.raises(ConfigError, match="cannot read trace"):
        load_trace(path)


def test_unknown_short_name_lists_the_names() -> None:
    with pytest.raises(UnknownNameError) as info:
        load_trace("lmsys")
    err = info.value
    assert err.kind == "trace"
    assert err.choices == sorted(TRACE_NAMES)
    for name in TRACE_NAMES:
        assert name in str(err)


def test_near_miss_short_name_suggests_the_closest() -> None:
    with pytest.raises(UnknownNameError) as info:
        load_trace("splitwise-conv")
    assert "splitwise_conv" in str(info.value)
    assert "CSV" in str(info.value) and info.value.hint is None  # one line: the names and what else works


@pytest.mark.parametrize("missing", ["nowhere/trace.csv", "trace.csv.gz"])
def test_missing_file_is_a_config_error(tmp_path: Path, missing: str) -> None:
    with pytest.raises(ConfigError, match="does not exist") as info:
        load_trace(tmp_path / missing)
    assert not isinstance(info.value, UnknownNameError)
    with pytest.raises(ConfigError, match="does not exist"):
        load_trace(str(tmp_path / missing))
