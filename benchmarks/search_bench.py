"""Speed of the design-space search: plans priced per second by the vectorized evaluator.

Run from the repository root::

    .venv/bin/python benchmarks/search_bench.py          # human-readable
    .venv/bin/python benchmarks/search_bench.py --json   # exactly one JSON object on stdout

Target (issue 5): >= 100,000 plans evaluated in <= 10 s on 2 cores. The space is
Llama-3.1-405B on DGX H100 at 2,048, 4,096, 8,192 and 16,384 GPUs (seq 8192, global
batch 2048) over the default axes; the whole search (enumeration, pricing every
plan, exact re-ranking of the best, Pareto front) is timed in a fresh state,
so the per-shape pricing is included. Speed is measured here, never asserted
in tests.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

TARGET_PLANS = 100_000
TARGET_TIME_S = 10.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--gpus", default="2048,4096,8192,16384", help="comma-separated GPU counts")
    args = ap.parse_args()
    t_import = time.perf_counter()
    from perfcast.sweep import SearchSpace, search_training

    import_s = time.perf_counter() - t_import
    space = SearchSpace(model="llama-3.1-405b", cluster="dgx-h100",
                        gpus=tuple(int(g) for g in args.gpus.split(",")), seq_len=8192, global_batch=2048)
    t0 = time.perf_counter()
    res = search_training(space, top=10)
    total_s = time.perf_counter() - t0
    out = {
        "plans_enumerated": res.plans_enumerated,
        "plans_evaluated": res.plans_evaluated,
        "plans_feasible": res.plans_feasible,
        "search_time_s": total_s,
        "evaluate_time_s": res.evaluate_time_s,
        "plans_per_s": res.plans_evaluated / total_s,
        "evaluate_plans_per_s": res.plans_evaluated / res.evaluate_time_s,
        "import_s": import_s,
        "target": {"plans": TARGET_PLANS, "time_s": TARGET_TIME_S,
                   "met": res.plans_evaluated >= TARGET_PLANS and total_s <= TARGET_TIME_S},
        "agreement": res.agreement,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }
    if args.json:
        sys.stdout.write(json.dumps(out) + "\n")
    else:
        print(f"search: {res.plans_evaluated:,} plans evaluated ({res.plans_enumerated:,} enumerated, "
              f"{res.plans_feasible:,} fit) in {total_s:.2f} s = {out['plans_per_s']:,.0f} plans/s "
              f"(vectorized pricing alone {res.evaluate_time_s:.2f} s = {out['evaluate_plans_per_s']:,.0f} plans/s); "
              f"target >= {TARGET_PLANS:,} plans in <= {TARGET_TIME_S:.0f} s: "
              f"{'met' if out['target']['met'] else 'missed'} ({os.cpu_count()} CPUs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
