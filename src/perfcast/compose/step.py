"""Layer 2: one device's step time from its kernels.

The host (Python + framework) dispatches kernels into the device's queue; the
device runs them in order. With eager PyTorch every kernel costs host time,
so small kernels leave the device idle while large ones let the host run
ahead. A host synchronization (``nonzero``, ``.item()``) drains the queue and
exposes the next dispatches. The step is simulated as that two-clock queue,
per run of ops that repeat together (a layer), so its cost does not grow with
the number of layers.

Eager and compiled PyTorch run attention through SDPA, whose flash backend is FlashAttention-2: on Hopper and
later GPUs it is slowed as :mod:`perfcast.kernel.legacy_mma` says.
"""

from __future__ import annotations

from perfcast.catalog.corrections import correct_compose
from perfcast.catalog.hardware import Hardware, load_hardware
from perfcast.coefficients.bundle import Calibration, resolve_calibration
from perfcast.coefficients.compose import HostCoefficients
from perfcast.compose.fusion import fuse_chains
from perfcast.compose.interval import interval_for
from perfcast.compose.types import OpTime, StepTime
from perfcast.digest import content_digest, content_key
from perfcast.errors import ConfigError
from perfcast.kernel.legacy_mma import fa2_attention
from perfcast.kernel.predict import price_ops
from perfcast.workload.types import Mode, Op, OpKind, Phase, Workload

__all__ = ["FRAMEWORKS", "predict_step", "simulate_queue"]

FRAMEWORKS = ("eager", "compiled", "graph")


def _host_times(framework: str, training: bool, host: HostCoefficients) -> dict[Phase, float]:
    """Host time to launch one kernel, per phase, under ``framework``."""
    if framework == "graph":
        return {Phase.FORWARD: 0.0, Phase.BACKWARD: 0.0, Phase.OPTIMIZER: 0.0}
    if framework == "compiled":
        fwd = host.compiled_op_s
    else:
        fwd = host.eager_training_op_s if training else host.eager_op_s
    return {Phase.FORWARD: fwd, Phase.BACKWARD: host.autograd_op_s, Phase.OPTIMIZER: host.autograd_op_s}


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


# per (workload, hardware, kernel and composition coefficients: their contents), fused, framework: the ops and times
_TIMES: dict[tuple[object, ...], tuple[list[Op], list[OpTime]]] = {}


def _run(seg: list[OpTime], cpu: float, gpu: float) -> tuple[float, float]:
    """Host and device clocks after one pass over ``seg`` starting at (cpu, gpu)."""
    for t in seg:
        if t.op.kind is OpKind.HOST:
            # the host blocks until the device drains its queue, then pays its own time
            cpu = max(cpu, gpu) + t.host_s
            continue
        cpu += t.host_s
        gpu = max(gpu, cpu) + t.kernel.time_s
    return cpu, gpu


def predict_step(workload: Workload, hardware: Hardware | str, *, fused: bool = False, framework: str | None = None,
                 calibration: Calibration | None = None, keep_ops: bool = True) -> StepTime:
    """Predict one step of ``workload`` on one device.

    ``fused`` applies compiler fusion (torch.compile); ``framework`` is the
    launch model: ``eager`` (default; ``compiled`` when fused) or ``graph``
    (CUDA graphs: no host time per kernel). ``calibration``: the shipped one when None.
    """
    hw = hardware if isinstance(hardware, Hardware) else load_hardware(hardware)
    cal = resolve_calibration(calibration)
    # an adapted device's host time per kernel (its kernels' corrections: price_ops)
    co, cc = cal.kernel, correct_compose(cal.compose, hw.corrections)
    fw = framework or ("compiled" if fused else "eager")
    if fw not in FRAMEWORKS:
        raise ConfigError(f"unknown framework {fw!r}; use one of {', '.join(FRAMEWORKS)}")
    key = (content_key(workload), content_digest(hw), content_digest(co), content_digest(cc), fused, fw)
    hit = _TIMES.get(key)
    if hit is not None:
        ops, times = hit
    else:
        ops = fuse_chains(workload.ops) if fused else list(workload.ops)
        kernels = price_ops(ops, hw, co)
        if fw in ("eager", "compiled"):  # SDPA's flash backend is FlashAttention-2
            kernels = fa2_attention(ops, kernels, hw, co)
        launch = _host_times(fw, workload.mode is Mode.TRAINING, cc.host)
        times = [OpTime(op=o, kernel=k, host_s=cc.host.sync_s if o.kind is OpKind.HOST else launch[o.phase])
                 for o, k in zip(ops, kernels, strict=True)]
        if len(_TIMES) > 2048:
            _TIMES.clear()
        _TIMES[key] = (ops, times)
    wall, host = simulate_queue(times)
    wall += cc.host.step_overhead_s
    by_phase: dict[str, float] = {}
    by_group: dict[str, float] = {}
    busy = 0.0
    comm = 0.0
    for t in times:
        total = t.total_s
        busy += total
        if t.op.kind is OpKind.COMM:
            comm += total
        by_phase[t.op.phase] = by_phase.get(t.op.phase, 0.0) + total
        group = t.op.group or "other"
        by_group[group] = by_group.get(group, 0.0) + total
    low, high = interval_for(wall, cal.intervals, kind="step", fused=fused)
    return StepTime(
        model_id=workload.model_id, hardware_id=hw.id, mode=workload.mode.value, batch_size=workload.batch_size,
        seq_len=workload.seq_len, dtype=workload.dtype.value, fused=fused, parallelism="none", time_s=wall,
        low_s=low, high_s=high, device_busy_s=busy, host_s=host, comm_s=comm,
        num_kernels=sum(o.count for o in ops if o.kind is not OpKind.HOST), flops=workload.flops,
        bytes=sum(o.bytes * o.count for o in ops), by_phase_s={str(k): v for k, v in by_phase.items()},
        by_group_s=by_group,
        ops=tuple(times) if keep_ops else (), quantization=workload.quantization,
    )
