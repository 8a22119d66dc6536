"""Layer 1's result type: the predicted time and energy of one op instance on one device."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["KernelTime"]


@dataclass(frozen=True, slots=True)
class KernelTime:
    """Predicted device time of one op instance, and its energy.

    ``bound`` is what limits it: ``compute`` (math units), ``memory`` (DRAM),
    ``latency`` (launch floor), ``host`` (a synchronization) or ``comm``.
    ``energy_J`` is the instance's energy at that time and ``dynamic_J`` its part
    above the device's static power (:mod:`perfcast.kernel.energy`), priced with
    the time by :func:`predict_ops`; 0 for a time made by hand
    (:func:`perfcast.kernel.energy.ops_energy` prices any time).
    """

    time_s: float
    bound: str
    flops: float
    bytes: float
    energy_J: float = 0.0
    dynamic_J: float = 0.0
