"""Layer 1's result type: the predicted time and energy of one op instance on one device."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["Bound", "KernelTime"]


class Bound(StrEnum):
    """What limits an op's time: the math units, DRAM, the launch floor, a host synchronization or a
    collective. A str, so it compares with and prints as its value."""

    COMPUTE = "compute"
    MEMORY = "memory"
    LATENCY = "latency"
    HOST = "host"
    COMM = "comm"


@dataclass(frozen=True, slots=True)
class KernelTime:
    """Predicted device time of one op instance, and its energy.

    ``bound`` is what limits it (:class:`Bound`).
    ``energy_J`` is the instance's energy at that time and ``dynamic_J`` its part
    above the device's static power (:mod:`perfcast.kernel.energy`), priced with
    the time by :func:`predict_ops`; 0 for a time made by hand
    (:func:`perfcast.kernel.energy.ops_energy` prices any time).
    """

    time_s: float
    bound: Bound
    flops: float
    bytes: float
    energy_J: float = 0.0
    dynamic_J: float = 0.0
