"""Speed of ``perfcast suite``: the whole suite as one process, and each scenario in process.

Run from the repository root::

    .venv/bin/python benchmarks/suite_bench.py          # human-readable
    .venv/bin/python benchmarks/suite_bench.py --json   # exactly one JSON object on stdout

Target (issue 5): the whole suite (every shipped scenario, results written with
``--out``) in <= 60 s on 2 cores, timed as a fresh ``perfcast suite --json --out DIR``
process. The per-scenario times (one in-process pass after the imports) show where
the time goes. Speed is measured here, never asserted in tests.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_SUITE_S = 60.0


def _perfcast() -> list[str]:
    exe = Path(sys.executable).with_name("perfcast")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "perfcast.cli"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--no-per-scenario", action="store_true", help="time the whole process only")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        proc = subprocess.run([*_perfcast(), "suite", "--json", "--out", str(Path(tmp) / "out")],
                              capture_output=True, text=True, check=False)
        whole_s = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        return 1
    statuses: dict[str, int] = {}
    for sc in json.loads(proc.stdout)["scenarios"]:
        statuses[sc["status"]] = statuses.get(sc["status"], 0) + 1
    per: dict[str, float] = {}
    if not args.no_per_scenario:
        from perfcast.scenarios import list_scenarios, run_scenario

        for sc in list_scenarios():
            t = time.perf_counter()
            run_scenario(sc)
            per[sc.id] = time.perf_counter() - t
    res = {"suite_process_s": whole_s, "target_s": TARGET_SUITE_S, "meets_target": whole_s <= TARGET_SUITE_S,
           "scenarios": sum(statuses.values()), "statuses": statuses, "cpu_count": os.cpu_count(),
           "per_scenario_s": per}
    if args.json:
        sys.stdout.write(json.dumps(res) + "\n")
        return 0
    sys.stdout.write(f"perfcast suite --json --out DIR: {whole_s:.1f} s for {res['scenarios']} scenarios "
                     f"({', '.join(f'{n} {s}' for s, n in statuses.items())}); target <= {TARGET_SUITE_S:g} s: "
                     f"{'meets target' if res['meets_target'] else 'MISSES target'} ({os.cpu_count()} CPUs)\n")
    for sid, t in sorted(per.items(), key=lambda kv: -kv[1])[:10]:
        sys.stdout.write(f"  {sid:6s} {t:6.2f} s\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
