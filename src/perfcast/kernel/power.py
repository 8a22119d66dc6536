"""The clock a device sustains under its power limit while its math units are saturated.

Boost clocks are quoted for light load; a saturated datapath draws power
``P(x) = P_static + P_full * x * v(x)**2`` at clock fraction ``x`` of boost,
where ``v(x) = vmin + (1 - vmin) * x`` is the voltage (DVFS lowers voltage with
clock) and ``P_full = peak_flops * energy_per_flop`` is the datapath's power at
boost. Energy per FLOP depends on the datapath (CUDA-core FP32, AMD FP32
matrix cores, tensor cores) and scales with the process node. ``P_static`` is
a share of TDP for leakage and I/O. The DRAM traffic that feeds the math units
adds interface power (energy per bit of the memory kind, from the literature)
in proportion to the FLOP rate; it does not depend on the peak bandwidth, so
more bandwidth never slows a device down. The device runs at the
largest ``x <= 1`` with ``P(x) <= `` its power cap (the board's power limit, TDP by default;
``P_static`` stays the board's share of TDP under a lower limit). A multi-die board (MI250: two GCDs, each
described with half the board's TDP) has one power limit for the whole package: when the device's sibling dies
idle (``Hardware.siblings_idle``, a single-device run), they hold only their static share and the busy die may
draw the rest of the board's limit. Every input is a datasheet figure (TDP, process, peak) or a global fitted
coefficient.

Where the datasheet gives a base clock (NVIDIA), that clock anchors the device's energy per FLOP instead of the
process node: the base clock is what the board guarantees at its TDP with its most power-hungry datapath
saturated (the tensor cores where it has them, else the CUDA cores), so ``static + P_full(worst) * x_b *
v(x_b)**2 = TDP`` at ``x_b = base / boost`` gives that datapath's energy per FLOP on this very board, and a
CUDA-core FP32 FLOP costs ``simt_per_tensor_energy`` tensor FLOPs (one global fitted ratio). Two boards of one
process node differ this way as their datasheets do: a 250 W V100 keeps its boost clock on FP32 GEMMs while a
70 W T4 (base 585 of 1590 MHz) runs them well below it.
"""

from __future__ import annotations

from perfcast.catalog.hardware import Hardware
from perfcast.coefficients.kernel import Coefficients
from perfcast.digest import content_digest
from perfcast.dtypes import DType

__all__ = ["FFMA_ISSUE_SHARE", "TENSOR_OVER_SIMT", "base_clock_simt_energy_J", "datapath", "die_power_cap_W",
           "dram_energy_per_byte_J", "energy_per_flop_J", "full_power_peak", "memory_kind", "simt_issue_share",
           "static_power_W", "sustained_clock_frac", "voltage_frac"]


def memory_kind(hw: Hardware) -> str:
    """``gddr`` for GDDR/LPDDR boards (and CPUs' DDR), else ``hbm``."""
    mt = hw.memory_type.lower()
    return "gddr" if ("gddr" in mt or "ddr" in mt and "hbm" not in mt) else "hbm"


def datapath(hw: Hardware, dtype: DType) -> str:
    """Which math units a GEMM of ``dtype`` runs on: ``simt``, ``matrix`` (AMD FP32 MFMA) or ``tensor``."""
    if dtype in (DType.FP32, DType.FP64):
        return "matrix" if (dtype is DType.FP32 and hw.peak_flops_per_s.fp32_matrix) else "simt"
    return "tensor"


FFMA_ISSUE_SHARE = 0.92  # FFMAs among the instructions a register-blocked SGEMM loop issues (see simt_issue_share)
_DUAL_ISSUE = ("kepler", "maxwell", "pascal")  # schedulers that issue a load beside an FFMA in one cycle


def simt_issue_share(hw: Hardware) -> float:
    """The share of CUDA-core FP32 peak a GEMM can issue: 1, or :data:`FFMA_ISSUE_SHARE` on an SM whose four
    schedulers each feed 32 FP32 lanes (128 per SM: Ampere GA10x, Ada, Hopper, Blackwell) without dual issue.
    There one FFMA warp instruction fills the lanes for one cycle, so every other instruction a GEMM issues
    (shared-memory loads of the operands, the K loop's global loads, barriers, address arithmetic) takes an FFMA's
    slot: an 8x8 register tile issues 64 FFMAs and 4 LDS.128 per K step and about 10 more per 8-step K block,
    64 of 69 slots. With 16 lanes per scheduler (GV100, TU10x, GA100, P100) an FFMA holds its lanes two cycles
    and the other instructions issue in between; Maxwell and Pascal schedulers dual-issue them."""
    if hw.vendor != "nvidia" or hw.fp32_lanes_per_sm < 128 or hw.architecture in _DUAL_ISSUE:
        return 1.0
    return FFMA_ISSUE_SHARE


def full_power_peak(hw: Hardware, path: str) -> float:
    """Peak FLOP/s of datapath ``path`` at boost clock (the rate its full power ``P_full`` goes with; the CUDA
    cores' as far as a GEMM can issue FFMAs, :func:`simt_issue_share`)."""
    p = hw.peak_flops_per_s
    if path == "simt":
        return p.fp32 * simt_issue_share(hw)
    if path == "matrix":
        return p.fp32_matrix or p.fp32
    return p.fp16 or p.bf16 or p.fp8 or p.fp32


def static_power_W(hw: Hardware, coeffs: Coefficients) -> float:
    """Power drawn whatever runs (leakage, I/O, the rest of the board), watts: a share of TDP."""
    return hw.tdp_W * coeffs.power.leakage_frac


def die_power_cap_W(hw: Hardware, coeffs: Coefficients) -> float:
    """The power this device may draw, watts: its board's limit (TDP by default); on a multi-die board whose
    other dies idle (``Hardware.siblings_idle``), the package's limit less the idle dies' static power."""
    if hw.siblings_idle:
        return hw.power_cap_W * hw.dies_per_board - static_power_W(hw, coeffs) * (hw.dies_per_board - 1)
    return hw.power_cap_W


TENSOR_OVER_SIMT = 2.5  # a 16-bit matrix peak above this many times the FP32 one is tensor cores', not CUDA cores'


def energy_per_flop_J(hw: Hardware, path: str, coeffs: Coefficients) -> float:
    """Energy of one FLOP on datapath ``path`` at boost voltage, joules: anchored on the base clock for CUDA-core
    FP32 where the datasheet gives one (:func:`base_clock_simt_energy_J`), else scaled by the process node."""
    pc = coeffs.power
    if path == "simt":
        anchored = base_clock_simt_energy_J(hw, coeffs)
        if anchored is not None:
            return anchored
    return pc.energy_pJ_per_flop_7nm[path] * 1e-12 * ((hw.process_nm or 7.0) / 7.0) ** pc.process_exponent


def base_clock_simt_energy_J(hw: Hardware, coeffs: Coefficients) -> float | None:
    """Energy of one CUDA-core FP32 FLOP at boost voltage, joules, from the board's base clock (see the module
    docstring); None for a board without a base clock below its boost clock, or not NVIDIA's (AMD publishes
    none)."""
    base, boost = hw.base_clock_hz, hw.boost_clock_hz
    if hw.vendor != "nvidia" or not base or not boost or base >= boost:
        return None
    x_b = base / boost
    v_b = voltage_frac(x_b, coeffs)
    budget = hw.tdp_W * (1.0 - coeffs.power.leakage_frac)  # the base clock is specified at TDP, not a set cap
    p = hw.peak_flops_per_s
    matrix = p.fp16 or p.bf16 or 0.0
    if matrix > TENSOR_OVER_SIMT * p.fp32:
        return coeffs.power.simt_per_tensor_energy * budget / (matrix * x_b * v_b * v_b)
    return budget / (p.fp32 * x_b * v_b * v_b)


def dram_energy_per_byte_J(hw: Hardware, coeffs: Coefficients) -> float:
    """DRAM interface energy of one byte moved, joules (by memory kind)."""
    return coeffs.power.memory_pJ_per_bit[memory_kind(hw)] * 1e-12 * 8.0


def voltage_frac(clock_frac: float, coeffs: Coefficients) -> float:
    """Voltage at ``clock_frac`` of boost, as a fraction of the boost voltage (DVFS)."""
    vmin = coeffs.power.vmin_frac
    return vmin + (1.0 - vmin) * clock_frac


_CACHE: dict[tuple[str, str, str], float] = {}  # (hardware content, path, coefficients content) -> clock


def sustained_clock_frac(hw: Hardware, path: str, coeffs: Coefficients) -> float:
    """Fraction of the boost clock sustained when ``path`` is saturated (0 < x <= 1)."""
    key = (content_digest(hw), path, content_digest(coeffs))
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    value = _sustained(hw, path, coeffs)
    if len(_CACHE) > 4096:
        _CACHE.clear()
    _CACHE[key] = value
    return value


def _sustained(hw: Hardware, path: str, coeffs: Coefficients) -> float:
    pc = coeffs.power
    p_full = full_power_peak(hw, path) * energy_per_flop_J(hw, path, coeffs)
    # DRAM traffic of a compute-bound kernel follows its FLOP rate (not the device's peak bandwidth),
    # so its interface power is a per-FLOP cost at the memory's energy per bit
    memory_full = full_power_peak(hw, path) * dram_energy_per_byte_J(hw, coeffs) / pc.flop_per_dram_byte
    budget = die_power_cap_W(hw, coeffs) - static_power_W(hw, coeffs)

    def power(x: float) -> float:
        v = voltage_frac(x, coeffs)
        return p_full * x * v * v + memory_full * x

    if budget <= 0:
        return 0.05
    if power(1.0) <= budget:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(40):  # power(x) is increasing: bisection
        mid = 0.5 * (lo + hi)
        if power(mid) <= budget:
            lo = mid
        else:
            hi = mid
    return max(lo, 0.05)
