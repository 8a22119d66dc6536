"""Golden outputs: the safety net for moving code with behaviour held fixed.

Two sets of cases, each recorded value for value in ``tests/golden/outputs/*.json``:

- ``SERVING_CASES``: 25 reference serving configurations, one per feature of the simulator (each scheduler,
  router, prefix caching, swap preemption, speculative decoding, disaggregation, pipeline stages, beams, MoE
  with attention DP and EP, MLA, multimodal prompts, retrieval, a closed loop, gamma and trace arrivals,
  quantized weights, an FP8 KV cache, an MLPerf length table, over-long requests refused). For each, every
  per-request array, every scalar the result carries, its metrics and its energy.
- ``VALIDATE_CASES``: ``perfcast validate --json``, every table's error figures.
- ``CLI_CASES``: the ``--json`` object and exit code of ``perfcast predict``, ``train``, ``serve``, ``search``,
  ``collective`` and ``suite`` (every scenario but R6, which measures this CPU) for fixed command lines.

Values that change from run to run (a search's own wall time) are found when the outputs are written: each case
runs twice and every leaf that differs is recorded as volatile and skipped by the comparison. Everything else
must match bit for bit (floats compared by their ``repr``).

Regenerate only when a change is meant to move a number, and say so in its commit::

    .venv/bin/python tests/golden/outputs.py --write [--force] [--only NAME,...]
    .venv/bin/python tests/golden/outputs.py --check             # what the test does, with a diff summary

``tests/golden/test_golden_outputs.py`` checks them in the default test run.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

DATA = Path(__file__).resolve().parent / "outputs"

# ---------------------------------------------------------------------------------------------------------------
# serving: 25 reference configurations (ServingConfig keyword arguments)

_ARXIV = {"trace": "arxiv_summarization", "num_requests": 200, "qps": 2.0, "seed": 42}
_FIXED = {"prompt_tokens": 512, "output_tokens": 128, "num_requests": 200, "qps": 8.0, "seed": 7}

SERVING_CASES: dict[str, dict[str, Any]] = {
    "vllm_arxiv": {"model": "llama-2-7b", "hardware": "a100-sxm-80gb", "scheduler": "vllm", "workload": _ARXIV},
    "sarathi_arxiv": {"model": "llama-2-7b", "hardware": "a100-sxm-80gb", "scheduler": "sarathi",
                      "chunk_size": 512, "workload": _ARXIV},
    "orca_fixed": {"model": "llama-2-7b", "hardware": "a100-sxm-80gb", "scheduler": "orca", "workload": _FIXED},
    "lightllm_code": {"model": "llama-2-13b", "hardware": "a100-sxm-80gb", "scheduler": "lightllm",
                      "workload": {"trace": "splitwise_code", "num_requests": 200, "qps": 3.0, "seed": 3}},
    "static_fixed": {"model": "llama-2-7b", "hardware": "a100-sxm-80gb", "scheduler": "static", "max_num_seqs": 16,
                     "workload": {**_FIXED, "qps": 2.0}},
    "vllm_chunked_conv": {"model": "llama-3.1-8b", "hardware": "h100-sxm-80gb", "enable_chunked_prefill": True,
                          "max_num_batched_tokens": 2048,
                          "workload": {"trace": "splitwise_conv", "num_requests": 300, "qps": 10.0, "seed": 5}},
    "prefix_caching": {"model": "llama-2-7b", "hardware": "a100-sxm-80gb", "enable_prefix_caching": True,
                       "workload": {**_FIXED, "shared_prefix_tokens": 2000, "num_prefixes": 4, "qps": 4.0}},
    "swap_near_capacity": {"model": "llama-2-7b", "hardware": "a100-sxm-40gb", "block_size": 8,
                           "preemption_mode": "swap", "gpu_memory_utilization": 0.5,
                           "workload": {"trace": "arxiv_summarization", "num_requests": 200, "qps": 6.0,
                                        "seed": 11}},
    "recompute_near_capacity": {"model": "llama-2-7b", "hardware": "a100-sxm-40gb", "block_size": 32,
                                "gpu_memory_utilization": 0.5,
                                "workload": {"trace": "arxiv_summarization", "num_requests": 200, "qps": 6.0,
                                             "seed": 11}},
    "speculative": {"model": "llama-2-70b", "hardware": "h100-sxm-80gb", "tensor_parallel_size": 4,
                    "speculative_model": "llama-2-7b", "num_speculative_tokens": 4, "spec_acceptance_rate": 0.8,
                    "workload": {**_FIXED, "qps": 2.0}},
    "disaggregated": {"model": "llama-2-13b", "hardware": "h100-sxm-80gb", "num_replicas": 4,
                      "num_prefill_replicas": 2, "kv_transfer_bandwidth_Bps": 50e9,
                      "workload": {"prompt_tokens": 2048, "output_tokens": 256, "num_requests": 200, "qps": 6.0,
                                   "seed": 9}},
    "pipeline_pp2": {"model": "llama-2-13b", "hardware": "a100-sxm-80gb", "pipeline_parallel_size": 2,
                     "workload": _FIXED},
    "beams": {"model": "gpt-j-6b", "hardware": "h100-sxm-80gb", "workload": {**_FIXED, "num_beams": 4, "qps": 2.0}},
    "moe_attention_dp_ep": {"model": "qwen3-30b-a3b", "hardware": "h100-sxm-80gb", "tensor_parallel_size": 4,
                            "attention_data_parallel": True, "expert_parallel_size": 4, "quantization": "fp8",
                            "workload": {"trace": "splitwise_code", "num_requests": 300, "qps": 20.0, "seed": 1}},
    "mla_deepseek": {"model": "deepseek-v3", "hardware": "h100-sxm-80gb", "tensor_parallel_size": 8,
                     "pipeline_parallel_size": 2,
                     "quantization": "fp8",
                     "workload": {"prompt_tokens": 1024, "output_tokens": 256, "num_requests": 100, "qps": 2.0,
                                  "seed": 2}},
    "llava_images": {"model": "llava-1.5-7b", "hardware": "a100-sxm-80gb",
                     "workload": {**_FIXED, "images_per_request": 1, "qps": 4.0}},
    "rag_retrieval": {"model": "llama-2-13b", "hardware": "h100-sxm-80gb",
                      "workload": {"prompt_tokens": 3584, "output_tokens": 256, "num_requests": 150, "qps": 2.0,
                                   "retrieval_latency_s": 0.05, "retrieval_latency_cv": 0.5, "seed": 4}},
    "closed_loop": {"model": "llama-3.1-8b", "hardware": "h100-sxm-80gb",
                    "workload": {"prompt_tokens": 1000, "output_tokens": 200, "num_requests": 400, "concurrency": 64,
                                 "seed": 6}},
    "gamma_bursty": {"model": "mistral-7b", "hardware": "a100-sxm-80gb",
                     "workload": {**_FIXED, "arrival": "gamma", "burstiness_cv": 2.5}},
    "replicas_least_outstanding": {"model": "llama-2-70b", "hardware": "h100-sxm-80gb", "tensor_parallel_size": 8,
                                   "num_replicas": 4, "scheduler": "sarathi", "router": "least_outstanding",
                                   "workload": {"trace": "arxiv_summarization", "num_requests": 300, "qps": 8.0,
                                                "seed": 42}},
    "replicas_shortest_queue": {"model": "llama-2-7b", "hardware": "a100-sxm-80gb", "num_replicas": 3,
                                "router": "shortest_queue", "workload": {**_FIXED, "qps": 20.0}},
    "w4a16_70b": {"model": "llama-2-70b", "hardware": "a100-sxm-80gb", "quantization": "w4a16",
                  "workload": {**_FIXED, "qps": 1.0, "num_requests": 100}},
    "kv_fp8_h100": {"model": "llama-3.1-8b", "hardware": "h100-sxm-80gb", "quantization": "fp8",
                    "kv_cache_dtype": "fp8", "workload": {"trace": "splitwise_conv", "num_requests": 300,
                                                          "qps": 15.0, "seed": 8}},
    "trace_arrivals_mlperf": {"model": "llama-2-70b", "hardware": "h100-sxm-80gb", "tensor_parallel_size": 2,
                              "workload": {"trace": "mlperf:llama2-70b", "num_requests": 150, "qps": 3.0,
                                           "seed": 13}},
    "over_long_refused": {"model": "llama-2-7b", "hardware": "a100-sxm-80gb", "max_model_len": 3000,
                          "workload": _ARXIV},
}

_REQUEST_ARRAYS = ("arrival_s", "first_token_s", "finish_s", "prompt_tokens", "output_tokens", "generated_tokens",
                   "replica", "preemptions_per_request")
_SCALARS = ("preemptions", "iterations", "kv_blocks_per_engine", "kv_utilization_mean_frac",
            "kv_utilization_max_frac", "kv_fragmentation_mean_frac", "prefix_hit_frac", "weight_bytes_per_gpu",
            "spec_tokens_per_step", "gpu_time_s", "kv_bytes_per_token", "retrieval_mean_s", "gpu_memory_bytes", "dtype",
            "rejection_counts", "max_concurrent_sequences", "retrieval_share_frac", "kv_transfer_mean_s",
            "prefix_cache_bytes", "busy_frac", "mean_iteration_s")


def serving_values(name: str) -> dict[str, Any]:
    """Every value one reference serving configuration's simulation produces."""
    from perfcast.results.serialize import to_json
    from perfcast.serving.config import ServingConfig
    from perfcast.serving.engine import simulate_serving

    res = simulate_serving(ServingConfig(**SERVING_CASES[name]))
    out: dict[str, Any] = {k: np.asarray(getattr(res, k)).tolist() for k in _REQUEST_ARRAYS}
    out["status"] = list(res.status)
    out.update({k: getattr(res, k) for k in _SCALARS})
    out["metrics"] = to_json(res.metrics)
    out["energy"] = to_json(res.energy())
    out["memory"] = None if res.memory is None else to_json(res.memory)
    return out


# ---------------------------------------------------------------------------------------------------------------
# the command line: --json objects

CLI_CASES: dict[str, list[str]] = {
    "predict_gpt2_large_explain": ["predict", "-m", "gpt2-large", "-H", "a100-pcie-40gb", "--mode", "inference",
                                   "-b", "4", "-s", "1024", "--explain"],
    "predict_llama7b_training_oom": ["predict", "-m", "llama-2-7b", "-H", "h100", "--mode", "training", "-b", "1",
                                     "-s", "4096", "--dtype", "bf16"],
    "predict_bert_tp4": ["predict", "-m", "bert-large", "-H", "v100", "-b", "16", "-s", "512", "--parallelism",
                         "tp4"],
    "predict_llama7b_decode": ["predict", "-m", "llama-2-7b", "-H", "a100-sxm-80gb", "--mode", "decode", "-b", "8",
                               "-s", "2048"],
    "predict_resnet50_training": ["predict", "-m", "resnet-50", "-H", "a100-sxm-80gb", "--mode", "training", "-b",
                                  "64"],
    "predict_gpt_oss_mxfp4": ["predict", "-m", "gpt-oss-120b", "-H", "h100", "-b", "1", "-s", "1024"],
    "train_llama70b_t22": ["train", "--model", "llama-2-70b", "--cluster", "dgx-h100", "--nodes", "4", "--tp", "8",
                           "--dp", "4", "--seq-len", "4096", "--micro-batch", "1", "--global-batch", "128",
                           "--recompute", "selective", "--zero", "1"],
    "train_llama13b_pp4_tp2": ["train", "-m", "llama-2-13b", "-c", "dgx-a100", "--tp", "2", "--pp", "4", "--dp", "1",
                               "--seq-len", "4096", "--micro-batch", "1", "--global-batch", "16", "--sp"],
    "train_gpt2_whole_node": ["train", "-m", "gpt2-medium", "-c", "dgx-a100", "--seq-len", "1024",
                              "--micro-batch", "8", "--global-batch", "64"],
    "train_mixtral_ep": ["train", "-m", "mixtral-8x7b", "-c", "dgx-h100", "--nodes", "2", "--ep", "8", "--tp", "1",
                         "--dp", "16", "--zero", "1", "--seq-len", "4096", "--micro-batch", "1", "--global-batch",
                         "64", "--recompute", "full", "--moe-skew", "0.2"],
    "train_lora": ["train", "-m", "llama-2-7b", "-c", "dgx-a100", "--dp", "1", "--seq-len", "2048", "--micro-batch",
                   "4", "--global-batch", "16", "--lora-rank", "16"],
    "train_qlora": ["train", "-m", "llama-2-7b", "-c", "dgx-a100", "--dp", "1", "--seq-len", "2048", "--micro-batch",
                    "4", "--global-batch", "16", "--lora-rank", "16", "--qlora"],
    "serve_arxiv_qps2": ["serve", "--model", "llama-2-7b", "--hardware", "a100-sxm-80gb", "--scheduler", "vllm",
                         "--qps", "2", "--num-requests", "200", "--trace", "arxiv_summarization", "--seed", "42"],
    "serve_find_max_qps": ["serve", "-m", "llama-2-7b", "-H", "h100", "--prompt-tokens", "512", "--output-tokens",
                           "128", "--find-max-qps", "--slo-ttft-p99", "1", "--slo-tpot-p99", "0.05"],
    "serve_closed_loop": ["serve", "-m", "llama-3.1-8b", "-H", "h100", "--prompt-tokens", "1000",
                          "--output-tokens", "200", "--max-concurrency", "64", "-n", "500"],
    "serve_mlperf_server": ["serve", "--workload", "mlperf:llama2-70b:server", "-H", "h100-sxm-80gb",
                            "--tensor-parallel-size", "2"],
    "serve_moe": ["serve", "-m", "Qwen/Qwen3-30B-A3B", "-H", "h100", "--tensor-parallel-size", "4",
                  "--enable-attention-dp", "--expert-parallel-size", "4", "--quantization", "fp8", "--trace",
                  "splitwise_code", "--qps", "20"],
    "search_training": ["search", "--model", "llama-2-7b", "--cluster", "dgx-a100", "--gpus", "16", "--seq-len",
                        "2048", "--global-batch", "64"],
    "search_405b": ["search", "--model", "llama-3-405b", "--cluster", "dgx-h100", "--gpus", "16384", "--seq-len",
                    "8192", "--global-batch", "2048"],
    "search_serve": ["search", "--serve", "-m", "llama-2-70b", "-H", "h100-sxm-80gb", "--gpus", "8",
                     "--slo-ttft-p99", "2", "--slo-tpot-p99", "0.1"],
    "collective_all_reduce": ["collective", "--op", "all_reduce", "--bytes", "1MB", "--gpus", "8", "--cluster",
                              "dgx-h100"],
    "suite_all_but_r6": ["suite", "--only", ""],  # filled in below: every shipped scenario but R6
}


def _suite_ids() -> str:
    from perfcast.scenarios.schema import list_scenarios

    return ",".join(sc.id for sc in list_scenarios() if sc.id != "R6")


def cli_values(name: str, cases: dict[str, list[str]] = CLI_CASES) -> dict[str, Any]:
    """The exit code and the one ``--json`` object of one command line."""
    cli_tests = str(Path(__file__).resolve().parent.parent / "cli")
    if cli_tests not in sys.path:  # once, not once per case
        sys.path.insert(0, cli_tests)
    from cli_helpers import invoke_main  # the CLI tests' own in-process runner

    args = list(cases[name])
    if name == "suite_all_but_r6":
        args[-1] = _suite_ids()
    res = invoke_main([*args, "--json"])
    lines = res.stdout.strip().splitlines()
    if res.exit_code not in (0, 1) or len(lines) != 1:
        raise RuntimeError(f"{name}: exit {res.exit_code}, stdout {res.stdout[:300]!r}, stderr {res.stderr[:300]!r}")
    return {"exit_code": res.exit_code, "json": json.loads(lines[0])}


# ---------------------------------------------------------------------------------------------------------------
# comparison


def _canon(x: Any) -> Any:
    """A JSON-ready copy whose floats are their repr (NaN and infinities included), so equality is bit equality."""
    if isinstance(x, dict):
        return {str(k): _canon(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_canon(v) for v in x]
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, bool) or x is None or isinstance(x, int | str):
        return x
    if isinstance(x, float):
        return {"float": repr(x)} if not math.isfinite(x) else x
    return repr(x)


def _leaves(x: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(x, dict):
        for k, v in x.items():
            yield from _leaves(v, f"{path}/{k}")
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from _leaves(v, f"{path}[{i}]")
    else:
        yield path, x


def _volatile(a: Any, b: Any) -> list[str]:
    """Paths of the leaves that differ between two runs of the same case."""
    la, lb = dict(_leaves(a)), dict(_leaves(b))
    return sorted(p for p in la.keys() | lb.keys() if repr(la.get(p)) != repr(lb.get(p)))


def differences(expected: dict[str, Any], got: Any) -> list[str]:
    """Paths where ``got`` differs from the recorded ``expected`` (its volatile leaves skipped)."""
    skip = set(expected["volatile"])
    want, have = dict(_leaves(expected["values"])), dict(_leaves(_canon(got)))
    out = []
    for p in sorted(want.keys() | have.keys()):
        if p in skip:
            continue
        if p not in want or p not in have or repr(want[p]) != repr(have[p]):
            out.append(f"{p}: recorded {want.get(p, '(absent)')!r}, now {have.get(p, '(absent)')!r}")
    return out


# ``perfcast validate --json``: every table's error figures (about two minutes; the test is marked slow)
VALIDATE_CASES: dict[str, list[str]] = {"validate": ["validate"]}

KINDS: dict[str, tuple[dict[str, Any], Callable[[str], dict[str, Any]]]] = {
    "serving": (SERVING_CASES, serving_values),
    "cli": (CLI_CASES, cli_values),
    "validate": (VALIDATE_CASES, lambda name: cli_values(name, VALIDATE_CASES)),
}


def path_of(kind: str, name: str) -> Path:
    return DATA / f"{kind}-{name}.json"


def all_cases() -> list[tuple[str, str]]:
    return [(kind, name) for kind, (cases, _) in KINDS.items() for name in cases]


def write(kind: str, name: str, *, force: bool) -> Path:
    """Run a case twice, record its values and the leaves that differ between the runs."""
    path = path_of(kind, name)
    if path.exists() and not force:
        raise SystemExit(f"error: {path} exists; pass --force to record it again")
    run = KINDS[kind][1]
    first, second = _canon(run(name)), _canon(run(name))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"case": name, "kind": kind, "volatile": _volatile(first, second), "values": first},
                               indent=None, sort_keys=True) + "\n")
    return path


def check(kind: str, name: str) -> list[str]:
    expected = json.loads(path_of(kind, name).read_text())
    return differences(expected, KINDS[kind][1](name))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="record the outputs (refuses to replace without --force)")
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--check", action="store_true", help="compare with what is recorded")
    ap.add_argument("--only", default="", help="comma-separated case names")
    args = ap.parse_args(argv)
    only = {s for s in args.only.split(",") if s}
    cases = [(k, n) for k, n in all_cases() if not only or n in only]
    if only - {n for _, n in cases}:
        ap.error(f"unknown cases: {sorted(only - {n for _, n in cases})}")
    bad = 0
    for kind, name in cases:
        if args.write:
            print(f"wrote {write(kind, name, force=args.force)}")
        else:
            diff = check(kind, name)
            bad += bool(diff)
            print(f"{'DIFFERS' if diff else 'same   '} {kind}-{name}" + "".join(f"\n    {d}" for d in diff[:10]))
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
