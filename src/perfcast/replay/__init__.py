"""Replay a PyTorch profiler (Kineto) trace, on its own GPU or repriced for another (``perfcast replay``).

:mod:`~perfcast.replay.kineto` reads the trace, :mod:`~perfcast.replay.graph` rebuilds it as a dependency
graph, :mod:`~perfcast.replay.simulate` replays the graph, :mod:`~perfcast.replay.reprice` gives the GPU ops'
durations on another device or data-parallel size, and :mod:`~perfcast.replay.run` ties them together::

    from perfcast.replay import replay_trace
    result = replay_trace("trace.json.gz", hardware="h100-sxm-80gb")
    result.replayed.step_time_s, result.replayed.measured_step_time_s

A PyTorch execution trace (``ExecutionTraceObserver`` JSON: shapes, no durations) is predicted instead
(:mod:`~perfcast.replay.execution`): each step's ops composed as an eager PyTorch step on a device::

    from perfcast.replay import replay_execution_trace
    replay_execution_trace("et.json.gz", hardware="h100-sxm-80gb").step_time_s
"""

from perfcast.replay.execution import EtReplayResult, EtStepTime, replay_execution_trace
from perfcast.replay.graph import ReplayGraph, build_graph
from perfcast.replay.kineto import KinetoTrace, load_kineto, parse_kineto
from perfcast.replay.reprice import Repricing, classify, reprice
from perfcast.replay.run import ReplayResult, recorded_hardware, replay_chrome_trace, replay_trace, write_replay_trace
from perfcast.replay.simulate import Replay, StepTime, replay

__all__ = ["EtReplayResult", "EtStepTime", "KinetoTrace", "Replay", "ReplayGraph", "ReplayResult", "Repricing",
           "StepTime", "build_graph", "classify", "load_kineto", "parse_kineto", "recorded_hardware",
           "replay", "replay_chrome_trace", "replay_execution_trace", "replay_trace", "reprice", "write_replay_trace"]
