"""The registry of replica schedulers, keyed by the name users type (``--scheduler vllm``)."""

from __future__ import annotations

from perfcast.registry import Registry

__all__ = ["SCHEDULERS"]

SCHEDULERS: Registry[type] = Registry("scheduler")
