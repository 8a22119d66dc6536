"""What the operating system says about this machine's CPU, and the hardware entry built from it.

Cores, caches, clock and memory come from ``/proc`` and ``/sys`` (Linux); the
rates (peak FLOP/s, bandwidths, efficiencies) come from the fit, never from a
datasheet, so the entry describes what PyTorch achieves here.
"""

from __future__ import annotations

import os
import platform
import re
from dataclasses import dataclass
from pathlib import Path

from perfcast.catalog.cpu import LOCAL_CPU_ID, CpuEfficiency
from perfcast.catalog.hardware import Hardware, PeakFlops
from perfcast.catalog.paths import catalog_dirs, user_catalog_roots

__all__ = ["LOCAL_CPU_ID", "TDP_PER_CORE_W", "MachineInfo", "build_hardware", "default_path", "probe_machine"]

# A server core's share of its package TDP (Xeon Platinum 8480+: 350 W / 56 cores). The OS does not report
# a TDP, so the entry's tdp_W is this estimate times the cores, and says so in its notes.
TDP_PER_CORE_W = 6.25


@dataclass(frozen=True, slots=True)
class MachineInfo:
    """This machine's CPU as the OS describes it (sizes in bytes, clock in Hz)."""

    name: str
    vendor: str
    cores: int
    clock_hz: float
    l1d_bytes_per_core: float
    l2_bytes_total: float
    l3_bytes: float
    memory_bytes: float
    vector_lanes_fp32: int


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _size_bytes(text: str) -> float:
    m = re.match(r"\s*(\d+)\s*([KMG]?)", text)
    if not m:
        return 0.0
    return float(m.group(1)) * {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}[m.group(2)]


def _caches(cores: int) -> tuple[float, float, float]:
    """L1d per core, L2 summed over cores, L3 (bytes) from sysfs; 0 where unknown."""
    l1 = l2 = l3 = 0.0
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        level = _read(str(index / "level")).strip()
        kind = _read(str(index / "type")).strip()
        size = _size_bytes(_read(str(index / "size")))
        if level == "1" and kind in ("Data", "Unified"):
            l1 = size
        elif level == "2":
            l2 = size * cores
        elif level == "3":
            l3 = size
    return l1, l2, l3


def probe_machine(cores: int | None = None) -> MachineInfo:
    """Describe this machine's CPU; ``cores`` overrides the count of usable cores."""
    info = _read("/proc/cpuinfo")
    name = re.search(r"model name\s*:\s*(.+)", info)
    vendor = re.search(r"vendor_id\s*:\s*(.+)", info)
    mhz = re.search(r"cpu MHz\s*:\s*([\d.]+)", info)
    flags = re.search(r"flags\s*:\s*(.+)", info)
    usable = cores or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    l1, l2, l3 = _caches(usable)
    mem = re.search(r"MemTotal:\s*(\d+)\s*kB", _read("/proc/meminfo"))
    flag_set = set(flags.group(1).split()) if flags else set()
    lanes = 16 if "avx512f" in flag_set else 8 if "avx2" in flag_set else 4
    return MachineInfo(
        name=(name.group(1).strip() if name else platform.processor() or "unknown CPU"),
        vendor=(vendor.group(1).strip() if vendor else "unknown"),
        cores=usable,
        clock_hz=float(mhz.group(1)) * 1e6 if mhz else 2.0e9,
        l1d_bytes_per_core=l1 or 32 * 2**10,
        l2_bytes_total=l2 or usable * 2**20,
        l3_bytes=l3,
        memory_bytes=float(mem.group(1)) * 1024 if mem else 8 * 2**30,
        vector_lanes_fp32=lanes,
    )


def build_hardware(info: MachineInfo, *, peak_fp32_flops_per_s: float, memory_bandwidth_Bps: float,
                   efficiency: CpuEfficiency, source: tuple[str, ...] = ("perfcast calibrate",),
                   notes: str = "") -> Hardware:
    """The ``local-cpu`` hardware entry: machine facts plus fitted rates."""
    return Hardware(
        id=LOCAL_CPU_ID,
        name=f"{info.name} ({info.cores} cores, {efficiency.threads} threads)",
        vendor="cpu",
        kind="cpu",
        architecture=platform.machine() or "cpu",
        aliases=("local", "this-cpu"),
        memory_bytes=info.memory_bytes,
        memory_type="DDR",
        memory_bandwidth_Bps=memory_bandwidth_Bps,
        num_sms=info.cores,
        fp32_lanes_per_sm=info.vector_lanes_fp32,
        boost_clock_hz=info.clock_hz,
        l2_cache_bytes=max(info.l2_bytes_total, 1.0),
        shared_memory_per_sm_bytes=info.l1d_bytes_per_core,
        peak_flops_per_s=PeakFlops(fp32=peak_fp32_flops_per_s),
        tdp_W=TDP_PER_CORE_W * info.cores,
        source=source,
        notes=notes,
        cpu=efficiency,
    )


def default_path() -> Path:
    """Where ``perfcast calibrate`` writes by default: ``hardware/local-cpu.yaml`` in the first user catalog folder
    (``$PERFCAST_CATALOG``'s first entry, else ``~/.perfcast/catalog``), which the hardware catalog reads."""
    return user_catalog_roots()[0] / "hardware" / f"{LOCAL_CPU_ID}.yaml"


def user_catalog_has(path: Path) -> bool:
    """Whether ``path`` lies in a directory the hardware catalog reads."""
    return any(path.parent.resolve() == d.resolve() for d in catalog_dirs("hardware"))
