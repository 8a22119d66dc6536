"""Layer 4: a discrete-event simulator of LLM serving under load.

:func:`simulate_serving` takes a :class:`ServingConfig` (deployment, engine knobs
with vLLM's names, and the load) and returns a :class:`ServingResult` with every
request's times and the summary metrics (TTFT, TPOT, E2E percentiles,
throughput, goodput, KV utilization, preemptions).
"""

from __future__ import annotations

from perfcast.serving.config import ServingConfig, WorkloadConfig
from perfcast.serving.engine import simulate_serving
from perfcast.serving.iteration import IterationModel, PrefillChunk
from perfcast.serving.result import ServingResult
from perfcast.serving.schedulers import SCHEDULERS

__all__ = ["SCHEDULERS", "IterationModel", "PrefillChunk", "ServingConfig", "ServingResult", "WorkloadConfig",
           "simulate_serving"]
