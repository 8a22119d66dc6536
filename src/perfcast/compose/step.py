"""Layer 2: one device's step time from its kernels.

The host (Python + framework) dispatches kernels into the device's queue; the
device runs them in order. With eager PyTorch every kernel costs host time,
so small kernels leave the device idle while large ones let the host run
ahead. A host synchronization (``nonzero``, ``.item()``) drains the queue and
exposes the next dispatches. The step is simulated as that two-clock queue,
per run of ops that repeat together (a layer), so its cost does not grow with
the number of layers.
"""

from __future__ import annotations

from perfcast.catalog.hardware import Hardware, load_hardware
from perfcast.compose.fusion import fuse_chains
from perfcast.compose.interval import interval_for
from perfcast.compose.types import OpTime, StepTime
from perfcast.kernel.coefficients import Coefficients, load_coefficients
from perfcast.kernel.predict import predict_ops
from perfcast.workload.types import Op, OpKind, Workload

__all__ = ["FRAMEWORKS", "predict_step", "simulate_queue"]

FRAMEWORKS = ("eager", "compiled", "graph")


def _host_time(op: Op, framework: str, coeffs: Coefficients) -> float:
    if op.kind is OpKind.HOST:
        return coeffs.launch.dispatch_s.get("eager_op", 1e-5)
    if framework == "graph":
        return 0.0
    key = "compiled_op" if framework == "compiled" else "eager_op"
    return coeffs.launch.dispatch_s.get(key, coeffs.launch.dispatch_s.get("eager_op", 1e-5))


def simulate_queue(times: list[OpTime]) -> tuple[float, float]:
    """Wall time and host time of ops dispatched by one host thread into one device queue.

    Consecutive ops with the same ``count`` form a segment that repeats
    ``count`` times; a segment without synchronizations runs at the pace of its
    slower side (host or device), one with synchronizations is simulated once
    and repeated.
    """
    cpu = gpu = 0.0
    host_total = 0.0
    i = 0
    n = len(times)
    while i < n:
        j = i
        count = times[i].op.count
        while j < n and times[j].op.count == count:
            j += 1
        seg = times[i:j]
        hosts = sum(t.host_s for t in seg)
        host_total += hosts * count
        if any(t.op.kind is OpKind.HOST for t in seg):
            # each iteration drains the queue at its synchronization: simulate the first
            # iteration from the current state and a second one from the synced state
            first = _run(seg, cpu, gpu)
            second = _run(seg, *first)
            step = max(second) - max(first)
            cpu, gpu = first[0] + step * (count - 1), first[1] + step * (count - 1)
        else:
            device = sum(t.kernel.time_s for t in seg)
            cpu_end = cpu + hosts * count
            gpu = max(gpu + device * count, cpu_end + seg[-1].kernel.time_s)
            cpu = cpu_end
        i = j
    return max(cpu, gpu), host_total


_TIMES: dict[tuple[object, ...], tuple[Workload, Hardware, Coefficients, list[Op], list[OpTime]]] = {}


def _run(seg: list[OpTime], cpu: float, gpu: float) -> tuple[float, float]:
    """Host and device clocks after one pass over ``seg`` starting at (cpu, gpu)."""
    for t in seg:
        cpu += t.host_s
        if t.op.kind is OpKind.HOST:
            cpu = max(cpu, gpu)
            continue
        gpu = max(gpu, cpu) + t.kernel.time_s
    return cpu, gpu


def predict_step(workload: Workload, hardware: Hardware | str, *, fused: bool = False, framework: str | None = None,
                 coeffs: Coefficients | None = None, keep_ops: bool = True) -> StepTime:
    """Predict one step of ``workload`` on one device.

    ``fused`` applies compiler fusion (torch.compile); ``framework`` is the
    launch model: ``eager`` (default; ``compiled`` when fused) or ``graph``
    (CUDA graphs: no host time per kernel).
    """
    hw = hardware if isinstance(hardware, Hardware) else load_hardware(hardware)
    co = coeffs or load_coefficients()
    fw = framework or ("compiled" if fused else "eager")
    key = (id(workload), id(hw), id(co), fused, fw)
    hit = _TIMES.get(key)
    if hit is not None and hit[0] is workload and hit[1] is hw and hit[2] is co:
        ops, times = hit[3], hit[4]
    else:
        ops = fuse_chains(workload.ops) if fused else list(workload.ops)
        kernels = predict_ops(ops, hw, co)
        times = [OpTime(op=o, kernel=k, host_s=_host_time(o, fw, co)) for o, k in zip(ops, kernels, strict=True)]
        if len(_TIMES) > 2048:
            _TIMES.clear()
        _TIMES[key] = (workload, hw, co, ops, times)
    wall, host = simulate_queue(times)
    wall += co.launch.dispatch_s.get("step", 0.0)
    by_phase: dict[str, float] = {}
    by_group: dict[str, float] = {}
    busy = 0.0
    comm = 0.0
    for t in times:
        total = t.total_s
        busy += total
        if t.op.kind is OpKind.COMM:
            comm += total
        by_phase[t.op.phase.value] = by_phase.get(t.op.phase.value, 0.0) + total
        key = t.op.group or "other"
        by_group[key] = by_group.get(key, 0.0) + total
    low, high = interval_for(wall, kind="step", fused=fused)
    return StepTime(
        model_id=workload.model_id, hardware_id=hw.id, mode=workload.mode.value, batch_size=workload.batch_size,
        seq_len=workload.seq_len, dtype=workload.dtype.value, fused=fused, parallelism="none", time_s=wall,
        low_s=low, high_s=high, device_busy_s=busy, host_s=host, comm_s=comm,
        num_kernels=sum(o.count for o in ops if o.kind is not OpKind.HOST), flops=workload.flops,
        bytes=sum(o.bytes * o.count for o in ops), by_phase_s=by_phase, by_group_s=by_group,
        ops=tuple(times) if keep_ops else (),
    )
