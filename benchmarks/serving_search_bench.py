"""Speed of the serving search: one ``perfcast search --serve`` timed as a whole process.

Run from the repository root::

    .venv/bin/python benchmarks/serving_search_bench.py          # human-readable
    .venv/bin/python benchmarks/serving_search_bench.py --json   # exactly one JSON object on stdout

Target (issue 18): the serving search over 24 deployments in <= 15 s, with the
steady-state rule of issue 7 (each load judged in steady state). The search is
exactly the issue's command::

    perfcast search --serve -m llama-3.1-70b --gpus 8 -H h100-sxm-80gb --trace splitwise_conv \\
        --slo-ttft-p99 2 --slo-tpot-p99 0.1 --json

run as its own process (``--workers`` added when given: by default the search
uses one process per CPU). Reported: the wall time of the process, its CPU
seconds and its children's (the worker processes), the deployments evaluated,
the simulations the search ran and the best deployment. The machine may be
shared: the CPU seconds are steadier than the wall time. Speed is measured
here, never asserted in tests.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

TARGET_TIME_S = 15.0
COMMAND = ["search", "--serve", "-m", "llama-3.1-70b", "--gpus", "8", "-H", "h100-sxm-80gb", "--trace",
           "splitwise_conv", "--slo-ttft-p99", "2", "--slo-tpot-p99", "0.1", "--json"]
REPO = Path(__file__).resolve().parent.parent


def run_search(workers: int | None) -> dict[str, Any]:
    """Time one serving search as a process (wall and CPU seconds) and read its figures."""
    cmd = [sys.executable, "-m", "perfcast", *COMMAND, *(["--workers", str(workers)] if workers else [])]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=False)
    wall_s = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    data = json.loads(proc.stdout)
    best = data["best"][0]
    return {
        "command": "perfcast " + " ".join(COMMAND) + (f" --workers {workers}" if workers else ""),
        "wall_s": wall_s,
        "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        "search_time_s": data["search_time_s"],
        "configs_evaluated": data["configs_evaluated"],
        "configs_feasible": data["configs_feasible"],
        "simulations": data["simulations"],
        "best": {k: best[k] for k in ("tp", "replicas", "scheduler", "chunk_size", "max_num_seqs", "max_qps",
                                      "goodput_requests_per_s_per_gpu")},
        "target": {"time_s": TARGET_TIME_S, "met": wall_s <= TARGET_TIME_S},
        "cpus": os.cpu_count(),
        "load_average_1min": os.getloadavg()[0],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--workers", type=int, default=None, help="--workers for the search (default: its own)")
    args = ap.parse_args()
    out = run_search(args.workers)
    if args.json:
        sys.stdout.write(json.dumps(out) + "\n")
        return 0
    b = out["best"]
    print(f"serving search ({out['command']}): {out['configs_evaluated']} deployments ({out['configs_feasible']} "
          f"feasible), {out['simulations']} simulations in {out['wall_s']:.1f} s ({out['cpu_s']:.1f} s CPU, load "
          f"{out['load_average_1min']:.1f}, {out['cpus']} CPUs); best tp {b['tp']} x {b['replicas']} {b['scheduler']}"
          f"{'' if b['chunk_size'] is None else ' chunk ' + str(b['chunk_size'])} max_num_seqs {b['max_num_seqs']}: "
          f"{b['max_qps']:.3g} requests/s ({b['goodput_requests_per_s_per_gpu']:.3g} per GPU); target <= "
          f"{TARGET_TIME_S:.0f} s: {'met' if out['target']['met'] else 'missed'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
