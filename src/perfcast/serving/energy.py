"""Energy of a serving run, from what the simulation already counted (no work in the event loop).

Every GPU of the deployment draws its static power for the whole run (from
time 0 to the last finish). While an engine runs an iteration (the summed
``gpu_time_s``), its GPUs also draw active power, the math units' energy for
the run's FLOPs (``2 x active parameters`` per prompt or generated token, plus
attention over the context) and the DRAM energy of the bytes the iterations
stream: every iteration reads its stage's weights once, every decode step reads
its sequence's KV cache. Busy power is capped at TDP. The per-op terms are
those of :mod:`perfcast.kernel.energy` (a prior model: :data:`ENERGY_STATUS`);
the compute-bound prefill math is priced at boost voltage (a small overestimate
where the clock model throttles).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from perfcast.catalog.hardware import load_hardware
from perfcast.catalog.models import load_model
from perfcast.dtypes import DType
from perfcast.kernel.coefficients import Coefficients, load_coefficients
from perfcast.kernel.energy import ENERGY_STATUS, power_model
from perfcast.kernel.power import datapath, energy_per_flop_J
from perfcast.serving.config import ServingConfig

__all__ = ["RunCounts", "ServingEnergy", "serving_energy"]


class RunCounts(Protocol):
    """What the energy model reads from a finished run (a :class:`~perfcast.serving.result.ServingResult`)."""

    @property
    def config(self) -> ServingConfig: ...  # the deployment: model, hardware, tp, pp, replicas
    @property
    def finish_s(self) -> np.ndarray: ...  # per request: finish time (s; NaN when unfinished)
    @property
    def first_token_s(self) -> np.ndarray: ...  # per request: first token time (s; NaN before it)
    @property
    def prompt_tokens(self) -> np.ndarray: ...  # per request: prompt tokens
    @property
    def generated_tokens(self) -> np.ndarray: ...  # per request: output tokens emitted
    @property
    def gpu_time_s(self) -> float: ...  # summed time of every engine's iterations on their own (s)
    @property
    def iterations(self) -> int: ...  # iterations over every engine
    @property
    def weight_bytes_per_gpu(self) -> float: ...  # one GPU's weight bytes of its stage
    @property
    def kv_bytes_per_token(self) -> float: ...  # KV bytes of one token on one GPU
    @property
    def dtype(self) -> str: ...  # the dtype that ran


@dataclass(frozen=True, slots=True)
class ServingEnergy:
    """Energy of a whole serving run over every GPU of the deployment (joules, watts)."""

    energy_J: float
    busy_energy_J: float
    idle_energy_J: float
    num_gpus: int
    duration_s: float
    output_tokens: int
    power_limited: bool

    @property
    def energy_per_output_token_J(self) -> float:
        """Joules per generated token (all GPUs, idle time included)."""
        return self.energy_J / self.output_tokens if self.output_tokens else 0.0

    @property
    def avg_power_per_gpu_W(self) -> float:
        """Mean power of one GPU over the run, watts."""
        return self.energy_J / (self.num_gpus * self.duration_s) if self.duration_s > 0 else 0.0

    def as_dict(self) -> dict[str, object]:
        """JSON-ready keys (units in the names)."""
        return {"energy_J": self.energy_J, "energy_per_output_token_J": self.energy_per_output_token_J,
                "avg_power_per_gpu_W": self.avg_power_per_gpu_W, "energy_busy_J": self.busy_energy_J,
                "energy_idle_J": self.idle_energy_J, "energy_power_limited": self.power_limited,
                "energy_model": ENERGY_STATUS}


def serving_energy(result: RunCounts, coeffs: Coefficients | None = None) -> ServingEnergy:
    """Energy of ``result``'s run (see the module docstring)."""
    cfg = result.config
    co = coeffs or load_coefficients()
    hw = load_hardware(cfg.hardware)
    model = load_model(cfg.model)
    pm = power_model(hw, co)
    tp, pp = cfg.tensor_parallel_size, cfg.pipeline_parallel_size
    gpus = cfg.num_replicas * pp * tp
    finished = np.isfinite(result.finish_s)
    span = float(np.max(result.finish_s[finished])) if finished.any() else 0.0
    busy = result.gpu_time_s * tp  # GPU-seconds: each engine's iteration occupies its tensor-parallel GPUs
    prompts = result.prompt_tokens[np.isfinite(result.first_token_s)].astype(float)
    gen = result.generated_tokens.astype(float)
    ctx = result.prompt_tokens.astype(float)
    out_tokens = int(gen.sum())
    # FLOPs over the whole deployment: weights x tokens, plus attention (QK^T and PV) over the context
    attn_per_ctx = 4.0 * model.num_layers * model.num_heads * model.head_dim
    flops = 2.0 * model.num_active_params() * (float(prompts.sum()) + out_tokens)
    flops += attn_per_ctx * (float(np.sum(prompts * prompts)) / 2.0 + float(np.sum(gen * (ctx + gen / 2.0))))
    # DRAM: each engine iteration reads its stage's weight shard on each of its GPUs; decode reads the KV cache
    dram = result.iterations * result.weight_bytes_per_gpu * tp
    dram += float(np.sum(gen * (ctx + gen / 2.0))) * result.kv_bytes_per_token * tp * pp
    e_flop = energy_per_flop_J(hw, datapath(hw, DType(result.dtype)), co)
    dynamic = pm.active_W * busy + flops * e_flop + dram * pm.dram_J_per_byte
    busy_e = pm.static_W * busy + dynamic
    limited = busy_e > pm.tdp_W * busy
    if limited:
        busy_e = pm.tdp_W * busy
    idle_e = pm.idle_W * max(0.0, gpus * span - busy)
    return ServingEnergy(energy_J=busy_e + idle_e, busy_energy_J=busy_e, idle_energy_J=idle_e, num_gpus=gpus,
                         duration_s=span, output_tokens=out_tokens, power_limited=limited)
