"""Energy of one step: the sum of what its ops were priced at, plus what the GPUs draw while they wait.

Every op's energy was priced with its time by the kernel layer (``KernelTime.dynamic_J``,
:mod:`perfcast.kernel.energy`); the step adds them up, once per copy of the op list it runs (each data- or
tensor-parallel GPU runs one; a pipeline runs one per micro-batch, spread over its stages), and
:func:`perfcast.kernel.energy.step_energy_J` puts every GPU's static power over its kernels' time, its idle
power over the host gaps (the wall time its kernels and exposed communication leave) and active power over
exposed communication, capped at the power limit.
How settled the model is: :data:`perfcast.kernel.energy.ENERGY_STATUS`.
"""

from __future__ import annotations

from dataclasses import replace

from perfcast.catalog.hardware import Hardware
from perfcast.coefficients.kernel import Coefficients
from perfcast.compose.types import StepTime
from perfcast.kernel.energy import dynamic_energy_J, power_model, step_energy_J

__all__ = ["with_energy"]


def with_energy(step: StepTime, hw: Hardware, coeffs: Coefficients, *, gpus: int = 1,
                copies: float | None = None) -> StepTime:
    """``step`` with ``energy_J`` (all ``gpus``), ``avg_power_W`` (per GPU) and ``energy_by_group_J`` filled.

    ``copies`` is how many times the step's op list runs across the GPUs (default ``gpus``).
    ``step.ops`` must be kept (``predict_step(..., keep_ops=True)``, the default).
    """
    pm = power_model(hw, coeffs)
    n = copies if copies is not None else float(gpus)
    times = step.ops
    dynamic = dynamic_energy_J([t.kernel for t in times], [t.op.count for t in times])
    by_group: dict[str, float] = {}
    for t in times:
        g = t.op.group or "other"
        by_group[g] = by_group.get(g, 0.0) + t.kernel.energy_J * t.op.count * n
    wall = step.time_s
    idle = max(0.0, wall - step.device_busy_s - step.comm_s)  # per GPU: held with no kernel running (host gaps)
    total = step_energy_J(pm, wall_s=wall, dynamic_J=n * dynamic, comm_s=step.comm_s, devices=gpus, idle_s=idle)
    avg = total / (gpus * wall) if wall > 0 else 0.0
    return replace(step, energy_J=total, avg_power_W=avg, energy_by_group_J=by_group)
