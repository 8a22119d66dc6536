"""Record the PyTorch execution traces (and the Kineto traces of the same runs) the replay tests read.

Run with the venv's torch (CPU is enough): ``python tests/unit/replay/make_execution_traces.py [OUT_DIR]
[--threads N] [--measure]``. Each
model trains three profiled steps (forward, backward, SGD step) after one warm-up step, with
``torch.profiler.ExecutionTraceObserver`` writing the execution trace and ``export_chrome_trace`` the Kineto trace;
both are gzipped into ``OUT_DIR`` (default: ``data/`` beside this file). The profiler's own overhead (record
shapes, the observer) inflates the steps the Kineto trace measures; ``--measure`` also prints the median of 20
unprofiled steps (:func:`measure_step_s`), the time to compare a prediction with. The tests that need torch call
:func:`record` into a temporary directory instead of reading committed files.
"""

from __future__ import annotations

import gzip
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

MODELS = ("mlp", "transformer")


def _model(name: str, torch: Any) -> tuple[Any, Any, Any]:
    """The module, its input and its target for ``name``."""
    nn = torch.nn
    if name == "mlp":  # a 2-layer MLP, batch 64
        model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10))
        return model, torch.randn(64, 256), torch.randint(0, 10, (64,))
    if name == "transformer":  # one pre-norm encoder block (SDPA attention), batch 4 x 64 tokens, width 128
        model = nn.TransformerEncoderLayer(d_model=128, nhead=4, dim_feedforward=512, dropout=0.0,
                                           batch_first=True, norm_first=True)
        return model, torch.randn(4, 64, 128), torch.randn(4, 64, 128)
    raise ValueError(f"unknown model {name!r}; use one of {MODELS}")


def record(name: str, out_dir: Path, *, steps: int = 3, threads: int = 1) -> tuple[Path, Path]:
    """Train ``name`` for one warm-up and ``steps`` profiled steps; the gzipped execution trace and Kineto trace."""
    import torch
    from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile, schedule

    torch.manual_seed(0)
    torch.set_num_threads(threads)
    model, x, y = _model(name, torch)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.functional.cross_entropy if name == "mlp" else torch.nn.functional.mse_loss
    out_dir.mkdir(parents=True, exist_ok=True)
    outs = (out_dir / f"{name}_et.json.gz", out_dir / f"{name}_kineto.json.gz")
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        # "Profiler clears events at the end of each cycle": there is one cycle here
        warnings.simplefilter("ignore", UserWarning)
        et_path, kineto_path = Path(tmp) / "et.json", Path(tmp) / "kineto.json"
        et = ExecutionTraceObserver().register_callback(str(et_path))
        with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=steps),
                     execution_trace_observer=et, record_shapes=True,
                     on_trace_ready=lambda p: p.export_chrome_trace(str(kineto_path))) as prof:
            for _ in range(steps + 1):
                opt.zero_grad()
                loss_fn(model(x), y).backward()
                opt.step()
                prof.step()
        et.unregister_callback()
        for src, dst in zip((et_path, kineto_path), outs, strict=True):
            with src.open("rb") as fi, gzip.open(dst, "wb") as fo:
                shutil.copyfileobj(fi, fo)
    return outs


def measure_step_s(name: str, *, steps: int = 20, threads: int = 1) -> float:
    """Median seconds of ``steps`` unprofiled training steps of ``name`` (after three warm-up steps)."""
    import torch

    torch.manual_seed(0)
    torch.set_num_threads(threads)
    model, x, y = _model(name, torch)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.functional.cross_entropy if name == "mlp" else torch.nn.functional.mse_loss
    times = []
    for i in range(steps + 3):
        t0 = time.perf_counter()
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
        if i >= 3:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    n_threads = int(sys.argv[sys.argv.index("--threads") + 1]) if "--threads" in sys.argv else 1
    args = [a for a in args if a != str(n_threads)]
    target = Path(args[0]) if args else Path(__file__).with_name("data")
    for m in MODELS:
        print(*record(m, target, threads=n_threads))
        if "--measure" in sys.argv:
            print(f"{m}: unprofiled step {measure_step_s(m, threads=n_threads) * 1e3:.3f} ms ({n_threads} threads)")
