"""Collective operations and the result of pricing one.

Sizes follow nccl-tests, per rank: ``all_reduce`` and ``broadcast`` the buffer,
``all_gather`` the total output (every rank's chunk), ``reduce_scatter`` the total
input, ``all_to_all`` the total send buffer, ``send_recv`` the bytes sent. Bus
bandwidth is nccl-tests' ``busbw``: algorithm bandwidth ``size / time`` times the
factor that makes it comparable to a link's speed (``2(n-1)/n`` for all_reduce;
github.com/NVIDIA/nccl-tests doc/PERFORMANCE.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from perfcast.errors import UnknownNameError

__all__ = ["CollectiveOp", "CollectiveTime", "bus_factor", "parse_op"]


class CollectiveOp(StrEnum):
    """The collectives perfcast prices; values are the CLI and table spellings."""

    ALL_REDUCE = "all_reduce"
    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"
    ALL_TO_ALL = "all_to_all"
    BROADCAST = "broadcast"
    SEND_RECV = "send_recv"


_SPELLINGS = {
    "allreduce": CollectiveOp.ALL_REDUCE, "allgather": CollectiveOp.ALL_GATHER,
    "reducescatter": CollectiveOp.REDUCE_SCATTER, "alltoall": CollectiveOp.ALL_TO_ALL,
    "broadcast": CollectiveOp.BROADCAST, "bcast": CollectiveOp.BROADCAST, "sendrecv": CollectiveOp.SEND_RECV,
    "p2p": CollectiveOp.SEND_RECV,
}


def parse_op(name: str | CollectiveOp) -> CollectiveOp:
    """``all_reduce``, ``allreduce``, ``all-reduce``, ``AllReduce`` ... -> CollectiveOp (UnknownNameError)."""
    if isinstance(name, CollectiveOp):
        return name
    key = str(name).strip().lower().replace("_", "").replace("-", "").replace(" ", "")
    op = _SPELLINGS.get(key)
    if op is None:
        err = UnknownNameError("collective op", str(name), [o.value for o in CollectiveOp])
        err.message = f"unknown collective op {name!r}; valid: {', '.join(o.value for o in CollectiveOp)}"
        raise err
    return op


def bus_factor(op: CollectiveOp, n: int) -> float:
    """nccl-tests' busbw / algbw for ``op`` on ``n`` ranks."""
    if n <= 1:
        return 0.0
    if op is CollectiveOp.ALL_REDUCE:
        return 2.0 * (n - 1) / n
    if op in (CollectiveOp.ALL_GATHER, CollectiveOp.REDUCE_SCATTER, CollectiveOp.ALL_TO_ALL):
        return (n - 1) / n
    return 1.0


@dataclass(frozen=True, slots=True)
class CollectiveTime:
    """The predicted GPU time of one collective (SI units; kernel time, no host launch).

    ``algorithm`` and ``protocol`` name what was priced (NCCL's choice when none was asked for).
    """

    op: str
    algorithm: str
    size_bytes: float
    group_size: int
    time_s: float
    algbw_Bps: float
    busbw_Bps: float
    protocol: str = "simple"
    gpus_per_node: int = 1
