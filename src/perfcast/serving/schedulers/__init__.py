"""Replica schedulers, each a plug-in registered by name: vllm, sarathi, sglang, orca, lightllm, static."""

from __future__ import annotations

from perfcast.serving.schedulers import lightllm, orca, sarathi, sglang, static, vllm
from perfcast.serving.schedulers.base import Batch, ReplicaScheduler, SchedulerLimits
from perfcast.serving.schedulers.registry import SCHEDULERS

__all__ = ["SCHEDULERS", "Batch", "ReplicaScheduler", "SchedulerLimits", "lightllm", "orca", "sarathi", "sglang",
           "static", "vllm"]
