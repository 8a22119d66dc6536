"""R6 benchmark: BERT-base, GPT-2 and ResNet-50 inference measured here with PyTorch vs predicted on local-cpu.

Uses the calibrated ``local-cpu`` entry when there is one; otherwise (or with ``--calibrate``) runs
``perfcast calibrate``'s microbenchmarks first into a temporary file, on one thread by default: one thread's
CPU time is what stays measurable on a shared machine (with every core busy elsewhere, a multi-threaded
forward waits at each barrier for a descheduled thread and runs 4-35x slower). The fit sees only the
microbenchmarks; the models are the test. Prints one JSON object: every case's measured and predicted
seconds, the MAPE per model and overall (target <= 10%) of each of ``--runs`` measurements, the calibration
time and the machine's load around each run.

    .venv/bin/python benchmarks/cpu_local.py [--calibrate] [--threads N] [--quick] [--runs N]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from perfcast.calibrate.write import calibrate_to
from perfcast.errors import PerfcastError
from perfcast.groundtruth.local import FULL_CASES, load_local_cpu, validate_local
from perfcast.results.serialize import to_json

TARGET_MAPE_FRAC = 0.10


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calibrate", action="store_true", help="calibrate first (into a temporary file)")
    ap.add_argument("--threads", type=int, default=1, help="threads to calibrate for (default: 1)")
    ap.add_argument("--quick", action="store_true", help="quick calibration")
    ap.add_argument("--runs", type=int, default=1, help="measure and predict this many times (same calibration)")
    args = ap.parse_args()
    load_before = os.getloadavg()[0]
    calib_s = None
    hw = None
    if not args.calibrate:
        try:
            hw = load_local_cpu()
        except PerfcastError:
            hw = None
    with tempfile.TemporaryDirectory() as tmp:
        if hw is None:
            start = time.perf_counter()
            hw, _ = calibrate_to(Path(tmp) / "local-cpu.yaml", quick=args.quick, threads=args.threads)
            calib_s = time.perf_counter() - start
        runs = []
        for _ in range(max(args.runs, 1)):
            load_run = os.getloadavg()[0]
            start = time.perf_counter()
            rep = validate_local(FULL_CASES, hardware=hw)
            runs.append({**to_json(rep), "validation_time_s": time.perf_counter() - start,
                         "load_avg_1min_before": load_run, "load_avg_1min_after": os.getloadavg()[0]})
    out = {**runs[-1], "runs": runs, "mape_frac_by_run": [r["mape_frac"] for r in runs],
           "target_mape_frac": TARGET_MAPE_FRAC, "calibration_time_s": calib_s,
           "load_avg_1min_at_start": load_before, "cpu_count": os.cpu_count()}
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
