"""Unit tests of ``perfcast.serving.sources.arrivals``: arrival processes, length sources, clipping, determinism,
errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from perfcast.errors import ConfigError, UnknownNameError
from perfcast.serving.sources.arrivals import ARRIVAL_PROCESSES, RequestStream, generate_requests
from perfcast.serving.sources.traces import Trace, load_trace


def _trace(prompt: list[int], output: list[int], arrival: list[float] | None, name: str = "tiny") -> Trace:
    return Trace(
        name=name,
        prompt_tokens=np.asarray(prompt, dtype=np.int64),
        output_tokens=np.asarray(output, dtype=np.int64),
        arrival_s=None if arrival is None else np.asarray(arrival, dtype=np.float64),
        source="test",
    )


def _gaps(stream: RequestStream) -> np.ndarray:
    return np.diff(stream.arrival_s)


# -- determinism ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("arrival", ["poisson", "gamma"])
def test_same_seed_gives_identical_arrays_and_another_seed_differs(arrival: Any) -> None:
    trace = load_trace("arxiv_summarization")
    kwargs: dict[str, Any] = dict(num_requests=5000, arrival=arrival, qps=4.0, burstiness_cv=2.0, trace=trace)
    a = generate_requests(seed=7, **kwargs)
    b = generate_requests(seed=7, **kwargs)
    c = generate_requests(seed=8, **kwargs)
    for name in ("arrival_s", "prompt_tokens", "output_tokens"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
        assert not np.array_equal(getattr(a, name), getattr(c, name))


def test_stream_shapes_dtypes_and_read_only() -> None:
    stream = generate_requests(num_requests=100, seed=0, qps=2.0, trace=load_trace("splitwise_conv"))
    assert isinstance(stream, RequestStream)
    assert stream.num_requests == 100
    assert stream.arrival_s.dtype == np.float64
    assert stream.prompt_tokens.dtype == np.int64 and stream.output_tokens.dtype == np.int64
    assert stream.arrival_s[0] == 0.0
    assert bool(np.all(_gaps(stream) >= 0))
    with pytest.raises(ValueError):
        stream.arrival_s[0] = 1.0


def test_lengths_do_not_depend_on_qps_or_process() -> None:
    """Lengths are drawn before gaps, so a qps sweep with one seed sees the same requests."""
    trace = load_trace("arxiv_summarization")
    slow = generate_requests(num_requests=1000, seed=3, qps=1.0, trace=trace)
    fast = generate_requests(num_requests=1000, seed=3, qps=50.0, trace=trace)
    bursty = generate_requests(num_requests=1000, seed=3, arrival="gamma", qps=5.0, burstiness_cv=4.0, trace=trace)
    np.testing.assert_array_equal(slow.prompt_tokens, fast.prompt_tokens)
    np.testing.assert_array_equal(slow.output_tokens, bursty.output_tokens)
    np.testing.assert_allclose(slow.arrival_s, fast.arrival_s * 50.0, rtol=1e-12)


# -- arrival processes ----------------------------------------------------------------------------------------------
def test_poisson_gaps_have_mean_one_over_qps_and_cv_one() -> None:
    qps = 8.0
    n = 200_000
    gaps = _gaps(generate_requests(num_requests=n, seed=11, qps=qps, prompt_tokens=1, output_tokens=1))
    # standard error of the mean gap is (1/qps)/sqrt(n) ~ 0.22 %; allow 5 sigma
    assert gaps.mean() == pytest.approx(1 / qps, rel=0.012)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.02)
    assert gaps.min() >= 0


@pytest.mark.parametrize("cv", [0.5, 1.0, 3.0])
def test_gamma_gaps_have_requested_mean_and_cv(cv: float) -> None:
    qps = 3.0
    gaps = _gaps(
        generate_requests(num_requests=200_000, seed=5, arrival="gamma", qps=qps, burstiness_cv=cv,
                          prompt_tokens=1, output_tokens=1)
    )
    assert gaps.mean() == pytest.approx(1 / qps, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.06)


def test_fixed_gaps_are_exact() -> None:
    stream = generate_requests(num_requests=1000, seed=0, arrival="fixed", qps=4.0, prompt_tokens=3, output_tokens=2)
    np.testing.assert_array_equal(stream.arrival_s, np.arange(1000) / 4.0)
    np.testing.assert_array_equal(stream.prompt_tokens, np.full(1000, 3))
    np.testing.assert_array_equal(stream.output_tokens, np.full(1000, 2))


def test_fixed_lengths_and_fixed_arrivals_draw_nothing_so_any_seed_agrees() -> None:
    a = generate_requests(num_requests=10, seed=1, arrival="fixed", qps=1.0, prompt_tokens=5, output_tokens=5)
    b = generate_requests(num_requests=10, seed=2, arrival="fixed", qps=1.0, prompt_tokens=5, output_tokens=5)
    np.testing.assert_array_equal(a.arrival_s, b.arrival_s)


def test_single_request_arrives_at_zero() -> None:
    for arrival in ("poisson", "gamma", "fixed"):
        stream = generate_requests(num_requests=1, seed=0, arrival=arrival, qps=1.0,  # type: ignore[arg-type]
                                   prompt_tokens=1, output_tokens=1)
        np.testing.assert_array_equal(stream.arrival_s, [0.0])


# -- trace arrivals -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["splitwise_code", "splitwise_conv"])
def test_trace_arrivals_reproduce_the_trace(name: str) -> None:
    trace = load_trace(name)
    assert trace.arrival_s is not None
    stream = generate_requests(num_requests=trace.num_requests, seed=0, arrival="trace", trace=trace)
    np.testing.assert_array_equal(stream.arrival_s, trace.arrival_s)  # they start at 0 already
    np.testing.assert_array_equal(stream.prompt_tokens, trace.prompt_tokens)
    np.testing.assert_array_equal(stream.output_tokens, trace.output_tokens)
    head = generate_requests(num_requests=50, seed=0, arrival="trace", trace=trace)
    np.testing.assert_array_equal(head.arrival_s, trace.arrival_s[:50])


def test_trace_arrivals_are_shifted_to_start_at_zero() -> None:
    trace = _trace([1, 2, 3], [4, 5, 6], [100.0, 101.0, 103.0])
    stream = generate_requests(num_requests=3, seed=0, arrival="trace", trace=trace)
    np.testing.assert_array_equal(stream.arrival_s, [0.0, 1.0, 3.0])


def test_trace_replay_repeats_gaps_with_a_mean_gap_between_replays() -> None:
    trace = _trace([1, 2, 3], [4, 5, 6], [10.0, 11.0, 14.0])  # gaps 1, 3; mean gap 2; period 6
    stream = generate_requests(num_requests=8, seed=0, arrival="trace", trace=trace)
    np.testing.assert_array_equal(stream.arrival_s, [0.0, 1.0, 4.0, 6.0, 7.0, 10.0, 12.0, 13.0])
    np.testing.assert_array_equal(stream.prompt_tokens, [1, 2, 3, 1, 2, 3, 1, 2])
    np.testing.assert_array_equal(stream.output_tokens, [4, 5, 6, 4, 5, 6, 4, 5])


def test_trace_replay_keeps_the_trace_rate() -> None:
    trace = load_trace("splitwise_code")
    assert trace.arrival_s is not None
    n = trace.num_requests
    stream = generate_requests(num_requests=3 * n, seed=0, arrival="trace", trace=trace)
    assert bool(np.all(_gaps(stream) >= 0))
    trace_rate = (n - 1) / trace.arrival_s[-1]
    stream_rate = (3 * n - 1) / stream.arrival_s[-1]
    assert stream_rate == pytest.approx(trace_rate, rel=1e-9)
    np.testing.assert_allclose(stream.arrival_s[n:2 * n] - stream.arrival_s[n], trace.arrival_s, atol=1e-9)


def test_explicit_lengths_override_the_trace() -> None:
    trace = load_trace("splitwise_conv")
    stream = generate_requests(num_requests=20, seed=0, arrival="trace", trace=trace, prompt_tokens=7,
                               output_tokens=9)
    assert trace.arrival_s is not None
    np.testing.assert_array_equal(stream.arrival_s, trace.arrival_s[:20])
    assert set(stream.prompt_tokens.tolist()) == {7} and set(stream.output_tokens.tolist()) == {9}


# -- sampled lengths ------------------------------------------------------------------------------------------------
def test_sampling_a_trace_without_arrivals_reproduces_its_lengths() -> None:
    trace = load_trace("arxiv_summarization")
    stream = generate_requests(num_requests=100_000, seed=2, qps=10.0, trace=trace)
    for sampled, source in ((stream.prompt_tokens, trace.prompt_tokens), (stream.output_tokens, trace.output_tokens)):
        assert np.median(sampled) == pytest.approx(np.median(source), rel=0.03)
        assert np.mean(sampled) == pytest.approx(np.mean(source), rel=0.02)
        assert set(np.unique(sampled).tolist()) <= set(np.unique(source).tolist())
    assert stream.arrival_s[-1] == pytest.approx(100_000 / 10.0, rel=0.02)


def test_sampling_draws_with_replacement_beyond_the_trace_length() -> None:
    trace = _trace([1, 2, 3], [10, 20, 30], None)
    stream = generate_requests(num_requests=3000, seed=4, arrival="fixed", qps=1.0, trace=trace)
    # the pairing of prompt and output survives the sampling
    np.testing.assert_array_equal(stream.output_tokens, stream.prompt_tokens * 10)
    counts = np.bincount(stream.prompt_tokens, minlength=4)[1:]
    assert counts.min() > 900  # roughly uniform over the 3 rows


# -- max_tokens clipping --------------------------------------------------------------------------------------------
def test_max_tokens_clips_prompt_then_output() -> None:
    trace = _trace([10, 100, 8, 3], [5, 5, 1, 2], [0.0, 1.0, 2.0, 3.0])
    stream = generate_requests(num_requests=4, seed=0, arrival="trace", trace=trace, max_tokens=10)
    np.testing.assert_array_equal(stream.prompt_tokens, [9, 9, 8, 3])
    np.testing.assert_array_equal(stream.output_tokens, [1, 1, 1, 2])
    assert bool(np.all(stream.prompt_tokens + stream.output_tokens <= 10))


def test_max_tokens_on_a_real_trace_keeps_every_request_within_context() -> None:
    trace = load_trace("splitwise_conv")  # prompts up to 14,050 tokens
    stream = generate_requests(num_requests=50_000, seed=1, qps=5.0, trace=trace, max_tokens=4096)
    total = stream.prompt_tokens + stream.output_tokens
    assert int(total.max()) <= 4096
    assert int(stream.prompt_tokens.min()) >= 1 and int(stream.output_tokens.min()) >= 1
    assert int(stream.prompt_tokens.max()) == 4095


# -- errors ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        (dict(qps=None), "qps=None must be a finite number > 0"),
        (dict(qps=0.0), "qps=0.0 must be a finite number > 0"),
        (dict(qps=-1.0, arrival="fixed"), "qps=-1.0 must be a finite number > 0"),
        (dict(qps=float("inf"), arrival="gamma"), "qps=inf must be a finite number > 0"),
        (dict(num_requests=0), "num_requests=0 must be an integer >= 1"),
        (dict(num_requests=2.5), "num_requests=2.5 must be an integer >= 1"),
        (dict(burstiness_cv=0.0, arrival="gamma"), "burstiness_cv=0.0 must be a finite number > 0"),
        (dict(burstiness_cv=-2.0), "burstiness_cv=-2.0 must be a finite number > 0"),
        (dict(prompt_tokens=None, output_tokens=None), "no request lengths"),
        (dict(output_tokens=None), "only prompt_tokens was given"),
        (dict(prompt_tokens=None), "only output_tokens was given"),
        (dict(prompt_tokens=0), "prompt_tokens=0 must be an integer >= 1"),
        (dict(output_tokens=-1), "output_tokens=-1 must be an integer >= 1"),
        (dict(max_tokens=1), "max_tokens=1 must be an integer >= 2"),
        (dict(arrival="trace", qps=None), "arrival='trace' needs a trace"),
        (dict(arrival="trace", trace=_trace([1], [1], None, name="lens")),
         "trace 'lens' has no arrival times, so arrival='trace' is impossible"),
        (dict(arrival="trace", trace=_trace([1], [1], [0.0])), "qps=2.0 does not apply to arrival='trace'"),
        (dict(arrival="trace", qps=None, trace=_trace([1], [1], [0.0], name="one")),
         "trace 'one' has 1 arrival; replaying it for num_requests=10 needs at least 2 rows"),
    ],
)
def test_errors_are_one_line_config_errors(kwargs: dict[str, Any], fragment: str) -> None:
    base: dict[str, Any] = dict(num_requests=10, seed=0, arrival="poisson", qps=2.0, prompt_tokens=4, output_tokens=4)
    if "trace" in kwargs:
        base.update(prompt_tokens=None, output_tokens=None)
    base.update(kwargs)
    with pytest.raises(ConfigError) as info:
        generate_requests(**base)
    message = str(info.value)
    assert fragment in message
    assert "\n" not in message


def test_unknown_arrival_process_lists_the_choices() -> None:
    with pytest.raises(UnknownNameError) as info:
        generate_requests(num_requests=1, seed=0, arrival="uniform", qps=1.0,  # type: ignore[arg-type]
                          prompt_tokens=1, output_tokens=1)
    assert info.value.choices == sorted(ARRIVAL_PROCESSES)


def test_one_row_trace_is_fine_when_not_replayed() -> None:
    stream = generate_requests(num_requests=1, seed=0, arrival="trace", trace=_trace([3], [4], [5.0]))
    np.testing.assert_array_equal(stream.arrival_s, [0.0])


def test_request_stream_rejects_inconsistent_arrays() -> None:
    with pytest.raises(ConfigError, match="differ in length"):
        RequestStream(arrival_s=np.zeros(2), prompt_tokens=np.ones(3, dtype=np.int64),
                      output_tokens=np.ones(2, dtype=np.int64))
    with pytest.raises(ConfigError, match="non-decreasing"):
        RequestStream(arrival_s=np.array([1.0, 0.0]), prompt_tokens=np.ones(2, dtype=np.int64),
                      output_tokens=np.ones(2, dtype=np.int64))
