"""``perfcast predict-batch``: predict every row of a ground-truth-shaped table into a CSV."""

from __future__ import annotations

import csv
import gzip
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from perfcast.errors import ConfigError
from perfcast.kernel.coefficients import Coefficients
from perfcast.validate.groundtruth import read_header, read_rows
from perfcast.validate.tables import TableKind, TablePrediction, predict_table, recognize, target_columns

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


def predict_batch(table: str | Path, coeffs: Coefficients | None = None) -> BatchResult:
    """Recognize ``table`` from its columns and predict every row."""
    header = read_header(table)
    kind = recognize(header)
    rows = list(read_rows(table))
    targets = target_columns(kind, header)
    pred = predict_table(kind, rows, coeffs)
    return BatchResult(kind, header, rows, targets, pred)


def _fmt(x: float) -> str:
    return "" if not np.isfinite(x) else f"{x:.6g}"


def write_predictions(result: BatchResult, out: str | Path, *, force: bool = False) -> Path:
    """Write the table's rows and columns plus ``pred_X``, ``pred_X_low``, ``pred_X_high`` and ``status``."""
    path = Path(out)
    if path.exists() and not force:
        raise ConfigError(f"{path} exists; pass --force to overwrite it or choose another -o path")
    cols = list(result.header)
    extra: list[str] = []
    for t in result.targets:
        extra += [f"pred_{t}", f"pred_{t}_low", f"pred_{t}_high"]
    fieldnames = cols + [c for c in extra if c not in cols] + (["status"] if "status" not in cols else [])
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fieldnames, lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    p = result.prediction
    for i, row in enumerate(result.rows):
        rec = dict(row)
        for t in result.targets:
            v = p.pred.get(t)
            rec[f"pred_{t}"] = _fmt(v[i]) if v is not None else ""
            rec[f"pred_{t}_low"] = _fmt(p.low[t][i]) if v is not None else ""
            rec[f"pred_{t}_high"] = _fmt(p.high[t][i]) if v is not None else ""
        rec["status"] = p.status[i]
        writer.writerow(rec)
    data = buf.getvalue().encode("utf-8")
    if path.parent and not path.parent.exists():
        raise ConfigError(f"output folder {path.parent} does not exist")
    if path.suffix == ".gz":
        with gzip.open(path, "wb") as fh:
            fh.write(data)
    else:
        path.write_bytes(data)
    return path
