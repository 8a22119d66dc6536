"""The request stream a serving simulation consumes: arrival times and per-request token counts.

``generate_requests`` builds a ``RequestStream`` from an arrival process and a source of lengths.

Arrival processes (every stream starts at time 0: the first request arrives at ``arrival_s[0] == 0.0``,
as in Vidur's request generators; the ``num_requests - 1`` gaps follow):

* ``poisson``: exponential gaps with mean ``1/qps``.
* ``gamma``: gamma gaps with mean ``1/qps`` and coefficient of variation ``burstiness_cv``
  (shape ``k = 1/cv**2``, scale ``1/(qps*k)``); ``cv > 1`` is burstier than Poisson, ``cv < 1`` smoother,
  ``cv == 1`` has the Poisson gap distribution (but different draws than ``poisson``).
* ``fixed``: constant gaps ``1/qps`` (``arrival_s[i] == i / qps``).
* ``trace``: the trace's own times, shifted so the first request is at 0 (the shipped Splitwise traces
  already start at 0, so their times come back unchanged). Beyond the end of the trace the trace is
  replayed: replay ``c`` (0-based) of row ``j`` arrives at ``(t[j] - t[0]) + c * period`` where
  ``period = (t[-1] - t[0]) * n / (n - 1)``, i.e. the trace's inter-arrival gaps repeat cyclically with
  one mean gap ``(t[-1] - t[0]) / (n - 1)`` joining the end of one replay to the start of the next, so
  the long-run rate equals the trace's mean rate. A one-row trace cannot be replayed.

Lengths (prompt and output tokens):

* ``prompt_tokens`` and ``output_tokens`` given: every request has those lengths (with a trace they
  override the trace's lengths; give both or neither). With ``range_ratio`` r < 1 each request's lengths are
  drawn instead, uniformly from the integers in [floor(r * L), L] for each nominal length L (a benchmark
  client's ``--dataset-name random --random-range-ratio r``, as InferenceMAX runs it), prompts first, then
  outputs, from the lengths stream.
* otherwise from ``trace``: with ``arrival="trace"`` row ``i % n`` (rows in order, cycling with the
  replays above, so each request keeps its own row's length and time); with any other arrival process
  row indices are drawn uniformly with replacement, so any ``num_requests`` works and a trace without
  arrival times can be paired with a synthetic process.
* ``max_tokens`` (a model's context length) clips each request: ``prompt = min(prompt, max_tokens - 1)``,
  then ``output = min(output, max_tokens - prompt)``, so prompt + output <= max_tokens and both >= 1.

Randomness: ``numpy.random.SeedSequence(seed)`` spawns two independent streams, one per kind of draw:
(1) lengths: when sampled from a trace, ``integers(0, n, size=num_requests)`` row indices;
(2) gaps: for ``poisson``, ``standard_exponential(num_requests - 1)`` divided by ``qps``; for ``gamma``,
``standard_gamma(k, num_requests - 1) * scale``. ``fixed`` and ``trace`` arrivals draw nothing.
The same arguments give bit-identical arrays. Each stream draws request by request, so the first ``k``
requests are the same whatever ``num_requests`` is (a 50-request run is the start of a 200-request run
with the same seed, as in VIDUR's request generator), and because gaps are drawn in units of ``1/qps``, a
sweep over ``qps`` with one seed sees the same request lengths and the same gaps rescaled (common random
numbers).

The arrays of a ``RequestStream`` are read-only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from perfcast.errors import ConfigError, UnknownNameError
from perfcast.serving.sources.trace import Trace

__all__ = ["ARRIVAL_PROCESSES", "ArrivalProcess", "RequestStream", "generate_requests"]

ArrivalProcess = Literal["poisson", "gamma", "fixed", "trace"]
ARRIVAL_PROCESSES: tuple[str, ...] = ("poisson", "gamma", "fixed", "trace")
"""Names accepted by ``generate_requests(arrival=...)``."""


@dataclass(frozen=True, eq=False)
class RequestStream:
    """Requests in arrival order: ``arrival_s`` (float64, s, non-decreasing), token counts (int64, >= 1)."""

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray

    def __post_init__(self) -> None:
        n = self.arrival_s.shape[0]
        if self.prompt_tokens.shape[0] != n or self.output_tokens.shape[0] != n:
            raise ConfigError(
                f"request stream arrays differ in length: arrival_s {n}, prompt_tokens "
                f"{self.prompt_tokens.shape[0]}, output_tokens {self.output_tokens.shape[0]}; they must be equal"
            )
        if n > 1 and bool(np.any(np.diff(self.arrival_s) < 0)):
            raise ConfigError("request stream arrival_s must be non-decreasing")

    @property
    def num_requests(self) -> int:
        """Number of requests in the stream."""
        return int(self.arrival_s.shape[0])


def generate_requests(
    *,
    num_requests: int,
    seed: int,
    arrival: ArrivalProcess = "poisson",
    qps: float | None = None,
    burstiness_cv: float = 1.0,
    trace: Trace | None = None,
    prompt_tokens: int | None = None,
    output_tokens: int | None = None,
    max_tokens: int | None = None,
    range_ratio: float = 1.0,
) -> RequestStream:
    """Build ``num_requests`` requests; see the module docstring for the processes, cycling and draw order."""
    _check_arguments(num_requests, arrival, qps, burstiness_cv, trace, prompt_tokens, output_tokens, max_tokens)
    if not (isinstance(range_ratio, (int, float)) and 0 < range_ratio <= 1):
        raise ConfigError(f"range_ratio={range_ratio!r} must be in (0, 1] (1: every request at the nominal lengths)")
    rng_lengths, rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))

    # (1) lengths: fixed, trace rows in order (arrival="trace"), or rows sampled with the rng.
    prompt: np.ndarray
    output: np.ndarray
    if prompt_tokens is not None and output_tokens is not None and range_ratio < 1:
        prompt = rng_lengths.integers(math.floor(range_ratio * prompt_tokens), prompt_tokens + 1,
                                      size=num_requests, dtype=np.int64)
        output = rng_lengths.integers(math.floor(range_ratio * output_tokens), output_tokens + 1,
                                      size=num_requests, dtype=np.int64)
        np.maximum(prompt, 1, out=prompt)
        np.maximum(output, 1, out=output)
    elif prompt_tokens is not None and output_tokens is not None:
        prompt = np.full(num_requests, prompt_tokens, dtype=np.int64)
        output = np.full(num_requests, output_tokens, dtype=np.int64)
    else:
        assert trace is not None  # checked above
        num_rows = trace.num_requests
        if arrival == "trace":
            rows = np.arange(num_requests, dtype=np.int64) % num_rows
        else:
            rows = rng_lengths.integers(0, num_rows, size=num_requests, dtype=np.int64)
        prompt = np.asarray(trace.prompt_tokens, dtype=np.int64)[rows]
        output = np.asarray(trace.output_tokens, dtype=np.int64)[rows]

    # (2) arrival times, first request at 0.
    arrival_s = _arrivals(rng, num_requests, arrival, qps, burstiness_cv, trace)

    if max_tokens is not None:
        prompt = np.minimum(prompt, max_tokens - 1)
        output = np.minimum(output, max_tokens - prompt)

    for arr in (arrival_s, prompt, output):
        arr.flags.writeable = False
    return RequestStream(arrival_s=arrival_s, prompt_tokens=prompt, output_tokens=output)


def _arrivals(
    rng: np.random.Generator,
    num_requests: int,
    arrival: str,
    qps: float | None,
    burstiness_cv: float,
    trace: Trace | None,
) -> np.ndarray:
    num_gaps = num_requests - 1
    if arrival == "trace":
        assert trace is not None and trace.arrival_s is not None  # checked above
        times = np.asarray(trace.arrival_s, dtype=np.float64)
        offsets = times - times[0]
        num_rows = offsets.shape[0]
        if num_requests <= num_rows:
            return offsets[:num_requests].copy()
        period_s = float(offsets[-1]) * num_rows / (num_rows - 1)
        index = np.arange(num_requests, dtype=np.int64)
        return offsets[index % num_rows] + (index // num_rows).astype(np.float64) * period_s
    assert qps is not None  # checked above
    if arrival == "fixed":
        return np.arange(num_requests, dtype=np.float64) / qps
    if arrival == "poisson":
        gaps_s = rng.standard_exponential(num_gaps) / qps
    else:  # gamma
        shape = 1.0 / burstiness_cv**2
        gaps_s = rng.standard_gamma(shape, num_gaps) * (1.0 / (qps * shape))
    out = np.empty(num_requests, dtype=np.float64)
    out[0] = 0.0
    np.cumsum(gaps_s, out=out[1:])
    return out


def _check_arguments(
    num_requests: int,
    arrival: str,
    qps: float | None,
    burstiness_cv: float,
    trace: Trace | None,
    prompt_tokens: int | None,
    output_tokens: int | None,
    max_tokens: int | None,
) -> None:
    if arrival not in ARRIVAL_PROCESSES:
        raise UnknownNameError("arrival process", str(arrival), ARRIVAL_PROCESSES)
    if isinstance(num_requests, bool) or not isinstance(num_requests, (int, np.integer)) or num_requests < 1:
        raise ConfigError(f"num_requests={num_requests!r} must be an integer >= 1")
    if not (isinstance(burstiness_cv, (int, float)) and math.isfinite(burstiness_cv) and burstiness_cv > 0):
        raise ConfigError(f"burstiness_cv={burstiness_cv!r} must be a finite number > 0 (1 is Poisson-like)")
    if arrival == "trace":
        if trace is None:
            raise ConfigError("arrival='trace' needs a trace; pass trace=load_trace(...)")
        if trace.arrival_s is None:
            raise ConfigError(
                f"trace {trace.name!r} has no arrival times, so arrival='trace' is impossible; "
                "use arrival='poisson', 'gamma' or 'fixed' with a qps"
            )
        if qps is not None:
            raise ConfigError(
                f"qps={qps!r} does not apply to arrival='trace' (the trace's own times are used); leave qps unset"
            )
        if num_requests > trace.num_requests and trace.num_requests < 2:
            raise ConfigError(
                f"trace {trace.name!r} has {trace.num_requests} arrival; replaying it for "
                f"num_requests={num_requests} needs at least 2 rows"
            )
    elif qps is None or not (isinstance(qps, (int, float)) and math.isfinite(qps) and qps > 0):
        raise ConfigError(f"qps={qps!r} must be a finite number > 0 (requests per second) for arrival={arrival!r}")
    if (prompt_tokens is None) != (output_tokens is None):
        given = "prompt_tokens" if prompt_tokens is not None else "output_tokens"
        raise ConfigError(
            f"only {given} was given; give both prompt_tokens and output_tokens, or neither to take lengths "
            "from a trace"
        )
    if prompt_tokens is None and trace is None:
        raise ConfigError("no request lengths: give prompt_tokens and output_tokens, or a trace")
    for label, value, low in (("prompt_tokens", prompt_tokens, 1), ("output_tokens", output_tokens, 1),
                              ("max_tokens", max_tokens, 2)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low):
            raise ConfigError(f"{label}={value!r} must be an integer >= {low}")
