"""Evaluate a mapping: accesses per level, cycles, utilization and energy by component.

The counting follows Timeloop's tile analysis (Parashar et al., ISPASS 2019), simplified:

- A level's tile of a tensor spans every loop of that level (temporal and spatial) and of the levels
  inside it. For each tensor, consecutive levels that keep it (and finally the MACs, whose operand and
  accumulator registers hold one word) form parent/child pairs.
- The child's tile is replaced each time a loop above it steps, except the innermost loops that do not
  index the tensor (the tile stays, the tensor is *stationary*). So the number of tile visits is the
  product of the factors from the innermost loop above the child that indexes the tensor outward.
- Inputs slide: when that innermost loop is P, Q, R or S, each step brings in only the rows (columns)
  that do not overlap the previous window.
- A parent feeds its children once per word they share (multicast): it reads the footprint of the
  union of its children's tiles, so children that differ only in dims the tensor ignores share one read;
  children's partial sums are reduced on the way up the same way (spatial reduction).
- Outputs go back up as partial sums: each visit writes the tile to the parent; every write but a
  value's first arrival at the parent needs the partial sum read back down first.
- Cycles: the product of all temporal factors (one MAC per PE per cycle), or a level's traffic over its
  bandwidth when larger (bandwidth bound). Utilization = ideal cycles (MACs / PEs) / cycles.
- Energy: reads and writes times each level's per-access energy, words across each fanout times the
  network energy, MACs times the MAC energy. Leakage, clock, address generation and the adders of the
  spatial reduction are left out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from perfcast.accel.nest import Nest
from perfcast.accel.problem import RELEVANT, Problem
from perfcast.accel.spec import TENSORS, Architecture
from perfcast.digest import content_digest
from perfcast.results.serialize import json_field

__all__ = ["AccelResult", "AccelSummary", "LevelAccess", "evaluate_nest", "nest_cost"]

_SLIDING = (0, 1, 2, 3)  # R, S, P, Q


@dataclass(frozen=True, slots=True)
class LevelAccess:
    """Word accesses of one storage level, summed over its instances, per tensor."""

    name: str
    kind: str
    instances: int
    reads: dict[str, float] = field(metadata=json_field(key="reads_words"))
    writes: dict[str, float] = field(metadata=json_field(key="writes_words"))
    network_words: float
    energy_J: float
    network_energy_J: float
    cycles: float

    # to_json: the accesses (keyed by the level's name in the result's object)
    JSON_ORDER: ClassVar[tuple[str, ...]] = ("instances", "reads", "writes", "network_words", "cycles")

    @property
    def accesses(self) -> float:
        """Reads plus writes of every tensor."""
        return sum(self.reads.values()) + sum(self.writes.values())


@dataclass(frozen=True, slots=True)
class AccelResult:
    """What a mapping costs: cycles (ideal, compute, total), utilization and energy by component."""

    arch: str
    problem: str
    macs: int
    num_pes: int
    pes_used: int
    ideal_cycles: float
    compute_cycles: int
    cycles: float
    bound: str
    energy_J: float
    mac_energy_J: float
    levels: tuple[LevelAccess, ...]
    clock_Hz: float
    notes: tuple[str, ...] = field(default=())

    @property
    def utilization(self) -> float:
        """Ideal cycles / cycles (at most 1)."""
        return self.ideal_cycles / self.cycles

    @property
    def spatial_utilization(self) -> float:
        """PEs the mapping uses / PEs of the array."""
        return self.pes_used / self.num_pes

    @property
    def time_s(self) -> float:
        """Cycles at the architecture's clock."""
        return self.cycles / self.clock_Hz

    @property
    def energy_per_mac_fJ(self) -> float:
        """Total energy per MAC in femtojoules."""
        return self.energy_J / self.macs * 1e15

    @property
    def edp_Js(self) -> float:
        """Energy-delay product (joule-seconds)."""
        return self.energy_J * self.time_s

    def energy_breakdown(self) -> dict[str, float]:
        """Joules per component: each level, each network (``<level>.network``) and ``MAC``; sums to the total."""
        out: dict[str, float] = {}
        for lv in self.levels:
            out[lv.name] = lv.energy_J
            if lv.network_words:
                out[f"{lv.name}.network"] = lv.network_energy_J
        out["MAC"] = self.mac_energy_J
        return out

    def energy_shares(self) -> dict[str, float]:
        """Fractions of the energy in DRAM, in on-chip buffers and networks, and in the MACs."""
        dram = sum(lv.energy_J for lv in self.levels if lv.kind == "dram")
        total = self.energy_J or 1.0
        return {"dram": dram / total, "buffers": (self.energy_J - dram - self.mac_energy_J) / total,
                "mac": self.mac_energy_J / total}

    def json_view(self) -> AccelSummary:
        """The result's figures as reported (the CLI's ``--json``): units in the keys, each level's accesses."""
        return AccelSummary(
            arch=self.arch, problem=self.problem, macs=self.macs, num_pes=self.num_pes, pes_used=self.pes_used,
            ideal_cycles=self.ideal_cycles, compute_cycles=self.compute_cycles, cycles=self.cycles, bound=self.bound,
            utilization=self.utilization, spatial_utilization=self.spatial_utilization, time_s=self.time_s,
            energy_J=self.energy_J, energy_per_mac_fJ=self.energy_per_mac_fJ, edp_Js=self.edp_Js,
            energy_breakdown=self.energy_breakdown(), energy_share=self.energy_shares(),
            accesses={lv.name: lv for lv in self.levels})


@dataclass(frozen=True, slots=True)
class AccelSummary:
    """An :class:`AccelResult` as reported: cycles, utilization, time (s), energy (J, fJ per MAC, J s), energy by
    component and by kind of storage, and each level's word accesses."""

    arch: str
    problem: str
    macs: int
    num_pes: int
    pes_used: int
    ideal_cycles: float
    compute_cycles: int
    cycles: float
    bound: str
    utilization: float
    spatial_utilization: float
    time_s: float
    energy_J: float
    energy_per_mac_fJ: float
    edp_Js: float
    energy_breakdown: dict[str, float]
    energy_share: dict[str, float]
    accesses: dict[str, LevelAccess]


@dataclass(frozen=True, slots=True)
class _Counts:
    """Raw counts of one nest: per level and tensor (in TENSORS order) reads and writes, network words."""

    reads: list[list[float]]
    writes: list[list[float]]
    network: list[float]
    instances: list[int]
    compute_cycles: int


_ARCH_INFO: dict[str, tuple[tuple[list[int], ...], list[bool]]] = {}  # per architecture content digest


def _arch_info(arch: Architecture) -> tuple[tuple[list[int], ...], list[bool]]:
    """Per tensor the levels that keep it (then the MACs), and which levels have a fanout (cached per content)."""
    key = content_digest(arch)
    hit = _ARCH_INFO.get(key)
    if hit is not None:
        return hit
    n = len(arch.levels)
    keeps = tuple([i for i, lv in enumerate(arch.levels) if t in lv.tensors] + [n] for t in TENSORS)
    fanout = [bool(lv.fanout) for lv in arch.levels]
    if len(_ARCH_INFO) > 64:
        _ARCH_INFO.clear()
    _ARCH_INFO[key] = (keeps, fanout)
    return keeps, fanout


def _count(arch: Architecture, problem: Problem, nest: Nest) -> _Counts:
    """Accesses of every level (see the module docstring); the hot loop of the mapper."""
    n = nest.num_levels
    ext = nest.inner_extents()
    spatial = nest.spatial
    inst = [1] * (n + 1)  # instances of each level; inst[n] = MACs in use
    for i in range(n):
        fan = 1
        for f in spatial[i]:
            fan *= f
        inst[i + 1] = inst[i] * fan
    # temporal loops innermost first across levels; start[c] = first loop above level c; suffix products
    flat: list[tuple[int, int, int]] = []
    start = [0] * (n + 1)
    for c in range(n, -1, -1):
        start[c] = len(flat)
        if c > 0:
            flat.extend((c - 1, d, f) for d, f in reversed(nest.temporal[c - 1]))
    suffix = [1] * (len(flat) + 1)
    for k in range(len(flat) - 1, -1, -1):
        suffix[k] = suffix[k + 1] * flat[k][2]
    compute = suffix[0]
    reads = [[0.0, 0.0, 0.0] for _ in range(n)]
    writes = [[0.0, 0.0, 0.0] for _ in range(n)]
    network = [0.0] * n
    keeps, has_fanout = _arch_info(arch)
    for ti, tensor in enumerate(TENSORS):
        rel = RELEVANT[tensor]
        keep = keeps[ti]
        arrivals = float(problem.footprint(tensor, problem.dims))  # first arrivals of each word at the top
        for p, c in zip(keep, keep[1:], strict=False):
            visits, first = 1, None
            for k in range(start[c], len(flat)):
                if flat[k][1] in rel:
                    first = flat[k]
                    visits = suffix[k]
                    break
            union = ext[c]
            if c > p + 1 or inst[p + 1] > inst[p]:
                union = list(union)
                for m in range(p, c):
                    sm = spatial[m]
                    for d in range(7):
                        union[d] *= sm[d]
            tile = problem.footprint(tensor, ext[c])
            tile_u = problem.footprint(tensor, union)
            if ti == 1 and first is not None and first[1] in _SLIDING:
                j, d, f = first
                step = ext[j + 1][d] * spatial[j][d]
                per_child = visits // f * (tile + (f - 1) * problem.slide_words(ext[c], d, step))
                per_parent = visits // f * (tile_u + (f - 1) * problem.slide_words(union, d, step))
            else:
                per_child, per_parent = visits * tile, visits * tile_u
            child_words = float(inst[c] * per_child)
            parent_words = float(inst[p] * per_parent)
            if ti != 2:
                reads[p][ti] += parent_words
                if c < n:
                    writes[c][ti] += child_words
                crossing = child_words
            else:
                # partial sums: every arrival at the parent is a write; all but each value's first arrival
                # there needs the partial sum read back down first
                writes[p][ti] += parent_words
                back = max(0.0, parent_words - arrivals)
                reads[p][ti] += back
                back_child = child_words * (back / parent_words) if parent_words else 0.0
                if c < n:
                    reads[c][ti] += child_words
                    writes[c][ti] += back_child
                crossing = child_words + back_child
                arrivals = child_words - back_child  # words that start a residency at the child fresh
            for m in range(p, c):
                if has_fanout[m]:
                    network[m] += crossing
    return _Counts(reads, writes, network, inst, compute)


def _cost(arch: Architecture, problem: Problem, counts: _Counts) -> tuple[float, float, str, list[float]]:
    """(energy J, cycles, what bounds the cycles, cycles of each level) of raw counts."""
    cycles, bound = float(counts.compute_cycles), "compute"
    energy_pJ = problem.macs * arch.mac_energy_pJ
    per_level = []
    for i, lv in enumerate(arch.levels):
        r, w = counts.reads[i], counts.writes[i]
        if isinstance(lv.capacity_words, dict):
            busiest = max(r[t] + w[t] for t in range(3))
        else:
            busiest = sum(r) + sum(w)
        level_cycles = busiest / counts.instances[i] / lv.bandwidth_words_per_cycle
        per_level.append(level_cycles)
        if level_cycles > cycles:
            bound, cycles = lv.name, level_cycles
        energy_pJ += sum(r) * lv.read_energy_pJ + sum(w) * lv.write_energy_pJ
        energy_pJ += counts.network[i] * lv.network_energy_pJ_per_word
    return energy_pJ * 1e-12, cycles, bound, per_level


def nest_cost(arch: Architecture, problem: Problem, nest: Nest) -> tuple[float, float]:
    """(energy J, cycles) of a nest, without building the full result (the mapper's objective)."""
    energy, cycles, _, _ = _cost(arch, problem, _count(arch, problem, nest))
    return energy, cycles


def evaluate_nest(arch: Architecture, problem: Problem, nest: Nest) -> AccelResult:
    """Count accesses, cycles and energy of a checked nest (see the module docstring)."""
    counts = _count(arch, problem, nest)
    energy, cycles, bound, per_level = _cost(arch, problem, counts)
    levels = []
    for i, lv in enumerate(arch.levels):
        r, w = counts.reads[i], counts.writes[i]
        levels.append(LevelAccess(
            lv.name, lv.kind, counts.instances[i], dict(zip(TENSORS, r, strict=True)),
            dict(zip(TENSORS, w, strict=True)), counts.network[i],
            (sum(r) * lv.read_energy_pJ + sum(w) * lv.write_energy_pJ) * 1e-12,
            counts.network[i] * lv.network_energy_pJ_per_word * 1e-12, per_level[i]))
    mac_energy = problem.macs * arch.mac_energy_pJ * 1e-12
    return AccelResult(arch.name, problem.name, problem.macs, arch.num_macs, counts.instances[-1],
                       problem.macs / arch.num_macs, counts.compute_cycles, cycles, bound, energy, mac_energy,
                       tuple(levels), arch.clock_Hz)
