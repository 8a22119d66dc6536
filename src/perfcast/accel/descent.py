"""Random-pruned search with local descent over the mapspace (the mapper's ``random`` strategy).

1. Draws: ``samples`` random mappings (:func:`~perfcast.accel.mapspace.draw`), half of them with every
   prime factor anywhere, half on spatial splits that fill the PE array (Timeloop's heuristic; spread over
   :func:`~perfcast.accel.mapspace.spatial_fills`); those that fit are counted.
2. Descent: from the best draw of each of the best few spatial splits, steepest descent over the
   one-move neighborhood (:func:`~perfcast.accel.mapspace.neighbors`, counted in one batch per step) until
   no neighbor is better.
3. Kicks (iterated local search): the best mapping so far takes a few random moves that fit (or, half
   the time, a new fill of one fanout axis), descends first with its spatial factors held (so that the
   descent does not just undo the kick) and then freely; it is replaced when that ends lower. The search
   stops after ``patience`` kicks in a row without improvement (Timeloop's "victory condition") or when
   the evaluation budget is spent.

Everything random comes from one seeded generator, so a seed gives the same mapping every time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from perfcast.accel.batch import BatchModel, MapArrays
from perfcast.accel.mapspace import draw, neighbors, refills, spatial_fills

__all__ = ["DescentResult", "better_key", "descend_search", "objective_keys"]


@dataclass(frozen=True, slots=True)
class DescentResult:
    """The best mapping (one row), its (primary, secondary) objective, and the search's counts."""

    best: MapArrays
    key: tuple[float, float]
    evaluated: int
    drawn: int


def objective_keys(goal: str, energy_J: np.ndarray, cycles: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(primary, tie-break) per mapping: EDP then energy; energy then cycles; cycles then energy."""
    if goal == "energy":
        return energy_J, cycles
    if goal == "delay":
        return cycles, energy_J
    return energy_J * cycles, energy_J


class _Scorer:
    """Counts, keeps only mappings that fit, and tallies evaluations."""

    def __init__(self, model: BatchModel, goal: str) -> None:
        self.model, self.goal, self.evaluated = model, goal, 0

    def __call__(self, m: MapArrays) -> tuple[MapArrays, np.ndarray, np.ndarray]:
        """(the mappings that fit, their primary and secondary keys)."""
        if len(m) == 0:
            return m, np.zeros(0), np.zeros(0)
        ok = self.model.valid(m)
        m = m.take(np.nonzero(ok)[0])
        if len(m) == 0:
            return m, np.zeros(0), np.zeros(0)
        e, c = self.model.cost(m)
        self.evaluated += len(m)
        k1, k2 = objective_keys(self.goal, e, c)
        return m, k1, k2


def better_key(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """``a`` strictly below ``b`` (relative 1e-12 on the primary, so rounding never loops)."""
    if a[0] < b[0] * (1 - 1e-12):
        return True
    return a[0] <= b[0] * (1 + 1e-12) and a[1] < b[1] * (1 - 1e-12)


def _best_row(k1: np.ndarray, k2: np.ndarray) -> int:
    return int(np.lexsort((k2, k1))[0])


def _descend(score: _Scorer, start: MapArrays, key: tuple[float, float], budget: int,
             keep_spatial: bool = False) -> tuple[MapArrays, tuple[float, float]]:
    """Steepest descent from ``start`` (one row) until no neighbor is better or the budget is spent (with
    ``keep_spatial``, over the neighbors with ``start``'s spatial factors only)."""
    cur, cur_key = start, key
    while score.evaluated < budget:
        nb = neighbors(score.model, cur)
        if keep_spatial:
            same = (nb.spatial == cur.spatial).reshape(len(nb), -1).all(axis=1)
            nb = nb.take(np.nonzero(same)[0])
        nb, k1, k2 = score(nb)
        if len(nb) == 0:
            break
        j = _best_row(k1, k2)
        cand = (float(k1[j]), float(k2[j]))
        if not better_key(cand, cur_key):
            break
        cur, cur_key = nb.take([j]), cand
    return cur, cur_key


def _kick(score: _Scorer, m: MapArrays, rng: np.random.Generator, moves: int) -> MapArrays | None:
    """``m`` after ``moves`` random one-move steps that fit, or (every other kick, when there is one that
    fits) after a single new fill of a fanout axis. None when no step fits."""
    if rng.random() < 0.5:
        fills = refills(score.model, m)
        ok = np.nonzero(score.model.valid(fills))[0]
        if len(ok):
            return fills.take([int(ok[rng.integers(len(ok))])])
    for _ in range(moves):
        nb = neighbors(score.model, m)
        ok = np.nonzero(score.model.valid(nb))[0]
        if len(ok) == 0:
            return None
        m = nb.take([int(ok[rng.integers(len(ok))])])
    return m


def descend_search(model: BatchModel, goal: str, samples: int, seed: int, *, starts: int = 4,
                   patience: int = 6, kick_moves: int = 3, budget_per_sample: int = 60,
                   progress: Callable[[int, int], None] | None = None) -> DescentResult | None:
    """The search of the module docstring.
    At most ``budget_per_sample * samples`` mappings are counted; ``progress(counted, that most)`` is
    called after each descent. None when no mapping fits."""
    rng = np.random.default_rng(seed)
    score = _Scorer(model, goal)
    budget = budget_per_sample * samples
    fills = spatial_fills(model)
    pool: list[tuple[MapArrays, np.ndarray, np.ndarray]] = []
    uniform = samples // 2
    for lo in range(0, uniform, 4096):
        pool.append(score(draw(model, rng, min(4096, uniform - lo))))
        if progress is not None:
            progress(score.evaluated, budget)
    per_fill = -(-(samples - uniform) // len(fills))
    for fill in fills:
        pool.append(score(draw(model, rng, per_fill, fill)))
    m = MapArrays.concat([p[0] for p in pool])
    k1 = np.concatenate([p[1] for p in pool])
    k2 = np.concatenate([p[2] for p in pool])
    if len(m) == 0:
        return None
    # the best draw of each of the best few spatial splits starts a descent
    order = np.lexsort((k2, k1))
    split = m.spatial.reshape(len(m), -1)
    chosen: list[int] = []
    seen: set[bytes] = set()
    for j in order.tolist():
        sig = split[j].tobytes()
        if sig in seen:
            continue
        seen.add(sig)
        chosen.append(j)
        if len(chosen) == starts:
            break
    best, best_key = m.take([chosen[0]]), (float(k1[chosen[0]]), float(k2[chosen[0]]))
    for j in chosen:
        local, key = _descend(score, m.take([j]), (float(k1[j]), float(k2[j])), budget)
        if better_key(key, best_key):
            best, best_key = local, key
        if progress is not None:
            progress(score.evaluated, budget)
    stale = 0
    while stale < patience and score.evaluated < budget:
        kicked = _kick(score, best, rng, kick_moves)
        if kicked is None:
            break
        _, q1, q2 = score(kicked)
        if len(q1) == 0:
            stale += 1
            continue
        local, key = _descend(score, kicked, (float(q1[0]), float(q2[0])), budget, keep_spatial=True)
        local, key = _descend(score, local, key, budget)
        if better_key(key, best_key):
            best, best_key, stale = local, key, 0
        else:
            stale += 1
        if progress is not None:
            progress(score.evaluated, budget)
    return DescentResult(best, best_key, score.evaluated, samples)
