"""Rich tables for the terminal; conversion to display units happens only here."""

from __future__ import annotations

import math

from rich.table import Table

from perfcast.compose.types import StepTime
from perfcast.units import format_time

__all__ = ["pct", "step_table", "top_ops_table"]


def pct(x: float) -> str:
    """A fraction as a percentage string ('-' for NaN)."""
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}%"


def step_table(st: StepTime, *, dtype_note: str | None = None) -> Table:
    """Summary of one step prediction (``dtype_note``: why the dtype is what it is when it was not asked for,
    e.g. "the checkpoint's")."""
    extra = ("" if not st.fused else ", fused") + ("" if st.parallelism == "none" else ", " + st.parallelism)
    dtype = f"{st.dtype} ({dtype_note})" if dtype_note else st.dtype
    t = Table(title=f"{st.model_id} on {st.hardware_id}: {st.mode}, batch {st.batch_size}, seq {st.seq_len}, "
                    f"{dtype}{extra}", show_header=False)
    t.add_column("quantity")
    t.add_column("value", justify="right")
    mem = st.memory
    if mem is not None:
        t.add_row("verdict", "fits in memory" if mem.fits else "OUT OF MEMORY: the times below are for a "
                  "configuration that does not fit")
    t.add_row("step time", f"{format_time(st.time_s)}  (interval {format_time(st.low_s)} .. {format_time(st.high_s)})")
    if st.quantization != "none":
        t.add_row("weights", st.quantization)
    for phase, v in st.by_phase_s.items():
        t.add_row(f"  device time, {phase}", format_time(v))
    if st.comm_s:
        t.add_row("  exposed communication", format_time(st.comm_s))
    t.add_row("host dispatch", format_time(st.host_s))
    t.add_row("kernels", f"{st.num_kernels:,}")
    t.add_row("FLOPs", f"{st.flops / 1e12:.3f} TFLOP")
    t.add_row("achieved", f"{st.achieved_flops_per_s / 1e12:.2f} TFLOP/s")
    if st.energy_J > 0:
        t.add_row("energy", f"{st.energy_J:,.3g} J  (mean {st.avg_power_W:,.0f} W per GPU)")
    if mem is not None:
        gpu = "" if st.parallelism == "none" else " per GPU"
        t.add_row(f"memory{gpu}", f"{_gib(mem.total_bytes)} of {_gib(mem.capacity_bytes)}")
        for part, value in mem.parts().items():
            if value > 0:
                t.add_row(f"  {part.removesuffix('_bytes').replace('_', ' ')}", _gib(value))
    return t


def _gib(x: float) -> str:
    return f"{x / 2**30:.1f} GiB"


def top_ops_table(st: StepTime, n: int = 12) -> Table:
    """The ops that take the most device time, with their bound and share."""
    t = Table(title="top ops (device time)")
    for c in ("op", "kind", "shape", "count", "time", "share", "bound"):
        t.add_column(c, justify="right" if c in ("count", "time", "share") else "left")
    busy = st.device_busy_s or 1.0
    for o in st.top_ops(n):
        t.add_row(o.op.name, o.op.op, "x".join(map(str, o.op.dims)), str(o.op.count), format_time(o.total_s),
                  pct(o.total_s / busy), o.kernel.bound)
    return t
