"""Speed of the design-space search: plans priced per second by the vectorized evaluator.

Run from the repository root::

    .venv/bin/python benchmarks/search_bench.py          # human-readable
    .venv/bin/python benchmarks/search_bench.py --json   # exactly one JSON object on stdout

Target (issues 5 and 17): >= 100,000 plans evaluated in <= 10 s on 2 cores, for
each of two spaces:

- ``dense``: Llama-3.1-405B on DGX H100 at 2,048, 4,096, 8,192 and 16,384 GPUs
  (seq 8192, global batch 2048) over the default axes (bf16);
- ``moe``: DeepSeek-V3 (256 routed experts) on DGX H100 at the same GPU counts
  (seq 4096, global batch 8192) with the axes of issue 17: precision recipes
  bf16, fp8 and fp8-cs, expert tensor parallelism both split like the MLP
  (etp tp) and whole (etp 1, EP folded over TP x CP x DP), EP 8-64, CP 1-2 and
  micro-batches 1-2 (TP, PP, VP, recompute and ZeRO over their defaults).

Each space is searched in its own process (``--space`` runs one here), so
the whole search (enumeration, pricing every plan, exact re-ranking of the
best, Pareto front) is timed from a fresh state and the per-shape pricing is
included. The machine is shared: the CPU seconds of the search are reported
beside the wall time. Speed is measured here, never asserted in tests. The top
level of the JSON object is the dense space's (what ``run.py`` reads), with
``target.met`` for both and each space's figures under ``spaces``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from typing import Any

TARGET_PLANS = 100_000
TARGET_TIME_S = 10.0
GPUS = "2048,4096,8192,16384"

# space name -> SearchSpace keyword arguments (gpus from --gpus)
SPACES: dict[str, dict[str, Any]] = {
    "dense": {"model": "llama-3.1-405b", "cluster": "dgx-h100", "seq_len": 8192, "global_batch": 2048},
    "moe": {"model": "deepseek-v3", "cluster": "dgx-h100", "seq_len": 4096, "global_batch": 8192,
            "precision": ("bf16", "fp8", "fp8-cs"), "etp": ("tp", 1), "ep": (8, 16, 32, 64), "cp": (1, 2),
            "micro_batch": (1, 2)},
}


def run_space(name: str, gpus: str) -> dict[str, Any]:
    """Search one space in this process and report its figures."""
    t_import = time.perf_counter()
    from perfcast.sweep import SearchSpace, search_training

    import_s = time.perf_counter() - t_import
    space = SearchSpace(**SPACES[name], gpus=tuple(int(g) for g in gpus.split(",")))
    t0, c0 = time.perf_counter(), time.process_time()
    res = search_training(space, top=10)
    total_s, cpu_s = time.perf_counter() - t0, time.process_time() - c0
    return {
        "space": name,
        "model": space.model,
        "gpus": list(space.gpus),
        "precision": space.precision_text,
        "plans_enumerated": res.plans_enumerated,
        "plans_evaluated": res.plans_evaluated,
        "plans_feasible": res.plans_feasible,
        "rejected": res.rejected,
        "search_time_s": total_s,
        "search_cpu_s": cpu_s,
        "evaluate_time_s": res.evaluate_time_s,
        "plans_per_s": res.plans_evaluated / total_s,
        "evaluate_plans_per_s": res.plans_evaluated / res.evaluate_time_s,
        "import_s": import_s,
        "target": {"plans": TARGET_PLANS, "time_s": TARGET_TIME_S,
                   "met": res.plans_evaluated >= TARGET_PLANS and total_s <= TARGET_TIME_S},
        "agreement": res.agreement,
        "load_average_1min": os.getloadavg()[0],
    }


def _in_own_process(name: str, gpus: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, "--space", name, "--gpus", gpus, "--json"], check=True,
                         capture_output=True, text=True)
    return dict(json.loads(out.stdout))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--gpus", default=GPUS, help="comma-separated GPU counts")
    ap.add_argument("--space", choices=(*SPACES, "all"), default="all",
                    help="one space, searched in this process, or all, each in its own process")
    args = ap.parse_args()
    if args.space != "all":
        out = run_space(args.space, args.gpus)
        spaces = {args.space: out}
    else:
        spaces = {name: _in_own_process(name, args.gpus) for name in SPACES}
        out = {**spaces["dense"], "spaces": spaces}
        out["target"] = {**out["target"], "met": all(s["target"]["met"] for s in spaces.values())}
    out.update(cpus=os.cpu_count(), python=platform.python_version())
    if args.json:
        sys.stdout.write(json.dumps(out) + "\n")
        return 0
    for s in spaces.values():
        print(f"search {s['space']} ({s['model']}, {s['precision']}): {s['plans_evaluated']:,} plans evaluated "
              f"({s['plans_enumerated']:,} enumerated, {s['plans_feasible']:,} fit) in {s['search_time_s']:.2f} s "
              f"({s['search_cpu_s']:.2f} s CPU, load {s['load_average_1min']:.1f}) = {s['plans_per_s']:,.0f} plans/s "
              f"(vectorized pricing alone {s['evaluate_time_s']:.2f} s = {s['evaluate_plans_per_s']:,.0f} plans/s); "
              f"vectorized vs exact step time median {100 * s['agreement']['step_time_median_abs_err_frac']:.2f}%, "
              f"max {100 * s['agreement']['step_time_max_abs_err_frac']:.1f}%; target >= {TARGET_PLANS:,} plans in "
              f"<= {TARGET_TIME_S:.0f} s: {'met' if s['target']['met'] else 'missed'} ({os.cpu_count()} CPUs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
