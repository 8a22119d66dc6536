"""Run the scenarios over published and measured tables, rebuilt as ``perfcast validate`` rebuilds them.

- ``serving_table`` (R9): each selected row of a published serving-throughput table
  (TensorRT-LLM offline maximum throughput) is simulated with
  :func:`perfcast.groundtruth.serving_tables.inference_config` (``num_requests`` requests
  arriving at once) and its row shows ``measured_throughput_tokens_per_s`` beside
  ``throughput_tokens_per_s`` with ``error_frac`` = predicted / measured - 1.
- ``operator_table`` (R10): VIDUR's per-operator GPU kernel times are predicted row by
  row (:func:`perfcast.groundtruth.vidur_tables.predict_vidur_rows`) and summed per (GPU,
  operator): a row per pair with ``measured_time_s`` and ``predicted_time_s`` (the
  totals over the table's rows that measured that operator), ``error_frac`` of the
  totals, and the per-row ``mape_frac`` and ``median_ape_frac``.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from perfcast.coefficients.bundle import Calibration
from perfcast.errors import PerfcastError
from perfcast.groundtruth.files import find_groundtruth, read_rows
from perfcast.groundtruth.serving_tables import inference_config
from perfcast.groundtruth.vidur_tables import VIDUR_OPS, load_vidur_rows, predict_vidur_rows
from perfcast.results.scenario import ScenarioResult
from perfcast.scenarios.schema import OperatorTableScenario, ServingTableScenario
from perfcast.serving.experiments.run import Simulation, run_experiment

__all__ = ["run_operator_table_scenario", "run_serving_table_scenario"]


def _root_path(rel: str) -> tuple[Path | None, str]:
    root = find_groundtruth(required=False)
    if root is None or not (root / rel).exists():
        return None, (f"ground truth {rel} not found (set PERFCAST_GROUNDTRUTH to the shared/groundtruth folder); "
                      "this scenario's runs are that table's rows")
    return root / rel, ""


def _serving_row(row: dict[str, str], num_requests: int, table: str) -> dict[str, object]:
    out: dict[str, object] = {
        "label": (row.get("model") or row.get("model_id") or "").strip(), "model": row.get("model_id", ""),
        "gpu": row.get("gpu_id", ""), "tp": row.get("tp", ""), "pp": row.get("pp", ""),
        "precision": row.get("precision", ""), "input_len": row.get("input_len", ""),
        "output_len": row.get("output_len", ""), "framework": row.get("framework_version", "")}
    try:
        measured = float(row.get("value") or "nan")
        res = run_experiment(Simulation(inference_config(row, num_requests=num_requests)))
    except PerfcastError as exc:
        out.update(status="error", error=str(exc))
        return out
    except (KeyError, ValueError) as exc:
        out.update(status="error", error=f"malformed row ({exc})")
        return out
    m = res.metrics
    predicted = m.throughput_tokens_per_s
    out.update(status="ok", throughput_tokens_per_s=predicted, requests_simulated=m.requests_total,
               requests_rejected=m.requests_total - m.requests_completed, compared_metric="throughput_tokens_per_s",
               measured_source=f"{table}: {row.get('source', '')}".strip())
    if measured > 0 and math.isfinite(measured):
        out["measured_throughput_tokens_per_s"] = measured
        out["error_frac"] = predicted / measured - 1.0
    return out


def run_serving_table_scenario(sc: ServingTableScenario) -> ScenarioResult:
    """Simulate each selected row of the published table; one failure does not stop the others."""
    res = ScenarioResult(sc.id, sc.title, "ok", kind="serving_table")
    path, why = _root_path(sc.groundtruth)
    if path is None:
        res.error = why
        return res.settle()
    want = sc.model_contains.lower()
    rows = [r for r in read_rows(path) if want in (r.get("model_id") or r.get("model") or "").lower()
            and (not sc.gpus or r.get("gpu_id") in sc.gpus)]
    if sc.max_rows is not None and len(rows) > sc.max_rows:
        res.notes.append(f"{sc.max_rows} of the {len(rows)} selected rows predicted (max_rows)")
        rows = rows[:sc.max_rows]
    if not rows:
        where = ", ".join(sc.gpus) or "any GPU"
        res.error = f"no row of {sc.groundtruth} matches model {sc.model_contains!r} on {where}"
    res.rows.extend(_serving_row(r, sc.num_requests, sc.groundtruth) for r in rows)
    return res.settle()


def _pct_errors(measured: np.ndarray, predicted: np.ndarray) -> np.ndarray:
    ok = np.isfinite(measured) & np.isfinite(predicted) & (measured > 0)
    return np.asarray(predicted[ok] / measured[ok] - 1.0)


def run_operator_table_scenario(sc: OperatorTableScenario) -> ScenarioResult:
    """Predict every row of the selected per-operator tables and compare per (GPU, operator)."""
    res = ScenarioResult(sc.id, sc.title, "ok", kind="operator_table")
    folder, why = _root_path(sc.groundtruth)
    if folder is None:
        res.error = why
        return res.settle()
    missing = [g for g in sc.gpus if not (folder / g).is_dir()]
    if missing:
        seen = sorted(p.name for p in folder.iterdir() if p.is_dir())
        res.notes.append(f"no measurements for {', '.join(missing)} in {sc.groundtruth} (visible: {', '.join(seen)})")
    paths = [p for g in sc.gpus if (folder / g).is_dir() for p in sorted((folder / g).glob("*/mlp.csv*"))
             if not sc.models or p.parent.name in sc.models]
    if not paths:
        res.error = f"no mlp.csv table under {sc.groundtruth} for {', '.join(sc.gpus)}"
        return res.settle()
    try:
        rows = load_vidur_rows(paths)
        if sc.row_stride > 1:
            keep = np.zeros(len(rows), dtype=bool)
            for model in dict.fromkeys(zip(rows.gpu.tolist(), rows.model.tolist(), strict=True)):
                idx = np.flatnonzero((rows.gpu == model[0]) & (rows.model == model[1]))
                keep[idx[::sc.row_stride]] = True
            res.notes.append(f"every {sc.row_stride}th row of each table predicted ({int(keep.sum())} of {len(rows)})")
            rows = rows.subset(keep)
        predicted = predict_vidur_rows(rows, Calibration.shipped().kernel)
    except PerfcastError as exc:
        res.error = str(exc)
        return res.settle()
    res.notes.append("kernel coefficients of the tensor path were fitted on these VIDUR tables (all GPUs): "
                     "in-sample; `perfcast validate` reports the leave-one-GPU-out error")
    for gpu in dict.fromkeys(rows.gpu.tolist()):
        on_gpu = rows.gpu == gpu
        for j, op in enumerate(VIDUR_OPS):
            meas, pred = rows.measured_s[on_gpu, j], predicted[on_gpu, j]
            have = np.isfinite(meas) & np.isfinite(pred)
            if not have.any():
                continue
            errs = _pct_errors(meas[have], pred[have])
            m_total, p_total = float(meas[have].sum()), float(pred[have].sum())
            models = sorted({str(x) for x in rows.model[on_gpu][have]})
            tps = sorted({int(x) for x in rows.tp[on_gpu][have]})
            res.rows.append({
                "label": f"{gpu} {op}", "gpu": str(gpu), "op": op, "status": "ok", "table_rows": int(have.sum()),
                "models": ", ".join(models), "tp": ",".join(map(str, tps)),
                "tokens_min": int(rows.tokens[on_gpu][have].min()), "tokens_max": int(rows.tokens[on_gpu][have].max()),
                "measured_time_s": m_total, "predicted_time_s": p_total, "compared_metric": "predicted_time_s",
                "error_frac": p_total / m_total - 1.0 if m_total > 0 else None,
                "mape_frac": float(np.mean(np.abs(errs))) if errs.size else None,
                "median_ape_frac": float(np.median(np.abs(errs))) if errs.size else None,
                "measured_source": f"{sc.groundtruth}/{gpu}/*/mlp.csv time_stats.{op}.median"})
    return res.settle()
