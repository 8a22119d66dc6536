"""The mapspace as arrays: random draws, one-move neighborhoods, and conversions to and from nests.

Timeloop's view of a mapping space (Parashar et al., ISPASS 2019, Sec. IV): each dim's size is factored
over *slots*, the temporal loops of every level and the fanout axes that take the dim, and every level
picks a loop order. Here a mapping is a row of :class:`~perfcast.accel.batch.MapArrays`, so that a whole
population or neighborhood is counted in one call of :meth:`~perfcast.accel.batch.BatchModel.cost`.

- :func:`draw` assigns each prime factor of each dim to a slot uniformly at random, and each level a
  uniformly random loop order (rows that do not fit are filtered later by ``valid``);
- :func:`neighbors` lists every mapping one move away: a prime factor of one dim moved between two of
  its slots (a loop that appears at a level is tried where the order has it, innermost and outermost),
  two dims trading primes between two slots (tiles keep their size; this crosses the tight capacities of
  scratchpads), another loop order at one level (one order per distinct reuse pattern), or one fanout
  axis filled another way (:func:`refills`).
"""

from __future__ import annotations

import itertools
import math
from functools import cache

import numpy as np

from perfcast.accel.batch import BatchModel, MapArrays
from perfcast.accel.nest import Nest
from perfcast.accel.problem import RELEVANT
from perfcast.accel.spec import TENSORS

__all__ = ["Slot", "divisors", "draw", "from_nest_parts", "neighbors", "orders_of", "primes", "rank_of", "refills",
           "slots_of", "spatial_fills", "spatial_options", "to_nest"]

# a slot of a dim: (level, axis index) for a fanout axis, (level, -1) for the level's temporal loops
Slot = tuple[int, int]


def primes(n: int) -> list[int]:
    """Prime factors of ``n`` with multiplicity, ascending."""
    out, k = [], 2
    while k * k <= n:
        while n % k == 0:
            out.append(k)
            n //= k
        k += 1
    return out + ([n] if n > 1 else [])


def slots_of(model: BatchModel, d: int) -> list[Slot]:
    """Where dim ``d``'s factors may go: every level's temporal loops, and the fanout axes that take it."""
    out: list[Slot] = []
    for i in range(model.num_levels):
        out.append((i, -1))
        for a in range(len(model.axes[i])):
            if model.allowed[i, a, d]:
                out.append((i, a))
    return out


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
def orders_of(dims: frozenset[int]) -> tuple[tuple[int, ...], ...]:
    """One loop order of ``dims`` (outermost first) per distinct reuse pattern."""
    seen: dict[tuple[tuple[frozenset[int], int], ...], tuple[int, ...]] = {}
    for perm in itertools.permutations(sorted(dims)):
        seen.setdefault(_signature(perm), perm)
    return tuple(seen.values())


def rank_of(order: tuple[int, ...]) -> list[int]:
    """Ranks of a partial order (outermost first) with the other dims outermost (their factors are 1)."""
    full = [d for d in range(7) if d not in order] + list(order)
    rank = [0] * 7
    for pos, d in enumerate(full):
        rank[d] = pos
    return rank


@cache
def divisors(n: int) -> tuple[int, ...]:
    """Divisors of ``n``, ascending (trial division up to its square root)."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return tuple(small + [n // d for d in reversed(small) if d * d != n])


def spatial_options(fan_dims: list[int], size: int, rem: list[int]) -> list[dict[int, int]]:
    """Splits of one axis among its dims that no single factor can grow (to a larger divisor) within ``size``
    (in the order of ``itertools.product`` over ascending divisors)."""
    return [dict(split) for split in _spatial_options(tuple(fan_dims), size, tuple(rem[d] for d in fan_dims))]


@cache
def _spatial_options(fan_dims: tuple[int, ...], size: int, rem: tuple[int, ...]) -> tuple[tuple[tuple[int, int], ...],
                                                                                          ...]:
    out: list[tuple[tuple[int, int], ...]] = []
    chosen: list[int] = []

    def walk(k: int, used: int) -> None:
        if k == len(fan_dims):
            for r, f in zip(rem, chosen, strict=True):
                if any(g > f and used // f * g <= size for g in divisors(r)):
                    return
            out.append(tuple((d, f) for d, f in zip(fan_dims, chosen, strict=True) if f > 1))
            return
        for f in divisors(rem[k]):
            if used * f > size:
                break
            chosen.append(f)
            walk(k + 1, used * f)
            chosen.pop()

    walk(0, 1)
    return tuple(out)


def spatial_fills(model: BatchModel, limit: int = 64) -> np.ndarray:
    """Spatial splits of every fanout axis that fill it as far as the dims allow (``spatial_options`` per axis,
    innermost level first, each axis taking from what the others left), as ``(F, levels, axes, 7)``; the
    ``limit`` that use the most PEs when there are more."""
    n, a_max = model.num_levels, model.num_axes
    axes = [(i, a) for i in range(n - 1, -1, -1) for a in range(len(model.axes[i]))]
    found: list[np.ndarray] = []

    def walk(k: int, rem: list[int], sp: np.ndarray) -> None:
        if k == len(axes):
            found.append(sp.copy())
            return
        i, a = axes[k]
        fan_dims = [d for d in range(7) if model.allowed[i, a, d]]
        for split in spatial_options(fan_dims, int(model.axis_size[i, a]), rem):
            left = list(rem)
            for d, f in split.items():
                left[d] //= f
                sp[i, a, d] = f
            walk(k + 1, left, sp)
            sp[i, a] = 1

    walk(0, [int(x) for x in model.dims], np.ones((n, a_max, 7), dtype=np.int64))
    fills = np.stack(found)
    used = fills.reshape(len(fills), -1).prod(axis=1)
    return fills[np.argsort(-used, kind="stable")[:limit]]


def draw(model: BatchModel, rng: np.random.Generator, count: int, fill: np.ndarray | None = None) -> MapArrays:
    """``count`` random mappings: every prime factor of every dim to a uniformly chosen slot, uniformly
    random loop orders. With ``fill`` (one of :func:`spatial_fills`) the spatial factors are that fill's and
    only the rest is spread over the temporal slots. Some do not fit; filter with ``model.valid``."""
    n, a_max = model.num_levels, model.num_axes
    temporal = np.ones((count, n, 7), dtype=np.int64)
    spatial = np.ones((count, n, a_max, 7), dtype=np.int64)
    if fill is not None:
        spatial[:] = fill
    left = model.dims if fill is None else model.dims // fill.reshape(-1, 7).prod(axis=0)
    for d in range(7):
        slots = slots_of(model, d)
        if fill is not None:
            slots = [s for s in slots if s[1] < 0]
        for p in primes(int(left[d])):
            pick = rng.integers(0, len(slots), count)
            for s, (i, a) in enumerate(slots):
                sel = pick == s
                if a < 0:
                    temporal[sel, i, d] *= p
                else:
                    spatial[sel, i, a, d] *= p
    rank = np.argsort(rng.random((count, n, 7)), axis=2).astype(np.int64)
    return MapArrays(temporal, spatial, rank)


def neighbors(model: BatchModel, one: MapArrays) -> MapArrays:
    """Every mapping one move from the single mapping ``one`` (see the module docstring); some may not fit."""
    tl, sl, rl = one.temporal[0].tolist(), one.spatial[0].tolist(), one.rank[0].tolist()
    n = model.num_levels
    size = model.axis_size.tolist()
    used = [[math.prod(axis) for axis in level] for level in sl]

    def factor(d: int, slot: Slot) -> int:
        i, a = slot
        return int(tl[i][d] if a < 0 else sl[i][a][d])

    # each neighbor: factor edits (slot, dim, multiply by, divide by) and maybe a new rank row for one level
    edits: list[list[tuple[Slot, int, int, int]]] = []
    ranks: list[tuple[int, list[int]] | None] = []
    slots = [slots_of(model, d) for d in range(7)]
    moves: list[tuple[int, Slot, Slot, int]] = []  # (dim, from, to, prime)
    for d in range(7):
        for src in slots[d]:
            for p in sorted(set(primes(factor(d, src)))):
                moves.extend((d, src, dst, p) for dst in slots[d] if dst != src)
    for d, src, dst, p in moves:
        i, a = dst
        if a >= 0 and used[i][a] * p > size[i][a]:
            continue
        move = [(src, d, 1, p), (dst, d, p, 1)]
        edits.append(move)
        ranks.append(None)
        if a < 0 and tl[i][d] == 1:  # a new loop at level i: also try it innermost and outermost
            order = sorted((x for x in range(7) if x != d), key=lambda x: rl[i][x])
            for new_order in ([*order, d], [d, *order]):
                edits.append(move)
                ranks.append((i, rank_of(tuple(new_order))))
    # two dims (or two primes of one dim) trade places between two slots: d1 src -> dst, d2 dst -> src
    by_pair: dict[tuple[Slot, Slot], list[tuple[int, int]]] = {}
    for d, src, dst, p in moves:
        by_pair.setdefault((src, dst), []).append((d, p))
    for (src, dst), there in by_pair.items():
        if src >= dst:
            continue
        for (d1, p1), (d2, p2) in itertools.product(there, by_pair.get((dst, src), [])):
            if d1 == d2 and p1 == p2:
                continue
            ok = True
            for slot, gain, loss in ((src, p2, p1), (dst, p1, p2)):
                i, a = slot
                if a >= 0 and used[i][a] * gain // loss > size[i][a]:
                    ok = False
            if ok:
                edits.append([(src, d1, 1, p1), (dst, d1, p1, 1), (dst, d2, 1, p2), (src, d2, p2, 1)])
                ranks.append(None)
    for i in range(n):
        live = frozenset(d for d in range(7) if tl[i][d] > 1)
        current = _signature(tuple(sorted(live, key=lambda x: rl[i][x])))
        for alt in orders_of(live):
            if _signature(alt) != current:
                edits.append([])
                ranks.append((i, rank_of(alt)))
    return MapArrays.concat([_apply(one, edits, ranks), refills(model, one)])


def _apply(one: MapArrays, edits: list[list[tuple[Slot, int, int, int]]],
           ranks: list[tuple[int, list[int]] | None]) -> MapArrays:
    """Copies of ``one``, row k with ``edits[k]`` applied (multiplications first, so every division is exact)
    and, when ``ranks[k]`` is given, that level's rank row replaced."""
    k = len(edits)
    temporal = np.repeat(one.temporal, k, axis=0)
    spatial = np.repeat(one.spatial, k, axis=0)
    rank = np.repeat(one.rank, k, axis=0)
    t_ed = [(row, i, d, mul, div) for row, change in enumerate(edits) for (i, a), d, mul, div in change if a < 0]
    s_ed = [(row, i, a, d, mul, div) for row, change in enumerate(edits) for (i, a), d, mul, div in change
            if a >= 0]
    if t_ed:
        e = np.array(t_ed, dtype=np.int64)
        np.multiply.at(temporal, (e[:, 0], e[:, 1], e[:, 2]), e[:, 3])
        np.floor_divide.at(temporal, (e[:, 0], e[:, 1], e[:, 2]), e[:, 4])
    if s_ed:
        e = np.array(s_ed, dtype=np.int64)
        np.multiply.at(spatial, (e[:, 0], e[:, 1], e[:, 2], e[:, 3]), e[:, 4])
        np.floor_divide.at(spatial, (e[:, 0], e[:, 1], e[:, 2], e[:, 3]), e[:, 5])
    changed = [(row, r) for row, r in enumerate(ranks) if r is not None]
    if changed:
        rows = [row for row, _ in changed]
        rank[rows, [r[0] for _, r in changed]] = np.array([r[1] for _, r in changed], dtype=np.int64)
    return MapArrays(temporal, spatial, rank)


def refills(model: BatchModel, one: MapArrays) -> MapArrays:
    """The single mapping ``one`` with one fanout axis filled another way (:func:`spatial_options` of the
    problem's dims); the factors the axis gives up go to one level's temporal loops (each level in turn), the
    ones it takes come from temporal loops. Some may not fit."""
    t0, s0 = one.temporal[0].tolist(), one.spatial[0].tolist()
    ts: list[list[list[int]]] = []
    axis_of: list[tuple[int, int, list[int]]] = []
    for i, a, split in _fills(model):
        want = [1] * 7
        for d, f in split:
            want[d] = f
        if want == s0[i][a]:
            continue
        releases = any(old % new for old, new in zip(s0[i][a], want, strict=True))
        for to in range(model.num_levels) if releases else (i,):
            t = [list(row) for row in t0]
            if _refill(model, t, s0[i][a], want, i, to):
                ts.append(t)
                axis_of.append((i, a, want))
    if not ts:
        return one.take(slice(0, 0))
    spatial = np.repeat(one.spatial, len(ts), axis=0)
    for k, (i, a, want) in enumerate(axis_of):
        spatial[k, i, a] = want
    return MapArrays(np.array(ts, dtype=np.int64), spatial, np.repeat(one.rank, len(ts), axis=0))


@cache
def _fills_cached(dims: tuple[int, ...], axes: tuple[tuple[int, int, int, tuple[int, ...]], ...]
                  ) -> tuple[tuple[int, int, tuple[tuple[int, int], ...]], ...]:
    out = []
    for i, a, size, fan_dims in axes:
        for split in spatial_options(list(fan_dims), size, list(dims)):
            out.append((i, a, tuple(sorted(split.items()))))
    return tuple(out)


def _fills(model: BatchModel) -> tuple[tuple[int, int, tuple[tuple[int, int], ...]], ...]:
    """Every (level, axis, split) that fills one fanout axis as far as the problem's dims allow."""
    axes = tuple((i, a, int(model.axis_size[i, a]), tuple(d for d in range(7) if model.allowed[i, a, d]))
                 for i in range(model.num_levels) for a in range(len(model.axes[i])))
    return _fills_cached(tuple(int(x) for x in model.dims), axes)


def _refill(model: BatchModel, t: list[list[int]], have: list[int], want: list[int], i: int, to: int) -> bool:
    """Temporal factors ``t`` (in place) once level ``i``'s fanout axis goes from ``have`` to ``want``: what it
    gives up goes to level ``to``, what it takes more of comes from level i, then the outer levels, then the
    inner ones. False when the factors cannot be found."""
    donors = [i, *range(i - 1, -1, -1), *range(i + 1, model.num_levels)]
    for d in range(7):
        old, new = have[d], want[d]
        if old == new:
            continue
        common = math.gcd(old, new)
        t[to][d] *= old // common
        for p in primes(new // common):
            for j in donors:
                if t[j][d] % p == 0:
                    t[j][d] //= p
                    break
            else:
                return False
    return True


def to_nest(model: BatchModel, m: MapArrays, row: int) -> Nest:
    """Row ``row`` of ``m`` as the nest :mod:`perfcast.accel.evaluate` counts."""
    temporal, spatial, axes = [], [], []
    for i in range(model.num_levels):
        order = [int(d) for d in np.argsort(m.rank[row, i], kind="stable")]
        temporal.append(tuple((d, int(m.temporal[row, i, d])) for d in order if m.temporal[row, i, d] > 1))
        spatial.append(tuple(int(x) for x in m.spatial[row, i].prod(axis=0)))
        axes.append(tuple((name, tuple((d, int(m.spatial[row, i, a, d])) for d in range(7)
                                       if m.spatial[row, i, a, d] > 1))
                          for a, name in enumerate(model.axes[i])))
    return Nest(tuple(temporal), tuple(spatial), tuple(axes))


def from_nest_parts(model: BatchModel, temporal: list[dict[int, int]], orders: list[tuple[int, ...]],
                    axes: list[dict[str, dict[int, int]]]) -> MapArrays:
    """One mapping from per-level temporal factors, full loop orders (outermost first) and per-axis splits."""
    n, a_max = model.num_levels, model.num_axes
    t = np.ones((1, n, 7), dtype=np.int64)
    s = np.ones((1, n, a_max, 7), dtype=np.int64)
    r = np.zeros((1, n, 7), dtype=np.int64)
    for i in range(n):
        for d, f in temporal[i].items():
            t[0, i, d] = f
        for pos, d in enumerate(orders[i]):
            r[0, i, d] = pos
        for name, split in axes[i].items():
            a = model.axes[i].index(name)
            for d, f in split.items():
                s[0, i, a, d] = f
    return MapArrays(t, s, r)
