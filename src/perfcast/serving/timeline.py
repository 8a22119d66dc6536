"""Chrome trace (Perfetto) of a serving simulation: one lane per engine, one slice per iteration,
plus one lane per replica with each request's lifetime (queued, then running to its last token).
Times are microseconds, as the trace format expects; open the file in https://ui.perfetto.dev."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from perfcast.serving.engine import ServingResult

__all__ = ["serving_trace", "write_serving_trace"]

_MAX_REQUEST_SLICES = 20000  # request lifetimes shown (iterations are always all shown)


def serving_trace(result: ServingResult) -> dict[str, Any]:
    """The trace of ``result`` (simulated with ``keep_events=True``)."""
    pp = result.config.pipeline_parallel_size
    events: list[dict[str, Any]] = []
    engines = sorted({ev.engine for ev in result.events})
    for e in engines:
        rep, ve = divmod(e, pp)
        events.append({"name": "process_name", "ph": "M", "pid": rep, "args": {"name": f"replica {rep}"}})
        events.append({"name": "thread_name", "ph": "M", "pid": rep, "tid": 1 + ve,
                       "args": {"name": "iterations" + (f" (virtual engine {ve})" if pp > 1 else "")}})
    for ev in result.events:
        rep, ve = divmod(ev.engine, pp)
        kind = "prefill" if ev.prefill_tokens and not ev.decode_seqs else (
            "decode" if not ev.prefill_tokens else "mixed")
        events.append({"name": kind, "cat": "iteration", "ph": "X", "pid": rep, "tid": 1 + ve,
                       "ts": ev.start_s * 1e6, "dur": ev.duration_s * 1e6,
                       "args": {"prefill_tokens": ev.prefill_tokens, "decode_seqs": ev.decode_seqs}})
    shown = 0
    for i in range(result.arrival_s.size):
        if shown >= _MAX_REQUEST_SLICES:
            break
        a, f, done = float(result.arrival_s[i]), float(result.first_token_s[i]), float(result.finish_s[i])
        if not math.isfinite(done):
            continue
        rep = int(result.replica[i])
        events.append({"name": f"request {i}", "cat": "request", "ph": "X", "pid": rep, "tid": 100,
                       "ts": a * 1e6, "dur": (done - a) * 1e6,
                       "args": {"prompt_tokens": int(result.prompt_tokens[i]),
                                "output_tokens": int(result.output_tokens[i]), "ttft_s": f - a}})
        shown += 1
    for rep in {int(r) for r in result.replica if r >= 0}:
        events.append({"name": "thread_name", "ph": "M", "pid": rep, "tid": 100, "args": {"name": "requests"}})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"model": result.config.model, "hardware": result.config.hardware,
                          "scheduler": result.config.scheduler}}


def write_serving_trace(result: ServingResult, path: str | Path) -> Path:
    """Write :func:`serving_trace` as JSON to ``path``."""
    out = Path(path)
    out.write_text(json.dumps(serving_trace(result)), encoding="utf-8")
    return out
