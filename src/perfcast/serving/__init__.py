"""Layer 4: a discrete-event simulator of LLM serving under load.

:func:`simulate_serving` takes a :class:`ServingConfig` (deployment, engine knobs
with vLLM's names, and the load) and returns a :class:`ServingResult` with every
request's times and the summary metrics (TTFT, TPOT, E2E percentiles,
throughput, goodput, KV utilization, preemptions).

Where things are: ``config`` (what is asked, checked up front), ``deployment`` (the config resolved: iteration
model, memory, KV capacity, limits), ``engine`` (the event loop over ``replica`` state), its parts
``clock`` (iteration times, decode stretches; ``explain`` sums them by part), ``speculative``, ``handover``
(disaggregation, retrieval), ``client`` (closed loop), ``routers/`` and ``schedulers/`` (registries),
``kv/`` (block managers behind one protocol), ``outcomes`` and ``tally`` (what a run records), ``result``;
``sources/`` (traces, MLPerf presets, arrivals) and ``experiments/`` (max-QPS search, co-location, MLPerf,
RLHF, behind ``experiments.run.run_experiment``).
"""

from __future__ import annotations

from perfcast.serving.config import ServingConfig, WorkloadConfig
from perfcast.serving.engine import simulate_serving
from perfcast.serving.iteration import IterationModel, PrefillChunk
from perfcast.serving.result import ServingResult
from perfcast.serving.schedulers import SCHEDULERS

__all__ = ["SCHEDULERS", "IterationModel", "PrefillChunk", "ServingConfig", "ServingResult", "WorkloadConfig",
           "simulate_serving"]
