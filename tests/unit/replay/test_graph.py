"""The replay graph's semantics on small synthetic traces: stream order, synchronization, launch gaps, event
waits, cross-thread hand-off, launch-queue depth and step split; each replayed with the recorded durations (which
it must reproduce) and with changed GPU durations (which must move what depends on them, and only that)."""

from __future__ import annotations

from pathlib import Path

import pytest
from replay_traces import TraceBuilder

from perfcast.replay.graph import NodeKind, ReplayGraph, build_graph
from perfcast.replay.kineto import parse_kineto
from perfcast.replay.simulate import Replay, replay


def _graph(tb: TraceBuilder) -> ReplayGraph:
    return build_graph(parse_kineto(tb.data()))


def _scaled(g: ReplayGraph, factor: float, only: str | None = None) -> Replay:
    """Replay with the GPU ops (those named ``only``, or all) ``factor`` times longer."""
    return replay(g, [n.dur_s * factor if n.kind is NodeKind.GPU and (only is None or n.name == only) else n.dur_s
                      for n in g.nodes])


def _node(g: ReplayGraph, name: str) -> int:
    return next(n.index for n in g.nodes if n.name == name)


def _us(x: float) -> float:
    return round(x * 1e6, 6)


def _assert_reproduces(g: ReplayGraph) -> None:
    r = replay(g)
    for n in g.nodes:
        assert r.start_s[n.index] == pytest.approx(n.start_s, abs=1e-12)
        assert r.end_s[n.index] == pytest.approx(n.end_s, abs=1e-12)
    for s in r.steps:
        assert s.predicted_s == pytest.approx(s.measured_s, rel=1e-9)


def test_stream_order_serialises_a_stream_and_not_two() -> None:
    tb = TraceBuilder()
    tb.step(1, 0, 400)
    tb.kernel("A", 15, 100, launch_ts=10)  # A then B queued behind it on stream 7
    tb.kernel("B", 116, 50, launch_ts=20)
    tb.kernel("C", 30, 60, launch_ts=25, stream=20)  # C on its own stream, overlapping A
    g = _graph(tb)
    _assert_reproduces(g)
    r = _scaled(g, 2.0, only="A")
    assert _us(r.start_s[_node(g, "B")]) == 216  # B still starts 1 us after A ends
    assert _us(r.start_s[_node(g, "C")]) == 30  # another stream does not wait for A


def test_a_queued_op_starts_earlier_when_the_op_ahead_is_faster() -> None:
    tb = TraceBuilder()
    tb.step(1, 0, 400)
    tb.kernel("A", 15, 100, launch_ts=10)
    tb.kernel("B", 116, 50, launch_ts=20)
    g = _graph(tb)
    r = _scaled(g, 0.5, only="A")
    assert _us(r.start_s[_node(g, "B")]) == 66  # not held at its recorded start by its early launch


def test_device_sync_blocks_the_host_until_the_kernel_ends() -> None:
    tb = TraceBuilder()
    tb.step(1, 0, 300)
    tb.kernel("K", 15, 200, launch_ts=10)
    tb.call("cudaDeviceSynchronize", 20, 197)  # returned 2 us after K ended at 215
    tb.call("cudaMemsetAsync", 250, 3)  # host work after the sync: 33 us of gap
    g = _graph(tb)
    _assert_reproduces(g)
    r = _scaled(g, 2.0)
    sync = _node(g, "cudaDeviceSynchronize")
    assert _us(r.end_s[sync]) == 417  # K ends at 415, plus the call's own 2 us
    assert _us(r.start_s[_node(g, "cudaMemsetAsync")]) == 450  # the host gap after it stays
    assert _us(r.steps[0].predicted_s) == 500  # the step end moves with it
    r = _scaled(g, 0.5)
    assert _us(r.end_s[sync]) == 117


def test_stream_sync_waits_for_its_stream_only() -> None:
    tb = TraceBuilder()
    tb.step(1, 0, 300)
    tb.kernel("other", 12, 250, launch_ts=8, stream=20)
    tb.kernel("K", 20, 100, launch_ts=15)
    tb.call("cudaStreamSynchronize", 25, 97)  # waits for stream 7 (the thread's last launch), ends at 122
    g = _graph(tb)
    _assert_reproduces(g)
    r = _scaled(g, 2.0, only="other")
    assert _us(r.end_s[_node(g, "cudaStreamSynchronize")]) == 122


def test_launch_bound_kernels_follow_the_host_not_the_gpu() -> None:
    tb = TraceBuilder()
    tb.step(1, 0, 500)
    for i in range(5):  # short kernels launched every 50 us: the GPU idles between them
        tb.kernel(f"k{i}", 10 + 50 * i + 6, 5, launch_ts=10 + 50 * i)
    g = _graph(tb)
    _assert_reproduces(g)
    r = _scaled(g, 2.0)
    assert [_us(r.start_s[_node(g, f"k{i}")]) for i in range(5)] == [16 + 50 * i for i in range(5)]
    assert r.steps[0].predicted_s == pytest.approx(r.steps[0].measured_s)


def test_a_blocking_copy_to_pageable_memory_waits_for_the_stream() -> None:
    tb = TraceBuilder()
    tb.step(1, 0, 300)
    tb.kernel("K", 15, 100, launch_ts=10)
    copy = tb.kernel("Memcpy DtoH (Device -> Pageable)", 116, 4, launch_ts=20, launch_dur=102,
                     kind="gpu_memcpy", nbytes=4)
    assert copy
    g = _graph(tb)
    _assert_reproduces(g)
    r = _scaled(g, 3.0, only="K")
    assert _us(r.end_s[_node(g, "cudaMemcpyAsync")]) == 322  # K now ends at 315, the copy at 320, +2 us own


def test_stream_wait_event_orders_two_streams() -> None:
    tb = TraceBuilder()
    tb.step(1, 0, 400)
    tb.kernel("producer", 15, 100, launch_ts=10)
    tb.call("cudaEventRecord", 16, 2)
    tb.call("cudaStreamWaitEvent", 20, 2)
    tb.kernel("consumer", 116, 30, launch_ts=24, stream=20)
    g = _graph(tb)
    _assert_reproduces(g)
    r = _scaled(g, 2.0, only="producer")
    assert _us(r.start_s[_node(g, "consumer")]) == 215


def test_cross_thread_hand_off() -> None:
    tb = TraceBuilder()
    tb.step(1, 0, 400)
    tb.call("cudaGetDevice", 5, 1)  # main thread, then it waits in backward() while thread 200 works
    tb.kernel("bwd", 25, 200, launch_ts=20, tid=200)
    tb.call("cudaDeviceSynchronize", 30, 197, tid=200)  # ends 2 us after bwd, at 227
    tb.call("cudaGetDevice", 240, 1)  # main resumes 13 us after
    g = _graph(tb)
    _assert_reproduces(g)
    r = _scaled(g, 0.5)
    resumed = [n.index for n in g.nodes if n.name == "cudaGetDevice"][1]
    assert _us(r.start_s[resumed]) == 140  # bwd ends at 125, the sync at 127, main 13 us later
    assert _us(r.steps[0].predicted_s) == 300


def test_a_full_launch_queue_blocks_the_launch() -> None:
    tb = TraceBuilder()
    depth, n = 520, 600  # a queue of 520 launches: kernel i's launch returns once kernel i - 520 has ended
    t, kernel_end = 10.0, []
    for i in range(n):
        returns = t + 0.5 if i < depth else max(t + 0.5, kernel_end[i - depth] + 0.5)
        start = max(t + 5, kernel_end[-1] if kernel_end else 0.0)
        tb.kernel(f"k{i}", start, 20, launch_ts=t, launch_dur=returns - t)
        kernel_end.append(start + 20)
        t = returns + 0.5
    tb.step(1, 0, t)
    g = _graph(tb)
    assert g.queue_depth == depth
    _assert_reproduces(g)
    r = _scaled(g, 2.0)
    last = g.nodes[_node(g, f"k{n - 1}")]
    assert last.launch is not None
    waited = r.end_s[_node(g, f"k{n - 1 - depth}")]
    assert _us(waited) == 15 + 40 * (n - depth)  # kernels back to back, now 40 us each
    assert _us(r.end_s[last.launch]) == _us(waited) + 0.5  # the last launch returns only then
    assert r.steps[0].predicted_s > 1.9 * r.steps[0].measured_s - 1e-4  # the host now runs at the GPU's pace


def test_steps_split_and_a_trace_without_steps_is_one_step() -> None:
    tb = TraceBuilder()
    tb.step(1, 0, 100)
    tb.step(2, 100, 150)
    tb.kernel("K1", 15, 50, launch_ts=10)
    tb.kernel("K2", 115, 50, launch_ts=110)
    g = _graph(tb)
    r = replay(g)
    assert [(s.name, _us(s.measured_s)) for s in r.steps] == [("ProfilerStep#1", 100), ("ProfilerStep#2", 150)]
    assert _us(r.step_time_s) == 125 and not g.whole_trace

    tb = TraceBuilder()
    tb.kernel("K1", 15, 50, launch_ts=10)
    tb.kernel("K2", 70, 50, launch_ts=20)
    g = _graph(tb)
    r = _scaled(g, 2.0)
    assert g.whole_trace and [s.name for s in r.steps] == ["whole trace"]
    assert _us(r.steps[0].measured_s) == 110 and _us(r.steps[0].predicted_s) == 210


def test_plain_and_gzip_traces_read_alike(tmp_path: Path) -> None:
    from perfcast.replay.kineto import load_kineto

    tb = TraceBuilder()
    tb.step(1, 0, 100)
    tb.kernel("K", 15, 50, launch_ts=10)
    a = load_kineto(tb.write(tmp_path / "t.json.gz"))
    b = load_kineto(tb.write(tmp_path / "t.json", gz=False))
    assert a.gpu_ops == b.gpu_ops and a.calls == b.calls and a.steps == b.steps
    assert a.gpu_ops[0].correlation == a.calls[0].correlation


def test_launches_link_to_kernels_by_flow_events_without_correlation_args() -> None:
    tb = TraceBuilder()
    tb.step(1, 0, 300)
    tb.kernel("K", 15, 200, launch_ts=10)
    tb.call("cudaDeviceSynchronize", 20, 197)
    for e in tb.events:
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "cuda_runtime"):
            e["args"].pop("correlation")
    g = _graph(tb)
    kernel = g.nodes[_node(g, "K")]
    assert kernel.launch is not None and g.nodes[kernel.launch].name == "cudaLaunchKernel"
    assert _us(_scaled(g, 2.0).end_s[_node(g, "cudaDeviceSynchronize")]) == 417
