"""NeuSight's standalone-kernel tables: read them and predict every row (vectorized).

Each row times one PyTorch call on FP32 tensors with CUDA events, 25 runs, the
mean of the 5 fastest (see ``shared/groundtruth/neusight/README.md``). A
prediction is therefore the host dispatch of that call (a fitted constant per
op class) plus the kernel's device time, at the clock the device holds during
such a short burst: kernels much shorter than the power controller's time
constant finish before the clock settles to its sustained value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from perfcast.catalog.hardware import Hardware, load_hardware
from perfcast.coefficients.kernel import Coefficients
from perfcast.dtypes import DType
from perfcast.groundtruth.files import read_rows
from perfcast.kernel.conv import conv_times
from perfcast.kernel.gemm import gemm_times
from perfcast.kernel.power import datapath, sustained_clock_frac
from perfcast.kernel.vector import vector_times

__all__ = ["KernelRows", "VECTOR_IO", "load_kernel_rows", "predict_kernel_rows"]

# NeuSight vector op -> (perfcast op name, full-size inputs, outputs)
VECTOR_IO: dict[str, tuple[str, int, int]] = {
    "add": ("add", 2, 1), "mul": ("mul", 2, 1), "pow": ("pow", 2, 1), "div": ("div", 2, 1),
    "addu": ("addu", 1, 1), "mulu": ("mulu", 1, 1), "powu": ("powu", 1, 1), "divu": ("divu", 1, 1),
    "tanh": ("tanh", 1, 1), "relu": ("relu", 1, 1), "gelu": ("gelu", 1, 1),
    "softmax": ("softmax", 1, 1), "ln": ("layernorm", 1, 1),
}


@dataclass
class KernelRows:
    """Columns of a kernel table as arrays (one entry per row)."""

    kind: str  # gemm | vector | conv
    device: np.ndarray
    op: np.ndarray
    split: np.ndarray
    dims: np.ndarray
    latency_s: np.ndarray
    extra: dict[str, np.ndarray] = field(default_factory=dict)

    def subset(self, mask: np.ndarray) -> KernelRows:
        """The rows where ``mask`` is true."""
        return KernelRows(self.kind, self.device[mask], self.op[mask], self.split[mask], self.dims[mask],
                          self.latency_s[mask], {k: v[mask] for k, v in self.extra.items()})

    def __len__(self) -> int:
        return int(self.latency_s.size)


_DIM_COLS = {
    "gemm": ("batch", "m_rows", "k_reduction", "n_cols"),
    "vector": ("rows", "cols"),
    "conv": ("batch", "in_channels", "out_channels", "kernel_size", "input_hw", "stride", "padding"),
}


def load_kernel_rows(path: str | Path, kind: str) -> KernelRows:
    """Read a NeuSight kernel table (``latency_ms`` may be empty: then NaN)."""
    cols = _DIM_COLS[kind]
    dev, op, split, dims, lat = [], [], [], [], []
    for row in read_rows(path):
        dev.append(row["device"])
        op.append(row.get("op", "conv"))
        split.append(row.get("split", ""))
        dims.append([float(row[c]) for c in cols])
        v = row.get("latency_ms", "")
        lat.append(float(v) * 1e-3 if v not in ("", None) else np.nan)
    d = np.array(dims, dtype=float).reshape(len(dims), len(cols))
    if kind == "conv":  # groups = 1 for every NeuSight conv
        d = np.concatenate([d, np.ones((d.shape[0], 1))], axis=1)
    return KernelRows(kind, np.array(dev), np.array(op), np.array(split), d, np.array(lat))


def _burst_clock(hw: Hardware, path: str, boost_time_s: np.ndarray, coeffs: Coefficients) -> np.ndarray:
    x = sustained_clock_frac(hw, path, coeffs)
    return x + (1.0 - x) * np.exp(-boost_time_s / coeffs.measurement.burst_tau_s)


def predict_kernel_rows(rows: KernelRows, coeffs: Coefficients) -> np.ndarray:
    """Predicted latency (seconds) of every row, as NeuSight measured it."""
    out = np.full(len(rows), np.nan)
    dispatch = coeffs.launch.dispatch_s
    for dev in np.unique(rows.device):
        hw = load_hardware(str(dev))
        sel = rows.device == dev
        d = rows.dims[sel]
        ops = rows.op[sel]
        pred = np.empty(int(sel.sum()))
        if rows.kind == "gemm":
            for opname in ("bmm", "linear"):
                m = ops == opname
                if not m.any():
                    continue
                b, mm, k, n = d[m].T
                batched = opname == "bmm"
                t0 = gemm_times(b, mm, k, n, hw, DType.FP32, coeffs, batched=batched, clock_frac=1.0).time_s
                clock = _burst_clock(hw, datapath(hw, DType.FP32), t0, coeffs)
                t = gemm_times(b, mm, k, n, hw, DType.FP32, coeffs, batched=batched, clock_frac=clock).time_s
                pred[m] = t + dispatch[opname]
        elif rows.kind == "vector":
            names, nbytes = [], np.empty(d.shape[0])
            for j, (o, (r, c)) in enumerate(zip(ops, d, strict=True)):
                name, ins, outs = VECTOR_IO[str(o)]
                names.append(name)
                nbytes[j] = r * c * 4.0 * (ins + outs) + (2 * c * 4.0 if name == "layernorm" else 0.0)
            pred[:] = vector_times(names, nbytes, d[:, 1], hw, coeffs) + dispatch["vector"]
        else:
            t0 = conv_times(d, hw, DType.FP32, coeffs, clock_frac=1.0)
            clock = _burst_clock(hw, datapath(hw, DType.FP32), t0, coeffs)
            pred[:] = conv_times(d, hw, DType.FP32, coeffs, clock_frac=clock) + dispatch["conv"]
        out[sel] = pred
    return out
