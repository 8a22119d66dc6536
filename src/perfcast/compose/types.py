"""Values of layer 2: one device's step time, its parts and its interval."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from perfcast.kernel.types import KernelTime
from perfcast.workload.types import Op

__all__ = ["MemoryBreakdown", "OpTime", "StepTime"]


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
class MemoryBreakdown:
    """Bytes one GPU holds at the peak of a step, by part; ``capacity_bytes`` is the device memory.

    One breakdown for every step perfcast prices: a predicted step (:mod:`perfcast.compose.memory`) and a
    training step under a parallel plan (:mod:`perfcast.system.memory`). ``weights_bytes``: the parameters as
    stored (quantized weights at their stored size); ``gradients_bytes`` and ``optimizer_bytes``: training
    only; ``activations_bytes``: the live activations (inference: the largest op's inputs and outputs;
    training: what autograd saves plus that peak); ``comm_buffers_bytes``, ``context_bytes`` and
    ``fragmentation_bytes``: the framework's overhead; ``kv_cache_bytes``: the K/V cache of prefill/decode
    (0 for a training step).
    """

    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    comm_buffers_bytes: float
    context_bytes: float
    fragmentation_bytes: float
    capacity_bytes: float
    kv_cache_bytes: float = 0.0

    # to_json: the parts (as :meth:`parts` orders them), the total and the capacity
    JSON_ORDER: ClassVar[tuple[str, ...]] = ("weights_bytes", "kv_cache_bytes", "gradients_bytes", "optimizer_bytes",
                                             "activations_bytes", "comm_buffers_bytes", "context_bytes",
                                             "fragmentation_bytes", "total_bytes", "capacity_bytes")

    @property
    def total_bytes(self) -> float:
        """Everything the GPU holds at the peak of the step."""
        return sum(self.parts().values())

    @property
    def fits(self) -> bool:
        """Whether the step fits in the device memory."""
        return self.total_bytes <= self.capacity_bytes

    def parts(self) -> dict[str, float]:
        """The parts with unit-bearing keys (``weights_bytes`` ...), total and capacity excluded."""
        return {"weights_bytes": self.weights_bytes, "kv_cache_bytes": self.kv_cache_bytes,
                "gradients_bytes": self.gradients_bytes, "optimizer_bytes": self.optimizer_bytes,
                "activations_bytes": self.activations_bytes, "comm_buffers_bytes": self.comm_buffers_bytes,
                "context_bytes": self.context_bytes, "fragmentation_bytes": self.fragmentation_bytes}

    @classmethod
    def build(cls, *, weights: float, gradients: float, optimizer: float, activations: float, capacity: float,
              comm_buffers: float, context: float, fragmentation_frac: float,
              kv_cache: float = 0.0) -> MemoryBreakdown:
        """The breakdown of the tensors' bytes, with the context and the allocator's fragmentation allowance
        (``fragmentation_frac`` of every tensor byte) added."""
        tensors = weights + kv_cache + gradients + optimizer + activations + comm_buffers
        return cls(weights, gradients, optimizer, activations, comm_buffers, context, fragmentation_frac * tensors,
                   capacity, kv_cache)


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
    ``memory`` is one GPU's memory at the peak of the step (set by :func:`perfcast.compose.predict.predict`).
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
    memory: MemoryBreakdown | None = None

    @property
    def achieved_flops_per_s(self) -> float:
        """Model FLOPs of the step divided by its time."""
        return self.flops / self.time_s if self.time_s > 0 else 0.0

    def top_ops(self, n: int = 10) -> list[OpTime]:
        """The ``n`` ops with the largest total device time."""
        return sorted(self.ops, key=lambda o: o.total_s, reverse=True)[:n]
