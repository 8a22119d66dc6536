"""Search mappings of a problem onto an architecture for the lowest energy-delay product (or energy, or delay).

Two strategies, both reproducible from a seed; both count candidates in batches with
:class:`~perfcast.accel.batch.BatchModel` (the evaluator's rules on numpy arrays, ~50,000 mappings/s)
and report the best through :func:`~perfcast.accel.evaluate.evaluate_nest` (so its figures are the
evaluator's):

- ``random`` (random-pruned search with descent, :mod:`~perfcast.accel.descent`): ``samples`` random
  draws (each dim's prime factors spread over its slots: the levels' temporal loops and the fanout axes
  that take it; random loop orders; half of the draws on spatial splits that fill the PE array), steepest
  descent over one-move neighborhoods (a prime factor moved between two slots, two dims trading primes,
  another loop order at one level, another fill of one fanout axis) from the best draws of the best few
  spatial splits, then random kicks of the best and descents again until several kicks in a row find
  nothing better. At most ``60 * samples`` mappings are counted.
- ``exhaustive``: every mapping of a pruned space: spatial splits that fill each axis as far as the dims
  allow, temporal tiles that are maximal (no factor can grow by a prime and still fit), and per level one
  loop order per distinct reuse pattern (orders that leave the same dims inside each tensor's innermost
  indexing loop count the same accesses). When that space is larger than ``samples`` the search refuses
  (ConfigError) instead of silently truncating.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from perfcast.accel.batch import BatchModel, MapArrays
from perfcast.accel.descent import better_key, descend_search, objective_keys
from perfcast.accel.evaluate import AccelResult, evaluate_nest
from perfcast.accel.mapspace import divisors, from_nest_parts, orders_of, rank_of, spatial_options, to_nest
from perfcast.accel.nest import nest_to_spec
from perfcast.accel.problem import Problem
from perfcast.accel.spec import DIMS, Architecture, MappingSpec
from perfcast.errors import ConfigError

__all__ = ["MAX_SAMPLES", "Objective", "SearchResult", "search_mappings"]

# random draws (or mappings an exhaustive search may count) per search: ~30 s at ~40,000 mappings/s
# (resnet50.conv1 on eyeriss, measured); beyond, a search runs for hours
MAX_SAMPLES = 1_000_000


class Objective(StrEnum):
    """What the mapper minimizes."""

    EDP = "edp"
    ENERGY = "energy"
    DELAY = "delay"


@dataclass(frozen=True, slots=True)
class SearchResult:
    """The best mapping found and how the search went."""

    best: AccelResult
    mapping: MappingSpec
    strategy: str
    objective: str
    evaluated: int
    drawn: int
    search_time_s: float

    @property
    def mappings_per_s(self) -> float:
        """Mappings evaluated per second of search."""
        return self.evaluated / self.search_time_s if self.search_time_s > 0 else 0.0


def _fits(arch: Architecture, problem: Problem, level: int, ext: list[int]) -> bool:
    lv = arch.levels[level]
    if lv.capacity_words is None:
        return True
    if isinstance(lv.capacity_words, dict):
        return all(problem.footprint(t, ext) <= lv.capacity_words[t] for t in lv.tensors)  # type: ignore[index]
    return sum(problem.footprint(t, ext) for t in lv.tensors) <= lv.capacity_words


def _temporal_options(arch: Architecture, problem: Problem, level: int, base: list[int],
                      rem: list[int]) -> list[dict[int, int]]:
    """Maximal temporal tiles of a bounded level: they fit, and no factor can grow to a larger divisor."""
    dims = [d for d in range(7) if rem[d] > 1]
    out = []
    for combo in itertools.product(*(divisors(rem[d]) for d in dims)):
        tf = dict(zip(dims, combo, strict=True))
        ext = [base[d] * tf.get(d, 1) for d in range(7)]
        if not _fits(arch, problem, level, ext):
            continue
        maximal = True
        for d in dims:
            bigger = [g for g in divisors(rem[d]) if g > tf[d]]
            if bigger:
                trial = list(ext)
                trial[d] = base[d] * bigger[0]
                if _fits(arch, problem, level, trial):
                    maximal = False
                    break
        if maximal:
            out.append({d: f for d, f in tf.items() if f > 1})
    return out


def _factorings(arch: Architecture, problem: Problem) -> list[tuple[list[dict[int, int]],
                                                                    list[dict[str, dict[int, int]]]]]:
    n = len(arch.levels)
    results: list[tuple[list[dict[int, int]], list[dict[str, dict[int, int]]]]] = []

    def level(i: int, rem: list[int], ext: list[int], temporal: list[dict[int, int]],
              axes: list[dict[str, dict[int, int]]]) -> None:
        lv = arch.levels[i]
        axis_names = list(lv.fanout)

        def axis(k: int, rem: list[int], chosen: dict[str, dict[int, int]]) -> None:
            if k == len(axis_names):
                sp = [1] * 7
                for split in chosen.values():
                    for d, f in split.items():
                        sp[d] *= f
                base = [ext[d] * sp[d] for d in range(7)]
                if i == 0:
                    tf = {d: rem[d] for d in range(7) if rem[d] > 1}
                    results.append(([tf, *temporal], [dict(chosen), *axes]))
                    return
                for tf in _temporal_options(arch, problem, i, base, rem):
                    left = [rem[d] // tf.get(d, 1) for d in range(7)]
                    level(i - 1, left, [base[d] * tf.get(d, 1) for d in range(7)], [tf, *temporal],
                          [dict(chosen), *axes])
                return
            fan = lv.fanout[axis_names[k]]
            for split in spatial_options([DIMS.index(d) for d in fan.dims], fan.size, rem):
                left = list(rem)
                for d, f in split.items():
                    left[d] //= f
                axis(k + 1, left, {**chosen, axis_names[k]: split})

        axis(0, rem, {})

    level(n - 1, list(problem.dims), [1] * 7, [], [])
    return results


# -- search -------------------------------------------------------------------------------------------------------


def _exhaustive(model: BatchModel, goal: Objective, samples: int,
                progress: Callable[[int, int], None] | None) -> tuple[MapArrays | None, int]:
    """The best mapping of the pruned space (None if nothing fits) and how many mappings were counted."""
    arch, problem = model.arch, model.problem
    factorings = _factorings(arch, problem)
    per = [[orders_of(frozenset(tf)) or ((),) for tf in temporal] for temporal, _ in factorings]
    size = sum(int(np.prod([len(o) for o in orders])) for orders in per)
    if size > samples:
        raise ConfigError(f"the pruned mapping space of {problem.name} on {arch.name} holds {size:,} mappings, "
                          f"more than --samples {samples:,}; raise --samples or use --search random")
    best: MapArrays | None = None
    best_key = (float("inf"), float("inf"))
    done = 0
    chunk: list[MapArrays] = []

    def flush() -> None:
        nonlocal best, best_key
        m = MapArrays.concat(chunk)
        chunk.clear()
        k1, k2 = objective_keys(goal.value, *model.cost(m))
        j = int(np.lexsort((k2, k1))[0])
        if better_key((float(k1[j]), float(k2[j])), best_key):
            best, best_key = m.take([j]), (float(k1[j]), float(k2[j]))
        if progress is not None:
            progress(done, size)

    n = model.num_levels
    for (temporal, axes), orders in zip(factorings, per, strict=True):
        # every combination of the levels' orders, in itertools.product's order, as rank rows
        base = from_nest_parts(model, temporal, [tuple(range(7))] * n, axes)
        options = [np.array([rank_of(o) for o in level], dtype=np.int64) for level in orders]
        picks = [g.ravel() for g in np.meshgrid(*(np.arange(len(o)) for o in options), indexing="ij")]
        rank = np.stack([options[i][picks[i]] for i in range(n)], axis=1)
        count = len(rank)
        chunk.append(MapArrays(np.repeat(base.temporal, count, axis=0), np.repeat(base.spatial, count, axis=0),
                               rank))
        done += count
        if sum(len(c) for c in chunk) >= 4096:
            flush()
    if chunk:
        flush()
    return best, done


def search_mappings(arch: Architecture, problem: Problem, *, strategy: str = "random", samples: int = 2000,
                    objective: str | Objective = Objective.EDP, seed: int = 0,
                    progress: Callable[[int, int], None] | None = None) -> SearchResult:
    """The best mapping by ``objective`` (``edp``, ``energy`` or ``delay``) found by ``strategy``
    (``random``: ``samples`` draws, then descent; ``exhaustive``: the pruned space, refused if it holds more
    than ``samples`` mappings). ``progress(done, total)`` is called now and then (mappings counted out of the
    most the search may count). Raises ConfigError when nothing valid is found."""
    try:
        goal = Objective(objective)
    except ValueError:
        raise ConfigError(f"unknown objective {objective!r}; use one of {', '.join(o.value for o in Objective)}") \
            from None
    if not 1 <= samples <= MAX_SAMPLES:
        raise ConfigError(f"samples {samples}: give 1 to {MAX_SAMPLES:,} (a million draws take ~30 s at the "
                          "mapper's ~40,000 mappings/s, and the descent after them counts up to 60x as many)")
    if strategy not in ("random", "exhaustive"):
        raise ConfigError(f"unknown search strategy {strategy!r}; use random or exhaustive")
    if not 0 <= seed < 2**63:
        raise ConfigError(f"seed {seed}: give a non-negative integer below 2**63 (numpy's generators take those)")
    start = time.perf_counter()
    model = BatchModel(arch, problem)
    if strategy == "random":
        found = descend_search(model, goal.value, samples, seed, progress=progress)
        best, evaluated, drawn = (None, 0, samples) if found is None else (found.best, found.evaluated, found.drawn)
    else:
        best, evaluated = _exhaustive(model, goal, samples, progress)
        drawn = evaluated
    elapsed = time.perf_counter() - start
    if best is None:
        raise ConfigError(f"no valid mapping of {problem.name} on {arch.name} in {drawn:,} draws; "
                          "raise --samples or check the buffer sizes")
    nest = to_nest(model, best, 0)
    return SearchResult(evaluate_nest(arch, problem, nest), nest_to_spec(arch, problem, nest), strategy, goal.value,
                        evaluated, drawn, elapsed)
