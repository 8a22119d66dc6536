"""A mapping resolved against an architecture and a problem: the loop nest the evaluator counts.

:func:`build_nest` checks a :class:`~perfcast.accel.spec.MappingSpec` (levels exist, fanout axes exist
and allow the dims they get, spatial factors fit the array, every dim's factors multiply to its size,
every tile fits its buffer) and returns a :class:`Nest`: per level the temporal loops (outermost first,
factor-1 loops dropped) and the spatial factors per dim. Each check that fails raises ConfigError in
one line saying which level, dim or tensor and the numbers involved.
"""

from __future__ import annotations

from dataclasses import dataclass

from perfcast.accel.problem import Problem
from perfcast.accel.spec import DIMS, Architecture, LevelMapping, MappingSpec
from perfcast.errors import ConfigError

__all__ = ["DEFAULT_ORDER", "Nest", "build_nest", "check_capacity", "nest_to_spec"]

# outermost first; dims a mapping's order leaves out follow in this order
DEFAULT_ORDER: tuple[int, ...] = (6, 5, 4, 3, 2, 1, 0)  # N K C Q P S R


@dataclass(frozen=True, slots=True)
class Nest:
    """Per level ``temporal[i]`` = ((dim, factor), ...) outermost first (factors > 1 only) and
    ``spatial[i][d]`` = the product of level i's spatial factors of dim d (over its fanout axes).
    ``axes[i]`` keeps the per-axis split for writing the mapping back out."""

    temporal: tuple[tuple[tuple[int, int], ...], ...]
    spatial: tuple[tuple[int, ...], ...]
    axes: tuple[tuple[tuple[str, tuple[tuple[int, int], ...]], ...], ...] = ()

    @property
    def num_levels(self) -> int:
        """Storage levels."""
        return len(self.temporal)

    def inner_extents(self) -> list[list[int]]:
        """``ext[i][d]``: the extent of dim d in the tile of level i (its loops and all inner ones);
        ``ext[num_levels]`` is one MAC's (all ones)."""
        n = self.num_levels
        ext = [[1] * 7 for _ in range(n + 1)]
        for i in range(n - 1, -1, -1):
            row = list(ext[i + 1])
            for d, f in self.temporal[i]:
                row[d] *= f
            sp = self.spatial[i]
            for d in range(7):
                row[d] *= sp[d]
            ext[i] = row
        return ext


def _order(lm: LevelMapping) -> list[int]:
    listed = [DIMS.index(d) for d in lm.order]
    return listed + [d for d in DEFAULT_ORDER if d not in listed]


def check_capacity(arch: Architecture, problem: Problem, ext: list[list[int]]) -> None:
    """Raise ConfigError for the first tile that does not fit its level (which level, tensor, words)."""
    for i, lv in enumerate(arch.levels):
        if lv.capacity_words is None:
            continue
        words = {t: problem.footprint(t, ext[i]) for t in lv.tensors}
        if isinstance(lv.capacity_words, dict):
            for t in lv.tensors:
                cap = lv.capacity_words[t]  # type: ignore[index]
                if words[t] > cap:
                    raise ConfigError(f"tile too large: level {lv.name} holds {words[t]:,} words of {t} but its "
                                      f"{t} capacity is {cap:,} words; use smaller factors at {lv.name} or below")
        elif sum(words.values()) > lv.capacity_words:
            parts = " + ".join(f"{t} {w:,}" for t, w in words.items())
            raise ConfigError(f"tile too large: level {lv.name} holds {sum(words.values()):,} words ({parts}) but "
                              f"its capacity is {lv.capacity_words:,} words; use smaller factors at {lv.name} or "
                              "below")


def build_nest(arch: Architecture, problem: Problem, mapping: MappingSpec) -> Nest:
    """Check ``mapping`` against the architecture and problem and resolve it (see the module docstring)."""
    by_level: dict[int, LevelMapping] = {}
    for name, lm in mapping.levels.items():
        by_level[arch.level_index(name)] = lm
    temporal: list[tuple[tuple[int, int], ...]] = []
    spatial: list[tuple[int, ...]] = []
    axes: list[tuple[tuple[str, tuple[tuple[int, int], ...]], ...]] = []
    for i, lv in enumerate(arch.levels):
        lm = by_level.get(i, LevelMapping())
        factors = {DIMS.index(d): f for d, f in lm.temporal.items()}
        temporal.append(tuple((d, factors[d]) for d in _order(lm) if factors.get(d, 1) > 1))
        sp = [1] * 7
        level_axes = []
        for axis, split in lm.spatial.items():
            fan = lv.fanout.get(axis)
            if fan is None:
                have = ", ".join(lv.fanout) or "none"
                raise ConfigError(f"level {lv.name} has no spatial fanout axis {axis!r} (its axes: {have})")
            used = 1
            for dname, f in split.items():
                if dname not in fan.dims and f > 1:
                    raise ConfigError(f"level {lv.name} fanout {axis} does not take dim {dname} "
                                      f"(allowed: {', '.join(fan.dims)})")
                sp[DIMS.index(dname)] *= f
                used *= f
            if used > fan.size:
                raise ConfigError(f"spatial fanout too large: level {lv.name} axis {axis} gets factors multiplying "
                                  f"to {used} but the array has {fan.size} along it")
            level_axes.append((axis, tuple((DIMS.index(d), f) for d, f in split.items() if f > 1)))
        spatial.append(tuple(sp))
        axes.append(tuple(level_axes))
    nest = Nest(tuple(temporal), tuple(spatial), tuple(axes))
    ext = nest.inner_extents()
    for d, name in enumerate(DIMS):
        if ext[0][d] != problem.dims[d]:
            raise ConfigError(f"dim {name}: the mapping's factors multiply to {ext[0][d]} across levels but "
                              f"problem {problem.name} has {name}={problem.dims[d]}")
    check_capacity(arch, problem, ext)
    return nest


def nest_to_spec(arch: Architecture, problem: Problem, nest: Nest) -> MappingSpec:
    """The mapping file of a nest (levels with nothing to do left out)."""
    levels: dict[str, LevelMapping] = {}
    for i, lv in enumerate(arch.levels):
        temporal = {DIMS[d]: f for d, f in nest.temporal[i]}
        spatial = {axis: {DIMS[d]: f for d, f in split} for axis, split in (nest.axes[i] if nest.axes else ())
                   if split}
        if temporal or spatial:
            levels[lv.name] = LevelMapping.model_validate(
                {"temporal": temporal, "order": [DIMS[d] for d, _ in nest.temporal[i]], "spatial": spatial})
    if not levels:  # a nest of one iteration: every factor is 1
        levels[arch.levels[0].name] = LevelMapping()
    return MappingSpec(arch=arch.name, problem=problem.name, levels=levels)

