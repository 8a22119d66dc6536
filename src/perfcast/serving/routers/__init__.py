"""Global routers, each a plug-in registered by name: round_robin, least_outstanding, shortest_queue."""

from __future__ import annotations

from perfcast.serving.routers import least_outstanding, round_robin, shortest_queue
from perfcast.serving.routers.base import ReplicaLoads, Router
from perfcast.serving.routers.registry import ROUTERS

__all__ = ["ROUTERS", "ReplicaLoads", "Router", "least_outstanding", "round_robin", "shortest_queue"]
