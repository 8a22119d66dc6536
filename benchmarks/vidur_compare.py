"""Side by side with vidur 0.0.26: the same serving workload, simulated by both; speed ratio and metric gaps.

Run from the repository root (vidur runs offline in its own venv through ``../shared/anchors/vidur/run.sh``;
its first run trains its random-forest models for ~20 minutes and caches them)::

    .venv/bin/python benchmarks/vidur_compare.py                      # vllm and sarathi, 200 requests
    .venv/bin/python benchmarks/vidur_compare.py --requests 10000     # where simulation dominates start-up
    .venv/bin/python benchmarks/vidur_compare.py --json

The workload is the one configuration vidur has attention data for here: CodeLlama-34B on two A100 80GB
(TP2, the a100_pairwise_nvlink node), arxiv_summarization lengths capped at 4096 tokens, Poisson arrivals
at the given QPS and seed, vidur's batch caps (128 sequences; vllm 4096 tokens per batch, sarathi chunks of
512). vidur's wall time includes its start-up (loading the cached models, predicting its lookup tables);
the comparison also prints perfcast's, which includes tabulating its iteration model. Never part of the
test suite: it needs vidur installed by the anchor script, and speed is measured, not asserted.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
ANCHOR = REPO.parent / "shared" / "anchors" / "vidur" / "run.sh"
TARGET_SPEEDUP = 20.0


def _pct(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    v = sorted(values)
    pos = (len(v) - 1) * q
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def _summary(ttft: list[float], tpot: list[float], e2e: list[float]) -> dict[str, float]:
    return {"ttft_p50_s": _pct(ttft, 0.5), "ttft_p99_s": _pct(ttft, 0.99), "tpot_p50_s": _pct(tpot, 0.5),
            "tpot_p99_s": _pct(tpot, 0.99), "e2e_p50_s": _pct(e2e, 0.5), "e2e_p99_s": _pct(e2e, 0.99)}


def run_perfcast(scheduler: str, requests: int, qps: float, seed: int) -> dict[str, Any]:
    from perfcast.serving import ServingConfig, WorkloadConfig, simulate_serving

    cfg = ServingConfig(
        model="codellama-34b", hardware="a100-sxm-80gb", tensor_parallel_size=2, cluster="a100-pairwise-nvlink",
        scheduler=scheduler, max_num_seqs=128, max_num_batched_tokens=4096 if scheduler == "vllm" else None,
        chunk_size=512, max_model_len=4096,
        workload=WorkloadConfig(num_requests=requests, qps=qps, trace="arxiv_summarization", seed=seed))
    t0 = time.perf_counter()
    res = simulate_serving(cfg)
    wall = time.perf_counter() - t0
    m = res.metrics
    done = [i for i, s in enumerate(res.status) if s == "completed"]
    ttft = [float(res.first_token_s[i] - res.arrival_s[i]) for i in done]
    e2e = [float(res.finish_s[i] - res.arrival_s[i]) for i in done]
    tpot = [float((res.finish_s[i] - res.first_token_s[i]) / (res.output_tokens[i] - 1)) for i in done
            if res.output_tokens[i] > 1]
    return {"wall_s": wall, "requests_completed": m.requests_completed, **_summary(ttft, tpot, e2e)}


def run_vidur(scheduler: str, requests: int, qps: float, seed: int) -> dict[str, Any] | None:
    if not ANCHOR.is_file():
        return None
    t0 = time.perf_counter()
    proc = subprocess.run(["bash", str(ANCHOR), scheduler, str(requests), str(qps), str(seed)],
                          capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    out = next((line.split("output ", 1)[1].strip() for line in proc.stdout.splitlines() if "output " in line), None)
    if proc.returncode != 0 or out is None:
        sys.stderr.write(f"vidur failed ({proc.returncode}): {proc.stderr.strip()[-400:]}\n")
        return None
    metrics = next(Path(out).rglob("request_metrics.csv"), None)
    if metrics is None:
        return {"wall_s": wall}
    rows = list(csv.DictReader(metrics.open()))

    def col(name: str) -> list[float]:
        return [float(r[name]) for r in rows if r.get(name) not in (None, "")]

    inner = next((float(line.split("wall ")[1].split(" s")[0]) for line in proc.stdout.splitlines()
                  if "wall " in line), wall)
    return {"wall_s": inner, "requests_completed": len(rows),
            **_summary(col("prefill_e2e_time"), col("decode_time_execution_plus_preemption_normalized"),
                       col("request_e2e_time"))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--qps", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--schedulers", default="vllm,sarathi")
    ap.add_argument("--json", action="store_true", help="print exactly one JSON object")
    args = ap.parse_args(argv)
    os.chdir(REPO)
    result: dict[str, Any] = {"requests": args.requests, "qps": args.qps, "seed": args.seed,
                              "target_speedup": TARGET_SPEEDUP, "runs": []}
    for sched in [s.strip() for s in args.schedulers.split(",") if s.strip()]:
        pc = run_perfcast(sched, args.requests, args.qps, args.seed)
        vd = run_vidur(sched, args.requests, args.qps, args.seed)
        row: dict[str, Any] = {"scheduler": sched, "perfcast": pc, "vidur": vd}
        if vd and vd.get("wall_s"):
            row["speedup"] = vd["wall_s"] / pc["wall_s"]
            row["relative_diff"] = {k: pc[k] / vd[k] - 1.0 for k in pc if k.endswith("_s") and k != "wall_s"
                                    and k in vd and vd[k]}
        result["runs"].append(row)
    if args.json:
        sys.stdout.write(json.dumps(result) + "\n")
        return 0
    for row in result["runs"]:
        pc, vd = row["perfcast"], row["vidur"]
        print(f"{row['scheduler']}: perfcast {pc['wall_s']:.2f} s" + (
            f", vidur {vd['wall_s']:.1f} s, speed ratio {row['speedup']:.0f}x (target >= {TARGET_SPEEDUP:g}x)"
            if vd and "speedup" in row else " (vidur not available)"))
        for k in ("ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "e2e_p50_s", "e2e_p99_s"):
            other = f"  vidur {vd[k]:.4f}  diff {100 * row['relative_diff'][k]:+.0f}%" if vd and k in vd else ""
            print(f"  {k:<11} perfcast {pc[k]:.4f}{other}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
