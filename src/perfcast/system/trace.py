"""Chrome trace (Perfetto) of one predicted training step.

One process per pipeline rank (every data/tensor/context-parallel replica of a
rank runs the same timeline), with lanes for compute (forward and backward of
each micro-batch and model chunk, recompute inside the backward), pipeline
sends, the data-parallel gradient reduction and the optimizer step. Times are
microseconds, as the trace format expects. Open the file in
https://ui.perfetto.dev or chrome://tracing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from perfcast.system.training import TrainingResult

__all__ = ["training_trace", "write_trace"]

_LANES = {"compute": 1, "pipeline send": 2, "data parallel": 3, "optimizer": 4}


def training_trace(result: TrainingResult) -> dict[str, Any]:
    """The trace of ``result`` (which must have been simulated with ``keep_events=True``)."""
    plan = result.plan
    p = plan.pp
    events: list[dict[str, Any]] = []
    for r in range(p):
        events.append({"name": "process_name", "ph": "M", "pid": r,
                       "args": {"name": f"pipeline rank {r} (tp {plan.tp} x cp {plan.cp} x dp {plan.dp} GPUs)"}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": r, "args": {"sort_index": r}})
        for lane, tid in _LANES.items():
            events.append({"name": "thread_name", "ph": "M", "pid": r, "tid": tid, "args": {"name": lane}})
    send_s = 0.0
    if p > 1 and result.microbatches:
        send_s = result.comm_total_s.get("pp_send_s", 0.0) / (2 * result.microbatches * plan.vp)
    end = [0.0] * p
    for ev in result.events:
        stage = ev.chunk * p + ev.rank
        name = f"{'fwd' if ev.kind == 'F' else 'bwd'} mb{ev.microbatch}" + (f" chunk{ev.chunk}" if plan.vp > 1 else "")
        events.append({"name": name, "cat": "compute", "ph": "X", "pid": ev.rank, "tid": _LANES["compute"],
                       "ts": ev.start_s * 1e6, "dur": (ev.end_s - ev.start_s) * 1e6,
                       "args": {"microbatch": ev.microbatch, "virtual_stage": stage,
                                "layers": result.stage_layers[stage]}})
        end[ev.rank] = max(end[ev.rank], ev.end_s)
        last_stage = stage == p * plan.vp - 1
        if send_s > 0 and not (ev.kind == "F" and last_stage) and not (ev.kind == "B" and stage == 0):
            events.append({"name": "send activations" if ev.kind == "F" else "send gradients", "cat": "comm",
                           "ph": "X", "pid": ev.rank, "tid": _LANES["pipeline send"], "ts": ev.end_s * 1e6,
                           "dur": send_s * 1e6})
    b = result.breakdown_s
    pipe_end = max(end) if result.events else 0.0
    for r in range(p):
        t = pipe_end
        dp = b.get("dp_comm_s", 0.0)
        if dp > 0:
            events.append({"name": "gradient reduction (exposed)", "cat": "comm", "ph": "X", "pid": r,
                           "tid": _LANES["data parallel"], "ts": t * 1e6, "dur": dp * 1e6,
                           "args": {"total_s": result.comm_total_s.get("dp_comm_s", 0.0)}})
            t += dp
        opt = b.get("optimizer_s", 0.0)
        if opt > 0:
            events.append({"name": f"optimizer ({plan.optimizer})", "cat": "optimizer", "ph": "X", "pid": r,
                           "tid": _LANES["optimizer"], "ts": t * 1e6, "dur": opt * 1e6})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"model": result.model_id, "cluster": result.cluster_id, "num_gpus": result.num_gpus,
                          "step_time_s": result.step_time_s, "plan": plan.model_dump(mode="json")}}


def write_trace(result: TrainingResult, path: str | Path) -> Path:
    """Write the trace JSON of ``result`` to ``path``."""
    out = Path(path)
    out.write_text(json.dumps(training_trace(result)) + "\n", encoding="utf-8")
    return out
