"""Pipeline schedules, simulated: GPipe, 1F1B and interleaved 1F1B (and a forward-only pass, for inference).

Each pipeline rank runs its forward (F) and backward (B) passes of every
micro-batch in the order its schedule prescribes; an F of stage ``s`` can start
once stage ``s-1`` finished that micro-batch's F and sent its activations, a B
once stage ``s+1`` finished its B. Simulating the order (rather than applying
the textbook formula) makes the bubble, stage imbalance and send latency come
out of the schedule: for uniform stages and free sends the bubble fraction
equals ``(p - 1) / (m + p - 1)`` for GPipe and 1F1B, and
``(p - 1) / (v m + p - 1)`` for the interleaved schedule with ``v`` chunks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from perfcast.errors import ConfigError

__all__ = ["MAX_TRACED_PASSES", "PipelineResult", "ScheduleEvent", "simulate_pipeline", "steady_state_s"]


@dataclass(frozen=True, slots=True)
class ScheduleEvent:
    """One pass of one micro-batch on one rank: ``kind`` F or B, chunk = virtual stage index on that rank."""

    rank: int
    kind: str
    microbatch: int
    chunk: int
    start_s: float
    end_s: float


@dataclass
class PipelineResult:
    """Makespan of one step's pipeline and how busy each rank was."""

    time_s: float
    busy_s: list[float]
    bubble_frac: float
    events: list[ScheduleEvent] = field(default_factory=list)


def _order_1f1b(rank: int, p: int, m: int) -> list[tuple[str, int, int]]:
    warmup = min(p - rank - 1, m)
    ops: list[tuple[str, int, int]] = [("F", i, 0) for i in range(warmup)]
    f, b = warmup, 0
    while f < m:
        ops.append(("F", f, 0))
        f += 1
        ops.append(("B", b, 0))
        b += 1
    while b < m:
        ops.append(("B", b, 0))
        b += 1
    return ops


def _order_gpipe(m: int) -> list[tuple[str, int, int]]:
    return [("F", i, 0) for i in range(m)] + [("B", i, 0) for i in reversed(range(m))]


def _order_interleaved(rank: int, p: int, m: int, v: int) -> list[tuple[str, int, int]]:
    """Megatron's interleaved 1F1B: micro-batches in groups of p cycle through the v chunks."""
    total = m * v

    def chunk_of(k: int, forward: bool) -> tuple[int, int]:
        group, within = divmod(k, p * v)
        chunk = within // p
        mb = group * p + within % p
        if not forward:
            chunk = v - 1 - chunk
        return mb, chunk

    warmup = min((p - rank - 1) * 2 + (v - 1) * p, total)
    ops: list[tuple[str, int, int]] = []
    for k in range(warmup):
        mb, c = chunk_of(k, True)
        ops.append(("F", mb, c))
    f, b = warmup, 0
    while f < total:
        mb, c = chunk_of(f, True)
        ops.append(("F", mb, c))
        f += 1
        mb, c = chunk_of(b, False)
        ops.append(("B", mb, c))
        b += 1
    while b < total:
        mb, c = chunk_of(b, False)
        ops.append(("B", mb, c))
        b += 1
    return ops


_MAX_SIMULATED_PASSES = 4096  # beyond this the steady-state closed form is used (cost must not grow with m)
# a trace holds events for each forward and backward of each micro-batch on each stage, kept in memory and then
# written as JSON: a million passes took 1.5 GB and 14 s and wrote 250 MB (gpt2, pp 2); 200,000 (50 MB) is about
# what Perfetto's UI opens
MAX_TRACED_PASSES = 200_000


def steady_state_s(slowest_s: npt.ArrayLike, chain_s: npt.ArrayLike, microbatches: npt.ArrayLike,
                   chunks: npt.ArrayLike, pp: npt.ArrayLike, send_s: npt.ArrayLike) -> np.ndarray:
    """Makespan of a long 1F1B / interleaved 1F1B pipeline (``pp > 1``; arrays of pipelines or scalars).

    The slowest rank's work per micro-batch (``slowest_s``: forward and backward of all its ``chunks``) plus
    the two sends on the dependency loop between ranks paces the ``microbatches``; filling and draining add
    ``1 / chunks`` of the other stages' work (``chain_s`` is one micro-batch through every stage) and the
    sends along the pipeline.
    """
    slowest, chain, send = (np.asarray(x, dtype=float) for x in (slowest_s, chain_s, send_s))
    m, v, p = np.asarray(microbatches), np.asarray(chunks), np.asarray(pp)
    return m * (slowest + 2 * send) + (chain - slowest) / v + 2 * (p - 1) * send


def _closed_form(fwd_s: list[float], bwd_s: list[float], p: int, m: int, v: int, send_s: float,
                 schedule: str, forward_only: bool = False) -> PipelineResult:
    """Steady-state makespan of long pipelines: fill and drain once, the slowest rank paces the rest.

    GPipe runs all forwards, then all backwards, each phase paced by its own
    slowest stage. 1F1B and interleaved 1F1B alternate: the slowest rank's work
    per micro-batch (plus the two sends on the dependency loop between ranks)
    paces ``m`` micro-batches, and the fill/drain adds ``1/v`` of the other
    stages' work (``(p - 1) / v`` stage times for uniform stages).
    """
    per_rank = [sum(fwd_s[c * p + r] + bwd_s[c * p + r] for c in range(v)) for r in range(p)]
    busy = [x * m for x in per_rank]
    if forward_only:
        total = (m - 1) * max(fwd_s) + sum(fwd_s) + (p * v - 1) * send_s
    elif schedule == "gpipe":
        total = ((m - 1) * max(fwd_s) + sum(fwd_s) + (m - 1) * max(bwd_s) + sum(bwd_s)
                 + 2 * (p * v - 1) * send_s)
    else:
        chain = sum(f + b for f, b in zip(fwd_s, bwd_s, strict=True))
        total = float(steady_state_s(max(per_rank), chain, m, v, p, send_s))
    return PipelineResult(time_s=total, busy_s=busy, bubble_frac=(total - max(busy)) / total if total > 0 else 0.0)


def simulate_pipeline(fwd_s: list[float], bwd_s: list[float], microbatches: int, *, schedule: str = "1f1b",
                      chunks: int = 1, send_s: float = 0.0, keep_events: bool = False,
                      forward_only: bool = False) -> PipelineResult:
    """Simulate one step of a pipeline.

    ``fwd_s[s]``/``bwd_s[s]`` are the times of one micro-batch's forward/backward
    on virtual stage ``s`` (``p * chunks`` virtual stages; with ``chunks`` > 1
    stage ``s`` lives on rank ``s % p``). ``send_s`` is the activation send
    between consecutive stages. ``forward_only`` (inference) runs the forward
    passes alone, in micro-batch order (``bwd_s`` is then ignored). Pipelines with more than a few thousand passes
    (and no request for events) use the steady-state closed form.
    """
    v = chunks
    n_virtual = len(fwd_s)
    p = n_virtual // v
    m = microbatches
    _check_pipeline(fwd_s, bwd_s, p, m, v, schedule, keep_events)
    if p == 1:
        return _serial(fwd_s, bwd_s, m, v, keep_events)
    if not keep_events and 2 * p * v * m > _MAX_SIMULATED_PASSES:
        return _closed_form(fwd_s, bwd_s, p, m, v, send_s, schedule, forward_only)
    if forward_only:
        orders = [[("F", mb, c) for mb in range(m) for c in range(v)] for _ in range(p)]
    elif schedule == "interleaved" and v > 1:
        orders = [_order_interleaved(r, p, m, v) for r in range(p)]
    elif schedule == "gpipe":
        orders = [_order_gpipe(m) for _ in range(p)]
    else:
        orders = [_order_1f1b(r, p, m) for r in range(p)]
    return _run_orders(orders, fwd_s, bwd_s, p, send_s, keep_events)


def _check_pipeline(fwd_s: list[float], bwd_s: list[float], p: int, m: int, v: int, schedule: str,
                    keep_events: bool) -> None:
    """Refuse stage lists that do not split into ``v`` chunks of ``p`` ranks, chunks without the interleaved
    schedule, and a trace too large to keep."""
    if p * v != len(fwd_s) or len(bwd_s) != len(fwd_s):
        raise ValueError("fwd_s/bwd_s must list chunks x pipeline-rank stages")
    if v > 1 and p > 1 and schedule != "interleaved":
        raise ValueError(f"{v} model chunks per rank need the interleaved schedule (got {schedule!r})")
    if v > 1 and p > 1 and m % p:
        raise ValueError(f"the interleaved schedule needs micro-batches ({m}) to be a multiple of the "
                         f"pipeline depth ({p})")
    if keep_events and 2 * p * v * m > MAX_TRACED_PASSES:
        raise ConfigError(f"a trace of {m:,} micro-batches on {p * v} stages has {2 * p * v * m:,} forward and "
                          f"backward passes; a trace holds at most {MAX_TRACED_PASSES:,} (use fewer micro-batches "
                          "per step, or no trace)")


def _serial(fwd_s: list[float], bwd_s: list[float], m: int, v: int, keep_events: bool) -> PipelineResult:
    """One pipeline rank: ``m`` micro-batches run their ``v`` chunks' forwards then backwards, back to back."""
    total = m * sum(f + b for f, b in zip(fwd_s, bwd_s, strict=True))
    serial: list[ScheduleEvent] = []
    if keep_events:
        t = 0.0
        for mb in range(m):
            for c in range(v):
                serial.append(ScheduleEvent(0, "F", mb, c, t, t + fwd_s[c]))
                t += fwd_s[c]
            for c in reversed(range(v)):
                serial.append(ScheduleEvent(0, "B", mb, c, t, t + bwd_s[c]))
                t += bwd_s[c]
    return PipelineResult(time_s=total, busy_s=[total], bubble_frac=0.0, events=serial)


def _run_orders(orders: list[list[tuple[str, int, int]]], fwd_s: list[float], bwd_s: list[float], p: int,
                send_s: float, keep_events: bool) -> PipelineResult:
    """Run each rank's passes in its order (``(kind, micro-batch, chunk)``), each as soon as its rank is free and
    the pass it depends on (the previous stage's forward, the next stage's backward) has ended and sent."""
    n_virtual = len(fwd_s)
    done_f: dict[tuple[int, int], float] = {}
    done_b: dict[tuple[int, int], float] = {}
    clock = [0.0] * p
    busy = [0.0] * p
    pos = [0] * p
    events: list[ScheduleEvent] = []
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for r in range(p):
            while pos[r] < len(orders[r]):
                kind, mb, c = orders[r][pos[r]]
                s = c * p + r  # the virtual stage of chunk c on rank r
                ready: float | None
                if kind == "F":
                    dep = done_f.get((s - 1, mb)) if s > 0 else 0.0
                    if dep is None:
                        break
                    ready = dep + (send_s if s > 0 else 0.0)
                    dur = fwd_s[s]
                else:
                    if s == n_virtual - 1:
                        ready = done_f.get((s, mb))
                    else:
                        dep = done_b.get((s + 1, mb))
                        ready = dep + send_s if dep is not None else None
                    if ready is None:
                        break
                    dur = bwd_s[s]
                start = max(clock[r], ready)
                end = start + dur
                clock[r] = end
                busy[r] += dur
                (done_f if kind == "F" else done_b)[(s, mb)] = end
                if keep_events:
                    events.append(ScheduleEvent(r, kind, mb, c, start, end))
                pos[r] += 1
                remaining -= 1
                progressed = True
        if not progressed:  # pragma: no cover - orders are dependency-consistent by construction
            raise RuntimeError("pipeline schedule deadlocked")
    total = max(clock)
    ideal = max(busy)
    return PipelineResult(time_s=total, busy_s=busy, bubble_frac=(total - ideal) / total if total > 0 else 0.0,
                          events=events)
