"""A convolution or GEMM as the 7-dimensional loop nest of a spatial accelerator.

Dims (Timeloop's names): R, S filter rows and columns; P, Q output rows and columns; C input
channels; K output channels; N batch. The three tensors and the dims that index them:

- weights ``[K, C, R, S]``;
- inputs ``[N, C, H, W]`` with ``H = (P-1)*stride_h + (R-1)*dilation_h + 1`` (and W likewise from Q, S):
  input rows are a sliding window, so P and R both index them;
- outputs ``[N, K, P, Q]``.

A GEMM ``(M x Kr) @ (Kr x Nc)`` is P = M, C = Kr, K = Nc. Padding is part of the input footprint (the
nest reads the padded input), as in Timeloop's problem shapes.
"""

from __future__ import annotations

from dataclasses import dataclass

from perfcast.accel.spec import DIMS, ProblemSpec
from perfcast.errors import ConfigError

__all__ = ["R", "S", "P", "Q", "C", "K", "N", "MAX_LOOP_BOUND", "RELEVANT", "Problem"]

# a loop bound (dim) of at most 2^24 = 16,777,216: above any layer's (a 256k vocabulary, a million tokens of a
# batch), and the mapper enumerates each dim's divisors and tilings
MAX_LOOP_BOUND = 2**24

R, S, P, Q, C, K, N = range(7)
# dims that index each tensor (a loop over any other dim reuses the tensor's tile)
RELEVANT: dict[str, frozenset[int]] = {
    "weights": frozenset({K, C, R, S}),
    "inputs": frozenset({N, C, P, Q, R, S}),
    "outputs": frozenset({N, K, P, Q}),
}


@dataclass(frozen=True, slots=True)
class Problem:
    """Loop bounds ``dims`` in the order R S P Q C K N, with strides and dilations."""

    name: str
    dims: tuple[int, int, int, int, int, int, int]
    stride_h: int = 1
    stride_w: int = 1
    dilation_h: int = 1
    dilation_w: int = 1

    def __post_init__(self) -> None:
        for name, v in zip(DIMS, self.dims, strict=True):
            if not 1 <= v <= MAX_LOOP_BOUND:
                raise ConfigError(f"{self.name}: dim {name} = {v:,}; a loop bound is 1 to {MAX_LOOP_BOUND:,}")

    @classmethod
    def from_spec(cls, spec: ProblemSpec) -> Problem:
        """The problem a YAML spec describes (dims not given are 1)."""
        d = tuple(int(spec.dims.get(name, 1)) for name in DIMS)  # type: ignore[call-overload]
        return cls(spec.name, d, spec.stride_h, spec.stride_w, spec.dilation_h, spec.dilation_w)  # type: ignore[arg-type]

    @property
    def macs(self) -> int:
        """Multiply-accumulates of the whole nest."""
        n = 1
        for v in self.dims:
            n *= v
        return n

    def footprint(self, tensor: str, ext: tuple[int, ...] | list[int]) -> int:
        """Words of ``tensor`` touched by a tile spanning ``ext[d]`` of each dim (inputs: a bounding box)."""
        if tensor == "weights":
            return ext[K] * ext[C] * ext[R] * ext[S]
        if tensor == "outputs":
            return ext[N] * ext[K] * ext[P] * ext[Q]
        return ext[N] * ext[C] * self.input_rows(ext[P], ext[R]) * self.input_cols(ext[Q], ext[S])

    def input_rows(self, p: int, r: int) -> int:
        """Input rows a tile of ``p`` output rows and ``r`` filter rows reads."""
        return (p - 1) * self.stride_h + (r - 1) * self.dilation_h + 1

    def input_cols(self, q: int, s: int) -> int:
        """Input columns a tile of ``q`` output columns and ``s`` filter columns reads."""
        return (q - 1) * self.stride_w + (s - 1) * self.dilation_w + 1

    def slide_words(self, ext: tuple[int, ...] | list[int], dim: int, step: int) -> int:
        """New input words when a tile of extents ``ext`` moves by ``step`` along ``dim`` (P, Q, R or S):
        the rows (or columns) that overlap the previous position are kept."""
        if dim in (P, R):
            rows = self.input_rows(ext[P], ext[R])
            shift = step * (self.stride_h if dim == P else self.dilation_h)
            return ext[N] * ext[C] * min(rows, shift) * self.input_cols(ext[Q], ext[S])
        cols = self.input_cols(ext[Q], ext[S])
        shift = step * (self.stride_w if dim == Q else self.dilation_w)
        return ext[N] * ext[C] * self.input_rows(ext[P], ext[R]) * min(cols, shift)
