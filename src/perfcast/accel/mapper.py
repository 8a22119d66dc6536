"""Search mappings of a problem onto an architecture for the lowest energy-delay product (or energy, or delay).

Two strategies, both reproducible from a seed:

- ``random``: draw ``samples`` mappings. Levels are filled from the innermost outward: each fanout axis
  gets random divisors of what is left of its allowed dims (never more than the axis holds), each level
  random temporal divisors, shrunk one factor at a time until the tile fits the level; the backing store
  takes what is left; every level gets a random loop order. Draws that cannot fit are skipped. The best
  draw is then hill-climbed (one prime factor moved between two levels, or another loop order at one
  level) within another ``samples`` evaluations.
- ``exhaustive``: every mapping of a pruned space: spatial splits that fill each axis as far as the dims
  allow, temporal tiles that are maximal (no factor can grow by a prime and still fit), and per level one
  loop order per distinct reuse pattern (orders that leave the same dims inside each tensor's innermost
  indexing loop count the same accesses). When that space is larger than ``samples`` the search refuses
  (ConfigError) instead of silently truncating.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from enum import StrEnum
from functools import cache

import numpy as np

from perfcast.accel.evaluate import AccelResult, evaluate_nest, nest_cost
from perfcast.accel.nest import Nest, nest_to_spec
from perfcast.accel.problem import RELEVANT, Problem
from perfcast.accel.spec import DIMS, TENSORS, Architecture, MappingSpec
from perfcast.errors import ConfigError

__all__ = ["Objective", "SearchResult", "search_mappings"]


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


def _key_of(energy_J: float, cycles: float, objective: Objective) -> tuple[float, float]:
    if objective is Objective.ENERGY:
        return (energy_J, cycles)
    if objective is Objective.DELAY:
        return (cycles, energy_J)
    return (energy_J * cycles, energy_J)


@cache
def _divisors(n: int) -> tuple[int, ...]:
    return tuple(d for d in range(1, n + 1) if n % d == 0)


def _fits(arch: Architecture, problem: Problem, level: int, ext: list[int]) -> bool:
    lv = arch.levels[level]
    if lv.capacity_words is None:
        return True
    if isinstance(lv.capacity_words, dict):
        return all(problem.footprint(t, ext) <= lv.capacity_words[t] for t in lv.tensors)  # type: ignore[index]
    return sum(problem.footprint(t, ext) for t in lv.tensors) <= lv.capacity_words


def _signature(order: tuple[int, ...]) -> tuple[tuple[frozenset[int], int], ...]:
    """Per tensor: the dims inside its innermost indexing loop, and that loop's dim (-1: none)."""
    sig = []
    for t in TENSORS:
        inner: set[int] = set()
        first = -1
        for d in reversed(order):
            if d in RELEVANT[t]:
                first = d
                break
            inner.add(d)
        sig.append((frozenset(inner), first))
    return tuple(sig)


@cache
def _orders(dims: frozenset[int]) -> tuple[tuple[int, ...], ...]:
    """One loop order (outermost first) per distinct reuse pattern of ``dims``."""
    seen: dict[tuple[tuple[frozenset[int], int], ...], tuple[int, ...]] = {}
    for perm in itertools.permutations(sorted(dims)):
        seen.setdefault(_signature(perm), perm)
    return tuple(seen.values())


def _nest(temporal: list[dict[int, int]], orders: list[tuple[int, ...]],
          axes: list[dict[str, dict[int, int]]]) -> Nest:
    t_levels, s_levels, a_levels = [], [], []
    for tf, order, ax in zip(temporal, orders, axes, strict=True):
        t_levels.append(tuple((d, tf[d]) for d in order if tf.get(d, 1) > 1))
        sp = [1] * 7
        for split in ax.values():
            for d, f in split.items():
                sp[d] *= f
        s_levels.append(tuple(sp))
        a_levels.append(tuple((a, tuple((d, f) for d, f in split.items() if f > 1)) for a, split in ax.items()))
    return Nest(tuple(t_levels), tuple(s_levels), tuple(a_levels))


# -- random -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _State:
    """A mapping under search: per level the temporal factors, a full loop order (outermost first), the
    spatial split per fanout axis."""

    temporal: list[dict[int, int]]
    orders: list[tuple[int, ...]]
    axes: list[dict[str, dict[int, int]]]

    def nest(self) -> Nest:
        return _nest(self.temporal, self.orders, self.axes)


def _full(order: tuple[int, ...]) -> tuple[int, ...]:
    """An order of some dims completed with the others outermost (they have factor 1 there)."""
    return tuple(d for d in range(7) if d not in order) + tuple(order)


def _primes(n: int) -> list[int]:
    out, k = [], 2
    while k * k <= n:
        while n % k == 0:
            out.append(k)
            n //= k
        k += 1
    return out + ([n] if n > 1 else [])


def _valid(arch: Architecture, problem: Problem, st: _State) -> bool:
    ext = [1] * 7
    for i in range(len(arch.levels) - 1, 0, -1):
        for split in st.axes[i].values():
            for d, f in split.items():
                ext[d] *= f
        for d, f in st.temporal[i].items():
            ext[d] *= f
        if not _fits(arch, problem, i, ext):
            return False
    return True


def _refine(arch: Architecture, problem: Problem, st: _State, goal: Objective,
            budget: int) -> tuple[_State, tuple[float, float], int]:
    """Hill-climb from ``st``: move one prime factor of a dim between two levels' temporal loops, or pick
    another loop order (one per reuse pattern) at one level; keep any change that lowers the objective."""
    def score(s: _State) -> tuple[float, float]:
        e, c = nest_cost(arch, problem, s.nest())
        return _key_of(e, c, goal)

    best, key, used = st, score(st), 1
    improved = True
    while improved and used < budget:
        improved = False
        n = len(arch.levels)
        candidates: list[_State] = []
        for i in range(n):
            for order in _orders(frozenset(d for d, f in best.temporal[i].items() if f > 1)):
                orders = list(best.orders)
                orders[i] = _full(order)
                candidates.append(_State(best.temporal, orders, best.axes))
        for d in range(7):
            for a in range(n):
                fa = best.temporal[a].get(d, 1)
                for prime in sorted(set(_primes(fa))):
                    for b in range(n):
                        if b == a:
                            continue
                        temporal = [dict(t) for t in best.temporal]
                        temporal[a][d] = fa // prime
                        temporal[b][d] = temporal[b].get(d, 1) * prime
                        cand = _State(temporal, best.orders, best.axes)
                        if _valid(arch, problem, cand):
                            candidates.append(cand)
        for cand in candidates:
            if used >= budget:
                break
            k = score(cand)
            used += 1
            if k < key:
                best, key, improved = cand, k, True
    return best, key, used


class _Draws:
    """Uniform numbers drawn from a seeded generator in blocks (one numpy call per block, not per choice)."""

    def __init__(self, rng: np.random.Generator) -> None:
        self._rng = rng
        self._block: list[float] = []

    def index(self, n: int) -> int:
        """A uniform integer in [0, n)."""
        if not self._block:
            self._block = self._rng.random(4096).tolist()
        return min(int(self._block.pop() * n), n - 1)

    def pick(self, options: tuple[int, ...] | list[int]) -> int:
        """A uniform choice."""
        return options[self.index(len(options))]

    def shuffled(self, items: list[int]) -> list[int]:
        """A uniform permutation (Fisher-Yates)."""
        out = list(items)
        for k in range(len(out) - 1, 0, -1):
            j = self.index(k + 1)
            out[k], out[j] = out[j], out[k]
        return out


def _draw(arch: Architecture, problem: Problem, draws: _Draws) -> _State | None:
    n = len(arch.levels)
    rem = list(problem.dims)
    ext = [1] * 7
    temporal: list[dict[int, int]] = [{} for _ in range(n)]
    axes: list[dict[str, dict[int, int]]] = [{} for _ in range(n)]
    for i in range(n - 1, -1, -1):
        lv = arch.levels[i]
        spatial: dict[int, int] = {}
        for axis, fan in lv.fanout.items():
            room, split = fan.size, {}
            for d in draws.shuffled([DIMS.index(name) for name in fan.dims]):
                f = draws.pick([f for f in _divisors(rem[d]) if f <= room])
                if f > 1:
                    split[d] = f
                    rem[d] //= f
                    room //= f
            axes[i][axis] = split
            for d, f in split.items():
                spatial[d] = spatial.get(d, 1) * f
        if i == 0:
            temporal[0] = {d: rem[d] for d in range(7) if rem[d] > 1}
        else:
            tf = {d: draws.pick(_divisors(rem[d])) for d in range(7)}
            base = [ext[d] * spatial.get(d, 1) for d in range(7)]
            while not _fits(arch, problem, i, [base[d] * tf[d] for d in range(7)]):
                grown = [d for d in range(7) if tf[d] > 1]
                if not grown:
                    return None
                d = draws.pick(grown)
                tf[d] = draws.pick([f for f in _divisors(rem[d]) if f < tf[d]])
            temporal[i] = {d: f for d, f in tf.items() if f > 1}
            for d, f in temporal[i].items():
                rem[d] //= f
        for d in range(7):
            ext[d] *= spatial.get(d, 1) * temporal[i].get(d, 1)
    orders = [tuple(draws.shuffled(list(range(7)))) for _ in range(n)]
    return _State(temporal, orders, axes)


# -- exhaustive ---------------------------------------------------------------------------------------------------


def _spatial_options(fan_dims: list[int], size: int, rem: list[int]) -> list[dict[int, int]]:
    """Splits of one axis among its dims that no single factor can grow (to a larger divisor) within ``size``."""
    out = []
    choices = [_divisors(rem[d]) for d in fan_dims]
    for combo in itertools.product(*choices):
        used = int(np.prod(combo))
        if used > size:
            continue
        maximal = all(not any(g > f and used // f * g <= size for g in _divisors(rem[d]))
                      for d, f in zip(fan_dims, combo, strict=True))
        if maximal:
            out.append({d: f for d, f in zip(fan_dims, combo, strict=True) if f > 1})
    return out


def _temporal_options(arch: Architecture, problem: Problem, level: int, base: list[int],
                      rem: list[int]) -> list[dict[int, int]]:
    """Maximal temporal tiles of a bounded level: they fit, and no factor can grow to a larger divisor."""
    dims = [d for d in range(7) if rem[d] > 1]
    out = []
    for combo in itertools.product(*(_divisors(rem[d]) for d in dims)):
        tf = dict(zip(dims, combo, strict=True))
        ext = [base[d] * tf.get(d, 1) for d in range(7)]
        if not _fits(arch, problem, level, ext):
            continue
        maximal = True
        for d in dims:
            bigger = [g for g in _divisors(rem[d]) if g > tf[d]]
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
            for split in _spatial_options([DIMS.index(d) for d in fan.dims], fan.size, rem):
                left = list(rem)
                for d, f in split.items():
                    left[d] //= f
                axis(k + 1, left, {**chosen, axis_names[k]: split})

        axis(0, rem, {})

    level(n - 1, list(problem.dims), [1] * 7, [], [])
    return results


# -- search -------------------------------------------------------------------------------------------------------


def search_mappings(arch: Architecture, problem: Problem, *, strategy: str = "random", samples: int = 2000,
                    objective: str | Objective = Objective.EDP, seed: int = 0) -> SearchResult:
    """The best mapping by ``objective`` (``edp``, ``energy`` or ``delay``) found by ``strategy``
    (``random``: ``samples`` draws; ``exhaustive``: the pruned space, refused if it holds more than
    ``samples`` mappings). Raises ConfigError when nothing valid is found."""
    try:
        goal = Objective(objective)
    except ValueError:
        raise ConfigError(f"unknown objective {objective!r}; use one of {', '.join(o.value for o in Objective)}") \
            from None
    if samples < 1:
        raise ConfigError(f"samples must be a positive integer (got {samples})")
    start = time.perf_counter()
    best: tuple[tuple[float, float], _State] | None = None
    evaluated = drawn = 0
    if strategy == "random":
        draws = _Draws(np.random.default_rng(seed))
        for _ in range(samples):
            drawn += 1
            st = _draw(arch, problem, draws)
            if st is None:
                continue
            k = _key_of(*nest_cost(arch, problem, st.nest()), goal)
            evaluated += 1
            if best is None or k < best[0]:
                best = (k, st)
        if best is not None:
            refined, key, used = _refine(arch, problem, best[1], goal, budget=samples)
            evaluated += used
            best = (key, refined)
    elif strategy == "exhaustive":
        factorings = _factorings(arch, problem)
        per = []
        for temporal, _ in factorings:
            per.append([_orders(frozenset(tf)) or ((),) for tf in temporal])
        size = sum(int(np.prod([len(o) for o in orders])) for orders in per)
        if size > samples:
            raise ConfigError(f"the pruned mapping space of {problem.name} on {arch.name} holds {size:,} mappings, "
                              f"more than --samples {samples:,}; raise --samples or use --search random")
        for (temporal, axes), orders in zip(factorings, per, strict=True):
            for combo in itertools.product(*orders):
                drawn += 1
                st = _State(temporal, [_full(o) for o in combo], axes)
                k = _key_of(*nest_cost(arch, problem, st.nest()), goal)
                evaluated += 1
                if best is None or k < best[0]:
                    best = (k, st)
    else:
        raise ConfigError(f"unknown search strategy {strategy!r}; use random or exhaustive")
    elapsed = time.perf_counter() - start
    if best is None:
        raise ConfigError(f"no valid mapping of {problem.name} on {arch.name} in {drawn:,} draws; "
                          "raise --samples or check the buffer sizes")
    nest = best[1].nest()
    return SearchResult(evaluate_nest(arch, problem, nest), nest_to_spec(arch, problem, nest), strategy, goal.value,
                        evaluated, drawn, elapsed)
