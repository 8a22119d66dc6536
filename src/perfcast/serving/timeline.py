"""Chrome trace (Perfetto) of a serving simulation; open the file in https://ui.perfetto.dev.

Layout, per replica (one trace process each):

* one thread per engine (``iterations``; with pipeline stages, one per virtual engine) holding a complete
  ("X") slice per iteration. An engine runs one iteration at a time, so the slices of one thread follow
  each other and never overlap;
* the requests the replica served, on async tracks: each request is one nestable async pair ("b"/"e" with
  its own ``id``) from its arrival to its last token, with an async instant ("n", same ``id``) at its first
  token. Requests overlap in time, which complete slices on one thread cannot show (Perfetto nests or
  mis-draws overlapping "X" slices of one thread); async slices with distinct ids go on tracks of their
  own. A request has no child slices, so no end can be matched with the wrong begin.

Times are microseconds, as the trace format expects, rounded to the nanosecond; a slice's duration is the
difference of its rounded ends, so back-to-back iterations touch without overlapping.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from perfcast.serving.result import ServingResult

__all__ = ["MAX_REQUESTS_SHOWN", "serving_trace", "write_serving_trace"]

MAX_REQUESTS_SHOWN = 20000
"""Request lifetimes drawn (the first ones by id); every iteration is always drawn."""

_REQUESTS_TID = 0  # async events carry a tid too; their tracks belong to the process (the replica)


def _us(t_s: float) -> float:
    """Seconds to microseconds, rounded to the nanosecond."""
    return round(t_s * 1e6, 3)


def serving_trace(result: ServingResult) -> dict[str, Any]:
    """The trace of ``result`` (simulated with ``keep_events=True`` for the iterations)."""
    pp = result.config.pipeline_parallel_size
    events: list[dict[str, Any]] = []
    replicas = sorted({ev.engine // pp for ev in result.events} | {int(r) for r in result.replica if r >= 0})
    for rep in replicas:
        events.append({"name": "process_name", "ph": "M", "pid": rep, "args": {"name": f"replica {rep}"}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": rep, "args": {"sort_index": rep}})
    for e in sorted({ev.engine for ev in result.events}):
        rep, ve = divmod(e, pp)
        events.append({"name": "thread_name", "ph": "M", "pid": rep, "tid": 1 + ve,
                       "args": {"name": "iterations" + (f" (virtual engine {ve})" if pp > 1 else "")}})
    for ev in result.events:
        rep, ve = divmod(ev.engine, pp)
        kind = "prefill" if ev.prefill_tokens and not ev.decode_seqs else (
            "decode" if not ev.prefill_tokens else "mixed")
        start, end = _us(ev.start_s), _us(ev.start_s + ev.duration_s)
        events.append({"name": kind, "cat": "iteration", "ph": "X", "pid": rep, "tid": 1 + ve,
                       "ts": start, "dur": end - start,
                       "args": {"prefill_tokens": ev.prefill_tokens, "decode_seqs": ev.decode_seqs}})
    shown = 0
    for i in range(result.arrival_s.size):
        if shown >= MAX_REQUESTS_SHOWN:
            break
        a, f, done = float(result.arrival_s[i]), float(result.first_token_s[i]), float(result.finish_s[i])
        if not (math.isfinite(done) and math.isfinite(f)):
            continue  # rejected: it never ran
        rep = int(result.replica[i])
        common = {"cat": "request", "pid": rep, "tid": _REQUESTS_TID, "id": i}
        args = {"prompt_tokens": int(result.prompt_tokens[i]), "output_tokens": int(result.output_tokens[i]),
                "ttft_s": f - a, "e2e_s": done - a}
        events.append({**common, "name": f"request {i}", "ph": "b", "ts": _us(a), "args": args})
        events.append({**common, "name": "first token", "ph": "n", "ts": _us(f)})
        events.append({**common, "name": f"request {i}", "ph": "e", "ts": _us(done)})
        shown += 1
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"model": result.config.model, "hardware": result.config.hardware,
                          "scheduler": result.config.scheduler, "requests_shown": shown}}


def write_serving_trace(result: ServingResult, path: str | Path) -> Path:
    """Write :func:`serving_trace` as JSON to ``path``."""
    out = Path(path)
    out.write_text(json.dumps(serving_trace(result)), encoding="utf-8")
    return out
