"""Maximum achievable matmul FLOP/s (MAMF) as ``published/gemm.csv`` measures it, per GPU and datapath.

Each MAMF row is the best shape of a brute-force GEMM search; its note gives the efficiency against the
datapath's peak. Fits take priors from these measurements: how much less of its peak one datapath (FP8) or
one software stack (ROCm) sustains than the CUDA BF16 kernels the kernel model was fitted on.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

from perfcast.groundtruth.files import find_groundtruth

__all__ = ["mamf_efficiencies"]


def mamf_efficiencies(groundtruth: Path | None = None) -> dict[tuple[str, str], float]:
    """``(gpu_id, "bf16" | "fp8") -> efficiency`` (measured over peak, 0-1) of every MAMF row of
    ``published/gemm.csv`` (empty when the table is not found)."""
    root = groundtruth or find_groundtruth(required=False)
    path = root / "published" / "gemm.csv" if root is not None else None
    if path is None or not path.is_file():
        return {}
    with path.open(newline="", encoding="utf-8") as fh:
        rows = [r for r in csv.DictReader(fh) if "MAMF" in (r.get("note") or "")]
    eff: dict[tuple[str, str], float] = {}
    for r in rows:
        m = re.search(r"efficiency ([\d.]+)%", r["note"])
        kind = "fp8" if r["dtype"].startswith("fp8") else r["dtype"]
        if m and kind in ("fp8", "bf16"):
            eff[(r["gpu_id"], kind)] = float(m.group(1)) / 100.0
    return eff
