"""Energy of one step: its ops' energy plus what the GPUs draw while they wait.

Every GPU of the step draws its static power for the whole wall time (host
gaps, pipeline bubbles and waits included); on top of that come the ops'
dynamic energies (:mod:`perfcast.kernel.energy`), once per copy of the op list
the step runs (each data- or tensor-parallel GPU runs one; a pipeline runs one
per micro-batch, spread over its stages), and the active power of exposed
communication. The mean power of a GPU is capped at its TDP. A prior model
(no measured power to fit it on): :data:`perfcast.kernel.energy.ENERGY_STATUS`.
"""

from __future__ import annotations

from dataclasses import replace

from perfcast.catalog.hardware import Hardware
from perfcast.compose.types import StepTime
from perfcast.kernel.coefficients import Coefficients, load_coefficients
from perfcast.kernel.energy import ops_energy, power_model

__all__ = ["with_energy"]


def with_energy(step: StepTime, hw: Hardware, coeffs: Coefficients | None = None, *, gpus: int = 1,
                copies: float | None = None) -> StepTime:
    """``step`` with ``energy_J`` (all ``gpus``), ``avg_power_W`` (per GPU) and ``energy_by_group_J`` filled.

    ``copies`` is how many times the step's op list runs across the GPUs (default ``gpus``).
    ``step.ops`` must be kept (``predict_step(..., keep_ops=True)``, the default).
    """
    co = coeffs or load_coefficients()
    pm = power_model(hw, co)
    n = copies if copies is not None else float(gpus)
    times = step.ops
    energies = ops_energy([t.op for t in times], [t.kernel for t in times], hw, co)
    dynamic = 0.0
    by_group: dict[str, float] = {}
    for t, e in zip(times, energies, strict=True):
        c = t.op.count
        dynamic += e.dynamic_J * c
        g = t.op.group or "other"
        by_group[g] = by_group.get(g, 0.0) + e.energy_J * c * n
    wall = step.time_s
    total = gpus * pm.static_W * wall + n * dynamic + gpus * pm.active_W * step.comm_s
    total = min(total, gpus * pm.tdp_W * wall)
    avg = total / (gpus * wall) if wall > 0 else 0.0
    return replace(step, energy_J=total, avg_power_W=avg, energy_by_group_J=by_group)
