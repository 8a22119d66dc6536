"""Energy of a serving run: what its iterations priced, summed (no work in the event loop beyond a few sums).

The kernel layer prices every op's energy beside its time (:mod:`perfcast.kernel.energy`). The iteration
model tabulates the dynamic energy of the linear layers and the LM head beside their times
(:class:`~perfcast.serving.iteration.IterationModel`), and the clock sums, over every iteration of one
tensor-parallel rank through every pipeline stage, that energy and the attention calls' seconds, FLOPs and bytes
(prefill and decode apart) and the communication seconds (:class:`EnergyCounts`). After the run, attention's
dynamic energy is priced once from those sums (prefill compute-bound, decode memory-bound: the energy of a kernel
is linear in its time, FLOPs and bytes below the TDP cap), every tensor-parallel GPU of an iteration adds its
share, and :func:`~perfcast.kernel.energy.step_energy_J` gives the run's energy: every GPU of the deployment at
its static power while its kernels run and its idle power for the rest of the time from 0 to the last finish
(waiting for work, and the engine's CPU work inside each iteration), the priced ops' dynamic energy, active
power during the communication, capped at the power limit. The busy part is static power over the GPU seconds
of the iterations' kernels plus everything dynamic; the idle part idle power over the rest. How settled the
model is: :data:`ENERGY_STATUS`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Protocol

import numpy as np

from perfcast.catalog.hardware import Hardware
from perfcast.coefficients.kernel import Coefficients
from perfcast.dtypes import DType
from perfcast.kernel.energy import ENERGY_STATUS, kernel_dynamic_J, power_model, step_energy_J
from perfcast.kernel.types import Bound
from perfcast.results.serialize import json_field
from perfcast.serving.config import ServingConfig
from perfcast.workload.types import OpKind

__all__ = ["EnergyCounts", "RunCounts", "ServingEnergy", "serving_energy"]


@dataclass(frozen=True, slots=True)
class EnergyCounts:
    """What a run's iterations priced for its energy, summed over every engine's iterations on one
    tensor-parallel GPU through every pipeline stage (joules, seconds, FLOPs, bytes), and the device and
    coefficients that priced them."""

    hardware: Hardware
    coeffs: Coefficients
    dtype: DType  # the activations' dtype (attention's datapath)
    dynamic_J: float  # linear layers, LM head, vision tower: their ops' dynamic energy
    prefill_attention_s: float
    prefill_attention_flops: float
    prefill_attention_bytes: float
    decode_attention_s: float
    decode_attention_flops: float
    decode_attention_bytes: float
    comm_s: float  # tensor-parallel collectives
    cpu_s: float = 0.0  # the engine's CPU work inside iterations, the GPU idle

    def attention_dynamic_J(self) -> float:
        """Dynamic energy of the attention calls (J, one GPU): prefill priced compute-bound, decode memory-bound,
        each once from its sums."""
        hw, co, dt = self.hardware, self.coeffs, self.dtype
        return (kernel_dynamic_J(OpKind.ATTENTION, dt, time_s=self.prefill_attention_s,
                                 flops=self.prefill_attention_flops, bytes_=self.prefill_attention_bytes,
                                 bound=Bound.COMPUTE, hw=hw, coeffs=co)
                + kernel_dynamic_J(OpKind.ATTENTION, dt, time_s=self.decode_attention_s,
                                   flops=self.decode_attention_flops, bytes_=self.decode_attention_bytes,
                                   bound=Bound.MEMORY, hw=hw, coeffs=co))


class RunCounts(Protocol):
    """What the energy model reads from a finished run (a :class:`~perfcast.serving.result.ServingResult`)."""

    @property
    def config(self) -> ServingConfig: ...  # the deployment: tp, pp, replicas
    @property
    def finish_s(self) -> np.ndarray: ...  # per request: finish time (s; NaN when unfinished)
    @property
    def generated_tokens(self) -> np.ndarray: ...  # per request: output tokens emitted
    @property
    def gpu_time_s(self) -> float: ...  # summed time of every engine's iterations on their own (s)
    @property
    def energy_counts(self) -> EnergyCounts | None: ...  # what the iterations priced (None: nothing ran)


@dataclass(frozen=True, slots=True)
class ServingEnergy:
    """Energy of a whole serving run over every GPU of the deployment (joules, watts):
    ``energy_J = busy_energy_J + idle_energy_J = static_J + dynamic_J + comm_J`` below the TDP cap."""

    energy_J: float
    busy_energy_J: float = field(metadata=json_field(key="energy_busy_J"))
    idle_energy_J: float = field(metadata=json_field(key="energy_idle_J"))
    num_gpus: int
    duration_s: float
    output_tokens: int
    power_limited: bool = field(metadata=json_field(key="energy_power_limited"))
    static_J: float = 0.0  # every GPU's static power while it runs kernels
    dynamic_J: float = 0.0  # the priced ops' dynamic energy, every GPU
    comm_J: float = 0.0  # active power during the tensor-parallel collectives, every GPU

    # to_json: the totals, per token and per GPU, and the model's status (the parts stay in Python)
    requests: int = 0  # requests finished in the run

    JSON_ORDER: ClassVar[tuple[str, ...]] = ("energy_J", "energy_per_output_token_J", "energy_per_request_J",
                                             "avg_power_W", "avg_power_per_gpu_W",
                                             "busy_energy_J", "idle_energy_J", "power_limited", "energy_model")

    @property
    def energy_per_output_token_J(self) -> float:
        """Joules per generated token (all GPUs, idle time included)."""
        return self.energy_J / self.output_tokens if self.output_tokens else 0.0

    @property
    def energy_per_request_J(self) -> float:
        """Joules per finished request (all GPUs, idle time included)."""
        return self.energy_J / self.requests if self.requests else 0.0

    @property
    def avg_power_W(self) -> float:
        """Mean power of the deployment's GPUs together over the run, watts."""
        return self.energy_J / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def avg_power_per_gpu_W(self) -> float:
        """Mean power of one GPU over the run, watts."""
        return self.energy_J / (self.num_gpus * self.duration_s) if self.duration_s > 0 else 0.0

    @property
    def energy_model(self) -> str:
        """How settled the power model is (:data:`~perfcast.kernel.energy.ENERGY_STATUS`)."""
        return ENERGY_STATUS


def serving_energy(result: RunCounts) -> ServingEnergy:
    """Energy of ``result``'s run (see the module docstring)."""
    cfg = result.config
    tp = cfg.tensor_parallel_size
    gpus = cfg.num_replicas * cfg.pipeline_parallel_size * tp
    finished = np.isfinite(result.finish_s)
    span = float(np.max(result.finish_s[finished])) if finished.any() else 0.0
    out_tokens = int(result.generated_tokens.sum())
    requests = int(finished.sum())
    counts = result.energy_counts
    if counts is None:
        return ServingEnergy(0.0, 0.0, 0.0, gpus, span, out_tokens, False, requests=requests)
    pm = power_model(counts.hardware, counts.coeffs)
    # GPU seconds of kernels: an iteration holds its tensor-parallel GPUs, idle during its CPU work
    busy_s = min(max(result.gpu_time_s - counts.cpu_s, 0.0) * tp, gpus * span)
    dynamic = (counts.dynamic_J + counts.attention_dynamic_J()) * tp
    comm_s = counts.comm_s * tp / gpus if gpus else 0.0  # per GPU of the deployment
    idle_s = (gpus * span - busy_s) / gpus if gpus else 0.0  # per GPU: held with no kernel running
    energy = step_energy_J(pm, wall_s=span, dynamic_J=dynamic, comm_s=comm_s, devices=gpus, idle_s=idle_s)
    static, comm = pm.static_W * busy_s, gpus * pm.active_W * comm_s
    idle = pm.idle_W * (gpus * span - busy_s)
    return ServingEnergy(energy_J=energy, busy_energy_J=energy - idle, idle_energy_J=idle, num_gpus=gpus,
                         duration_s=span, output_tokens=out_tokens, power_limited=energy < static + dynamic + comm,
                         static_J=static, dynamic_J=dynamic, comm_J=comm, requests=requests)
