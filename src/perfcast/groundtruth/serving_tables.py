"""Published serving throughput (``published/inference.csv``): each benchmark's load, simulated.

The rows are TensorRT-LLM offline maximum-throughput runs: an infinite request
rate of uniform synthetic requests (``input_len`` prompt and ``output_len``
output tokens), in-flight batching, one TP x PP instance; ``value`` is the
instance's total output tokens per second. Each row is reproduced as:

- every request arriving at once, ``NUM_REQUESTS`` of them (a benchmark run of a
  few thousand requests, so the ramp-down of the last batch weighs as it does there);
- TensorRT-LLM's defaults: in-flight batching that mixes context and generation
  requests with KV reserved for each request's full length (its
  GUARANTEED_NO_EVICT capacity policy: the ``orca`` policy here), at most
  ``MAX_BATCH`` sequences and ``MAX_NUM_TOKENS`` tokens per iteration, a KV cache
  of ``KV_FREE_MEMORY_FRAC`` of the memory the weights leave free (TensorRT-LLM's
  ``kv_cache_free_gpu_mem_fraction``, a share of free memory, not of the whole GPU
  as vLLM's ``gpu_memory_utilization``), and the ``trtllm`` CPU-overhead preset;
- mixture-of-experts models on more than one tensor-parallel GPU in the
  PyTorch-backend (v1.0-era) rows: attention data parallelism with the experts
  split over the same GPUs (``enable_attention_dp`` with ``moe_expert_parallel_size
  = tp``, TensorRT-LLM's recommended maximum-throughput setup for its MoE models).
  This is an ASSUMPTION: the perf-overview tables name only TP and PP. Each
  attention rank then has its own ``MAX_BATCH`` / ``MAX_NUM_TOKENS`` limits. The
  TensorRT-engine (v0.11) rows (Mixtral) keep tensor-parallel experts;
- precision: ``fp16`` rows run FP16 weights and KV cache, ``fp8`` rows FP8 GEMMs
  and an FP8 KV cache, ``fp4`` rows NVFP4 GEMMs and an FP8 KV cache (as the
  TensorRT-LLM quantized checkpoints are built); with the FP8 cache, prefill
  attention runs as TensorRT-LLM's FP8 context FMHA on GPUs with FP8 tensor cores
  (recalled engine behaviour, stated with its assumption in
  :mod:`perfcast.serving.iteration`).

A row whose prompt plus output exceeds its model's context (GPT-J and Falcon-180B at 2048 + 2048 tokens, with
2048 positions) ran with a longer one (TensorRT-LLM builds its engine for the row's lengths and applies RoPE
past the trained positions): the run proves the deployment, so its config allows that ``max_model_len``
(``allow_long_max_model_len``); nothing else about the model changes.

A row that gives a ``concurrency`` is a closed-loop benchmark: that many clients,
each sending its next request when the last one finishes. Besides the output-token
throughputs, rows may ask for ``throughput_requests_per_s``, ``ttft_ms`` and
``itl_ms`` (means over requests; ITL is the time per output token after the first),
and ``e2e_latency_ms_{mean,median,p99}``: every metric comes from the same simulation.

A row with a ``workload`` column naming an MLPerf preset (``mlperf:<benchmark>:<scenario>``, see
:mod:`perfcast.serving.sources.mlperf`) instead of ``input_len``/``output_len`` runs that scenario: the preset's
request lengths and latency limits, offline as every request at once, server/interactive as the highest
Poisson load meeting the p99 limits. Its metrics are ``mlperf_<scenario>_tokens_per_s_total``,
``mlperf_<scenario>_samples_per_s_total``, ``mlperf_<scenario>_ttft_ms_p99`` and
``mlperf_<scenario>_tpot_ms_p99`` (the other metrics above are read from the same simulation). The system:
``gpu_id``; ``num_gpus`` GPUs in ``num_gpus / (tp * pp)`` instances (MLPerf systems run one engine per GPU
group; a row without ``num_gpus`` is one instance), behind a round-robin router; ``tp`` from the row, else
the smallest power of two whose weights take at most ``MLPERF_WEIGHT_FRAC`` of a GPU's memory (an
ASSUMPTION); ``pp`` from the row, else 1; precision from the row, else the preset's (FP8, or 16-bit on a
GPU without FP8 math); the model is the row's ``model_id``/``model``, else the benchmark's. The engine is
configured as for the rows above (TensorRT-LLM's defaults), with the context limit the preset's longest
prompt plus its longest output. Rows that name the same system and scenario share one simulation.
"""

from __future__ import annotations

import math

import numpy as np

from perfcast.catalog.hardware import load_hardware
from perfcast.catalog.models import load_model
from perfcast.coefficients.bundle import Calibration
from perfcast.dtypes import DType
from perfcast.errors import ConfigError, PerfcastError
from perfcast.groundtruth.files import ROW_ERRORS, row_status
from perfcast.serving.config import PRECISION_QUANTIZATION, ServingConfig, WorkloadConfig
from perfcast.serving.engines import load_engine
from perfcast.serving.experiments.mlperf import MLPerfResult
from perfcast.serving.experiments.run import MLPerfScenario, Simulation, run_experiment
from perfcast.serving.iteration import weight_bytes_per_gpu
from perfcast.serving.metrics import ServingMetrics
from perfcast.serving.sources.mlperf import SCENARIOS, apply_mlperf, default_quantization, parse_workload

__all__ = ["KV_FREE_MEMORY_FRAC", "MAX_BATCH", "MAX_NUM_TOKENS", "METRICS", "MLPERF_METRICS", "MLPERF_WEIGHT_FRAC",
           "NUM_REQUESTS",
           "attention_dp_default", "inference_config", "predict_inference_rows", "row_value"]

NUM_REQUESTS = 1000
# TensorRT-LLM's defaults, from its engine profile (data/engines/trtllm.yaml): max_batch_size, max_num_tokens and
# kv_cache_free_gpu_mem_fraction (of the memory left after the weights)
_TRTLLM = load_engine("trtllm")
MAX_BATCH = _TRTLLM.max_num_seqs
MAX_NUM_TOKENS = _TRTLLM.max_num_batched_tokens
KV_FREE_MEMORY_FRAC = _TRTLLM.gpu_memory_utilization
MLPERF_WEIGHT_FRAC = 0.6  # an MLPerf row without tp: the smallest tp whose weights take at most this share of a GPU
_TOTALS = ("throughput_tokens_per_s", "output_throughput_tokens_per_s_total", "output_tokens_per_s_total")
# metric -> (ServingMetrics field, distribution statistic or "", scale to the row's unit)
METRICS: dict[str, tuple[str, str, float]] = {
    **{m: ("throughput_tokens_per_s", "", 1.0) for m in _TOTALS},
    "throughput_requests_per_s": ("throughput_requests_per_s", "", 1.0),
    "ttft_ms": ("ttft_s", "mean", 1e3),
    "itl_ms": ("tpot_s", "mean", 1e3),
    "e2e_latency_ms_mean": ("e2e_s", "mean", 1e3),
    "e2e_latency_ms_median": ("e2e_s", "p50", 1e3),
    "e2e_latency_ms_p99": ("e2e_s", "p99", 1e3),
}
# MLPerf rows' metrics, read from perfcast.serving.experiments.mlperf.MLPerfResult.as_dict()
MLPERF_METRICS: tuple[str, ...] = tuple(f"mlperf_{scenario}_{quantity}" for scenario in SCENARIOS for quantity in (
    "tokens_per_s_total", "samples_per_s_total", "ttft_ms_p99", "tpot_ms_p99"))


def _int(row: dict[str, str], key: str) -> int:
    v = (row.get(key) or "").strip()
    if not v:
        raise ConfigError(f"the row gives no {key}")
    return int(float(v))


def inference_config(row: dict[str, str], *, num_requests: int | None = None) -> ServingConfig:
    """The serving simulation that reproduces one published row (see the module docstring); for an MLPerf
    ``workload`` row, the deployment with the preset's requests and latency limits (the server search is
    :func:`perfcast.serving.experiments.mlperf.run_mlperf`'s)."""
    metric = (row.get("metric") or "").strip()
    if metric not in METRICS and metric not in MLPERF_METRICS:
        raise ConfigError(f"metric {metric!r} is not one perfcast predicts for serving rows; known: "
                          f"{', '.join(METRICS)}, mlperf_<scenario>_{{tokens_per_s_total, samples_per_s_total, "
                          "ttft_ms_p99, tpot_ms_p99}")
    workload = (row.get("workload") or "").strip()
    if workload:
        return _mlperf_config(row, workload, metric, num_requests)
    if metric.startswith("mlperf_"):
        raise ConfigError(f"metric {metric} needs a workload column naming mlperf:<benchmark>:<scenario>")
    num_requests = NUM_REQUESTS if num_requests is None else num_requests
    quant = _quantization(row)
    if quant is None:
        quant = "none"
    isl, osl = _int(row, "input_len"), _int(row, "output_len")
    concurrency = (row.get("concurrency") or "").strip()
    model = (row.get("model_id") or row.get("model") or "").strip()
    tp = _int(row, "tp")
    dp = attention_dp_default(row, model, tp)
    return ServingConfig(
        model=model, hardware=row["gpu_id"], tensor_parallel_size=tp, pipeline_parallel_size=_int(row, "pp"),
        expert_parallel_size=tp if dp else 1, attention_data_parallel=dp, scheduler="orca",
        engine=_TRTLLM.id, dtype="fp16", quantization=quant,  # type: ignore[arg-type]
        # under attention DP each rank has its own scheduler with these limits
        max_num_seqs=MAX_BATCH * (tp if dp else 1), max_num_batched_tokens=MAX_NUM_TOKENS * (tp if dp else 1),
        max_model_len=isl + osl, allow_long_max_model_len=isl + osl > load_model(model).max_positions,
        gpu_memory_utilization=_memory_frac(model, row["gpu_id"], tp, _int(row, "pp"), quant, dp),
        workload=WorkloadConfig(num_requests=num_requests, prompt_tokens=isl, output_tokens=osl, qps=None,
                                concurrency=int(float(concurrency)) if concurrency else None))


def _quantization(row: dict[str, str]) -> str | None:
    """The row's precision as a serving quantization scheme (None when the row gives no precision)."""
    precision = (row.get("precision") or "").strip().lower()
    if not precision:
        return None
    quant = PRECISION_QUANTIZATION.get(precision)
    if quant is None:
        raise ConfigError(f"precision {precision!r} has no serving quantization scheme; known: "
                          f"{', '.join(PRECISION_QUANTIZATION)}")
    return quant


def _optional_int(row: dict[str, str], key: str) -> int | None:
    v = (row.get(key) or "").strip()
    return int(float(v)) if v else None


def _mlperf_config(row: dict[str, str], workload: str, metric: str, num_requests: int | None) -> ServingConfig:
    bench, scenario = parse_workload(workload)
    if metric.startswith("mlperf_") and not metric.startswith(f"mlperf_{scenario}_"):
        raise ConfigError(f"metric {metric} does not belong to the row's workload {workload} (its metrics are "
                          f"mlperf_{scenario}_*)")
    gpu = (row.get("gpu_id") or "").strip()
    if not gpu:
        raise ConfigError("the row gives no gpu_id")
    model = (row.get("model_id") or row.get("model") or "").strip() or bench.model
    quant = _quantization(row) or default_quantization(bench, gpu)
    pp = _optional_int(row, "pp") or 1
    num_gpus = _optional_int(row, "num_gpus")
    tp = _optional_int(row, "tp") or _default_tp(model, gpu, num_gpus, pp, quant)
    if num_gpus is not None and num_gpus % (tp * pp):
        raise ConfigError(f"num_gpus {num_gpus} is not a multiple of tp x pp = {tp * pp}")
    replicas = max(1, (num_gpus or tp * pp) // (tp * pp))
    dp = attention_dp_default(row, model, tp)
    max_len = bench.input.max_tokens + bench.output.max_tokens
    cfg = ServingConfig(
        model=model, hardware=gpu, tensor_parallel_size=tp, pipeline_parallel_size=pp, num_replicas=replicas,
        expert_parallel_size=tp if dp else 1, attention_data_parallel=dp, scheduler="orca", engine=_TRTLLM.id,
        dtype="fp16", quantization=quant,  # type: ignore[arg-type]
        max_num_seqs=MAX_BATCH * (tp if dp else 1), max_num_batched_tokens=MAX_NUM_TOKENS * (tp if dp else 1),
        max_model_len=max_len, gpu_memory_utilization=_memory_frac(model, gpu, tp, pp, quant, dp))
    return apply_mlperf(cfg, f"mlperf:{bench.name}:{scenario}", num_requests=num_requests)


def _default_tp(model: str, gpu: str, num_gpus: int | None, pp: int, quant: str) -> int:
    """The smallest power-of-two tp (up to the row's GPUs per pipeline stage, else 8) whose weights take at most
    ``MLPERF_WEIGHT_FRAC`` of one GPU's memory; the largest candidate when none does."""
    limit = max(1, (num_gpus or 8 * pp) // pp)
    candidates = [t for t in (1, 2, 4, 8, 16, 32, 64) if t <= limit and limit % t == 0] or [1]
    try:
        memory = float(load_hardware(gpu).memory_bytes)
    except PerfcastError:
        return candidates[0]  # the simulation reports the unknown GPU
    for t in candidates:
        try:
            weights = weight_bytes_per_gpu(model, tp=t, dtype=DType.FP16, quantization=quant) / pp
        except PerfcastError:
            continue
        if weights <= MLPERF_WEIGHT_FRAC * memory:
            return t
    return candidates[-1]


def _memory_frac(model: str, gpu: str, tp: int, pp: int, quant: str, dp: bool) -> float:
    """TensorRT-LLM's KV budget as a share of the whole GPU: ``KV_FREE_MEMORY_FRAC`` of what the weights leave."""
    try:
        weights = weight_bytes_per_gpu(model, tp=tp, dtype=DType.FP16, quantization=quant, attention_dp=dp) / pp
        total = float(load_hardware(gpu).memory_bytes)
    except PerfcastError:
        return KV_FREE_MEMORY_FRAC  # the simulation reports what is wrong with the row
    return min(1.0, max(KV_FREE_MEMORY_FRAC * 0.5, (weights + KV_FREE_MEMORY_FRAC * max(total - weights, 0.0)) / total))


def attention_dp_default(row: dict[str, str], model: str, tp: int) -> bool:
    """Whether the row's run is taken to use attention data parallelism with expert parallelism (see the
    module docstring): a mixture-of-experts model served by TensorRT-LLM's PyTorch backend on more than one
    tensor-parallel GPU."""
    if tp < 2 or "pytorch" not in (row.get("framework_version") or "").lower():
        return False
    try:
        cfg = load_model(model)
    except PerfcastError:
        return False
    return cfg.moe is not None


def row_value(row: dict[str, str], metrics: ServingMetrics) -> float:
    """The simulated value of the row's ``metric``, in the row's unit."""
    field, stat, scale = METRICS[(row.get("metric") or "").strip()]
    value = getattr(metrics, field)
    return float(getattr(value, stat) if stat else value) * scale


def predict_inference_rows(rows: list[dict[str, str]], calibration: Calibration | None = None,
                           ) -> tuple[np.ndarray, list[str], list[str]]:
    """Predicted ``value`` per row (NaN where not predicted), a status per row and each row's GPU
    (``calibration``: the shipped one when None)."""
    out = np.full(len(rows), np.nan)
    status = ["ok"] * len(rows)
    groups = [r.get("gpu_id", "") for r in rows]
    mlperf: dict[str, MLPerfResult] = {}  # rows naming one system and scenario share its simulation
    for i, row in enumerate(rows):
        try:
            cfg = inference_config(row)
            workload = (row.get("workload") or "").strip()
            if workload:
                key = cfg.model_dump_json()
                if key not in mlperf:
                    mlperf[key] = run_experiment(MLPerfScenario(cfg, workload))
                res = mlperf[key].result
                figures = mlperf[key].as_dict()
            else:
                res = run_experiment(Simulation(cfg, calibration=calibration))
                figures = {}
        except ROW_ERRORS as exc:
            status[i] = row_status(exc)
            continue
        metric = (row.get("metric") or "").strip()
        value = figures.get(metric, math.nan) if metric in MLPERF_METRICS else row_value(row, res.metrics)
        out[i] = math.nan if value is None else value
        if res.metrics.requests_completed < res.metrics.requests_total:
            status[i] = f"ok ({res.metrics.requests_total - res.metrics.requests_completed} requests rejected)"
    return out, status, groups
