"""Per-op energy on one device from the power model that also sets the sustained clock.

An op that runs ``t`` seconds draws

- static power ``P_static`` (leakage, I/O, the rest of the board; the share of
  TDP that :mod:`perfcast.kernel.power` reserves) for ``t``;
- active power ``P_active = active_frac * (TDP - P_static)`` at clock fraction
  ``x`` and voltage ``v``, scaled by ``x * v**2``, for ``t``: what a resident
  kernel costs whatever it computes (clock tree, issue, caches, on-chip traffic);
- ``flops * e_flop(datapath) * v**2``: the math units (tensor cores, CUDA cores,
  AMD FP32 matrix cores), at the energy per FLOP the clock model uses;
- ``dram_bytes * e_dram``: the DRAM interface. A compute-bound kernel moves at
  least ``flops / flop_per_dram_byte`` bytes (tiles are re-read), as the clock model assumes.

A compute-bound op runs at the clock :func:`~perfcast.kernel.power.sustained_clock_frac`
gives its datapath (DVFS lowers the voltage too); every other op at boost.
The average power is capped at TDP: an op whose sum exceeds ``TDP * t`` is
power-limited (its clock would throttle; the cap keeps the energy at the limit).
Between kernels (host gaps, pipeline bubbles, waits) a device draws its static
power only; during exposed communication it draws static plus active power
(communication kernels keep it clocked; link energy is small beside it).

Status: a prior. The energies per FLOP are the fitted coefficients of the clock
model (fitted on kernel *times*, where throttling shows); no measured power or
energy of a run is in the ground truth, so ``leakage_frac`` (static and idle
power), ``active_frac`` and the DRAM energies per bit are literature priors,
not fitted. :data:`ENERGY_STATUS` says so in every output.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from perfcast.catalog.hardware import Hardware
from perfcast.kernel.coefficients import Coefficients, load_coefficients
from perfcast.kernel.power import (
    datapath,
    dram_energy_per_byte_J,
    energy_per_flop_J,
    static_power_W,
    sustained_clock_frac,
    voltage_frac,
)
from perfcast.kernel.predict import KernelTime
from perfcast.workload.types import Op, OpKind

__all__ = ["ENERGY_STATUS", "OpEnergy", "PowerModel", "op_energy", "ops_energy", "power_model"]

ENERGY_STATUS = ("prior: power model of the sustained-clock fit (energy per FLOP fitted on kernel times); "
                 "static/idle share, active share and DRAM energy per bit are literature priors; "
                 "no measured power in the ground truth")

_MATRIX_KINDS = (OpKind.GEMM, OpKind.ATTENTION, OpKind.CONV)


@dataclass(frozen=True, slots=True)
class OpEnergy:
    """Energy of one instance of an op: ``static_J + dynamic_J = energy_J`` (joules), its average power
    (watts) and whether the TDP cap bound it."""

    energy_J: float
    static_J: float
    dynamic_J: float
    avg_power_W: float
    power_limited: bool


@dataclass(frozen=True, slots=True)
class PowerModel:
    """One device's power terms (watts, joules per FLOP and per byte at boost voltage)."""

    hardware_id: str
    tdp_W: float
    static_W: float
    active_W: float
    dram_J_per_byte: float
    flop_per_dram_byte: float
    coeffs: Coefficients = field(repr=False, compare=False)

    def voltage_frac(self, clock_frac: float) -> float:
        """Voltage at ``clock_frac`` of boost, as a fraction of the boost voltage (the clock model's DVFS law)."""
        return voltage_frac(clock_frac, self.coeffs)

    @property
    def idle_W(self) -> float:
        """Power between kernels (host gaps, bubbles, an engine with nothing to run), watts."""
        return self.static_W

    @property
    def comm_W(self) -> float:
        """Power during exposed communication (static + active at boost), watts."""
        return self.static_W + self.active_W

    def busy_energy_J(self, time_s: float, flops: float, dram_bytes: float, e_flop_J: float,
                      clock_frac: float = 1.0) -> float:
        """Energy of ``time_s`` seconds of kernels doing ``flops`` (at ``e_flop_J`` per FLOP at boost voltage)
        and moving ``dram_bytes``, capped at TDP; joules."""
        if time_s <= 0:
            return 0.0
        v2 = self.voltage_frac(clock_frac) ** 2
        e = (self.static_W + self.active_W * clock_frac * v2) * time_s + flops * e_flop_J * v2 + \
            dram_bytes * self.dram_J_per_byte
        return min(e, self.tdp_W * time_s)


_MODELS: dict[tuple[int, int], tuple[Hardware, Coefficients, PowerModel]] = {}


def power_model(hw: Hardware, coeffs: Coefficients | None = None) -> PowerModel:
    """The power terms of ``hw`` (cached per device and coefficients)."""
    co = coeffs or load_coefficients()
    key = (id(hw), id(co))
    hit = _MODELS.get(key)
    if hit is not None and hit[0] is hw and hit[1] is co:
        return hit[2]
    static = static_power_W(hw, co)
    pm = PowerModel(hardware_id=hw.id, tdp_W=hw.tdp_W, static_W=static,
                    active_W=co.power.active_frac * max(0.0, hw.tdp_W - static),
                    dram_J_per_byte=dram_energy_per_byte_J(hw, co), flop_per_dram_byte=co.power.flop_per_dram_byte,
                    coeffs=co)
    if len(_MODELS) > 256:
        _MODELS.clear()
    _MODELS[key] = (hw, co, pm)
    return pm


def op_energy(op: Op, kernel: KernelTime, hw: Hardware, coeffs: Coefficients | None = None) -> OpEnergy:
    """Energy of one instance of ``op`` whose predicted time is ``kernel`` (see the module docstring)."""
    return ops_energy([op], [kernel], hw, coeffs)[0]


def ops_energy(ops: Sequence[Op], kernels: Sequence[KernelTime], hw: Hardware,
               coeffs: Coefficients | None = None) -> list[OpEnergy]:
    """Energy of one instance of each op (``kernels`` from :func:`perfcast.kernel.predict_ops`)."""
    co = coeffs or load_coefficients()
    pm = power_model(hw, co)
    e_flop: dict[str, float] = {}
    out = []
    zero = OpEnergy(0.0, 0.0, 0.0, 0.0, False)
    for op, kt in zip(ops, kernels, strict=True):
        t = kt.time_s
        if t <= 0:
            out.append(zero)
            continue
        if kt.bound == "comm":
            e = pm.comm_W * t
            out.append(OpEnergy(e, pm.static_W * t, e - pm.static_W * t, pm.comm_W, False))
            continue
        if kt.bound == "host":
            out.append(OpEnergy(pm.idle_W * t, pm.idle_W * t, 0.0, pm.idle_W, False))
            continue
        path = datapath(hw, op.dtype) if op.kind in _MATRIX_KINDS else "simt"
        ef = e_flop.get(path)
        if ef is None:
            ef = e_flop[path] = energy_per_flop_J(hw, path, co)
        x = sustained_clock_frac(hw, path, co) if kt.bound == "compute" else 1.0
        dram = kt.bytes
        if op.kind in _MATRIX_KINDS:
            dram = max(dram, kt.flops / pm.flop_per_dram_byte)
        v2 = pm.voltage_frac(x) ** 2
        static = pm.static_W * t
        total = static + pm.active_W * x * v2 * t + kt.flops * ef * v2 + dram * pm.dram_J_per_byte
        cap = pm.tdp_W * t
        limited = total > cap
        if limited:
            total = cap
        out.append(OpEnergy(total, static, total - static, total / t, limited))
    return out
