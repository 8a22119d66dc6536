"""The evaluator's counts for many mappings at once, as numpy arrays (the mapper's objective).

:mod:`perfcast.accel.evaluate` counts one nest with Python loops (~5,000 nests/s). The mapper needs the
energy and cycles of tens of thousands, so this module repeats the same counting rules (see that module's
docstring: tile visits from the innermost indexing loop above a child, sliding input windows, multicast
and spatial reduction through the union of the children's tiles, partial sums read back, bandwidth-bound
cycles) on a batch of ``B`` mappings held as three integer arrays:

- ``temporal[b, i, d]``: level i's temporal factor of dim d (the backing store's takes what is left);
- ``spatial[b, i, a, d]``: level i's spatial factor of dim d on its fanout axis a (axes in the order
  the architecture lists them; 1 where a level has fewer axes or the axis does not take d);
- ``rank[b, i, d]``: position of dim d in level i's loop order (0 outermost); loops of factor 1 are absent
  from the nest, so their rank does not matter.

The figures agree with :func:`perfcast.accel.evaluate.evaluate_nest` to rounding (a unit test checks
random mappings); the mapper reports its best through the scalar evaluator all the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from perfcast.accel.problem import RELEVANT, C, K, N, P, Problem, Q, R, S
from perfcast.accel.spec import DIMS, TENSORS, Architecture

__all__ = ["MapArrays", "BatchModel"]

_I = np.int64


class _Traffic(NamedTuple):
    """Words moved per mapping: ``reads``/``writes`` (level, tensor, mapping) and ``network`` (level, mapping)."""

    reads: np.ndarray
    writes: np.ndarray
    network: np.ndarray


@dataclass(slots=True)
class MapArrays:
    """A batch of mappings (see the module docstring for the three arrays' layout)."""

    temporal: np.ndarray  # (B, levels, 7) int64
    spatial: np.ndarray  # (B, levels, axes, 7) int64
    rank: np.ndarray  # (B, levels, 7) int64

    def __len__(self) -> int:
        return int(self.temporal.shape[0])

    def take(self, index: np.ndarray | list[int] | slice) -> MapArrays:
        """The mappings at ``index``."""
        return MapArrays(self.temporal[index], self.spatial[index], self.rank[index])

    @staticmethod
    def concat(parts: list[MapArrays]) -> MapArrays:
        """The mappings of every part, in order."""
        return MapArrays(np.concatenate([p.temporal for p in parts]), np.concatenate([p.spatial for p in parts]),
                         np.concatenate([p.rank for p in parts]))


class BatchModel:
    """An architecture and a problem, ready to count batches of mappings."""

    def __init__(self, arch: Architecture, problem: Problem) -> None:
        self.arch = arch
        self.problem = problem
        self.num_levels = len(arch.levels)
        self.axes: list[list[str]] = [list(lv.fanout) for lv in arch.levels]
        self.num_axes = max([1, *(len(a) for a in self.axes)])
        # allowed[i, a, d]: fanout axis a of level i takes dim d
        allowed = np.zeros((self.num_levels, self.num_axes, 7), dtype=bool)
        size = np.ones((self.num_levels, self.num_axes), dtype=_I)
        for i, lv in enumerate(arch.levels):
            for a, fan in enumerate(lv.fanout.values()):
                size[i, a] = fan.size
                for dname in fan.dims:
                    allowed[i, a, DIMS.index(dname)] = True
        self.allowed = allowed
        self.axis_size = size
        self.keeps = [[i for i, lv in enumerate(arch.levels) if t in lv.tensors] + [self.num_levels]
                      for t in TENSORS]
        self.has_fanout = [bool(lv.fanout) for lv in arch.levels]
        self.dims = np.array(problem.dims, dtype=_I)

    # -- footprints (problem.footprint / slide_words on arrays of extents, last axis = the 7 dims) ------------

    def _rows(self, p: np.ndarray, r: np.ndarray) -> np.ndarray:
        return (p - 1) * self.problem.stride_h + (r - 1) * self.problem.dilation_h + 1

    def _cols(self, q: np.ndarray, s: np.ndarray) -> np.ndarray:
        return (q - 1) * self.problem.stride_w + (s - 1) * self.problem.dilation_w + 1

    def footprint(self, tensor: int, ext: np.ndarray) -> np.ndarray:
        """Words of tensor ``tensor`` (index into TENSORS) a tile of extents ``ext[..., 7]`` touches."""
        if tensor == 0:
            return ext[..., K] * ext[..., C] * ext[..., R] * ext[..., S]
        if tensor == 2:
            return ext[..., N] * ext[..., K] * ext[..., P] * ext[..., Q]
        return ext[..., N] * ext[..., C] * self._rows(ext[..., P], ext[..., R]) * self._cols(ext[..., Q], ext[..., S])

    def _slide(self, ext: np.ndarray, dim: np.ndarray, step: np.ndarray) -> np.ndarray:
        """problem.slide_words for each row, ``dim`` in R S P Q (other rows: anything)."""
        pr = self.problem
        rows = self._rows(ext[:, P], ext[:, R])
        cols = self._cols(ext[:, Q], ext[:, S])
        nc = ext[:, N] * ext[:, C]
        vertical = (dim == P) | (dim == R)
        shift_v = step * np.where(dim == P, pr.stride_h, pr.dilation_h)
        shift_h = step * np.where(dim == Q, pr.stride_w, pr.dilation_w)
        return np.where(vertical, nc * np.minimum(rows, shift_v) * cols, nc * rows * np.minimum(cols, shift_h))

    # -- checks and counts --------------------------------------------------------------------------------------

    def extents(self, m: MapArrays) -> tuple[np.ndarray, np.ndarray]:
        """(``ext[b, i, d]`` for i in 0..levels, the last all ones; ``sp[b, i, d]`` level i's spatial product)."""
        b, n = len(m), self.num_levels
        sp = m.spatial.prod(axis=2)
        ext = np.ones((b, n + 1, 7), dtype=_I)
        for i in range(n - 1, -1, -1):
            ext[:, i] = ext[:, i + 1] * m.temporal[:, i] * sp[:, i]
        return ext, sp

    def valid(self, m: MapArrays, ext: np.ndarray | None = None) -> np.ndarray:
        """Per mapping: every tile fits its level and no fanout axis gets more than it has."""
        if ext is None:
            ext, _ = self.extents(m)
        ok = (m.spatial.prod(axis=3) <= self.axis_size[None]).all(axis=(1, 2))
        for i, lv in enumerate(self.arch.levels):
            if lv.capacity_words is None:
                continue
            if isinstance(lv.capacity_words, dict):
                for t in lv.tensors:
                    ok &= self.footprint(TENSORS.index(t), ext[:, i]) <= lv.capacity_words[t]  # type: ignore[index]
            else:
                total = sum(self.footprint(TENSORS.index(t), ext[:, i]) for t in lv.tensors)
                ok &= total <= lv.capacity_words
        return ok  # type: ignore[no-any-return]

    def cost(self, m: MapArrays) -> tuple[np.ndarray, np.ndarray]:
        """(energy J, cycles) of every mapping (valid or not: check :meth:`valid` separately)."""
        n, b = self.num_levels, len(m)
        ext, sp = self.extents(m)
        T = m.temporal
        inst = np.ones((b, n + 1), dtype=_I)  # inst[:, i]: instances of level i (the spatial fan-out above it)
        for i in range(n):
            inst[:, i + 1] = inst[:, i] * sp[:, i].prod(axis=1)
        level_prod = T.prod(axis=2)  # (b, n)
        outer = np.ones((b, n + 1), dtype=_I)  # outer[:, j] = product of the temporal factors of levels < j
        for j in range(n):
            outer[:, j + 1] = outer[:, j] * level_prod[:, j]
        traffic = _Traffic(np.zeros((n, 3, b)), np.zeros((n, 3, b)), np.zeros((n, b)))
        for ti in range(len(TENSORS)):
            self._tensor_traffic(ti, m, ext, sp, inst, outer, traffic)
        return self._energy_cycles(outer[:, n], inst, traffic)

    def _tensor_traffic(self, ti: int, m: MapArrays, ext: np.ndarray, sp: np.ndarray, inst: np.ndarray,
                        outer: np.ndarray, traffic: _Traffic) -> None:
        """Add tensor ``ti``'s words read and written at each level that keeps it, and those crossing each
        fanned-out network, for every mapping, to ``traffic``."""
        n, b = self.num_levels, len(m)
        T = m.temporal
        reads, writes, network = traffic
        below = ext[:, 1:] * sp  # below[:, j, d]: dim d's extent under level j's temporal loops
        rows_b = np.arange(b)
        rel = np.zeros(7, dtype=bool)
        rel[sorted(RELEVANT[TENSORS[ti]])] = True
        # per level: the innermost indexing loop (dim, its factor) and the product from it outward
        mask = (T > 1) & rel[None, None, :]
        has = mask.any(axis=2).astype(bool)  # (b, n)
        score = np.where(mask, m.rank, -1)
        first_d = score.argmax(axis=2)  # (b, n)
        first_rank = score.max(axis=2)
        outward = np.where(m.rank <= first_rank[:, :, None], T, 1).prod(axis=2)
        keep = self.keeps[ti]
        arrivals = float(self.problem.footprint(TENSORS[ti], self.problem.dims))
        arrivals_v = np.full(b, arrivals)
        for p, c in zip(keep, keep[1:], strict=False):
            visits = np.ones(b, dtype=_I)
            found: np.ndarray = np.zeros(b, dtype=bool)
            fd = np.zeros(b, dtype=_I)
            fj = np.zeros(b, dtype=_I)
            for j in range(c - 1, -1, -1):
                take = has[:, j] & ~found
                visits = np.where(take, outer[:, j] * outward[:, j], visits)
                fd = np.where(take, first_d[:, j], fd)
                fj = np.where(take, j, fj)
                found |= take
            union = ext[:, c].copy()
            for mm in range(p, c):
                union *= sp[:, mm]
            tile = self.footprint(ti, ext[:, c])
            tile_u = self.footprint(ti, union)
            per_child = visits * tile
            per_parent = visits * tile_u
            if ti == 1:
                sliding = found & (fd <= Q)
                if sliding.any():
                    f = T[rows_b, fj, fd]
                    step = below[rows_b, fj, fd]
                    base = visits // f
                    slid_c = base * (tile + (f - 1) * self._slide(ext[:, c], fd, step))
                    slid_p = base * (tile_u + (f - 1) * self._slide(union, fd, step))
                    per_child = np.where(sliding, slid_c, per_child)
                    per_parent = np.where(sliding, slid_p, per_parent)
            child_words = (inst[:, c] * per_child).astype(float)
            parent_words = (inst[:, p] * per_parent).astype(float)
            if ti != 2:
                reads[p, ti] += parent_words
                if c < n:
                    writes[c, ti] += child_words
                crossing = child_words
            else:
                writes[p, ti] += parent_words
                back = np.maximum(0.0, parent_words - arrivals_v)
                reads[p, ti] += back
                safe = np.where(parent_words > 0, parent_words, 1.0)
                back_child = np.where(parent_words > 0, child_words * (back / safe), 0.0)
                if c < n:
                    reads[c, ti] += child_words
                    writes[c, ti] += back_child
                crossing = child_words + back_child
                arrivals_v = child_words - back_child
            for mm in range(p, c):
                if self.has_fanout[mm]:
                    network[mm] += crossing

    def _energy_cycles(self, compute: np.ndarray, inst: np.ndarray,
                       traffic: _Traffic) -> tuple[np.ndarray, np.ndarray]:
        """(energy J, cycles): the MACs' energy plus each level's accesses and network words; cycles the most of
        the compute steps and each level's busiest instance's words over its bandwidth."""
        arch, b = self.arch, len(compute)
        cycles = compute.astype(float)
        energy_pJ = np.full(b, self.problem.macs * arch.mac_energy_pJ)
        for i, lv in enumerate(arch.levels):
            r, w = traffic.reads[i], traffic.writes[i]
            busiest = (r + w).max(axis=0) if isinstance(lv.capacity_words, dict) else r.sum(axis=0) + w.sum(axis=0)
            cycles = np.maximum(cycles, busiest / inst[:, i] / lv.bandwidth_words_per_cycle)
            energy_pJ = energy_pJ + r.sum(axis=0) * lv.read_energy_pJ + w.sum(axis=0) * lv.write_energy_pJ
            energy_pJ = energy_pJ + traffic.network[i] * lv.network_energy_pJ_per_word
        return energy_pJ * 1e-12, cycles
