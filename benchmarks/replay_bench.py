"""Time ``perfcast replay`` and ``perfcast adapt`` as whole processes (what a user waits for).

Run from the repository root::

    .venv/bin/python benchmarks/replay_bench.py           # human-readable report
    .venv/bin/python benchmarks/replay_bench.py --json    # exactly one JSON object on stdout

For each visible profiler trace (``traces/*.json.gz`` of the ground truth): ``perfcast replay TRACE --json`` on its
own GPU and repriced for an H100 (``--hardware h100-sxm-80gb``; the MI250 trace names its device only as "AMD Radeon
Graphics", so it takes ``--from-hardware mi250``), median wall seconds of ``--runs`` runs after one untimed run
that fills the OS file cache; each execution trace shipped with the tests (``tests/unit/replay/data/*_et.json.gz``,
recorded with torch 2.13's ExecutionTraceObserver) predicted for an H100 the same way; then ``perfcast adapt`` of
five NeuSight end-to-end rows of one GPU. No target is
set for either (issue 20 asks for accuracy, not speed); the numbers are for comparing before and after a change.
Standard library + perfcast only; the script exits 0 whenever it could measure.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from perfcast.groundtruth.files import find_groundtruth

PERFCAST = [sys.executable, "-m", "perfcast"]


def _wall_s(cmd: list[str], runs: int) -> float:
    """Median wall seconds of ``runs`` runs of ``cmd`` (after one untimed run); raises on a failing run."""
    subprocess.run(cmd, check=True, capture_output=True)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _five_rows(e2e: Path, out: Path) -> tuple[Path, str]:
    """The first five NeuSight end-to-end rows of its first device, written to ``out``; and that device."""
    with e2e.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
        fields = reader.fieldnames or []
    device = rows[0]["device"]
    mine = [r for r in rows if r["device"] == device][:5]
    with out.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(mine)
    return out, device


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="timed runs per command (default 3)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    root = find_groundtruth(required=False)
    if root is None:
        print(json.dumps({"error": "no ground truth found"}) if args.json else "no ground truth found")
        return 0
    replay: dict[str, dict[str, float]] = {}
    for trace in sorted((root / "traces").glob("*.json.gz")):
        base = [*PERFCAST, "replay", str(trace), "--json"]
        if "mi250" in trace.name:
            base += ["--from-hardware", "mi250"]
        print(f"replay {trace.name}", file=sys.stderr)
        replay[trace.name] = {"own_gpu_s": _wall_s(base, args.runs),
                              "h100_s": _wall_s([*base, "--hardware", "h100-sxm-80gb"], args.runs)}
    execution: dict[str, float] = {}
    data = Path(__file__).resolve().parent.parent / "tests" / "unit" / "replay" / "data"
    for et in sorted(data.glob("*_et.json.gz")):
        print(f"replay {et.name}", file=sys.stderr)
        execution[et.name] = _wall_s([*PERFCAST, "replay", str(et), "--hardware", "h100-sxm-80gb", "--json"],
                                     args.runs)
    with tempfile.TemporaryDirectory() as tmp:
        samples, device = _five_rows(root / "neusight" / "e2e.csv", Path(tmp) / "samples.csv")
        print(f"adapt 5 rows of {device}", file=sys.stderr)
        adapt_s = _wall_s([*PERFCAST, "adapt", str(samples), "-o", str(Path(tmp) / "dev.yaml"), "--force"],
                          args.runs)
    result = {"replay_wall_s": replay, "execution_trace_h100_wall_s": execution, "adapt_5_rows_wall_s": adapt_s,
              "adapt_device": device, "runs": args.runs}
    if args.json:
        print(json.dumps(result))
    else:
        for name, r in replay.items():
            print(f"perfcast replay {name}: {r['own_gpu_s']:.2f} s on its GPU, {r['h100_s']:.2f} s repriced for H100")
        for name, t in execution.items():
            print(f"perfcast replay {name} --hardware h100-sxm-80gb: {t:.2f} s")
        print(f"perfcast adapt (5 rows of {device}): {adapt_s:.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
