"""The plug-in interface of collective algorithms and their registry.

An algorithm prices one collective as a latency-bandwidth (alpha-beta) cost, the way
NCCL's own tuning model does (src/graph/tuning.cc): ``intra_steps`` and ``inter_steps``
sequential steps, each paying the link's latency plus a per-step protocol overhead, and a
bandwidth term of ``s_per_byte`` seconds per byte of the collective's size at the Simple
protocol (LL and LL128 run at a fraction of that bandwidth with lower latencies). The
cost is a closed form in the group size: no algorithm loops over GPUs.

Each algorithm is one module registering one class by name (``@register("ring")``);
``ALGORITHMS`` holds an instance of each. A duplicate name raises at import; an unknown
name raises UnknownNameError listing the valid names.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, TypeVar

from perfcast.coefficients.collectives import CollectiveCoefficients
from perfcast.registry import Registry
from perfcast.system.cluster import Cluster
from perfcast.system.collectives.placement import Links, Placement
from perfcast.system.collectives.types import CollectiveOp

__all__ = ["ALGORITHMS", "PROTOCOLS", "Algorithm", "Cost", "register"]

PROTOCOLS = ("ll", "ll128", "simple")


@dataclass(frozen=True, slots=True)
class Cost:
    """Alpha-beta cost of one algorithm for one op and placement (see the module docstring)."""

    intra_steps: float
    inter_steps: float
    s_per_byte: float
    fixed_s: float = 0.0
    protocols: tuple[str, ...] = PROTOCOLS
    ll_max_bytes: float = math.inf  # LL (ll, p2p_ll) only up to this size (NCCL's point-to-point LL threshold)
    # a faster rate for messages that fit the path's buffers (TCP socket buffers): seconds per byte while the
    # message fits ``burst_bytes``, blending into ``s_per_byte`` beyond (None: one rate at every size)
    burst_s_per_byte: float | None = None
    burst_bytes: float = 0.0


class Algorithm:
    """A collective algorithm. Subclasses set ``ops`` and ``nccl_ops`` and implement ``cost``."""

    name: ClassVar[str] = ""
    ops: ClassVar[frozenset[CollectiveOp]] = frozenset()
    nccl_ops: ClassVar[frozenset[CollectiveOp]] = frozenset()  # ops NCCL would choose it for
    summary: ClassVar[str] = ""

    def unavailable(self, op: CollectiveOp, p: Placement, links: Links, cluster: Cluster) -> str | None:
        """Why the algorithm cannot run this op on this placement (None: it can)."""
        return None

    def nccl_candidate(self, op: CollectiveOp, p: Placement, links: Links) -> bool:
        """Whether NCCL would consider this algorithm for ``op`` on this placement (automatic choice)."""
        return op in self.nccl_ops

    def cost(self, op: CollectiveOp, p: Placement, links: Links, co: CollectiveCoefficients) -> Cost:
        """The alpha-beta cost of ``op`` on placement ``p``."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__module__}.{type(self).__name__}"


ALGORITHMS: Registry[Algorithm] = Registry("collective algorithm")

A = TypeVar("A", bound=type[Algorithm])


def register(name: str) -> Callable[[A], A]:
    """Class decorator: register an instance of the class as algorithm ``name``."""

    def deco(cls: A) -> A:
        cls.name = name
        ALGORITHMS.add(name, cls())
        return cls

    return deco


def log2_ceil(x: int) -> int:
    """Steps of a binary tree or recursive doubling over ``x`` members."""
    return max(0, math.ceil(math.log2(x))) if x > 1 else 0
