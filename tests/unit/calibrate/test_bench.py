"""The measuring statistic: fastest repeat, interleaved passes, untimed set-up (a fake clock, no timing)."""

from __future__ import annotations

import statistics

import pytest

from perfcast.calibrate.bench import fastest_time_s, interleaved_fastest_s
from perfcast.errors import ConfigError


class FakeClock:
    """A clock that each call of a benchmark advances by its next scripted duration."""

    def __init__(self) -> None:
        self.now = 0.0
        self.log: list[str] = []

    def __call__(self) -> float:
        return self.now

    def call(self, name: str, durations: list[float]):  # noqa: ANN201
        def run() -> None:
            self.log.append(name)
            self.now += durations.pop(0) if durations else 1.0
        return run


def test_fastest_repeat_is_the_statistic_and_warm_up_is_not_timed() -> None:
    clock = FakeClock()
    # the warm-up call would be the fastest: it must not count; load only ever adds time
    fn = clock.call("a", [0.001, 0.5, 0.2, 0.9])
    assert fastest_time_s(fn, min_time_s=0.0, min_repeats=3, max_repeats=3, warmup=1, clock=clock) == pytest.approx(0.2)


def test_passes_interleave_calls_and_set_up_runs_untimed_before_each_timed_call() -> None:
    clock = FakeClock()
    a = clock.call("a", [9.0, 0.7, 0.6, 9.0, 0.3, 0.8])  # (warm-up, two repeats) per pass
    b = clock.call("b", [9.0, 0.4, 0.5, 9.0, 0.9, 0.9])
    flushes: list[str] = []

    def flush() -> None:
        flushes.append("flush")
        clock.now += 100.0  # the set-up's own time must not reach any measurement

    best = interleaved_fastest_s([a, b], rounds=2, min_time_s=0.0, min_repeats=2, max_repeats=4, clock=clock,
                                 before=flush)
    assert best == pytest.approx([0.3, 0.4])
    assert clock.log == ["a"] * 3 + ["b"] * 3 + ["a"] * 3 + ["b"] * 3
    assert len(flushes) == 8  # one per timed call, none for warm-ups


def test_rounds_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="rounds"):
        interleaved_fastest_s([lambda: None], rounds=0)


def test_per_pass_mean_takes_the_fastest_pass_not_the_fastest_call() -> None:
    clock = FakeClock()
    # pass 1: repeats 0.2 and 1.0 (mean 0.6); pass 2: 0.5 and 0.5 (mean 0.5). The fastest call is 0.2, but
    # the fastest pass on average is the second one
    a = clock.call("a", [9.0, 0.2, 1.0, 9.0, 0.5, 0.5])
    best = interleaved_fastest_s([a], rounds=2, min_time_s=0.0, min_repeats=2, max_repeats=4, clock=clock,
                                 per_pass=statistics.fmean)
    assert best == pytest.approx([0.5])
