"""Small synthetic Kineto traces written by the tests (no copy of a recorded trace).

Times are microseconds as Kineto writes them. :class:`TraceBuilder` appends host runtime calls and the GPU ops
they launch, linked by correlation id (and an ``ac2g`` flow, as the profiler writes it).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

PID = 100
MAIN = 100


class TraceBuilder:
    """Build the events of one trace; :meth:`data` gives the JSON object."""

    def __init__(self, device: str = "NVIDIA A100-SXM4-40GB", world_size: int | None = None) -> None:
        self.events: list[dict[str, Any]] = []
        self.corr = 0
        self.device = device
        self.world_size = world_size

    def call(self, name: str, ts: float, dur: float, *, tid: int = MAIN) -> int:
        """A runtime call; returns its correlation id."""
        self.corr += 1
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": PID, "tid": tid, "ts": ts,
                            "dur": dur, "args": {"correlation": self.corr, "External id": self.corr}})
        return self.corr

    def kernel(self, name: str, ts: float, dur: float, *, launch_ts: float, stream: int = 7, tid: int = MAIN,
               launch_dur: float = 4.0, kind: str = "kernel", nbytes: int = 0) -> int:
        """A launch call at ``launch_ts`` and the GPU op it releases at ``ts``."""
        call = {"kernel": "cudaLaunchKernel", "gpu_memcpy": "cudaMemcpyAsync", "gpu_memset": "cudaMemsetAsync"}[kind]
        corr = self.call(call, launch_ts, launch_dur, tid=tid)
        args: dict[str, Any] = {"device": 0, "stream": stream, "correlation": corr, "External id": corr}
        if nbytes:
            args["bytes"] = nbytes
        self.events.append({"ph": "X", "cat": kind, "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
                            "args": args})
        self.events.append({"ph": "s", "cat": "ac2g", "name": "ac2g", "id": corr, "pid": PID, "tid": tid,
                            "ts": launch_ts})
        self.events.append({"ph": "f", "cat": "ac2g", "name": "ac2g", "id": corr, "pid": 0, "tid": stream, "ts": ts,
                            "bp": "e"})
        return corr

    def cpu_op(self, name: str, ts: float, dur: float, *, dims: list[list[int]] | None = None,
               types: list[str] | None = None, tid: int = MAIN, cat: str = "cpu_op") -> None:
        """A CPU operator (or user annotation) with recorded input shapes."""
        args: dict[str, Any] = {}
        if dims is not None:
            args["Input Dims"] = dims
            args["Input type"] = types or ["float"] * len(dims)
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": PID, "tid": tid, "ts": ts, "dur": dur,
                            "args": args})

    def step(self, n: int, ts: float, dur: float, *, tid: int = MAIN) -> None:
        """A ``ProfilerStep#n`` annotation."""
        self.cpu_op(f"ProfilerStep#{n}", ts, dur, tid=tid, cat="user_annotation")

    def data(self) -> dict[str, Any]:
        """The trace as the profiler exports it."""
        out: dict[str, Any] = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": self.device}],
                               "traceEvents": self.events}
        if self.world_size is not None:
            out["distributedInfo"] = {"backend": "nccl", "rank": 0, "world_size": self.world_size}
        return out

    def write(self, path: Path, *, gz: bool = True) -> Path:
        """Write the trace (gzip by default) and return its path."""
        text = json.dumps(self.data())
        if gz:
            with gzip.open(path, "wt", encoding="utf-8") as fh:
                fh.write(text)
        else:
            path.write_text(text, encoding="utf-8")
        return path
