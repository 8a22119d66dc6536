"""A Kineto trace as a dependency graph of host calls, step markers and GPU ops.

Every node has two endpoints, its start and its end; an edge says "this endpoint happens no earlier than that
endpoint plus a lag". A root start (no incoming edge) keeps its recorded time. The edges:

- host order: on each host thread, runtime calls and the ``ProfilerStep`` markers follow each other with the
  recorded host gap (the CPU operators' own time between two runtime calls stays as recorded);
- cross-thread hand-off: when another thread's calls all fall inside a gap of this thread (the autograd
  thread running the backward while the main thread waits in ``backward()``), the other thread's first call
  starts after the gap opens and this thread resumes after the other's last call, each with its recorded lag;
- launch: a GPU op starts after its launch call started, plus the launch latency; stream order: after the
  previous op of its stream ended, plus the recorded idle gap. Which of the two held in the recording decides
  which lag stays as recorded: for a queued op (its stream was still busy) the launch lag is the trace's typical
  launch latency, for an op that waited for its launch the stream gap is the typical back-to-back gap, so an op
  moves when the work ahead of it speeds up or slows down;
- synchronization: ``cudaDeviceSynchronize`` waits for the last op launched on every stream before it,
  ``cudaStreamSynchronize`` for its stream's (the stream a ``cuda_sync`` event names, else the stream this
  thread launched onto last), ``cudaEventSynchronize`` for the stream of the thread's last ``cudaEventRecord``;
  a blocking copy (``cudaMemcpy``, ``hipMemcpyWithStream``, a copy to pageable host memory) for its own copy.
  A blocking call ends ``own`` seconds after both its start and the awaited ops' ends, ``own`` being the
  recorded time it took after the wait was over;
- event wait: ``cudaStreamWaitEvent`` makes the next op this thread launches wait for the last op of the stream
  of the thread's last ``cudaEventRecord`` (Kineto does not record the event; this is the usual pattern).

HIP names (``hipLaunchKernel``, ``hipDeviceSynchronize``...) are read like their CUDA counterparts. With the
recorded durations the graph reproduces the recorded times (up to the heuristics above when a trace breaks
them); repricing changes only the GPU ops' durations.
"""

from __future__ import annotations

import bisect
import statistics
from dataclasses import dataclass
from enum import StrEnum

from perfcast.replay.kineto import GpuOp, KinetoTrace

__all__ = ["Edge", "Node", "NodeKind", "ReplayGraph", "StepSpan", "build_graph"]

_DEVICE_SYNC = {"cudaDeviceSynchronize", "hipDeviceSynchronize", "cuCtxSynchronize"}
_STREAM_SYNC = {"cudaStreamSynchronize", "hipStreamSynchronize", "cuStreamSynchronize"}
_EVENT_SYNC = {"cudaEventSynchronize", "hipEventSynchronize", "cuEventSynchronize"}
_EVENT_RECORD = {"cudaEventRecord", "hipEventRecord", "cuEventRecord", "cudaEventRecordWithFlags"}
_STREAM_WAIT = {"cudaStreamWaitEvent", "hipStreamWaitEvent", "cuStreamWaitEvent"}
_SYNC_COPY = {"cudaMemcpy", "hipMemcpy", "hipMemcpyWithStream", "cuMemcpy", "cudaMemcpy2D", "hipMemcpy2D"}
_DEFAULT_LAUNCH_S = 5e-6  # launch latency when no op in the trace was launched onto an idle stream
_DEFAULT_GAP_S = 1e-6  # back-to-back gap when no op in the trace was queued
_QUEUE_DEPTH = 1024  # pending launches a CUDA stream queue holds before a launch blocks (usual default)
_FULL_QUEUE = 512  # a trace with this many launches pending at once ran into its queue limit


class NodeKind(StrEnum):
    """A host runtime call, a step marker (zero length) or a GPU op."""

    HOST = "host"
    MARK = "mark"
    GPU = "gpu"


@dataclass(slots=True)
class Node:
    """One node; ``start_s``/``dur_s`` are as recorded (seconds from the trace start). ``own_s`` is set on
    blocking host calls: the time the call took once what it waited for was done."""

    index: int
    kind: NodeKind
    name: str
    lane: str
    start_s: float
    dur_s: float
    own_s: float | None = None
    gpu: GpuOp | None = None
    launch: int | None = None

    @property
    def end_s(self) -> float:
        """Recorded end, seconds from the trace start."""
        return self.start_s + self.dur_s


@dataclass(frozen=True, slots=True)
class Edge:
    """``dst``'s start (or end, ``dst_end``) >= ``src``'s end (or start, ``src_end=False``) + ``lag_s``."""

    src: int
    dst: int
    lag_s: float
    kind: str
    src_end: bool = True
    dst_end: bool = False


@dataclass(frozen=True, slots=True)
class StepSpan:
    """One step: its markers (None, None for a trace without steps: the whole trace) and measured time, s."""

    name: str
    measured_s: float
    start: int | None
    end: int | None


@dataclass(frozen=True, slots=True)
class ReplayGraph:
    """Nodes, edges and steps of one trace; ``whole_trace`` when the trace has no ProfilerStep annotation."""

    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]
    steps: tuple[StepSpan, ...]
    whole_trace: bool
    launch_latency_s: float
    back_to_back_gap_s: float
    queue_depth: int


def _blocking_copy(call_name: str, op: GpuOp | None) -> bool:
    if call_name in _SYNC_COPY:
        return True
    return op is not None and op.kind == "memcpy" and "DtoH" in op.name and "Pageable" in op.name


class _Builder:
    def __init__(self, trace: KinetoTrace) -> None:
        self.trace = trace
        self.nodes: list[Node] = []
        self.edges: list[Edge] = []

    def add(self, kind: NodeKind, name: str, lane: str, start_s: float, dur_s: float, **kw: object) -> Node:
        node = Node(len(self.nodes), kind, name, lane, start_s, dur_s, **kw)  # type: ignore[arg-type]
        self.nodes.append(node)
        return node

    def edge(self, src: int, dst: int, lag_s: float, kind: str, *, src_end: bool = True,
             dst_end: bool = False) -> None:
        self.edges.append(Edge(src, dst, lag_s, kind, src_end, dst_end))


def build_graph(trace: KinetoTrace) -> ReplayGraph:
    """The dependency graph of ``trace`` (module docstring)."""
    b = _Builder(trace)
    by_corr: dict[int, Node] = {}
    threads: dict[int, list[Node]] = {}
    for hc in trace.calls:
        node = b.add(NodeKind.HOST, hc.name, f"thread {hc.thread}", hc.start_s, hc.dur_s)
        threads.setdefault(hc.thread, []).append(node)
        if hc.correlation is not None:
            by_corr.setdefault(hc.correlation, node)
    spans: list[StepSpan] = []
    for step in trace.steps:
        lane = f"thread {step.thread}"
        s = b.add(NodeKind.MARK, f"{step.name} start", lane, step.start_s, 0.0)
        e = b.add(NodeKind.MARK, f"{step.name} end", lane, step.end_s, 0.0)
        threads.setdefault(step.thread, []).extend((s, e))
        spans.append(StepSpan(step.name, step.dur_s, s.index, e.index))
    thread_of = {n.index: tid for tid, ns in threads.items() for n in ns}
    for ns in threads.values():
        ns.sort(key=lambda n: (n.start_s, n.end_s, n.index))

    streams: dict[tuple[int, int], list[Node]] = {}
    launched: dict[int, list[Node]] = {}  # thread -> GPU nodes it launched, in launch order
    for op in trace.gpu_ops:
        call = by_corr.get(op.correlation) if op.correlation is not None else None
        node = b.add(NodeKind.GPU, op.name, f"stream {op.stream}" + (f" (device {op.device})" if op.device else ""),
                     op.start_s, op.dur_s, gpu=op, launch=call.index if call else None)
        streams.setdefault((op.device, op.stream), []).append(node)
        if call is not None:
            launched.setdefault(thread_of[call.index], []).append(node)
    for ns in streams.values():
        ns.sort(key=lambda n: (n.start_s, n.index))
    for ns in launched.values():
        ns.sort(key=lambda n: (b.nodes[n.launch].start_s if n.launch is not None else n.start_s, n.index))
    _host_order(b, threads, workers=set(launched) | {st.thread for st in trace.steps})
    latency, gap = _launch_edges(b, streams)
    awaited = _sync_waits(b, threads, streams, launched)
    queue: dict[int, list[Node]] = {}
    depth = _queue_waits(b, queue)
    for index in sorted(set(awaited) | set(queue)):
        call = b.nodes[index]
        waits = [(x, "sync") for x in awaited.get(index, [])] + [(x, "queue") for x in queue.get(index, [])]
        call.own_s = max(0.0, call.end_s - max(call.start_s, max(x.end_s for x, _ in waits)))
        for x, kind in waits:
            b.edge(x.index, index, call.own_s, kind, dst_end=True)
    whole = not spans
    if whole:
        ends = [n.end_s for n in b.nodes]
        spans.append(StepSpan("whole trace", max(ends) - min(n.start_s for n in b.nodes), None, None))
    return ReplayGraph(tuple(b.nodes), tuple(b.edges), tuple(spans), whole, latency, gap, depth)


def _host_order(b: _Builder, threads: dict[int, list[Node]], workers: set[int]) -> None:
    """Host order on each thread and the cross-thread hand-offs between ``workers`` (the threads that launch GPU
    work or hold the steps; a thread that only polls events, like NCCL's watchdog, hands nothing over)."""
    starts = {tid: [n.start_s for n in ns] for tid, ns in threads.items()}
    for tid, ns in threads.items():
        for a, nxt in zip(ns, ns[1:], strict=False):
            handed = False
            for other, ons in threads.items():
                if nxt.start_s <= a.end_s or tid not in workers or other == tid or other not in workers:
                    continue
                lo = bisect.bisect_left(starts[other], a.end_s)
                hi = bisect.bisect_right(starts[other], nxt.start_s)
                inside = [n for n in ons[lo:hi] if n.end_s <= nxt.start_s]
                if not inside or len(inside) != hi - lo:
                    continue
                first, last = inside[0], max(inside, key=lambda n: n.end_s)
                b.edge(a.index, first.index, first.start_s - a.end_s, "cross-thread")
                b.edge(last.index, nxt.index, nxt.start_s - last.end_s, "cross-thread")
                handed = True
            # a gap handed over to another thread is a wait for it, not host work of this thread
            b.edge(a.index, nxt.index, min(0.0, nxt.start_s - a.end_s) if handed else nxt.start_s - a.end_s,
                   "host order")


def _launch_edges(b: _Builder, streams: dict[tuple[int, int], list[Node]]) -> tuple[float, float]:
    """Launch and stream-order edges; returns (launch latency, back-to-back gap) typical of the trace, s."""
    idle_lags: list[float] = []
    queued_gaps: list[float] = []
    for ns in streams.values():
        for prev, n in zip([None, *ns], ns, strict=False):
            if n.launch is None:
                continue
            launch_start = b.nodes[n.launch].start_s
            if prev is None or prev.end_s <= launch_start:
                idle_lags.append(n.start_s - launch_start)
            elif n.start_s >= prev.end_s:
                queued_gaps.append(n.start_s - prev.end_s)
    latency = statistics.median(idle_lags) if idle_lags else _DEFAULT_LAUNCH_S
    gap = statistics.median(queued_gaps) if queued_gaps else _DEFAULT_GAP_S
    for ns in streams.values():
        for prev, n in zip([None, *ns], ns, strict=False):
            stream_gap = n.start_s - prev.end_s if prev is not None else None
            if n.launch is None:
                if prev is not None and stream_gap is not None:
                    b.edge(prev.index, n.index, stream_gap, "stream")
                continue
            launch_start = b.nodes[n.launch].start_s
            lag = n.start_s - launch_start
            if prev is None or stream_gap is None:
                b.edge(n.launch, n.index, lag, "launch", src_end=False)
            elif launch_start + latency >= prev.end_s:  # waited for its launch: the stream gap is back-to-back
                b.edge(n.launch, n.index, lag, "launch", src_end=False)
                b.edge(prev.index, n.index, min(stream_gap, gap), "stream")
            else:  # queued behind the stream: the launch lag is the launch latency
                b.edge(n.launch, n.index, min(lag, latency), "launch", src_end=False)
                b.edge(prev.index, n.index, stream_gap, "stream")
    return latency, gap


def _last_before(ns: list[Node], keys: list[float], t: float) -> Node | None:
    i = bisect.bisect_left(keys, t)
    return ns[i - 1] if i > 0 else None


def _sync_waits(b: _Builder, threads: dict[int, list[Node]], streams: dict[tuple[int, int], list[Node]],
                launched: dict[int, list[Node]]) -> dict[int, list[Node]]:
    """Stream waits on events (as edges) and what each synchronizing or blocking call waits for (returned:
    call index -> GPU nodes; module docstring)."""
    nodes = b.nodes
    waits: dict[int, list[Node]] = {}

    def launch_t(n: Node) -> float:
        return nodes[n.launch].start_s if n.launch is not None else n.start_s

    by_stream = {key: (ns, [launch_t(n) for n in ns]) for key, ns in streams.items()}
    for _, keys in by_stream.values():  # launch order within a stream follows stream order; keep keys monotone
        for i in range(1, len(keys)):
            keys[i] = max(keys[i], keys[i - 1])
    by_thread = {tid: (ns, [launch_t(n) for n in ns]) for tid, ns in launched.items()}
    gpu_of_call = {n.launch: n for ns in launched.values() for n in ns}

    def last_on(key: tuple[int, int], t: float) -> Node | None:
        ops, keys = by_stream[key]
        return _last_before(ops, keys, t)

    def last_launched(tid: int, t: float) -> Node | None:
        if tid not in by_thread:
            return None
        ops, keys = by_thread[tid]
        return _last_before(ops, keys, t)

    def stream_key(n: Node) -> tuple[int, int]:
        assert n.gpu is not None
        return (n.gpu.device, n.gpu.stream)

    for tid, host in threads.items():
        last_record: Node | None = None
        for call in host:
            if call.kind is not NodeKind.HOST:
                continue
            name = call.name
            awaited: list[Node] = []
            if name in _EVENT_RECORD:
                last_record = call
            elif name in _DEVICE_SYNC:
                awaited = [x for key in by_stream if (x := last_on(key, call.start_s)) is not None]
            elif name in _STREAM_SYNC:
                corr = b.trace.calls[call.index].correlation  # host nodes come first, in trace.calls order
                stream = b.trace.sync_streams.get(corr) if corr is not None else None
                mine = last_launched(tid, call.start_s)
                key = next((k for k in by_stream if k[1] == stream), None) if stream is not None else None
                key = key or (stream_key(mine) if mine is not None else None)
                x = last_on(key, call.start_s) if key is not None else None
                awaited = [x] if x is not None else []
            elif name in _EVENT_SYNC or name in _STREAM_WAIT:
                src = None
                if last_record is not None and (mine := last_launched(tid, last_record.start_s)) is not None:
                    src = last_on(stream_key(mine), last_record.start_s)
                if name in _EVENT_SYNC:
                    awaited = [src] if src is not None else []
                elif src is not None:
                    nxt = next((g for g in by_thread[tid][0] if launch_t(g) > call.start_s), None)
                    if nxt is not None and stream_key(nxt) != stream_key(src):
                        b.edge(src.index, nxt.index, min(0.0, nxt.start_s - src.end_s), "event wait")
            elif (op := gpu_of_call.get(call.index)) is not None and _blocking_copy(name, op.gpu):
                awaited = [op]
            if awaited:
                waits[call.index] = awaited
    return waits


def _queue_waits(b: _Builder, waits: dict[int, list[Node]]) -> int:
    """The launch queue: a launch returns only once fewer than ``depth`` ops of its device are pending. Its
    depth is the most ops the trace ever had pending at a launch when that reached 512 or more (the queue was
    full: launches then block, V100 traces show 1022), else CUDA's usual 1024. Adds to ``waits``: each launch
    call waits for the end of the op launched ``depth`` launches before its own op. Returns the depth."""
    per_device: dict[int, list[Node]] = {}
    for n in b.nodes:
        if n.gpu is not None and n.launch is not None:
            per_device.setdefault(n.gpu.device, []).append(n)
    most = 0
    for ns in per_device.values():
        ns.sort(key=lambda n: (b.nodes[n.launch].start_s if n.launch is not None else 0.0, n.index))
        ends = sorted(n.end_s for n in ns)
        for k, n in enumerate(ns):
            done = bisect.bisect_right(ends, b.nodes[n.launch].start_s if n.launch is not None else 0.0)
            most = max(most, k - done)
    depth = most if most >= _FULL_QUEUE else _QUEUE_DEPTH
    for ns in per_device.values():
        for k in range(depth, len(ns)):
            call = ns[k].launch
            assert call is not None
            waits.setdefault(call, []).append(ns[k - depth])
    return depth
