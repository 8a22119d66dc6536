"""Online serving benchmarks (``serving_online/serving_online.csv``): each measured point, simulated as it ran.

The rows are InferenceMAX's nightly runs of real engines (vLLM, SGLang; TensorRT-LLM in the same schema) under
the benchmark client of vLLM/SGLang (``benchmark_serving.py``). A row is reproduced as:

- **the client**: a closed loop at ``max_concurrency`` (no request rate: a new request is sent the moment one
  finishes), ``--dataset-name random --random-range-ratio 0.8 --ignore-eos``: each request's input and output
  lengths uniform in the integers ``[floor(0.8 L), L]`` for the row's nominal ``input_len`` / ``output_len``,
  outputs always to their drawn length;
- **the number of prompts**: the row's ``num_prompts``, else ``PROMPTS_PER_CONCURRENCY`` x the concurrency
  (ASSUMPTION: the result files do not record it; the launch scripts of these runners sent 10 x concurrency);
- **the engine**: the ``framework`` column names an engine profile (:mod:`perfcast.serving.engines`: its
  scheduler, chunking, token budget, memory share, custom all-reduce; its fitted CPU overhead), with the
  launch scripts' flags on top: ``--max-num-seqs`` equal to the concurrency where the scripts pass it (the
  NVIDIA vLLM scripts, per the table's README), else the profile's default;
- **the deployment**: ``tp`` GPUs of one node (the catalog's node of ``gpu_id``), the checkpoint ``model_id``
  with its own quantization (the ``precision`` column is the benchmark's label of it), ``ep`` expert-parallel
  GPUs and attention data parallelism where the row records them; where it does not (the October snapshot),
  tensor-parallel experts without attention DP (ASSUMPTION, stated per row in the table's README);
- **disaggregated rows** (``disagg`` true): ``num_prefill_gpus`` and ``num_decode_gpus`` GPUs as prefill and
  decode pools of ``tp``-GPU replicas (both counts must be multiples of ``tp``: pools of another parallelism
  are refused), the KV cache moving over the cluster's links (:func:`perfcast.serving.handover.kv_transfer_bandwidth`);
- **speculative rows** (``spec_decode`` ``mtp``): the model's own multi-token-prediction module drafting
  ``MTP_DRAFT_TOKENS`` tokens per step, each accepted with ``MTP_ACCEPTANCE`` (ASSUMPTION: the rows record
  neither; DeepSeek-V3's report measures 85-90 % acceptance of its one MTP token, and later drafts of a
  chain are accepted less often).

Every measured column perfcast can derive is predicted from the same simulation: throughput (total, output,
input tokens/s, per GPU and for the deployment; requests/s) and the TTFT, TPOT and E2E latency mean, median,
p99 and standard deviation (ms, over the completed requests, numpy's linear percentiles as the client
computes them), and the mean ITL: the client's mean over every gap between streamed tokens, which for
one-token chunks is the requests' decode time summed over their gaps summed. ITL's median, p99 and standard
deviation (per-gap distributions the simulator does not keep) are not predicted.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from perfcast.catalog.hardware import load_hardware
from perfcast.coefficients.bundle import Calibration
from perfcast.dtypes import DType
from perfcast.errors import ConfigError
from perfcast.groundtruth.files import ROW_ERRORS, row_number, row_status
from perfcast.groundtruth.gpus import row_gpu_id
from perfcast.groundtruth.online_columns import ONLINE_TARGETS, STATS
from perfcast.serving.config import ServingConfig, WorkloadConfig
from perfcast.serving.engines import engine_settings, load_engine
from perfcast.serving.experiments.run import Simulation, run_experiment
from perfcast.serving.iteration import weight_bytes_per_gpu
from perfcast.serving.outcomes import RequestStatus
from perfcast.serving.result import ServingResult

__all__ = ["LENGTH_RANGE_RATIO", "MTP_ACCEPTANCE", "MTP_DRAFT_TOKENS", "PROMPTS_PER_CONCURRENCY", "online_config",
           "online_figures", "predict_online_rows"]

LENGTH_RANGE_RATIO = 0.8  # the client's --random-range-ratio (the table's length_distribution)
PROMPTS_PER_CONCURRENCY = 10  # --num-prompts = 10 x concurrency (the launch scripts; not in the result files)
MTP_DRAFT_TOKENS = 3  # spec_decode mtp: tokens drafted per step (ASSUMPTION, module docstring)
MTP_ACCEPTANCE = 0.7  # ... and the probability each is accepted (ASSUMPTION)
def _int(row: dict[str, str], key: str, default: int | None = None) -> int:
    return int(row_number(row, key, None if default is None else float(default)))


def _flag(row: dict[str, str], key: str) -> bool:
    return (row.get(key) or "").strip().lower() in ("true", "1", "yes")


def online_config(row: dict[str, str]) -> ServingConfig:
    """The simulation that reproduces one serving_online row (module docstring)."""
    framework = (row.get("framework") or "").strip()
    if not framework:
        raise ConfigError("the row gives no framework (the engine: vllm, sglang or tensorrt-llm)")
    profile = load_engine(framework)
    spec = (row.get("spec_decode") or "none").strip().lower()
    if spec not in ("", "none", "mtp"):
        raise ConfigError(f"spec_decode {spec!r}: perfcast reproduces mtp rows (the model's own module drafting); "
                          "this row's draft model and acceptance are not recorded")
    if not (row.get("gpu_id") or "").strip():
        raise ConfigError("the row gives no gpu_id")
    gpu = row_gpu_id(row)  # with the row's GPU memory where it differs from the catalog entry's
    hw = load_hardware(gpu)
    tp = _int(row, "tp")
    num_gpus = _int(row, "num_gpus", tp)
    if num_gpus % tp:
        raise ConfigError(f"num_gpus {num_gpus} is not a multiple of tp {tp}")
    prefill_replicas = 0
    if _flag(row, "disagg"):
        prefill, decode = _int(row, "num_prefill_gpus"), _int(row, "num_decode_gpus")
        if prefill % tp or decode % tp:
            raise ConfigError(f"disaggregated pools of {prefill} prefill and {decode} decode GPUs are not whole "
                              f"replicas of tp {tp}: pools of different parallelism are not modelled")
        prefill_replicas, num_gpus = prefill // tp, prefill + decode
    concurrency = _int(row, "max_concurrency")
    isl, osl = _int(row, "input_len"), _int(row, "output_len")
    model = (row.get("model_id") or row.get("base_model_id") or "").strip()
    weights = None
    if profile.kv_fraction_of_free_memory:  # TensorRT-LLM: its KV share is of the memory the weights leave
        weights = weight_bytes_per_gpu(model, tp=tp, dtype=DType.FP16, quantization="auto",
                                       attention_dp=_flag(row, "dp_attention"))
    settings = engine_settings(profile, float(hw.memory_bytes), weights)
    if profile.id == "vllm" and hw.vendor == "nvidia":
        settings["max_num_seqs"] = concurrency  # the NVIDIA vLLM launch scripts' --max-num-seqs
    ep = _int(row, "ep", 1)
    dp = _flag(row, "dp_attention")
    prompts = _int(row, "num_prompts", PROMPTS_PER_CONCURRENCY * concurrency)
    draft: dict[str, Any] = ({"speculative_model": "mtp", "num_speculative_tokens": MTP_DRAFT_TOKENS,
              "spec_acceptance_rate": MTP_ACCEPTANCE} if spec == "mtp" else {})
    return ServingConfig(
        model=model, hardware=gpu, tensor_parallel_size=tp, num_replicas=num_gpus // tp,
        num_prefill_replicas=prefill_replicas, expert_parallel_size=ep, attention_data_parallel=dp, **draft,
        **settings,
        workload=WorkloadConfig(num_requests=prompts, prompt_tokens=isl, output_tokens=osl,
                                length_range_ratio=LENGTH_RANGE_RATIO, concurrency=concurrency))


def _stats(values: np.ndarray, prefix: str) -> dict[str, float]:
    if not values.size:
        return {f"{prefix}_ms_{s}": math.nan for s in STATS}
    ms = values * 1e3
    return {f"{prefix}_ms_mean": float(ms.mean()), f"{prefix}_ms_median": float(np.percentile(ms, 50)),
            f"{prefix}_ms_p99": float(np.percentile(ms, 99)), f"{prefix}_ms_std": float(ms.std())}


def online_figures(res: ServingResult, num_gpus: int) -> dict[str, float]:
    """Every target of :data:`ONLINE_TARGETS` from one finished simulation of ``num_gpus`` GPUs."""
    m = res.metrics
    done = np.array([s == RequestStatus.COMPLETED for s in res.status], dtype=bool)
    arrival, first, finish = res.arrival_s[done], res.first_token_s[done], res.finish_s[done]
    out_tok = res.output_tokens[done]
    decodes = out_tok >= 2
    tpot = (finish[decodes] - first[decodes]) / (out_tok[decodes] - 1)
    gaps = float((out_tok[decodes] - 1).sum())
    total, output = m.total_tokens_per_s, m.throughput_tokens_per_s
    figures = {
        "total_tput_tok_s": total, "output_tput_tok_s": output, "input_tput_tok_s": total - output,
        "request_tput_req_s": m.throughput_requests_per_s,
        "itl_ms_mean": float((finish[decodes] - first[decodes]).sum()) / gaps * 1e3 if gaps else math.nan,
        **_stats(first - arrival, "ttft"), **_stats(tpot, "tpot"), **_stats(finish - arrival, "e2el"),
    }
    for key in ("total_tput_tok_s", "output_tput_tok_s", "input_tput_tok_s"):
        figures[key.replace("_tok_s", "_tok_s_per_gpu")] = figures[key] / num_gpus
    return figures


def predict_online_rows(rows: list[dict[str, str]], calibration: Calibration | None = None,
                        ) -> tuple[dict[str, np.ndarray], list[str], list[str]]:
    """Per target, the predicted value of every row (NaN where not predicted); a status and a group (``gpu_id
    framework``) per row."""
    n = len(rows)
    out = {t: np.full(n, np.nan) for t in ONLINE_TARGETS}
    status = ["ok"] * n
    groups = [f"{r.get('gpu_id', '')} {r.get('framework', '')}".strip() for r in rows]
    for i, row in enumerate(rows):
        try:
            cfg = online_config(row)
            res = run_experiment(Simulation(cfg, calibration=calibration))
        except ROW_ERRORS as exc:
            status[i] = row_status(exc)
            continue
        figures = online_figures(res, cfg.tensor_parallel_size * cfg.num_replicas)
        for t in ONLINE_TARGETS:
            out[t][i] = figures[t]
        if res.metrics.requests_completed < res.metrics.requests_total:
            status[i] = f"ok ({res.metrics.requests_total - res.metrics.requests_completed} requests rejected)"
    return out, status, groups
