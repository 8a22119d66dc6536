"""The serving timeline as Perfetto reads it: iterations as complete slices that never overlap on a thread,
requests as matched async begin/end pairs (they overlap in time, so they cannot share a thread)."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from perfcast.serving import ServingConfig, WorkloadConfig, simulate_serving
from perfcast.serving.timeline import serving_trace, write_serving_trace


def _trace(**deployment: Any) -> tuple[Any, dict[str, Any]]:
    cfg = ServingConfig(model="llama-2-7b", hardware="a100-sxm-80gb", max_num_seqs=64, **deployment,
                        workload=WorkloadConfig(num_requests=60, qps=20.0, trace="arxiv_summarization"))
    res = simulate_serving(cfg, keep_events=True)
    return res, serving_trace(res)


def _complete_slices_nest_or_follow(events: list[dict[str, Any]]) -> None:
    by_thread: dict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            assert e["dur"] >= 0
            by_thread[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    assert by_thread
    eps = 1e-6  # microseconds
    for spans in by_thread.values():
        open_ends: list[float] = []  # the enclosing slices' ends
        for start, end in sorted(spans, key=lambda s: (s[0], -s[1])):
            while open_ends and start >= open_ends[-1] - eps:
                open_ends.pop()
            assert not open_ends or end <= open_ends[-1] + eps, "two slices overlap without nesting on one thread"
            open_ends.append(end)


def _async_pairs_match(events: list[dict[str, Any]]) -> int:
    by_id: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        if e["ph"] in "ben":
            by_id[(e["cat"], e["id"])].append(e)
    for evs in by_id.values():
        begins = [e for e in evs if e["ph"] == "b"]
        ends = [e for e in evs if e["ph"] == "e"]
        assert len(begins) == len(ends) == 1 and begins[0]["name"] == ends[0]["name"]
        assert len({e["pid"] for e in evs}) == 1
        assert all(begins[0]["ts"] <= e["ts"] <= ends[0]["ts"] for e in evs)
    return len(by_id)


@pytest.mark.parametrize("deployment", [{}, {"num_replicas": 2}, {"pipeline_parallel_size": 2}],
                         ids=["one-replica", "two-replicas", "two-stages"])
def test_requests_are_async_pairs_and_iterations_never_overlap(deployment: dict[str, Any]) -> None:
    res, trace = _trace(**deployment)
    events = trace["traceEvents"]
    _complete_slices_nest_or_follow(events)
    assert _async_pairs_match(events) == res.metrics.requests_completed
    assert not any(e["ph"] == "X" and e.get("cat") == "request" for e in events)
    # the load overlaps requests: the async tracks are needed
    spans = sorted((float(a), float(f)) for a, f in zip(res.arrival_s, res.finish_s, strict=True))
    assert any(nxt[0] < cur[1] for cur, nxt in zip(spans, spans[1:], strict=False))
    assert sum(e["ph"] == "X" for e in events) == res.iterations


def test_the_written_file_is_that_trace(tmp_path: Path) -> None:
    res, trace = _trace()
    out = write_serving_trace(res, tmp_path / "t.json")
    assert json.loads(out.read_text()) == json.loads(json.dumps(trace))
