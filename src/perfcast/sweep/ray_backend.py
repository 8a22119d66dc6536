"""Evaluate a search's plans on a Ray cluster: the plan arrays are split into chunks, one Ray task each.

Ray is an optional extra (``pip install perfcast[ray]``) imported only here. Each
task rebuilds the search's :class:`~perfcast.sweep.evaluate.Pricer` from the
space (plain data; one per worker process, reused by its later tasks) and runs
the same :func:`~perfcast.sweep.evaluate.evaluate_plans` as the local backend,
so the results are identical. Without ``RAY_ADDRESS`` a local Ray with two CPUs
is started for the search and shut down after it.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from perfcast.errors import ConfigError
from perfcast.sweep.evaluate import PlanScores, Pricer, evaluate_plans
from perfcast.sweep.space import PlanArrays, SearchSpace

__all__ = ["evaluate_chunk", "evaluate_with_ray"]

_PRICERS: dict[str, Pricer] = {}  # per worker process: the pricer of each space seen (its memos are reused)


def evaluate_chunk(space_json: str, arrays: dict[str, np.ndarray]) -> dict[str, Any]:
    """Evaluate one chunk of plans (the body of a Ray task; plain data in and out)."""
    pricer = _PRICERS.get(space_json)
    if pricer is None:
        pricer = _PRICERS[space_json] = Pricer(SearchSpace.model_validate_json(space_json))
    sc = evaluate_plans(pricer, PlanArrays(**arrays))
    return {"step_time_s": sc.step_time_s, "tflops_per_gpu": sc.tflops_per_gpu, "memory_bytes": sc.memory_bytes,
            "capacity_bytes": sc.capacity_bytes}


def evaluate_with_ray(space: SearchSpace, plans: PlanArrays, *, chunks: int | None = None) -> PlanScores:
    """Evaluate ``plans`` in ``chunks`` Ray tasks (default: two per CPU of the Ray cluster)."""
    try:
        import ray
    except ImportError:
        raise ConfigError("--backend ray needs Ray, which is not installed; pip install perfcast[ray]") from None
    started = False
    if not ray.is_initialized():
        if os.environ.get("RAY_ADDRESS"):
            ray.init(address=os.environ["RAY_ADDRESS"], log_to_driver=False)
        else:
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        started = True
    try:
        cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
        n = min(len(plans), chunks or 2 * cpus)
        bounds = np.linspace(0, len(plans), n + 1).astype(int)
        task = ray.remote(evaluate_chunk)
        space_json = space.model_dump_json()
        futures = [task.remote(space_json, {f: getattr(plans, f)[a:b] for f in PlanArrays.FIELDS})
                   for a, b in zip(bounds[:-1], bounds[1:], strict=True) if b > a]
        parts = ray.get(futures)
    finally:
        if started:
            ray.shutdown()
    return PlanScores.concat([PlanScores(p["step_time_s"], p["tflops_per_gpu"], p["memory_bytes"],
                                         p["capacity_bytes"]) for p in parts])
