"""Per-device corrections: a few multipliers fitted on a handful of one device's own measurements.

The kernel and composition layers price every device with global coefficients and the device's datasheet
(:mod:`perfcast.kernel`). A user who measured a few runs on a device can adapt it (``perfcast adapt``,
``perfcast predict-batch --adapt``): :class:`DeviceCorrections` then multiplies the few quantities those layers
take from the datasheet and the global fit, on that device only:

- ``matrix_throughput``: the sustained throughput of the math units, i.e. the fraction of the datasheet peak a
  GEMM tile, a convolution's implicit GEMM and a fused attention kernel reach (every GEMM path's
  ``max_efficiency`` and attention's compute efficiencies);
- ``memory_bandwidth``: the fraction of the datasheet DRAM bandwidth kernels stream at (vector kernels'
  ``memory_efficiency`` on every memory kind, GEMM operands', the KV-cache reads of attention);
- ``host_overhead``: the host (CPU) time the framework spends per launched kernel (eager, autograd, compiled
  and diffusers launches; not the per-step or per-synchronization costs).

Each is 1.0 on the datasheet, the prior the fit pulls toward (:mod:`perfcast.calibrate.adapt`). A device
without corrections (``Hardware.corrections`` None) is priced exactly as before: nothing here runs.

Not corrected: the clocks under the power limit, the launch floor, collectives and links between GPUs, the
serving engines' own CPU times and the serving simulator's scalar attention rates, isolated-kernel benchmark
tables (they are priced by the kernel functions directly).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from perfcast.coefficients.compose import ComposeCoefficients
from perfcast.coefficients.kernel import Coefficients

__all__ = ["CORRECTION_NAMES", "DeviceCorrections", "correct_compose", "correct_kernel"]

# the fitted multipliers, in the order the fitter keeps them
CORRECTION_NAMES = ("matrix_throughput", "memory_bandwidth", "host_overhead")

_HOST_PER_KERNEL = ("eager_op_s", "diffusers_op_s", "eager_training_op_s", "autograd_op_s", "compiled_op_s")


class DeviceCorrections(BaseModel):
    """Multipliers on one device's datasheet-derived rates (1.0 = the datasheet and the global fit; see the module
    docstring for what each multiplies)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    matrix_throughput: float = Field(default=1.0, gt=0, description="multiplies the fraction of the peak FLOP/s "
                                     "GEMMs, convolutions and fused attention sustain")
    memory_bandwidth: float = Field(default=1.0, gt=0, description="multiplies the fraction of the DRAM bandwidth "
                                    "kernels stream at")
    host_overhead: float = Field(default=1.0, gt=0, description="multiplies the host time per launched kernel")

    def multipliers(self) -> tuple[float, ...]:
        """The multipliers in :data:`CORRECTION_NAMES` order."""
        return tuple(float(getattr(self, n)) for n in CORRECTION_NAMES)


# corrected coefficients per (coefficients object, corrections): applying is cheap, but the kernel layer's caches
# key on the content digest of what it is given, which a fresh copy per call would recompute
_KERNEL: dict[tuple[int, DeviceCorrections], tuple[Coefficients, Coefficients]] = {}
_COMPOSE: dict[tuple[int, DeviceCorrections], tuple[ComposeCoefficients, ComposeCoefficients]] = {}
_LIMIT = 256


def correct_kernel(co: Coefficients, corrections: DeviceCorrections | None) -> Coefficients:
    """The kernel coefficients ``co`` as they apply to a device with ``corrections`` (``co`` itself for None)."""
    if corrections is None:
        return co
    key = (id(co), corrections)
    hit = _KERNEL.get(key)
    if hit is not None and hit[0] is co:
        return hit[1]
    mt, mb = corrections.matrix_throughput, corrections.memory_bandwidth
    paths = {name: p.model_copy(update={"max_efficiency": p.max_efficiency * mt,
                                        "memory_efficiency": p.memory_efficiency * mb})
             for name, p in co.gemm.paths.items()}
    ac = co.attention
    attention = ac.model_copy(update={"compute_efficiency": ac.compute_efficiency * mt,
                                      "backward_efficiency": ac.backward_efficiency * mt,
                                      "training_efficiency": ac.training_efficiency * mt,
                                      "memory_efficiency": ac.memory_efficiency * mb})
    vector = co.vector.model_copy(update={"memory_efficiency": {k: v * mb for k, v in
                                                                co.vector.memory_efficiency.items()}})
    out = co.model_copy(update={"gemm": co.gemm.model_copy(update={"paths": paths}), "attention": attention,
                                "vector": vector})
    if len(_KERNEL) >= _LIMIT:
        _KERNEL.clear()
    _KERNEL[key] = (co, out)
    return out


def correct_compose(cc: ComposeCoefficients, corrections: DeviceCorrections | None) -> ComposeCoefficients:
    """The composition coefficients ``cc`` as they apply to a device with ``corrections`` (``cc`` itself for
    None)."""
    if corrections is None:
        return cc
    key = (id(cc), corrections)
    hit = _COMPOSE.get(key)
    if hit is not None and hit[0] is cc:
        return hit[1]
    host = cc.host
    update = {name: getattr(host, name) * corrections.host_overhead for name in _HOST_PER_KERNEL
              if getattr(host, name) is not None}
    out = cc.model_copy(update={"host": host.model_copy(update=update)})
    if len(_COMPOSE) >= _LIMIT:
        _COMPOSE.clear()
    _COMPOSE[key] = (cc, out)
    return out
