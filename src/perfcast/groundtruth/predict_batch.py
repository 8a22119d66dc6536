"""``perfcast predict-batch``: predict every row of a ground-truth-shaped table into a CSV."""

from __future__ import annotations

import csv
import gzip
import io
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from perfcast.coefficients.bundle import Calibration, resolve_calibration
from perfcast.errors import ConfigError
from perfcast.groundtruth.files import read_header, read_rows
from perfcast.groundtruth.tables import TableKind, TablePrediction, predict_table, recognize, target_columns

__all__ = ["BatchResult", "predict_batch", "write_predictions"]


@dataclass
class BatchResult:
    """A predicted table: its kind, header, rows, targets and predictions."""

    kind: TableKind
    header: list[str]
    rows: list[dict[str, str]]
    targets: list[str]
    prediction: TablePrediction

    def measured(self, target: str) -> np.ndarray:
        """The measured values of a target column (NaN where empty)."""
        out = np.full(len(self.rows), np.nan)
        for i, r in enumerate(self.rows):
            v = r.get(target, "")
            try:
                out[i] = float(v) if v not in ("", None) else np.nan
            except ValueError:
                out[i] = np.nan
        return out


def predict_batch(table: str | Path, calibration: Calibration | None = None) -> BatchResult:
    """Recognize ``table`` from its columns and predict every row (``calibration``: the shipped one when None)."""
    header = read_header(table)
    kind = recognize(header)
    rows = list(read_rows(table))
    pred = predict_table(kind, rows, resolve_calibration(calibration))
    # only the targets perfcast predicts (a VIDUR table may carry time_stats of ops it does not model)
    targets = [t for t in target_columns(kind, header) if t in pred.pred]
    return BatchResult(kind, header, rows, targets, pred)


def _fmt(x: float) -> str:
    return f"{x:.6g}" if math.isfinite(x) else ""


def write_predictions(result: BatchResult, out: str | Path, *, force: bool = False) -> Path:
    """Write the table's rows and columns plus ``pred_X``, ``pred_X_low``, ``pred_X_high`` and ``status``."""
    path = Path(out)
    if path.exists() and not force:
        raise ConfigError(f"{path} exists; pass --force to overwrite it or choose another -o path")
    cols = list(result.header)
    extra: list[str] = []
    for t in result.targets:
        extra += [f"pred_{t}", f"pred_{t}_low", f"pred_{t}_high"]
    if any(c in cols for c in [*extra, "status"]):
        raise ConfigError(f"{path}: the input already has prediction columns (pred_*/status); give the original table")
    fieldnames = cols + extra + ["status"]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(fieldnames)
    p = result.prediction
    columns = [(p.pred[t].tolist(), p.low[t].tolist(), p.high[t].tolist()) if t in p.pred else None
               for t in result.targets]
    for i, row in enumerate(result.rows):
        values = [row.get(c, "") for c in cols]
        for col in columns:
            values += ["", "", ""] if col is None else [_fmt(col[0][i]), _fmt(col[1][i]), _fmt(col[2][i])]
        values.append(p.status[i])
        writer.writerow(values)
    data = buf.getvalue().encode("utf-8")
    if path.parent and not path.parent.exists():
        raise ConfigError(f"output folder {path.parent} does not exist")
    if path.suffix == ".gz":
        with gzip.open(path, "wb", compresslevel=6) as fh:
            fh.write(data)
    else:
        path.write_bytes(data)
    return path
