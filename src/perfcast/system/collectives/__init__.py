"""Collectives: the time of all_reduce, all_gather, reduce_scatter, all_to_all, broadcast and send_recv
over a group of GPUs placed on a cluster.

Algorithms are plug-ins in ``ALGORITHMS`` (one module each): ``ring``, ``tree``,
``halving_doubling``, ``direct``, ``hierarchical``, ``nvls``. Their latency-bandwidth costs
use coefficients fitted on measured NCCL tables (``data/coefficients/collectives.json``)::

    from perfcast.system.collectives import collective_time
    t = collective_time("all_reduce", 1e6, 8, load_cluster("dgx-h100"))
    t.time_s, t.algorithm, t.busbw_Bps
"""

# the built-in algorithms register themselves on import, in this order
from perfcast.coefficients.collectives import (
    COLLECTIVES_SCHEMA_VERSION,
    CollectiveCoefficients,
    load_collective_coefficients,
)
from perfcast.system.collectives import direct, halving_doubling, hierarchical, nvls, ring, tree  # noqa: F401
from perfcast.system.collectives.base import ALGORITHMS, Algorithm, Cost, register
from perfcast.system.collectives.model import collective_time, collective_times, price_collective
from perfcast.system.collectives.placement import Links, Placement
from perfcast.system.collectives.types import CollectiveOp, CollectiveTime, bus_factor, parse_op

__all__ = [
    "ALGORITHMS",
    "COLLECTIVES_SCHEMA_VERSION",
    "Algorithm",
    "CollectiveCoefficients",
    "CollectiveOp",
    "CollectiveTime",
    "Cost",
    "Links",
    "Placement",
    "bus_factor",
    "collective_time",
    "collective_times",
    "price_collective",
    "load_collective_coefficients",
    "parse_op",
    "register",
]
