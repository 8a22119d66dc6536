"""The registry of global routers, keyed by the name users type (``--router round_robin``)."""

from __future__ import annotations

from perfcast.registry import Registry

__all__ = ["ROUTERS"]

ROUTERS: Registry[type] = Registry("router")
