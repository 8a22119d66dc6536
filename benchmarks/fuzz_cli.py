"""The command-line fuzz at depth: draw at least 10,000 fresh perfcast command lines and report the failures.

Run from the repository root (needs hypothesis, from the test extras)::

    .venv/bin/python benchmarks/fuzz_cli.py                      # 10,000 cases, a readable report
    .venv/bin/python benchmarks/fuzz_cli.py --json               # exactly one JSON object on stdout
    .venv/bin/python benchmarks/fuzz_cli.py --examples 20000 --workers 2 --seed 7

The cases and the checks are those of ``tests/property/cli_fuzz.py`` (the test suite runs a few hundred fixed
ones): every command with drawn flags, numbers, input files and outputs that already hold a user's file, run
through the ``perfcast`` script's entry point in-process, each in its own folder. A case fails when an
exception escapes, a traceback is printed, the exit code is not 0/1/2, an exit 1 or 2 does not end in exactly
one ``does not fit:``/``failed:`` or ``error:`` line, ``--json`` does not print one JSON object, a file that
existed changed without ``--force``, it runs past ``--time-limit`` seconds, or it exhausts
``--memory-limit-gb`` (the address space of the worker, so a blow-up is a MemoryError and not the OOM killer).

Cases run in worker processes (``--workers``), each with its own seed and an empty user catalog. The script
exits 0 when every case passed, 1 when some failed (they are listed), 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "property"))


def _worker(examples: int, seed: int, time_limit_s: float, memory_gb: float) -> dict[str, Any]:
    """Run ``examples`` cases drawn with ``seed``; returns counts and the failing cases."""
    import resource

    from cli_fuzz import Case, cases, problems, run_case
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hseed

    if memory_gb > 0:
        limit = int(memory_gb * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    home = Path(tempfile.mkdtemp(prefix="perfcast-fuzz-"))
    os.environ["PERFCAST_CATALOG"] = str(home / "user-catalog")
    counts: Counter[str] = Counter()
    exits: Counter[str] = Counter()
    failed: list[dict[str, Any]] = []
    slowest: list[tuple[float, str]] = []
    done = [0]

    @hseed(seed)
    @settings(max_examples=examples, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(case=cases())
    def run(case: Case) -> None:
        done[0] += 1
        folder = home / f"case{done[0]}"
        outcome = run_case(case, folder, time_limit_s=time_limit_s)
        found = problems(case, outcome)
        command = case.argv[0] if case.argv else "(none)"
        counts[command] += 1
        exits[str(outcome.exit_code)] += 1
        slowest.append((outcome.time_s, case.describe()))
        slowest.sort(reverse=True)
        del slowest[5:]
        if found:
            failed.append({"command": case.describe(), "problems": found, "exit_code": outcome.exit_code,
                           "stderr": outcome.stderr[-400:], "escaped": outcome.escaped,
                           "files": [name for name, _ in case.files], "time_s": outcome.time_s})
        shutil.rmtree(folder, ignore_errors=True)

    start = time.perf_counter()
    run()
    shutil.rmtree(home, ignore_errors=True)
    return {"cases": done[0], "failures": len(failed), "failed": failed, "by_command": dict(counts),
            "exit_codes": dict(exits), "time_s": time.perf_counter() - start,
            "slowest": [{"time_s": t, "command": c} for t, c in slowest]}


def _merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"cases": 0, "failures": 0, "failed": [], "by_command": Counter(), "exit_codes": Counter(),
                           "slowest": []}
    for p in parts:
        out["cases"] += p["cases"]
        out["failures"] += p["failures"]
        out["failed"] += p["failed"]
        out["by_command"].update(p["by_command"])
        out["exit_codes"].update(p["exit_codes"])
        out["slowest"] = sorted(out["slowest"] + p["slowest"], key=lambda s: -s["time_s"])[:5]
    out["by_command"] = dict(out["by_command"])
    out["exit_codes"] = dict(out["exit_codes"])
    kinds = Counter(problem.split(":")[0] for f in out["failed"] for problem in f["problems"])
    out["failure_kinds"] = dict(kinds)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--examples", type=int, default=10_000, help="cases to draw in total (default 10,000)")
    ap.add_argument("--workers", type=int, default=1, help="worker processes (default 1)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the first worker (the others: seed + i)")
    ap.add_argument("--time-limit", type=float, default=60.0, help="seconds a case may run (default 60)")
    ap.add_argument("--memory-limit-gb", type=float, default=6.0, help="address space per worker (default 6)")
    ap.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.examples < 1 or args.workers < 1:
        ap.error("--examples and --workers must be positive")
    if args.worker:
        sys.stdout.write(json.dumps(_worker(args.examples, args.seed, args.time_limit, args.memory_limit_gb)) + "\n")
        return 0
    start = time.perf_counter()
    share = [args.examples // args.workers + (i < args.examples % args.workers) for i in range(args.workers)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    procs = [subprocess.Popen([sys.executable, __file__, "--worker", "--examples", str(n), "--seed",
                               str(args.seed + i), "--time-limit", str(args.time_limit), "--memory-limit-gb",
                               str(args.memory_limit_gb)], stdout=subprocess.PIPE, env=env, text=True)
             for i, n in enumerate(share) if n]
    parts = []
    for proc in procs:
        out, _ = proc.communicate()
        if proc.returncode != 0 or not out.strip():
            parts.append({"cases": 0, "failures": 1, "by_command": {}, "exit_codes": {}, "slowest": [],
                          "failed": [{"command": "(a worker)", "problems": [f"worker exited {proc.returncode}"]}]})
            continue
        parts.append(json.loads(out.strip().splitlines()[-1]))
    result = _merge(parts)
    result.update(examples_asked=args.examples, workers=args.workers, seed=args.seed,
                  wall_time_s=time.perf_counter() - start)
    if args.json:
        sys.stdout.write(json.dumps(result) + "\n")
    else:
        p = sys.stdout.write
        p(f"{result['cases']:,} cases in {result['wall_time_s']:.0f} s ({args.workers} worker(s), seed "
          f"{args.seed}): {result['failures']} failed\n")
        p("by command: " + ", ".join(f"{k} {v}" for k, v in sorted(result["by_command"].items())) + "\n")
        p("exit codes: " + ", ".join(f"{k}: {v}" for k, v in sorted(result["exit_codes"].items())) + "\n")
        for s in result["slowest"]:
            p(f"  slow: {s['time_s']:.1f} s  {s['command'][:150]}\n")
        for f in result["failed"][:50]:
            p(f"FAIL {f['command'][:200]}\n     {'; '.join(f['problems'])[:300]}\n")
    return 1 if result["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
