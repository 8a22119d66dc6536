"""The three declarative specs of a spatial accelerator run, as typed YAML schemas (Timeloop's split).

- :class:`Architecture`: storage levels from the backing store (DRAM) inward, each with its capacity in
  words, the tensors it keeps, its per-access energies and bandwidth, and the spatial fanout below it
  (the PE array). Per-access energies are a table with the source they come from (Accelergy's idea).
- :class:`ProblemSpec`: a convolution or a GEMM as the 7-dimensional loop nest R, S, P, Q, C, K, N
  (see :mod:`perfcast.accel.problem`).
- :class:`MappingSpec`: per storage level, the temporal tiling factors and their loop order, and the
  spatial factors on each fanout axis.

Every schema forbids unknown keys. Units: words (one operand of ``word_bits``), picojoules per word
access, words per cycle, hertz.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from perfcast.datafiles import data_dir
from perfcast.errors import ConfigError, UnknownNameError
from perfcast.yamlio import load_model_file

__all__ = ["DIMS", "TENSORS", "Architecture", "Axis", "Dim", "FanoutAxis", "LevelMapping", "MappingSpec",
           "ProblemSpec", "StorageLevel", "TensorName", "list_archs", "load_arch", "load_mapping",
           "load_problem_file"]

Dim = Literal["R", "S", "P", "Q", "C", "K", "N"]
TensorName = Literal["weights", "inputs", "outputs"]
Axis = Literal["x", "y"]
DIMS: tuple[str, ...] = ("R", "S", "P", "Q", "C", "K", "N")
TENSORS: tuple[str, ...] = ("weights", "inputs", "outputs")


def _all_dims() -> list[Dim]:
    return ["R", "S", "P", "Q", "C", "K", "N"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# -- architecture ----------------------------------------------------------------------------------------------


class FanoutAxis(_Strict):
    """One axis of the spatial fanout below a level: ``size`` child instances along it, which may take the
    loop dims in ``dims`` (a dataflow's spatial constraint, e.g. Eyeriss' filter rows on the PE rows)."""

    size: int = Field(gt=0)
    dims: list[Dim] = Field(default_factory=lambda: _all_dims(), min_length=1)


class StorageLevel(_Strict):
    """One storage level; there is one instance of it per instance of the fanout above it.

    ``capacity_words`` is one number (shared by its tensors), one per tensor (separate scratchpads, as in
    an Eyeriss PE), or absent for the backing store (unbounded). ``bandwidth_words_per_cycle`` is per
    instance (per scratchpad when the capacity is per tensor). ``network_energy_pJ_per_word`` is paid per
    word that crosses this level's fanout to or from a child instance.
    """

    name: str = Field(min_length=1)
    kind: Literal["dram", "sram", "regfile"]
    tensors: list[TensorName] = Field(min_length=1)
    capacity_words: int | dict[TensorName, int] | None = None
    read_energy_pJ: float = Field(ge=0)
    write_energy_pJ: float = Field(ge=0)
    bandwidth_words_per_cycle: float = Field(gt=0)
    fanout: dict[Axis, FanoutAxis] = Field(default_factory=dict)
    network_energy_pJ_per_word: float = Field(default=0.0, ge=0)

    @model_validator(mode="after")
    def _capacity(self) -> StorageLevel:
        if self.kind != "dram" and self.capacity_words is None:
            raise ValueError(f"level {self.name!r} ({self.kind}) needs capacity_words")
        if isinstance(self.capacity_words, dict):
            missing = [t for t in self.tensors if t not in self.capacity_words]
            if missing:
                raise ValueError(f"level {self.name!r}: capacity_words has no entry for {', '.join(missing)}")
        return self

    def capacity_of(self, tensor: str) -> int | None:
        """Words available to ``tensor`` here (None: unbounded, or shared with the level's other tensors)."""
        if isinstance(self.capacity_words, dict):
            return self.capacity_words.get(tensor)  # type: ignore[call-overload, no-any-return]
        return None

    @property
    def fanout_size(self) -> int:
        """Child instances per instance of this level."""
        n = 1
        for axis in self.fanout.values():
            n *= axis.size
        return n


class Architecture(_Strict):
    """A spatial accelerator: storage levels from the backing store inward, MACs below the innermost."""

    name: str
    description: str = ""
    technology: str = Field(min_length=1, description="process node the energies are for, e.g. '65 nm'")
    source: list[str] = Field(min_length=1, description="where the sizes and energies come from")
    word_bits: int = Field(gt=0)
    clock_Hz: float = Field(gt=0)
    mac_energy_pJ: float = Field(ge=0)
    levels: list[StorageLevel] = Field(min_length=1, description="outermost (the backing store) first")

    @model_validator(mode="after")
    def _backing_store(self) -> Architecture:
        top = self.levels[0]
        if top.kind != "dram":
            raise ValueError(f"the first level ({top.name!r}, {top.kind}) must be the backing store: kind dram")
        missing = [t for t in TENSORS if t not in top.tensors]
        if missing:
            raise ValueError(f"the backing store {top.name!r} must keep every tensor; it lacks {', '.join(missing)}")
        names = [lv.name for lv in self.levels]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"level names must be unique; repeated: {', '.join(dup)}")
        if any(lv.kind == "dram" for lv in self.levels[1:]):
            raise ValueError("only the first level may be kind dram")
        return self

    @property
    def num_macs(self) -> int:
        """MAC units: the product of every level's fanout."""
        n = 1
        for lv in self.levels:
            n *= lv.fanout_size
        return n

    def level_index(self, name: str) -> int:
        """Position of the level called ``name`` (0 = the backing store); raises ConfigError if absent."""
        for i, lv in enumerate(self.levels):
            if lv.name == name:
                return i
        raise ConfigError(f"the mapping names level {name!r}, which architecture {self.name!r} does not have; "
                          f"its levels are {', '.join(lv.name for lv in self.levels)}")


# -- problem ---------------------------------------------------------------------------------------------------


class ProblemSpec(_Strict):
    """A convolution (or a GEMM: P = rows M, C = reduction, K = columns N) as a 7-dim loop nest.

    Dims not given are 1. R and S are the filter's rows and columns, P and Q the output's, C the input
    channels, K the output channels, N the batch. Strides and dilations are per spatial direction.
    """

    name: str = "problem"
    dims: dict[Dim, int] = Field(min_length=1)
    stride_h: int = Field(default=1, gt=0)
    stride_w: int = Field(default=1, gt=0)
    dilation_h: int = Field(default=1, gt=0)
    dilation_w: int = Field(default=1, gt=0)

    @model_validator(mode="after")
    def _positive(self) -> ProblemSpec:
        bad = {d: v for d, v in self.dims.items() if v < 1}
        if bad:
            raise ValueError(f"dims must be positive integers; got {bad}")
        return self


# -- mapping ---------------------------------------------------------------------------------------------------


class LevelMapping(_Strict):
    """What one storage level does: ``temporal`` factors iterated over its tile, in ``order`` (outermost
    loop first; dims not listed follow, innermost, in the order N K C Q P S R),
    and ``spatial`` factors per fanout axis (the tile split among the child instances)."""

    temporal: dict[Dim, int] = Field(default_factory=dict)
    order: list[Dim] = Field(default_factory=list)
    spatial: dict[Axis, dict[Dim, int]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _valid(self) -> LevelMapping:
        if len(set(self.order)) != len(self.order):
            raise ValueError(f"order lists a dim twice: {self.order}")
        factors = list(self.temporal.values()) + [f for ax in self.spatial.values() for f in ax.values()]
        if any(f < 1 for f in factors):
            raise ValueError("tiling factors must be positive integers")
        return self


class MappingSpec(_Strict):
    """A mapping: per architecture level (by name), its temporal and spatial factors and loop order.

    Levels not named keep every factor at 1. For each dim the factors of all levels multiply to the
    problem's size.
    """

    arch: str | None = Field(default=None, description="the architecture it was made for (informational)")
    problem: str | None = Field(default=None, description="the problem it was made for (informational)")
    levels: dict[str, LevelMapping] = Field(min_length=1)


# -- loading ---------------------------------------------------------------------------------------------------


def _data_dir() -> Path:
    return data_dir("accelerators")


def list_archs() -> list[str]:
    """Names of the shipped architectures."""
    return sorted(p.stem for p in _data_dir().glob("*.yaml"))


def load_arch(name_or_path: str | Path) -> Architecture:
    """A shipped architecture by name (``eyeriss``) or a YAML file by path; raises ConfigError in one line."""
    text = str(name_or_path)
    if text.endswith((".yaml", ".yml")):
        path = Path(text)
        if not path.is_file():
            raise ConfigError(f"architecture file {path} does not exist")
    else:
        path = _data_dir() / f"{text}.yaml"
        if not path.is_file():
            raise UnknownNameError("architecture", text, list_archs(), list_command="perfcast accel --list-archs")
    arch: Architecture = load_model_file(path, Architecture, what="architecture", error=ConfigError)
    return arch


def load_mapping(path: str | Path) -> MappingSpec:
    """A mapping YAML file; raises ConfigError naming the file and the key."""
    spec: MappingSpec = _load_spec_file(path, MappingSpec, "mapping")
    return spec


def load_problem_file(path: str | Path) -> ProblemSpec:
    """A problem YAML file; raises ConfigError naming the file and the key."""
    spec: ProblemSpec = _load_spec_file(path, ProblemSpec, "problem")
    return spec


def _load_spec_file(path: str | Path, model: type[BaseModel], what: str) -> Any:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{what} file {p} does not exist")
    return load_model_file(p, model, what=what, error=ConfigError)
