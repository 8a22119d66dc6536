"""The training step's formulas (:mod:`perfcast.system.step`, :func:`perfcast.system.schedule.steady_state_s`):
worked on paper, and the same on a scalar as on each element of an array (the exact step calls them on one plan,
the vectorized search on arrays of plans)."""

from __future__ import annotations

import numpy as np
import pytest

from perfcast.system.schedule import simulate_pipeline, steady_state_s
from perfcast.system.step import (
    data_parallel_exposed_s,
    exposed_reduction_s,
    in_flight_microbatches,
    memory_parts_bytes,
    overlapped_s,
    step_time_s,
    zero3_layer_s,
)


def test_overlap_hides_what_fits_behind_the_compute_with_interference() -> None:
    # 3 s of collective behind 1 s of compute: 2 s stick out, 10% of the hidden second slows the compute
    assert float(overlapped_s(3.0, 1.0, 0.1)) == pytest.approx(2.1)
    assert float(overlapped_s(1.0, 3.0, 0.1)) == pytest.approx(0.1)
    assert float(overlapped_s(1.0, 3.0, 0.0)) == 0.0


def test_a_bucketed_reduction_exposes_at_least_its_last_bucket() -> None:
    assert float(exposed_reduction_s(8.0, 100.0, 8, 0.0)) == 1.0  # hidden, but the last of 8 buckets waits
    assert float(exposed_reduction_s(8.0, 2.0, 8, 0.0)) == 6.0
    assert float(exposed_reduction_s(0.0, 2.0, 8, 0.5)) == 0.0


def test_data_parallel_tail_by_zero_stage() -> None:
    args = dict(all_reduce_s=4.0, reduce_scatter_s=2.0, gather_s=3.0, bwd_window_s=1.0, fwd_window_s=1.0, layers=8,
                interference=0.0)
    assert float(data_parallel_exposed_s(0, **args)) == 3.0  # all-reduce behind the backward
    assert float(data_parallel_exposed_s(1, **args)) == 1.0 + 2.0  # reduce-scatter + all-gather, past their windows
    assert float(data_parallel_exposed_s(3, **args)) == 0.0  # ZeRO-3: per layer, not here
    zero = np.array([0, 1, 2, 3])
    together = data_parallel_exposed_s(zero, **args)
    assert together.tolist() == [float(data_parallel_exposed_s(int(z), **args)) for z in zero]


def test_zero3_layer_gathers_before_each_pass() -> None:
    f, b = zero3_layer_s(1.0, 2.0, 0.5, 0.5, 0.0)
    assert (float(f), float(b)) == (1.0, 2.0)  # both hidden
    f, b = zero3_layer_s(1.0, 2.0, 1.5, 1.0, 0.0)
    assert (float(f), float(b)) == (1.5, 2.5)


def test_step_is_pipeline_then_the_slowest_ranks_tail_then_overhead() -> None:
    assert float(step_time_s(10.0, [1.0, 0.5], [0.2, 1.0], 0.1)) == pytest.approx(10.0 + 1.5 + 0.1)
    rows = step_time_s(np.array([10.0, 20.0]), np.array([[1.0, 0.5], [0.0, 0.0]]), np.array([[0.2, 1.0], [1.0, 2.0]]),
                       0.1)
    assert rows.tolist() == [float(step_time_s(10.0, [1.0, 0.5], [0.2, 1.0], 0.1)),
                             float(step_time_s(20.0, [0.0, 0.0], [1.0, 2.0], 0.1))]


def test_in_flight_microbatches_per_schedule() -> None:
    assert float(in_flight_microbatches(1, 1, 8, 0)) == 1.0  # no pipeline
    assert float(in_flight_microbatches(4, 1, 8, 0)) == 4.0  # 1F1B: pp - rank on the first rank
    assert float(in_flight_microbatches(4, 1, 8, 3)) == 1.0
    assert float(in_flight_microbatches(4, 1, 8, 0, gpipe=True)) == 8.0
    # interleaved, Megatron's warm-up: (p - r - 1) * 2 + (v - 1) * p + 1 = 11 chunks of 2 per micro-batch
    assert float(in_flight_microbatches(4, 2, 8, 0)) == 5.5


def test_memory_parts_shard_by_zero_stage() -> None:
    kw = dict(params=100.0, trainable=100.0, quantized_elements=0.0, quantized_bytes=0.0, max_layer_params=10.0,
              saved_activation_bytes=50.0, checkpoint_bytes=5.0, max_layer_activation_bytes=20.0, in_flight=2.0,
              full_recompute=False, shards=4, weight_bytes_per_param=2.0, grad_bytes=4.0,
              optimizer_bytes_per_param=12.0, weight_copy_bytes_per_param=0.0)
    w, g, o, a = (float(x) for x in memory_parts_bytes(zero=0, **kw))
    assert (w, g, o, a) == (200.0, 400.0, 1200.0, 100.0)
    w, g, o, _ = (float(x) for x in memory_parts_bytes(zero=3, **kw))
    assert (w, g, o) == (200.0 / 4 + 2 * 10.0 * 2.0, 100.0, 300.0)
    _, _, _, a = (float(x) for x in memory_parts_bytes(zero=0, **{**kw, "full_recompute": True}))
    assert a == 5.0 * 2.0 + 20.0


def test_steady_state_is_m_plus_p_minus_1_stage_times_and_the_simulators_closed_form() -> None:
    """Uniform stages (1 s forward + backward each), free sends: (m + p - 1) stage times; the simulator's
    closed form for long pipelines is this function."""
    assert float(steady_state_s(1.0, 4.0, 16, 1, 4, 0.0)) == 16 + 3
    m = 4096
    fwd, bwd = [0.25, 0.3, 0.25, 0.2], [0.5, 0.6, 0.5, 0.4]
    closed = simulate_pipeline(fwd, bwd, m, send_s=0.01)
    slowest = max(f + b for f, b in zip(fwd, bwd, strict=True))
    assert closed.time_s == float(steady_state_s(slowest, sum(fwd) + sum(bwd), m, 1, 4, 0.01))
