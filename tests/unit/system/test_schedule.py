"""Unit tests of ``perfcast.system.schedule``: simulated GPipe / 1F1B / interleaved pipeline schedules."""

from __future__ import annotations

from collections import Counter

import pytest

from perfcast.system import schedule as schedule_mod
from perfcast.system.schedule import PipelineResult, ScheduleEvent, simulate_pipeline

F, B = 1.0, 2.0  # one micro-batch's forward / backward on one (virtual) stage
THRESHOLD = 4096  # passes (2 * p * v * m) above which the closed form is used without keep_events


def _uniform(p: int, v: int = 1, f: float = F, b: float = B) -> tuple[list[float], list[float]]:
    return [f] * (p * v), [b] * (p * v)


def _check_events(res: PipelineResult, fwd: list[float], bwd: list[float], m: int, p: int, v: int,
                  send_s: float) -> None:
    """Every invariant a valid pipeline trace must satisfy."""
    eps = 1e-9
    ev = res.events
    n_virtual = p * v
    assert len(ev) == 2 * p * v * m
    # every (rank, microbatch, chunk) has exactly one F and one B
    counts = Counter((e.rank, e.microbatch, e.chunk, e.kind) for e in ev)
    expected = {(r, mb, c, k) for r in range(p) for mb in range(m) for c in range(v) for k in "FB"}
    assert set(counts) == expected
    assert all(n == 1 for n in counts.values())
    by_key = {(e.kind, e.chunk * p + e.rank, e.microbatch): e for e in ev}
    for e in ev:
        s = e.chunk * p + e.rank
        # durations are the stage's pass times
        dur = fwd[s] if e.kind == "F" else bwd[s]
        assert e.end_s - e.start_s == pytest.approx(dur)
        assert e.start_s >= -eps
        if e.kind == "F":
            if s > 0:  # activations of stage s-1 arrive one send later
                prev = by_key[("F", s - 1, e.microbatch)]
                assert e.start_s >= prev.end_s + send_s - eps
        else:
            own_f = by_key[("F", s, e.microbatch)]
            assert e.start_s >= own_f.end_s - eps  # B after F on the same stage
            if s < n_virtual - 1:  # gradients of stage s+1 arrive one send later
                nxt = by_key[("B", s + 1, e.microbatch)]
                assert e.start_s >= nxt.end_s + send_s - eps
    # no two events overlap on one rank
    for r in range(p):
        mine = sorted((e for e in ev if e.rank == r), key=lambda e: e.start_s)
        for a, b in zip(mine, mine[1:], strict=False):
            assert b.start_s >= a.end_s - eps
        assert res.busy_s[r] == pytest.approx(sum(e.end_s - e.start_s for e in mine))
    assert res.time_s == pytest.approx(max(e.end_s for e in ev))


# --- bubble fraction -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize(("p", "m"), [(2, 1), (4, 2), (8, 3), (4, 4), (8, 8), (3, 5), (4, 16), (8, 64), (2, 200)])
def test_uniform_bubble_is_textbook_for_gpipe_and_1f1b(schedule: str, p: int, m: int) -> None:
    fwd, bwd = _uniform(p)
    res = simulate_pipeline(fwd, bwd, m, schedule=schedule)
    assert res.bubble_frac == pytest.approx((p - 1) / (m + p - 1), rel=1e-12)
    assert res.time_s == pytest.approx((m + p - 1) * (F + B), rel=1e-12)
    assert res.busy_s == pytest.approx([m * (F + B)] * p)


@pytest.mark.parametrize(("p", "v", "m"), [(2, 2, 2), (4, 2, 4), (4, 2, 8), (4, 4, 8), (2, 3, 6), (8, 2, 8),
                                           (4, 2, 64), (2, 4, 32)])
def test_uniform_interleaved_bubble_shrinks_by_the_chunk_count(p: int, v: int, m: int) -> None:
    # the interleaved order cycles micro-batches in groups of p: m must be a multiple of p (m >= p)
    assert m % p == 0
    fwd, bwd = _uniform(p, v, F / v, B / v)  # a rank's v chunks together cost what one 1F1B stage does
    res = simulate_pipeline(fwd, bwd, m, schedule="interleaved", chunks=v)
    assert res.bubble_frac == pytest.approx((p - 1) / (v * m + p - 1), rel=1e-12)
    assert res.time_s == pytest.approx((m + (p - 1) / v) * (F + B), rel=1e-12)
    # and it beats plain 1F1B on the same work
    plain = simulate_pipeline([F] * p, [B] * p, m, schedule="1f1b")
    assert res.time_s < plain.time_s


@pytest.mark.parametrize(("p", "m"), [(2, 1), (4, 3), (4, 4), (8, 32), (5, 7)])
def test_1f1b_and_gpipe_have_the_same_makespan_for_uniform_stages(p: int, m: int) -> None:
    fwd, bwd = _uniform(p)
    g = simulate_pipeline(fwd, bwd, m, schedule="gpipe")
    o = simulate_pipeline(fwd, bwd, m, schedule="1f1b")
    assert g.time_s == pytest.approx(o.time_s, rel=1e-12)
    assert g.busy_s == pytest.approx(o.busy_s)


def test_1f1b_keeps_at_most_p_minus_rank_micro_batches_in_flight_while_gpipe_keeps_all() -> None:
    p, m = 4, 12

    def peak_in_flight(res: PipelineResult, rank: int) -> int:
        live = peak = 0
        for e in sorted((e for e in res.events if e.rank == rank), key=lambda e: e.start_s):
            live += 1 if e.kind == "F" else -1
            peak = max(peak, live)
        return peak

    fwd, bwd = _uniform(p)
    o = simulate_pipeline(fwd, bwd, m, schedule="1f1b", keep_events=True)
    g = simulate_pipeline(fwd, bwd, m, schedule="gpipe", keep_events=True)
    assert [peak_in_flight(o, r) for r in range(p)] == [p - r for r in range(p)]
    assert [peak_in_flight(g, r) for r in range(p)] == [m] * p


# --- stage imbalance ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("p", "m"), [(4, 1), (4, 4), (4, 8), (8, 16), (3, 10)])
def test_uniform_slowdown_of_every_stage_costs_m_plus_p_minus_1_times_it(p: int, m: int) -> None:
    d = 0.25
    base = simulate_pipeline(*_uniform(p), m).time_s
    slow = simulate_pipeline(*_uniform(p, 1, F + d, B + 2 * d), m).time_s
    assert slow - base == pytest.approx((m + p - 1) * 3 * d, rel=1e-9)


@pytest.mark.parametrize(("p", "m"), [(4, 1), (4, 4), (4, 8), (8, 16), (4, 32)])
@pytest.mark.parametrize(("df", "db"), [(0.1, 0.2), (0.5, 1.0), (2.0, 4.0)])
def test_one_slow_stage_in_1f1b_costs_between_one_and_m_times_its_slowdown(p: int, m: int, df: float,
                                                                          db: float) -> None:
    """One stage slower by d = df + db (per micro-batch, F + B).

    Upper bound: 1F1B's makespan is at most ``(m - 1) x slowest + chain`` = base + m d (the slowest stage
    paces every micro-batch once the pipe is full). Lower bounds: the first micro-batch's chain crosses the
    slow stage (base + d), and the slow stage s cannot start before ``s f`` nor finish before its ``m``
    passes, after which ``s b`` of backward remains upstream. The last stage has no warm-up to hide
    behind: it is busy from ``(p-1) f`` to the end of its ``m`` passes, then ``(p-1) b`` drains, so
    there the bound is reached exactly.
    """
    d = df + db
    base = (m + p - 1) * (F + B)
    deltas = []
    for s in range(p):
        fwd, bwd = _uniform(p)
        fwd[s] += df
        bwd[s] += db
        t = simulate_pipeline(fwd, bwd, m, schedule="1f1b").time_s
        assert t <= base + m * d + 1e-9
        assert t >= base + d - 1e-9
        assert t >= m * (F + df + B + db) + s * (F + B) - 1e-9
        deltas.append(t - base)
    assert deltas[-1] == pytest.approx(m * d, rel=1e-9)
    # later stages hide less of their slowdown behind the warm-up
    assert deltas == sorted(deltas)


@pytest.mark.parametrize(("p", "m"), [(4, 1), (4, 4), (8, 16)])
def test_one_slow_stage_in_gpipe_costs_exactly_m_times_its_slowdown(p: int, m: int) -> None:
    # GPipe's forward phase is paced by the slow stage's f', its backward phase by its b':
    # T = (p - 1)(f + b) + m (f' + b')
    for s in range(p):
        fwd, bwd = _uniform(p)
        fwd[s] += 0.5
        bwd[s] += 0.75
        t = simulate_pipeline(fwd, bwd, m, schedule="gpipe").time_s
        assert t == pytest.approx((p - 1) * (F + B) + m * (F + B + 1.25), rel=1e-12)


# --- send latency ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize(("p", "m"), [(2, 3), (4, 1), (4, 8), (8, 32)])
def test_send_latency_adds_time(schedule: str, p: int, m: int) -> None:
    fwd, bwd = _uniform(p)
    t0 = simulate_pipeline(fwd, bwd, m, schedule=schedule).time_s
    t1 = simulate_pipeline(fwd, bwd, m, schedule=schedule, send_s=0.1).time_s
    t2 = simulate_pipeline(fwd, bwd, m, schedule=schedule, send_s=0.5).time_s
    # at least one forward and one backward crossing of every stage boundary
    assert t1 >= t0 + 2 * (p - 1) * 0.1 - 1e-9
    assert t2 > t1
    if schedule == "gpipe" or m == 1:  # nothing waits on a round trip: exactly the fill and drain sends
        assert t1 == pytest.approx(t0 + 2 * (p - 1) * 0.1, rel=1e-12)


def test_send_latency_adds_time_to_the_interleaved_schedule() -> None:
    p, v, m = 4, 2, 8
    fwd, bwd = _uniform(p, v, 0.5, 1.0)
    t0 = simulate_pipeline(fwd, bwd, m, schedule="interleaved", chunks=v).time_s
    t1 = simulate_pipeline(fwd, bwd, m, schedule="interleaved", chunks=v, send_s=0.1).time_s
    # p*v - 1 boundaries crossed forward and backward
    assert t1 >= t0 + 2 * (p * v - 1) * 0.1 - 1e-9


# --- events ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("schedule", "p", "v", "m"), [
    ("gpipe", 4, 1, 6), ("1f1b", 4, 1, 6), ("1f1b", 4, 1, 2), ("1f1b", 3, 1, 7), ("gpipe", 2, 1, 1),
    ("interleaved", 4, 2, 8), ("interleaved", 2, 3, 4), ("interleaved", 4, 4, 4),
])
@pytest.mark.parametrize("send_s", [0.0, 0.05])
def test_events_are_a_consistent_trace(schedule: str, p: int, v: int, m: int, send_s: float) -> None:
    fwd = [1.0 + 0.1 * (i % 3) for i in range(p * v)]  # mildly imbalanced stages
    bwd = [2.0 + 0.3 * (i % 2) for i in range(p * v)]
    res = simulate_pipeline(fwd, bwd, m, schedule=schedule, chunks=v, send_s=send_s, keep_events=True)
    assert all(isinstance(e, ScheduleEvent) for e in res.events)
    _check_events(res, fwd, bwd, m, p, v, send_s)
    # keeping events changes nothing about the result
    plain = simulate_pipeline(fwd, bwd, m, schedule=schedule, chunks=v, send_s=send_s)
    assert plain.time_s == pytest.approx(res.time_s, rel=1e-12)
    assert plain.events == []


def test_events_of_a_single_rank_run_chunks_in_order() -> None:
    res = simulate_pipeline([1.0, 3.0], [2.0, 4.0], 2, chunks=2, keep_events=True)
    assert [(e.kind, e.microbatch, e.chunk, e.start_s, e.end_s) for e in res.events] == [
        ("F", 0, 0, 0.0, 1.0), ("F", 0, 1, 1.0, 4.0), ("B", 0, 1, 4.0, 8.0), ("B", 0, 0, 8.0, 10.0),
        ("F", 1, 0, 10.0, 11.0), ("F", 1, 1, 11.0, 14.0), ("B", 1, 1, 14.0, 18.0), ("B", 1, 0, 18.0, 20.0),
    ]
    assert res.time_s == 20.0


# --- p = 1 and argument checks --------------------------------------------------------------------------------


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b", "interleaved"])
@pytest.mark.parametrize("m", [1, 7, 5000])
def test_single_rank_is_m_times_f_plus_b(schedule: str, m: int) -> None:
    res = simulate_pipeline([1.5], [2.5], m, schedule=schedule, send_s=0.3)
    assert res.time_s == pytest.approx(m * 4.0)
    assert res.busy_s == pytest.approx([m * 4.0])
    assert res.bubble_frac == 0.0


def test_single_rank_with_chunks_sums_its_chunks() -> None:
    res = simulate_pipeline([1.0, 2.0, 3.0], [2.0, 4.0, 6.0], 4, schedule="interleaved", chunks=3)
    assert res.time_s == pytest.approx(4 * 18.0)
    assert res.bubble_frac == 0.0


@pytest.mark.parametrize(("fwd", "bwd", "chunks"), [([1.0] * 3, [1.0] * 3, 2), ([1.0] * 4, [1.0] * 3, 1),
                                                    ([1.0] * 4, [1.0] * 2, 2)])
def test_malformed_stage_lists_are_rejected(fwd: list[float], bwd: list[float], chunks: int) -> None:
    with pytest.raises(ValueError, match="chunks x pipeline-rank stages"):
        simulate_pipeline(fwd, bwd, 4, chunks=chunks)


# --- closed form for long pipelines ---------------------------------------------------------------------------


def test_closed_form_is_used_only_above_the_threshold_and_without_events(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = schedule_mod._closed_form

    def spy(*args: object, **kw: object) -> PipelineResult:
        calls.append(1)
        return real(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(schedule_mod, "_closed_form", spy)
    fwd, bwd = _uniform(4)
    simulate_pipeline(fwd, bwd, THRESHOLD // 8)  # exactly 4096 passes: simulated
    assert calls == []
    simulate_pipeline(fwd, bwd, THRESHOLD // 8 + 1, keep_events=True)  # events requested: simulated
    assert calls == []
    simulate_pipeline(fwd, bwd, THRESHOLD // 8 + 1)
    assert calls == [1]


_IMBALANCED_F = [1.0, 1.2, 0.9, 1.1, 1.05, 0.95, 1.3, 1.0]
_IMBALANCED_B = [2.0, 2.5, 1.8, 2.2, 2.1, 1.9, 2.6, 2.0]


@pytest.mark.parametrize(("schedule", "p", "v", "m"), [
    ("1f1b", 4, 1, 513), ("1f1b", 8, 1, 257), ("interleaved", 4, 2, 260), ("interleaved", 2, 2, 516),
])
@pytest.mark.parametrize("balanced", [True, False])
def test_closed_form_agrees_with_the_event_simulation_just_above_the_threshold(schedule: str, p: int, v: int,
                                                                              m: int, balanced: bool) -> None:
    assert 2 * p * v * m > THRESHOLD
    n = p * v
    fwd, bwd = (_uniform(p, v, F / v, B / v) if balanced
                else ([x / v for x in _IMBALANCED_F[:n]], [x / v for x in _IMBALANCED_B[:n]]))
    fast = simulate_pipeline(fwd, bwd, m, schedule=schedule, chunks=v)
    slow = simulate_pipeline(fwd, bwd, m, schedule=schedule, chunks=v, keep_events=True)
    assert len(slow.events) == 2 * n * m and fast.events == []
    assert fast.time_s == pytest.approx(slow.time_s, rel=0.01)
    assert fast.busy_s == pytest.approx(slow.busy_s, rel=1e-9)
    assert fast.bubble_frac == pytest.approx(slow.bubble_frac, abs=0.01)


@pytest.mark.parametrize(("p", "m"), [(4, 513), (8, 257)])
def test_closed_form_agrees_with_the_event_simulation_with_send_latency(p: int, m: int) -> None:
    fwd, bwd = _uniform(p)
    fast = simulate_pipeline(fwd, bwd, m, send_s=0.05)
    slow = simulate_pipeline(fwd, bwd, m, send_s=0.05, keep_events=True)
    assert fast.time_s == pytest.approx(slow.time_s, rel=0.01)


def test_gpipe_step_time_does_not_drop_when_crossing_the_closed_form_threshold() -> None:
    fwd, bwd = [2.0, 1.0, 1.0, 1.0], [2.0, 4.0, 2.0, 2.0]
    below = simulate_pipeline(fwd, bwd, 512, schedule="gpipe").time_s
    above = simulate_pipeline(fwd, bwd, 513, schedule="gpipe").time_s
    assert above >= below


def test_interleaved_closed_form_makespan_is_at_least_the_busiest_ranks_work() -> None:
    p, v, m = 2, 4, 260
    assert 2 * p * v * m > THRESHOLD
    res = simulate_pipeline(*_uniform(p, v, 0.75, 0.75), m, schedule="interleaved", chunks=v)
    assert res.time_s >= max(res.busy_s)
    assert res.bubble_frac >= 0.0


# --- schedule inputs the simulator cannot run -----------------------------------------------------------------


@pytest.mark.parametrize(("p", "v", "m"), [(4, 2, 6), (4, 2, 2), (2, 2, 3)])
def test_interleaved_with_micro_batches_not_a_multiple_of_p_is_rejected(p: int, v: int, m: int) -> None:
    with pytest.raises(ValueError, match="multiple"):
        simulate_pipeline(*_uniform(p, v), m, schedule="interleaved", chunks=v)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_chunks_with_a_non_interleaved_schedule_fail_cleanly(schedule: str) -> None:
    with pytest.raises(ValueError):
        simulate_pipeline(*_uniform(4, 2), 4, schedule=schedule, chunks=2)
