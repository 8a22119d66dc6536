"""ML.ENERGY serving runs (``energy/llm_serving_energy.csv``, ``energy/mllm_serving_energy.csv``), simulated as
they ran, with their GPU energy.

A row is one vLLM server under the ML.ENERGY Leaderboard's benchmark (read ``energy/README.md``):

- **the engine**: the ``engine_version`` names the profile (:func:`perfcast.serving.engines.engine_for_version`;
  vLLM 0.5.4 is ``vllm-0.5``, the V0 engine whose API server shares its process), with the row's flags:
  ``max_num_seqs`` (per pipeline: each of the ``pp`` virtual engines holds that many), chunked prefill off,
  ``gpu_memory_utilization`` 0.95, ``max_model_len``, recompute preemption;
- **the deployment**: ``vllm_tensor_parallel_size`` x ``vllm_pipeline_parallel_size`` GPUs per replica and
  ``vllm_data_parallel_size`` replicas of the ``gpu_id`` under the row's ``gpu_power_limit_W``
  (:func:`perfcast.catalog.hardware.with_power_limit`);
- **the requests**: all sent at time 0, ``num_prompts`` (else the data set's size: HumanEval+'s 164) times the
  data-dup-factor the row's ``num_request_repeats`` states (per GPU where it names one per GPU; "4 in most"
  runs is taken as 4, an ASSUMPTION the README states: the rows do not record it), prompt lengths of the data set
  the ``task`` names (:mod:`perfcast.serving.sources.datasets`: ShareGPT for chat, HumanEval+ for code,
  LLaVA-Instruct with one image for visual chat), output lengths of the preset's spread with the row's measured
  ``mean_output_tokens`` as their mean (how long the model answers is the model's, not the server's: a workload
  input) capped at ``max_output_tokens``;
- **what is measured over which span** (the README's caveat: "v2 energy per token and power are derived in the
  source from Energy/req and throughput; the ML.ENERGY blog notes v2 power was measured over the whole run"):
  the *energy* is the whole benchmark run's, the *throughput* a steady state's. perfcast runs the benchmark's
  ``N`` requests, and a second run of ``2 N`` requests of the same draw for the steady state: the two runs'
  start and drain match, so their difference is ``N`` requests served with the queue never empty. Energy per
  output token is the ``N``-request run's GPU energy over its output tokens (its ramp-up and drain included);
  energy per request is that times the run's mean output tokens (the source's "Energy/req"); throughput and
  the mean batch are the steady state's (tokens, requests and running requests over the difference's window);
  the average power is derived as the source derives it, energy per output token times that output
  throughput; and the mean TPOT is the benchmark's, over every request of the ``N``-request run (its ramp and
  drain included, as a serving benchmark client reports it). Taking energy and TPOT over the steady state
  instead left every row's energy per token and power lower (the drain serves small batches) and its TPOT
  higher, most where ``max_num_seqs`` is large beside ``N``.
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

from perfcast.catalog.hardware import load_hardware, with_power_limit
from perfcast.coefficients.bundle import Calibration
from perfcast.errors import ConfigError
from perfcast.groundtruth.energy_columns import ENERGY_TARGETS
from perfcast.groundtruth.files import ROW_ERRORS, row_number, row_status
from perfcast.groundtruth.gpus import row_gpu_id
from perfcast.serving.config import ServingConfig, WorkloadConfig
from perfcast.serving.engines import engine_for_version, engine_settings
from perfcast.serving.experiments.run import Simulation, run_experiment
from perfcast.serving.outcomes import RequestStatus
from perfcast.serving.result import ServingResult
from perfcast.serving.sources.datasets import load_dataset

__all__ = ["REQUEST_REPEATS", "TASK_DATASETS", "energy_config", "predict_energy_rows", "request_repeats",
           "steady_state_figures"]

REQUEST_REPEATS = 4  # the benchmark's data-dup-factor where the row does not state one
# the row's task -> the data set preset of its prompts, and images per request
TASK_DATASETS: dict[str, tuple[str, int]] = {
    "v2-chat": ("dataset:sharegpt", 0), "v2-code": ("dataset:humaneval-plus", 0),
    "v2-visual-chat": ("dataset:llava-instruct", 1),
}


def _engine_version(row: dict[str, str]) -> tuple[str, str]:
    engine = (row.get("engine") or "").strip()
    family = "vllm" if engine.lower().startswith("vllm") else engine.split(" ")[0].lower()
    version = (row.get("engine_version") or "").strip()
    if not family or not version:
        raise ConfigError("the row gives no engine and engine_version")
    return family, version


def request_repeats(row: dict[str, str]) -> int:
    """The data-dup-factor of ``row``'s queue file: the ``num_request_repeats`` figure, the one of the row's GPU
    where it names one per GPU ("20 (A100) / 10 (H100)"), else :data:`REQUEST_REPEATS`."""
    text = (row.get("num_request_repeats") or "").strip()
    per_gpu = re.findall(r"(\d+)\s*\(([^)]+)\)", text)
    gpu = (row.get("gpu") or row.get("gpu_id") or "").lower()
    for value, name in per_gpu:
        if name.strip().lower() in gpu:
            return int(value)
    found = re.search(r"data-dup-factor\s+(\d+)", text)
    return int(found.group(1)) if found else REQUEST_REPEATS


def energy_config(row: dict[str, str], *, scale: int = 1) -> ServingConfig:
    """The simulation that reproduces one serving energy row, with ``scale`` times its requests (module
    docstring)."""
    task = (row.get("task") or "").strip()
    if task not in TASK_DATASETS:
        raise ConfigError(f"task {task!r}: perfcast reproduces the tasks {', '.join(TASK_DATASETS)}")
    dataset, images = TASK_DATASETS[task]
    profile = engine_for_version(*_engine_version(row))
    gpu = row_gpu_id(row)
    limit = row_number(row, "gpu_power_limit_W", 0.0)
    hw = with_power_limit(gpu, limit) if limit > 0 else load_hardware(gpu)
    tp = int(row_number(row, "vllm_tensor_parallel_size"))
    pp = int(row_number(row, "vllm_pipeline_parallel_size", 1))
    dp = int(row_number(row, "vllm_data_parallel_size", 1))
    if (row.get("vllm_enable_expert_parallel") or "").strip().lower() == "true":
        raise ConfigError("vLLM expert parallelism in an energy row is not reproduced (tensor-parallel experts only)")
    settings: dict[str, Any] = engine_settings(profile, float(hw.memory_bytes))
    settings |= {"max_num_seqs": int(row_number(row, "max_num_seqs")), "gpu_memory_utilization": 0.95,
                 "enable_chunked_prefill": False, "preemption_mode": "recompute"}
    max_len = int(row_number(row, "max_model_len", 4096))
    batched = row_number(row, "max_num_batched_tokens", 0.0)
    settings["max_num_batched_tokens"] = int(batched) if batched > 0 else max(max_len, 2048)
    size = load_dataset(dataset).prompts
    prompts = int(row_number(row, "num_prompts", float(size) if size else None)) * request_repeats(row) * scale
    mean_out = row_number(row, "mean_output_tokens")
    cap = int(row_number(row, "max_output_tokens", 1024))
    model = (row.get("model_id") or "").strip()
    return ServingConfig(
        model=model, hardware=hw.id, tensor_parallel_size=tp, pipeline_parallel_size=pp, num_replicas=dp,
        max_model_len=max_len, **settings,
        workload=WorkloadConfig(num_requests=prompts, trace=dataset, output_tokens_mean=mean_out,
                                output_tokens_max=cap, images_per_request=images))


def _running_mean(res: ServingResult, t0: float, t1: float) -> float:
    """Requests running (first token out, not finished) averaged over ``[t0, t1]`` (s)."""
    if t1 <= t0:
        return math.nan
    start = np.clip(res.first_token_s, t0, t1)
    end = np.clip(np.nan_to_num(res.finish_s, nan=t1), t0, t1)
    live = np.isfinite(res.first_token_s)
    return float(np.sum((end - start)[live])) / (t1 - t0)


def steady_state_figures(short: ServingResult, long: ServingResult) -> dict[str, float]:
    """Every target of :data:`ENERGY_TARGETS` from the benchmark's run of ``N`` requests (``short``) and one of
    ``2 N`` (``long``): energy and TPOT over the ``N``-request run, throughput and batch over the steady state
    the longer run adds, power derived from both (module docstring)."""
    es, el = short.energy(), long.energy()
    dt = el.duration_s - es.duration_s
    tokens = float(el.output_tokens - es.output_tokens)
    done = long.metrics.requests_completed - short.metrics.requests_completed
    if dt <= 0 or tokens <= 0 or done <= 0 or es.output_tokens <= 0:
        raise ConfigError("the runs show no steady state (the longer run served no more tokens)")
    gpus = el.num_gpus
    # the window of the longer run that the shorter lacks: from the end of its start to the start of its drain
    t0 = max((el.duration_s - dt) / 2, 0.0)  # centred: the start and the drain lie outside it
    t1 = t0 + dt
    ok = np.array([s == RequestStatus.COMPLETED for s in short.status], dtype=bool) & (short.generated_tokens >= 2)
    tpot = ((short.finish_s - short.first_token_s) / np.maximum(short.generated_tokens - 1, 1))[ok]
    per_token = es.energy_J / float(es.output_tokens)
    mean_out = float(es.output_tokens) / max(short.metrics.requests_completed, 1)
    throughput = tokens / dt
    return {
        "energy_per_output_token_J": per_token, "energy_per_request_J": per_token * mean_out,
        "avg_power_total_W": per_token * throughput, "avg_power_per_gpu_W": per_token * throughput / gpus,
        "output_throughput_tok_per_s": throughput, "request_throughput_req_per_s": done / dt,
        "avg_batch_size": _running_mean(long, t0, t1),
        "tpot_mean_s": float(tpot.mean()) if tpot.size else math.nan,
    }


def predict_energy_rows(rows: list[dict[str, str]], calibration: Calibration | None = None,
                        ) -> tuple[dict[str, np.ndarray], list[str], list[str]]:
    """Per target, the predicted value of every row (NaN where not predicted); a status and a group (``gpu_id``)
    per row."""
    n = len(rows)
    out = {t: np.full(n, np.nan) for t in ENERGY_TARGETS}
    status = ["ok"] * n
    groups = [(r.get("gpu_id") or "").strip() for r in rows]
    for i, row in enumerate(rows):
        try:
            short_cfg = energy_config(row)
            long_cfg = energy_config(row, scale=2)
            short = run_experiment(Simulation(short_cfg, calibration=calibration))
            long = run_experiment(Simulation(long_cfg, calibration=calibration))
            figures = steady_state_figures(short, long)
        except ROW_ERRORS as exc:
            status[i] = row_status(exc)
            continue
        for t in ENERGY_TARGETS:
            out[t][i] = figures[t]
        if long.metrics.requests_completed < long.metrics.requests_total:
            status[i] = f"ok ({long.metrics.requests_total - long.metrics.requests_completed} requests rejected)"
    return out, status, groups
