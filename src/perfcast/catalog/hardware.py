"""Hardware catalog: typed device specs loaded from one YAML file per device.

All values are base SI units (bytes, bytes/s, FLOP/s, Hz, W); peaks are *dense*
(no structured sparsity) unless named otherwise. Nothing in the code names a
device: a new GPU is one YAML file.

Memory variants. Each memory variant a vendor sells with its own bandwidth, clocks or
power (H100 PCIe 80 GB vs H100 NVL 94 GB, GH200 96 GB HBM3 vs 144 GB HBM3e, ...) is a
catalog entry of its own. Any other memory size is an explicit override: a hardware name
followed by ``@<size>gb`` (``h100-sxm-80gb@94gb``, ``gh200@144gb``, ``mi300x@128gib``)
is the named entry with only ``memory_bytes`` replaced and the suffix kept in its id, so
the id reads back to the same device wherever a hardware name is accepted. The size is the
vendor's label: like every catalog entry, "94 GB" is read as 94 GiB (HBM stacks come in
binary sizes; an H100's "80 GB" is 80 GiB), and ``gib`` says the same explicitly. An
override to the entry's own memory is the entry itself.

Power limits. A board runs under a power limit its owner sets (``nvidia-smi -pl``), TDP by default.
``@<watts>w`` after a hardware name (``a100-sxm-40gb@250w``, ``h100-sxm-80gb@94gb@400w``: after a memory
override) is the entry with ``power_limit_W`` set and the suffix kept in its id: the clocks a saturated
datapath sustains and every op's energy are capped at the limit, while the static power and the datapaths'
energy stay the board's (they do not change with the limit). A limit equal to the TDP is the entry itself.

Adapted devices. A device fitted to a few of its own measurements carries :class:`DeviceCorrections`
(``corrections``; ``perfcast adapt`` writes such a file). :func:`adapted_hardware` makes catalog names resolve to
such devices within a block (``perfcast predict-batch --adapt``: the table's rows keep naming their devices).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from enum import StrEnum
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from perfcast.catalog.corrections import DeviceCorrections
from perfcast.catalog.cpu import LOCAL_CPU_ID, CpuEfficiency
from perfcast.catalog.paths import catalog_dirs, normalize_name
from perfcast.dtypes import DType
from perfcast.errors import CatalogError, ConfigError, UnknownNameError, UnsupportedError
from perfcast.yamlio import load_model_file

__all__ = ["MEMORY_OVERRIDE_SEP", "DeviceCorrections", "Fabric", "Hardware", "Interconnect", "PeakFlops",
           "adapted_hardware", "alone_on_board", "base_hardware_id", "list_hardware", "load_hardware", "with_memory",
           "with_power_limit"]

MEMORY_OVERRIDE_SEP = "@"  # "h100-sxm-80gb@94gb": the entry with 94 GiB of memory
_MEMORY_SIZE = re.compile(r"^(?P<value>[0-9]+(?:\.[0-9]+)?)(?P<unit>gb|gib)$")
_MEMORY_OVERRIDE_HELP = ("give the GPU memory after '@' as a positive number of GB, e.g. h100-sxm-80gb@94gb or "
                         "gh200-96gb@144gb (the vendor's GB label, read as GiB like every catalog entry; 'gib' "
                         "also accepted)")
_MIN_MEMORY_BYTES = 2**20  # an override of less than 1 MiB is a typo, and its id could not say it
_POWER_LIMIT = re.compile(r"^(?P<value>[0-9]+(?:\.[0-9]+)?)w$")
_POWER_LIMIT_HELP = ("give the power limit after '@' in watts, e.g. a100-sxm-40gb@250w or h100-sxm-80gb@94gb@400w "
                     "(between 5 % of the board's TDP and twice it)")


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PeakFlops(_Frozen):
    """Dense peak throughput per format, FLOP/s (OP/s for integers); None = not supported.

    ``fp32`` is the vector (CUDA-core / SIMD) rate; ``fp32_matrix`` is AMD's FP32
    matrix-core (MFMA) rate; ``fp16``/``bf16``/``tf32``/``fp8``/``int8``/``fp4`` are
    tensor/matrix-core rates.
    """

    fp64: float | None = None
    fp64_tensor: float | None = None
    fp32: float = Field(gt=0)
    fp32_matrix: float | None = None
    tf32: float | None = None
    fp16: float | None = None
    bf16: float | None = None
    fp8: float | None = None
    int8: float | None = None
    int4: float | None = None
    fp4: float | None = None


class Fabric(StrEnum):
    """Scale-up fabric between the GPUs of one node."""

    NVLINK = "nvlink"
    XGMI = "xgmi"
    PCIE = "pcie"
    ETHERNET = "ethernet"  # on-die RoCE NICs as the scale-up fabric (Intel Gaudi)
    NONE = "none"


class Interconnect(_Frozen):
    """Links of one device. Bandwidths are bidirectional totals per device, bytes/s, as vendors quote them."""

    fabric: Fabric = Fabric.PCIE
    fabric_bidir_bandwidth_Bps: float | None = Field(default=None, gt=0)
    pcie_gen: int | None = Field(default=None, ge=1, le=7)
    pcie_bidir_bandwidth_Bps: float | None = Field(default=None, gt=0)


class Hardware(_Frozen):
    """One device as PyTorch sees it (a multi-die board is described per die, see ``dies_per_board``)."""

    @property
    def power_cap_W(self) -> float:
        """The power the board may draw, watts: its power limit, else its TDP."""
        return self.power_limit_W if self.power_limit_W is not None else self.tdp_W

    # a catalog id, or one with an explicit memory override ("h100-sxm-80gb@94gb", see the module docstring)
    id: str = Field(pattern=r"^[a-z0-9][a-z0-9.\-]*(@[0-9]+(\.[0-9]+)?gb)?(@[0-9]+(\.[0-9]+)?w)?$")
    name: str
    vendor: Literal["nvidia", "amd", "intel", "google", "cpu", "other"]
    kind: Literal["gpu", "cpu", "accelerator"] = "gpu"
    architecture: str
    compute_capability: float | None = Field(default=None, description="NVIDIA CUDA compute capability (e.g. 8.0)")
    process_nm: float | None = Field(default=None, gt=0)
    form_factor: str = ""
    release_year: int | None = None
    aliases: tuple[str, ...] = ()

    memory_bytes: float = Field(gt=0)
    memory_type: str = ""
    memory_bandwidth_Bps: float = Field(gt=0)

    num_sms: int = Field(gt=0, description="streaming multiprocessors (NVIDIA) or compute units (AMD)")
    fp32_lanes_per_sm: int = Field(gt=0, description="FP32 lanes per SM/CU")
    boost_clock_hz: float = Field(gt=0)
    base_clock_hz: float | None = Field(default=None, gt=0)
    l2_cache_bytes: float = Field(gt=0)
    shared_memory_per_sm_bytes: float = Field(gt=0)

    peak_flops_per_s: PeakFlops
    sparse_speedup: float = Field(default=1.0, ge=1.0,
                                  description="speedup of 2:4 structured sparsity on matrix formats")
    interconnect: Interconnect = Interconnect()
    tdp_W: float = Field(gt=0)
    power_limit_W: float | None = Field(default=None, gt=0, description="the board's power limit when it is not "
                                        "the TDP (an override, @<watts>w; see the module docstring)")
    dies_per_board: int = Field(default=1, ge=1)
    siblings_idle: bool = Field(default=False, description="the other dies of this device's board idle (one die "
                                "used alone, see :func:`alone_on_board`): the board's power limit is shared, so the "
                                "busy die may draw what the idle ones leave")
    cpu: CpuEfficiency | None = Field(default=None, description="fitted CPU cost model (`perfcast calibrate`); "
                                      "a device with one is priced by perfcast.kernel.cpu")
    corrections: DeviceCorrections | None = Field(default=None, description="multipliers fitted on this device's "
                                                  "own measurements (`perfcast adapt`); None: the datasheet alone")

    source: tuple[str, ...] = Field(min_length=1)
    notes: str = ""

    @field_validator("source")
    @classmethod
    def _source_not_blank(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not all(s.strip() for s in value):
            raise ValueError("every source entry must be non-empty")
        return value

    def peak(self, dtype: DType, *, matrix: bool = True) -> float:
        """Dense peak FLOP/s of ``dtype`` math; ``matrix=False`` gives the vector (non-tensor) rate.

        FP32 matrix math is AMD's MFMA rate where the device has one, else the
        vector rate (NVIDIA FP32 GEMMs with TF32 off run on CUDA cores). Raises
        UnsupportedError when the device has no such format: no invented peak.
        """
        p = self.peak_flops_per_s
        if not matrix:
            if dtype is DType.FP64:
                return p.fp64 or p.fp32 / 2.0
            return p.fp32
        value = {
            DType.FP64: p.fp64_tensor or p.fp64,
            DType.FP32: p.fp32_matrix or p.fp32,
            DType.TF32: p.tf32,
            DType.FP16: p.fp16,
            DType.BF16: p.bf16,
            DType.FP8: p.fp8,
            DType.INT8: p.int8,
            DType.INT4: p.int4,
            DType.FP4: p.fp4,
        }[dtype]
        if value is None:
            raise UnsupportedError(
                f"{self.id} has no {dtype.value} peak in its datasheet; "
                f"formats it supports: {', '.join(self.supported_dtypes())}"
            )
        return value

    def supported_dtypes(self) -> list[str]:
        """Formats with a peak on this device."""
        p = self.peak_flops_per_s.model_dump()
        out = [k for k, v in p.items() if v and k in {d.value for d in DType}]
        return out


def _read_yaml(path: Path) -> Hardware:
    hw: Hardware = load_model_file(path, Hardware, what="hardware file", error=CatalogError)
    if MEMORY_OVERRIDE_SEP in hw.id:
        raise CatalogError(f"{path}: id {hw.id!r} carries a memory override ('{MEMORY_OVERRIDE_SEP}...'); a hardware "
                           "file describes one device under a plain id (a-z, 0-9, '.', '-')")
    if any(MEMORY_OVERRIDE_SEP in a for a in hw.aliases):
        raise CatalogError(f"{path}: an alias may not contain '{MEMORY_OVERRIDE_SEP}' (it starts a memory override)")
    return hw


_READ_STATE: dict[str, object] = {}


def _user_dirs_state() -> tuple[tuple[str, int], ...]:
    """The user hardware folders and their modification times (a file added or removed changes them)."""
    return tuple((str(d), d.stat().st_mtime_ns) for d in catalog_dirs("hardware")[1:])


def _catalog() -> tuple[dict[str, Hardware], dict[str, str]]:
    """The catalog as read from the folders the environment names now (PERFCAST_CATALOG, else HOME's)."""
    return _catalog_for(os.environ.get("PERFCAST_CATALOG"), os.environ.get("HOME"))


@lru_cache(maxsize=1)
def _catalog_for(catalog_env: str | None, home: str | None) -> tuple[dict[str, Hardware], dict[str, str]]:
    _READ_STATE["dirs"] = _user_dirs_state()
    by_id: dict[str, Hardware] = {}
    names: dict[str, str] = {}
    for folder in catalog_dirs("hardware"):
        for path in sorted(folder.glob("*.yaml")):
            hw = _read_yaml(path)
            if path.stem != hw.id:
                raise CatalogError(f"{path}: file name must be the id ({hw.id}.yaml)")
            by_id[hw.id] = hw  # a user file may override a shipped one
            for alias in (hw.id, *hw.aliases):
                names[normalize_name(alias)] = hw.id
    return by_id, names


def list_hardware() -> list[Hardware]:
    """Every catalog device, sorted by id."""
    by_id, _ = _catalog()
    return [by_id[k] for k in sorted(by_id)]


def base_hardware_id(hardware_id: str) -> str:
    """The catalog id under an id with a memory or power override ("h100-sxm-80gb@94gb@400w" ->
    "h100-sxm-80gb"); any other id unchanged."""
    return hardware_id.split(MEMORY_OVERRIDE_SEP, 1)[0]


def with_memory(hardware: str | Path | Hardware, memory_bytes: float) -> Hardware:
    """``hardware`` with ``memory_bytes`` of GPU memory and nothing else changed (bandwidth, clocks, peaks and
    power stay the entry's); its id carries the size as an override suffix, ``<id>@<GiB>gb``. The entry itself
    when its memory already is ``memory_bytes``."""
    hw = load_hardware(hardware)
    if not (math.isfinite(memory_bytes) and memory_bytes >= _MIN_MEMORY_BYTES):
        raise ConfigError(f"GPU memory must be at least 1 MiB (got {memory_bytes} bytes)")
    if memory_bytes == hw.memory_bytes:
        return hw
    base = base_hardware_id(hw.id)
    size_gib = _plain(memory_bytes / 2**30)
    override = f"{base}{MEMORY_OVERRIDE_SEP}{size_gib}gb"
    note = f"Memory overridden to {size_gib} GiB ({override}); every other value is {base}'s."
    out = Hardware.model_validate({
        **hw.model_dump(), "id": override, "name": f"{hw.name} ({size_gib} GB)", "aliases": (),
        "memory_bytes": memory_bytes, "power_limit_W": None, "notes": f"{hw.notes} {note}".strip()})
    return out if hw.power_limit_W is None else with_power_limit(out, hw.power_limit_W)


def alone_on_board(hw: Hardware) -> Hardware:
    """``hw`` used as the only busy die of its board (a single-device run on one GCD of a two-GCD MI250): the
    board's power limit is shared by its dies, so the busy die may draw what its idle siblings leave
    (:func:`perfcast.kernel.power.sustained_clock_frac`). A single-die device is returned as it is."""
    if hw.dies_per_board <= 1 or hw.siblings_idle:
        return hw
    return hw.model_copy(update={"siblings_idle": True})


def with_power_limit(hardware: str | Path | Hardware, power_limit_W: float) -> Hardware:
    """``hardware`` under a power limit of ``power_limit_W`` watts (see the module docstring); its id carries the
    limit as a suffix, ``<id>@<W>w``. The entry without a limit when ``power_limit_W`` is its TDP."""
    hw = load_hardware(hardware)
    if not (math.isfinite(power_limit_W) and 0.05 * hw.tdp_W <= power_limit_W <= 2.0 * hw.tdp_W):
        raise ConfigError(f"power limit {power_limit_W:g} W of {hw.id}: {_POWER_LIMIT_HELP}")
    base, *suffixes = hw.id.split(MEMORY_OVERRIDE_SEP)
    unlimited = MEMORY_OVERRIDE_SEP.join([base, *(p for p in suffixes if p.endswith("gb"))])
    if power_limit_W == hw.tdp_W:
        return hw if hw.power_limit_W is None else hw.model_copy(update={"id": unlimited, "power_limit_W": None})
    watts = _plain(power_limit_W)
    override = f"{unlimited}{MEMORY_OVERRIDE_SEP}{watts}w"
    note = f"Power limit {watts} W ({override}); TDP {hw.tdp_W:g} W."
    return Hardware.model_validate({
        **hw.model_dump(), "id": override, "name": f"{hw.name} at {watts} W", "aliases": (),
        "power_limit_W": round(power_limit_W, 6), "notes": f"{hw.notes} {note}".strip()})


def _plain(value: float) -> str:
    """``value`` as plain decimals (the id pattern has no exponent)."""
    return f"{value:.6f}".rstrip("0").rstrip(".")


def _override(text: str) -> Hardware:
    """``<hardware>@<size>gb[@<watts>w]``: the hardware with that memory and power limit (see the module
    docstring)."""
    base, *suffixes = text.split(MEMORY_OVERRIDE_SEP)
    if not base.strip() or not suffixes or len(suffixes) > 2:
        raise ConfigError(f"bad hardware override {text!r}: {_MEMORY_OVERRIDE_HELP}; or {_POWER_LIMIT_HELP}")
    hw = load_hardware(base.strip())
    seen: set[str] = set()
    for raw in suffixes:
        size = raw.strip().lower().replace(" ", "")
        power = _POWER_LIMIT.match(size)
        if power is not None and "w" not in seen and (len(suffixes) == 1 or raw is suffixes[-1]):
            seen.add("w")
            hw = with_power_limit(hw, round(float(power["value"]), 6))
            continue
        match = _MEMORY_SIZE.match(size)
        if match is None or "gb" in seen or float(match["value"]) * 2**30 < _MIN_MEMORY_BYTES:
            raise ConfigError(f"bad hardware override {text!r}: {_MEMORY_OVERRIDE_HELP}; or {_POWER_LIMIT_HELP}")
        seen.add("gb")
        # rounded as the id writes it, so the id reads back to the same bytes
        hw = with_memory(hw, round(float(match["value"]), 6) * 2**30)
    return hw


# within adapted_hardware(): what a catalog entry looked up by name becomes (None: the entry itself)
_ADAPT: ContextVar[Callable[[Hardware], Hardware] | None] = ContextVar("perfcast_adapt_hardware", default=None)


@contextmanager
def adapted_hardware(adapt: Callable[[Hardware], Hardware]) -> Iterator[None]:
    """Within the block, every catalog entry looked up by id or alias (memory and power overrides included) is
    ``adapt(entry)``: e.g. the entry with the corrections fitted on its measurements, under its own id so that
    a second lookup by that id adapts it again. Files given by path are read as they are."""
    token = _ADAPT.set(adapt)
    try:
        yield
    finally:
        _ADAPT.reset(token)


def load_hardware(name: str | Path | Hardware) -> Hardware:
    """Look up a device by id, alias (case-insensitive) or path to a YAML file, each optionally followed by a
    memory override ``@<size>gb`` (see the module docstring)."""
    if isinstance(name, Hardware):
        return name
    text = str(name)
    if MEMORY_OVERRIDE_SEP in text and not text.endswith((".yaml", ".yml")):
        return _override(text)
    if text.endswith((".yaml", ".yml")):
        path = Path(text)
        if not path.is_file():
            raise CatalogError(f"hardware file {text} does not exist")
        return _read_yaml(path)
    by_id, names = _catalog()
    key = names.get(normalize_name(text))
    if key is None and _user_dirs_state() != _READ_STATE.get("dirs"):  # a user catalog changed since the last read
        _catalog_for.cache_clear()  # (e.g. `perfcast calibrate` wrote local-cpu.yaml): read it again
        by_id, names = _catalog()
        key = names.get(normalize_name(text))
    if key is None and normalize_name(text) == LOCAL_CPU_ID:
        raise ConfigError(f"unknown hardware {text!r}: this machine has not been calibrated yet; `perfcast "
                          "calibrate` measures its CPU and writes local-cpu where the catalog reads it")
    if key is None:
        raise UnknownNameError("hardware", text, by_id.keys(), list_command="perfcast hardware list")
    adapt = _ADAPT.get()
    return by_id[key] if adapt is None else adapt(by_id[key])
