"""The visible measured traces (shared/groundtruth/traces) replayed on their own GPU: the median replayed step
within 5% of the median measured step (the issue's target), and repriced for a faster GPU, shorter."""

from __future__ import annotations

from functools import cache

import pytest

from perfcast.groundtruth.files import find_groundtruth
from perfcast.replay.kineto import KinetoTrace, load_kineto
from perfcast.replay.run import replay_trace

GROUNDTRUTH = find_groundtruth(required=False)
TRACES = ("a100_alexnet_benchmark", "a100_recsys_train_rank3", "v100_train_rank0", "mi250_minitoy_train")
TOLERANCE = 0.05  # the target for the median step on the recorded GPU


@cache
def _read(name: str) -> KinetoTrace | None:
    assert GROUNDTRUTH is not None
    path = GROUNDTRUTH / "traces" / f"{name}.json.gz"
    return load_kineto(path) if path.is_file() else None


def _trace(name: str) -> KinetoTrace:
    trace = _read(name)
    if trace is None:
        pytest.skip(f"traces/{name}.json.gz not found")
    return trace


@pytest.mark.skipif(GROUNDTRUTH is None, reason="ground truth not found (PERFCAST_GROUNDTRUTH)")
@pytest.mark.parametrize("name", TRACES)
def test_replay_on_the_recorded_gpu_is_within_5_percent(name: str) -> None:
    r = replay_trace(_trace(name)).replayed
    assert r.step_time_s == pytest.approx(r.measured_step_time_s, rel=TOLERANCE)


@pytest.mark.skipif(GROUNDTRUTH is None, reason="ground truth not found (PERFCAST_GROUNDTRUTH)")
def test_the_v100_training_steps_are_shorter_on_an_h100() -> None:
    result = replay_trace(_trace("v100_train_rank0"), hardware="h100-sxm-80gb")
    assert result.recorded_hardware == "v100-sxm2-32gb"
    r = result.replayed
    assert r.step_time_s < 0.6 * r.measured_step_time_s  # GPU-bound steps; the host keeps its recorded time


@pytest.mark.skipif(GROUNDTRUTH is None, reason="ground truth not found (PERFCAST_GROUNDTRUTH)")
def test_v100_steps_replayed_with_the_previous_steps_kernel_times() -> None:
    """Not by construction: each V100 step (same 1219 GPU ops in the same order) replayed with the durations its
    ops had in the step before reproduces its own measured time within 1%."""
    from perfcast.replay.graph import NodeKind, build_graph
    from perfcast.replay.simulate import replay

    g = build_graph(_trace("v100_train_rank0"))

    def launched(n: int) -> float:
        node = g.nodes[n]
        return g.nodes[node.launch].start_s if node.launch is not None else node.start_s

    windows = [(g.nodes[s.start].start_s, g.nodes[s.end].start_s) for s in g.steps
               if s.start is not None and s.end is not None]
    per_step = [[n for n in g.nodes if n.kind is NodeKind.GPU and a <= launched(n.index) < b] for a, b in windows]
    durations = [n.dur_s for n in g.nodes]
    for prev, cur in zip(per_step, per_step[1:], strict=False):
        assert [n.name for n in prev] == [n.name for n in cur]
        for p, c in zip(prev, cur, strict=True):
            durations[c.index] = p.dur_s
    r = replay(g, durations)
    for s in r.steps[1:]:
        assert s.predicted_s == pytest.approx(s.measured_s, rel=0.01)
