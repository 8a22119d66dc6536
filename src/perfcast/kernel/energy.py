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

:func:`perfcast.kernel.predict.predict_ops` prices every op's energy beside its time
(``KernelTime.energy_J``/``dynamic_J``, one instance, cached with the time); a step sums what it
priced with :func:`step_energy_J`, the rule compose's step, the training step and serving share:
static power of every device for the whole wall time, the ops' dynamic energy, active power during
exposed communication, capped at TDP.

Status: fitted where the ground truth measures it. The energies per FLOP are the fitted coefficients of the
clock model (fitted on kernel *times*, where throttling shows); ``idle_frac`` (the power of a GPU held with no
kernel running) and ``active_frac`` are fitted on measured GPU power (``perfcast fit --stages energy``:
ML.ENERGY's vLLM serving runs, diffusion runs and batch-1 generation, :mod:`perfcast.coefficients.energy`);
``leakage_frac`` (it sets the clocks) and the DRAM energies per bit stay literature priors.
:data:`ENERGY_STATUS` says so in every output.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from perfcast.catalog.hardware import Hardware
from perfcast.coefficients.kernel import Coefficients
from perfcast.digest import content_digest
from perfcast.dtypes import DType
from perfcast.kernel.power import (
    datapath,
    die_power_cap_W,
    dram_energy_per_byte_J,
    energy_per_flop_J,
    static_power_W,
    sustained_clock_frac,
    voltage_frac,
)
from perfcast.kernel.types import Bound, KernelTime
from perfcast.workload.types import Op, OpKind

__all__ = ["ENERGY_STATUS", "MATRIX_KINDS", "OpEnergy", "PowerModel", "dynamic_energy_J", "energy_arrays",
           "kernel_dynamic_J", "op_energy", "ops_energy", "power_model", "step_energy_J"]

ENERGY_STATUS = ("fitted: idle and active power shares on measured GPU power (ML.ENERGY runs on A100 and H100 "
                 "serving, A100/A40/V100 batch-1 generation, diffusion); energy per FLOP on kernel times (the "
                 "sustained-clock fit); leakage share and DRAM energy per bit are literature priors")

MATRIX_KINDS = (OpKind.GEMM, OpKind.ATTENTION, OpKind.CONV)  # run on the matrix datapaths; the rest is memory-bound


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
    tdp_W: float  # the power cap: the board's power limit, TDP by default
    static_W: float
    active_W: float
    idle_W: float  # held with no kernel running (host gaps, bubbles, an engine's CPU work)
    dram_J_per_byte: float
    flop_per_dram_byte: float
    coeffs: Coefficients = field(repr=False, compare=False)

    def voltage_frac(self, clock_frac: float) -> float:
        """Voltage at ``clock_frac`` of boost, as a fraction of the boost voltage (the clock model's DVFS law)."""
        return voltage_frac(clock_frac, self.coeffs)

    @property
    def comm_W(self) -> float:
        """Power during exposed communication (static + active at boost), watts."""
        return self.static_W + self.active_W

    def busy_energy_J(self, time_s: float, flops: float, dram_bytes: float, e_flop_J: float,
                      clock_frac: float = 1.0) -> float:
        """Energy of ``time_s`` seconds of kernels doing ``flops`` (at ``e_flop_J`` per FLOP at boost voltage)
        and moving ``dram_bytes`` at ``clock_frac`` of boost, capped at TDP; joules. The formula every op is
        priced with (:func:`energy_arrays`), for a kernel priced outside :func:`perfcast.kernel.predict_ops`."""
        if time_s <= 0:
            return 0.0
        energy, _, _ = self.kernel_energy_J(time_s, flops, dram_bytes, e_flop_J, clock_frac,
                                            self.voltage_frac(clock_frac) ** 2)
        return float(energy)

    def kernel_energy_J(self, time_s: npt.ArrayLike, flops: npt.ArrayLike, dram_bytes: npt.ArrayLike,
                        e_flop_J: npt.ArrayLike, clock_frac: npt.ArrayLike,
                        voltage2_frac: npt.ArrayLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Energy of kernels (arrays or scalars), its static part (joules) and whether the TDP cap bound it:
        static power for ``time_s``, active power scaled by the clock and the squared voltage, the math units'
        and the DRAM's energy; capped at TDP."""
        t = np.asarray(time_s, dtype=float)
        x, v2 = np.asarray(clock_frac, dtype=float), np.asarray(voltage2_frac, dtype=float)
        static = self.static_W * t
        total = static + self.active_W * x * v2 * t + np.asarray(flops) * e_flop_J * v2 + \
            np.asarray(dram_bytes) * self.dram_J_per_byte
        cap = self.tdp_W * t
        limited = total > cap
        return np.where(limited, cap, total), static, limited


_MODELS: dict[tuple[str, str], PowerModel] = {}  # (hardware content, coefficients content) -> power terms


def power_model(hw: Hardware, co: Coefficients) -> PowerModel:
    """The power terms of ``hw`` (cached per the contents of the device and the coefficients)."""
    key = (content_digest(hw), content_digest(co))
    hit = _MODELS.get(key)
    if hit is not None:
        return hit
    static = static_power_W(hw, co)
    idle = static if co.power.idle_frac is None else co.power.idle_frac * hw.tdp_W
    pm = PowerModel(hardware_id=hw.id, tdp_W=die_power_cap_W(hw, co), static_W=static,
                    active_W=co.power.active_frac * max(0.0, hw.tdp_W - static),
                    dram_J_per_byte=dram_energy_per_byte_J(hw, co), flop_per_dram_byte=co.power.flop_per_dram_byte,
                    coeffs=co, idle_W=min(idle, hw.power_cap_W))
    if len(_MODELS) > 256:
        _MODELS.clear()
    _MODELS[key] = pm
    return pm


def energy_arrays(kinds: Sequence[OpKind], dtypes: Sequence[DType], time_s: np.ndarray, bounds: Sequence[str],
                  flops: np.ndarray, bytes_: np.ndarray, hw: Hardware,
                  coeffs: Coefficients) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Energy, its static and dynamic parts (joules) and whether the TDP cap bound it, for one instance of each
    op (of kind ``kinds[i]`` in ``dtypes[i]``) that runs ``time_s`` bound by ``bounds`` doing ``flops`` and moving
    ``bytes_`` (see the module docstring;
    arrays): the clock, voltage and energy per FLOP of its datapath priced by :meth:`PowerModel.kernel_energy_J`."""
    pm = power_model(hw, coeffs)
    n = len(kinds)
    t = np.asarray(time_s, dtype=float)
    matrix = np.array([k in MATRIX_KINDS for k in kinds], dtype=bool)
    compute = np.array([b == Bound.COMPUTE for b in bounds], dtype=bool)
    # clock fraction, its voltage and the energy per FLOP per (datapath, compute-bound) pair
    x, v2, ef = np.ones(n), np.ones(n), np.zeros(n)
    pairs: dict[tuple[str, bool], list[int]] = {}
    for i, dtype in enumerate(dtypes):
        pairs.setdefault((datapath(hw, dtype) if matrix[i] else "simt", bool(compute[i])), []).append(i)
    for (path, bound), idx in pairs.items():
        xi = sustained_clock_frac(hw, path, coeffs) if bound else 1.0
        x[idx], v2[idx], ef[idx] = xi, pm.voltage_frac(xi) ** 2, energy_per_flop_J(hw, path, coeffs)
    dram = np.where(matrix, np.maximum(bytes_, flops / pm.flop_per_dram_byte), bytes_)
    total, static, limited = pm.kernel_energy_J(t, flops, dram, ef, x, v2)
    comm = np.array([b == Bound.COMM for b in bounds], dtype=bool)
    host = np.array([b == Bound.HOST for b in bounds], dtype=bool)
    total = np.where(comm, pm.comm_W * t, np.where(host, pm.idle_W * t, total))
    dynamic = np.where(host, 0.0, total - static)
    off = (t <= 0) | comm | host
    limited = limited & ~off
    idle = t <= 0
    return (np.where(idle, 0.0, total), np.where(idle, 0.0, static), np.where(idle, 0.0, dynamic), limited)


def op_energy(op: Op, kernel: KernelTime, hw: Hardware, coeffs: Coefficients) -> OpEnergy:
    """Energy of one instance of ``op`` whose predicted time is ``kernel`` (see the module docstring)."""
    return ops_energy([op], [kernel], hw, coeffs)[0]


def ops_energy(ops: Sequence[Op], kernels: Sequence[KernelTime], hw: Hardware,
               coeffs: Coefficients) -> list[OpEnergy]:
    """Energy of one instance of each op at the time ``kernels`` give (any time: a measured one, a scaled one;
    :func:`perfcast.kernel.predict.predict_ops` already attaches it to the times it predicts)."""
    pm = power_model(hw, coeffs)
    t = np.array([k.time_s for k in kernels], dtype=float)
    energy, static, dynamic, limited = energy_arrays([o.kind for o in ops], [o.dtype for o in ops], t,
                                                     [k.bound for k in kernels],
                                             np.array([k.flops for k in kernels], dtype=float),
                                             np.array([k.bytes for k in kernels], dtype=float), hw, coeffs)
    out = []
    for i, k in enumerate(kernels):
        e, ti = float(energy[i]), float(t[i])
        held_W = {Bound.COMM: pm.comm_W, Bound.HOST: pm.idle_W}.get(k.bound)
        avg = 0.0 if ti <= 0 else (held_W if held_W is not None else e / ti)
        out.append(OpEnergy(e, float(static[i]), float(dynamic[i]), avg, bool(limited[i])))
    return out


def kernel_dynamic_J(kind: OpKind, dtype: DType, *, time_s: float, flops: float, bytes_: float, bound: str,
                     hw: Hardware, coeffs: Coefficients) -> float:
    """Dynamic energy of a kernel priced outside :func:`perfcast.kernel.predict.predict_ops` (a time from the
    kernel layer's rates, e.g. an attention call evaluated per iteration), joules: the formula every op is
    priced with. The energy is linear in the time, FLOPs and bytes below the TDP cap, so kernels of one kind and
    bound can be priced once from their summed time, FLOPs and bytes."""
    _, _, dynamic, _ = energy_arrays([kind], [dtype], np.array([time_s]), [bound], np.array([flops]),
                                     np.array([bytes_]), hw, coeffs)
    return float(dynamic[0])


def dynamic_energy_J(kernels: Sequence[KernelTime], counts: Sequence[float]) -> float:
    """The dynamic energy of priced ops, ``counts[i]`` instances of ``kernels[i]`` (joules): what a step adds
    to its devices' static power (:func:`step_energy_J`)."""
    total = 0.0
    for k, c in zip(kernels, counts, strict=True):
        total += k.dynamic_J * c
    return total


def step_energy_J(pm: PowerModel, *, wall_s: float, dynamic_J: float, comm_s: float, devices: float = 1.0,
                  idle_s: float = 0.0) -> float:
    """Energy of ``devices`` over ``wall_s`` seconds (joules): static power throughout (host gaps, bubbles and
    waits included) but for ``idle_s`` seconds per device known to run no kernel, at idle power; the priced ops'
    ``dynamic_J`` (:func:`dynamic_energy_J`), active power during ``comm_s`` of exposed communication per device;
    capped at the power limit."""
    idle_s = min(max(idle_s, 0.0), wall_s)
    total = (devices * (pm.static_W * (wall_s - idle_s) + pm.idle_W * idle_s) + dynamic_J
             + devices * pm.active_W * comm_s)
    return min(total, devices * pm.tdp_W * wall_s)
