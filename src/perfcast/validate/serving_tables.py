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
  TensorRT-LLM quantized checkpoints are built).

A row that gives a ``concurrency`` is a closed-loop benchmark: that many clients,
each sending its next request when the last one finishes. Besides the output-token
throughputs, rows may ask for ``throughput_requests_per_s``, ``ttft_ms`` and
``itl_ms`` (means over requests; ITL is the time per output token after the first),
and ``e2e_latency_ms_{mean,median,p99}``: every metric comes from the same simulation.
"""

from __future__ import annotations

import numpy as np

from perfcast.catalog.hardware import load_hardware
from perfcast.catalog.models import load_model
from perfcast.dtypes import DType
from perfcast.errors import ConfigError, PerfcastError
from perfcast.serving.coefficients import ServingCoefficients
from perfcast.serving.config import ServingConfig, WorkloadConfig
from perfcast.serving.engine import simulate_serving
from perfcast.serving.iteration import weight_bytes_per_gpu
from perfcast.serving.metrics import ServingMetrics

__all__ = ["KV_FREE_MEMORY_FRAC", "MAX_BATCH", "MAX_NUM_TOKENS", "METRICS", "NUM_REQUESTS", "attention_dp_default",
           "inference_config", "predict_inference_rows", "row_value"]

NUM_REQUESTS = 1000
MAX_BATCH = 2048
MAX_NUM_TOKENS = 8192
KV_FREE_MEMORY_FRAC = 0.9  # TensorRT-LLM's kv_cache_free_gpu_mem_fraction default: of the memory left after the weights
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


def _int(row: dict[str, str], key: str) -> int:
    v = (row.get(key) or "").strip()
    if not v:
        raise ConfigError(f"the row gives no {key}")
    return int(float(v))


def inference_config(row: dict[str, str], *, num_requests: int = NUM_REQUESTS) -> ServingConfig:
    """The serving simulation that reproduces one published row (see the module docstring)."""
    metric = (row.get("metric") or "").strip()
    if metric not in METRICS:
        raise ConfigError(f"metric {metric!r} is not one perfcast predicts for serving rows; known: "
                          f"{', '.join(METRICS)}")
    precision = (row.get("precision") or "fp16").strip().lower()
    quant = {"fp16": "none", "bf16": "none", "fp8": "fp8", "fp4": "fp4", "nvfp4": "fp4"}.get(precision)
    if quant is None:
        raise ConfigError(f"precision {precision!r} has no serving quantization scheme")
    isl, osl = _int(row, "input_len"), _int(row, "output_len")
    concurrency = (row.get("concurrency") or "").strip()
    model = (row.get("model_id") or row.get("model") or "").strip()
    tp = _int(row, "tp")
    dp = attention_dp_default(row, model, tp)
    return ServingConfig(
        model=model, hardware=row["gpu_id"], tensor_parallel_size=tp, pipeline_parallel_size=_int(row, "pp"),
        expert_parallel_size=tp if dp else 1, attention_data_parallel=dp, scheduler="orca",
        engine="trtllm", dtype="fp16", quantization=quant,  # type: ignore[arg-type]
        # under attention DP each rank has its own scheduler with these limits
        max_num_seqs=MAX_BATCH * (tp if dp else 1), max_num_batched_tokens=MAX_NUM_TOKENS * (tp if dp else 1),
        max_model_len=isl + osl, gpu_memory_utilization=_memory_frac(model, row["gpu_id"], tp, _int(row, "pp"),
                                                                     quant, dp),
        workload=WorkloadConfig(num_requests=num_requests, prompt_tokens=isl, output_tokens=osl, qps=None,
                                concurrency=int(float(concurrency)) if concurrency else None))


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


def predict_inference_rows(rows: list[dict[str, str]], serving: ServingCoefficients | None = None,
                           ) -> tuple[np.ndarray, list[str], list[str]]:
    """Predicted ``value`` per row (NaN where not predicted), a status per row and each row's GPU."""
    out = np.full(len(rows), np.nan)
    status = ["ok"] * len(rows)
    groups = [r.get("gpu_id", "") for r in rows]
    for i, row in enumerate(rows):
        try:
            cfg = inference_config(row)
            res = simulate_serving(cfg, serving=serving)
        except PerfcastError as exc:
            status[i] = f"unsupported: {exc}"
            continue
        except (KeyError, ValueError) as exc:
            status[i] = f"unsupported: malformed row ({exc})"
            continue
        out[i] = row_value(row, res.metrics)
        if res.metrics.requests_completed < res.metrics.requests_total:
            status[i] = f"ok ({res.metrics.requests_total - res.metrics.requests_completed} requests rejected)"
    return out, status, groups
