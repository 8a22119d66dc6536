"""Values of layer 2: one device's step time, its parts and its interval."""

from __future__ import annotations

from dataclasses import dataclass, field

from perfcast.kernel.predict import KernelTime
from perfcast.workload.types import Op

__all__ = ["OpTime", "StepTime"]


@dataclass(frozen=True, slots=True)
class OpTime:
    """One op of the step with its predicted device time per instance and in total (x count)."""

    op: Op
    kernel: KernelTime
    host_s: float

    @property
    def total_s(self) -> float:
        """Device time of all ``count`` instances, seconds."""
        return self.kernel.time_s * self.op.count


@dataclass(frozen=True, slots=True)
class StepTime:
    """Predicted time of one step on one device (or one replica of a simple parallel run).

    ``time_s`` is wall time; ``low_s``/``high_s`` the prediction interval;
    ``device_busy_s`` the sum of kernel times; ``host_s`` the host dispatch time;
    ``comm_s`` the exposed communication time; ``by_phase_s`` and ``by_group_s``
    split the device time. ``energy_J`` is the step's energy over every GPU it
    runs on, ``avg_power_W`` the mean power of one GPU over the step and
    ``energy_by_group_J`` the ops' energy by group (a prior power model, see
    :mod:`perfcast.kernel.energy`; zero until :func:`perfcast.compose.energy.with_energy`).
    """

    model_id: str
    hardware_id: str
    mode: str
    batch_size: int
    seq_len: int
    dtype: str
    fused: bool
    parallelism: str
    time_s: float
    low_s: float
    high_s: float
    device_busy_s: float
    host_s: float
    comm_s: float
    num_kernels: int
    flops: float
    bytes: float
    by_phase_s: dict[str, float] = field(default_factory=dict)
    by_group_s: dict[str, float] = field(default_factory=dict)
    ops: tuple[OpTime, ...] = ()
    energy_J: float = 0.0
    avg_power_W: float = 0.0
    energy_by_group_J: dict[str, float] = field(default_factory=dict)
    quantization: str = "none"  # the weights' quantization, in words (Workload.quantization)

    @property
    def achieved_flops_per_s(self) -> float:
        """Model FLOPs of the step divided by its time."""
        return self.flops / self.time_s if self.time_s > 0 else 0.0

    def top_ops(self, n: int = 10) -> list[OpTime]:
        """The ``n`` ops with the largest total device time."""
        return sorted(self.ops, key=lambda o: o.total_s, reverse=True)[:n]
