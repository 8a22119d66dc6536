"""The serving rows' report series: latency quantiles that are the requests' own latencies, and a QPS sweep
whose throughput follows the offered load."""

from __future__ import annotations

import numpy as np
import pytest

from perfcast.scenarios.serving_curves import (
    LOAD_FRACS,
    NUM_QUANTILES,
    latency_quantiles,
    load_curve,
    sweepable,
)
from perfcast.serving import ServingConfig, WorkloadConfig, simulate_serving


def _cfg(n: int = 60, qps: float | None = 2.0) -> ServingConfig:
    work = WorkloadConfig(num_requests=n, qps=qps, trace="arxiv_summarization", seed=42)
    return ServingConfig(model="llama-2-7b", hardware="a100-sxm-80gb", max_num_seqs=128, workload=work)


def test_latency_quantiles_span_the_requests_latencies() -> None:
    res = simulate_serving(_cfg())
    q = latency_quantiles(res)
    rows = [r for r in res.request_rows() if r["status"] == "completed"]
    for key in ("ttft_s", "tpot_s", "e2e_s"):
        values = [r[key] for r in rows if r[key] is not None]
        series = q[key]
        assert len(series) == NUM_QUANTILES
        assert series == sorted(series)
        assert series[0] == pytest.approx(min(values)) and series[-1] == pytest.approx(max(values))
        assert series[50] == pytest.approx(float(np.median(values)))
    assert q["q"][0] == 0.0 and q["q"][-1] == 1.0 and len(q["q"]) == NUM_QUANTILES
    assert q["ttft_s"][99] <= res.metrics.ttft_s.max


def test_load_curve_throughput_follows_the_offered_load() -> None:
    curve = load_curve(_cfg())
    assert [p["load_frac"] for p in curve] == list(LOAD_FRACS)
    qps = [float(str(p["qps"])) for p in curve]
    assert qps == sorted(qps) and qps[0] > 0
    below = [p for p in curve if float(str(p["load_frac"])) <= 0.75]
    tput = [float(str(p["throughput_requests_per_s"])) for p in below]
    assert tput == sorted(tput)  # below capacity, more load is more throughput
    for p in curve:
        assert p["ttft_p50_s"] is not None and p["ttft_p99_s"] is not None
        assert float(str(p["ttft_p50_s"])) <= float(str(p["ttft_p99_s"]))


def test_a_single_request_is_not_swept() -> None:
    assert not sweepable(_cfg(n=1, qps=None))
    assert load_curve(_cfg(n=1, qps=None)) == []
    assert sweepable(_cfg())
