"""Run a training scenario: each run is one predicted training step
(:func:`perfcast.system.training.simulate_training`).

A row carries the step's headline quantities with their units in the keys, the
exposed (non-overlapped) time of each part of the step (``compute_s`` ...
``overhead_s``, which add up to ``step_time_s``), every collective's total time
whether hidden or not (``<name>_total_s``, summed in ``comm_total_s``) and the
per-GPU memory by part. A run predicted not to fit in memory is still a
prediction: ``status`` ok with ``fits_in_memory`` false.

Where a run has a published figure (``published`` in the YAML, or the measured
column of a ground-truth table row) the row adds ``compared_metric``,
``measured_<metric>`` and ``error_frac`` = predicted / measured - 1.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

from perfcast.catalog.hardware import load_hardware
from perfcast.catalog.models import ModelConfig, load_model
from perfcast.coefficients.bundle import Calibration
from perfcast.errors import PerfcastError
from perfcast.results.scenario import ScenarioResult
from perfcast.scenarios.schema import TrainingRun, TrainingScenario
from perfcast.system.layers import micro_batch_costs
from perfcast.system.plan import ParallelPlan
from perfcast.system.training import TrainingResult, simulate_training

__all__ = ["BREAKDOWN_KEYS", "run_plan", "run_training_scenario", "training_row"]

BREAKDOWN_KEYS = ("compute_s", "recompute_s", "tp_comm_s", "cp_comm_s", "ep_comm_s", "fsdp_comm_s", "pp_send_s",
                  "dp_comm_s", "bubble_s", "optimizer_s", "overhead_s")
COMM_KEYS = ("tp_comm_s", "cp_comm_s", "ep_comm_s", "fsdp_comm_s", "pp_send_s", "dp_comm_s")
_DEFAULT_PLAN = ParallelPlan()


def plan_text(plan: ParallelPlan) -> str:
    """The plan's settings that differ from the defaults, as ``key=value`` words."""
    words = []
    for name in ParallelPlan.model_fields:
        value = getattr(plan, name)
        if value == getattr(_DEFAULT_PLAN, name) and name not in ("seq_len", "micro_batch"):
            continue
        if isinstance(value, bool):
            words.append(name if value else f"no_{name}")
        elif isinstance(value, tuple):
            words.append(f"{name}={','.join(map(str, value))}")
        else:
            words.append(f"{name}={value}")
    if plan.global_batch is None:
        words.append(f"global_batch={plan.effective_global_batch}")
    return " ".join(words)


def _trainable_params(res: TrainingResult, model: str | ModelConfig) -> float | None:
    """Trainable parameters of the whole model under the plan (the LoRA adapters only, for a LoRA run)."""
    whole = res.plan.model_copy(update={"tp": 1, "pp": 1, "dp": 1, "cp": 1, "ep": 1, "vp": 1, "sp": False,
                                        "micro_batch": 1, "global_batch": None})
    try:
        cfg = load_model(model)
        hw = load_hardware(res.gpu_id)
        cal = Calibration.shipped()
        costs = micro_batch_costs(cfg, whole, hw, cal.kernel, cal.compose)
    except PerfcastError:
        return None
    return float(sum(p.trainable_params * p.count for p in costs.parts))


def _stage_imbalance(res: TrainingResult) -> float:
    """Slowest pipeline stage (forward + backward of one micro-batch) over the mean stage, minus 1."""
    work = [f + b for f, b in zip(res.stage_fwd_s, res.stage_bwd_s, strict=True)]
    if len(work) < 2 or sum(work) <= 0:
        return 0.0
    return max(work) / (sum(work) / len(work)) - 1.0


def training_row(res: TrainingResult, model: str | ModelConfig, *, label: str = "") -> dict[str, object]:
    """The row of one predicted step of ``model`` (keys carry units; see the module docstring)."""
    plan = res.plan
    mem = res.memory
    row: dict[str, object] = {
        "label": label, "model": res.model_id, "cluster": res.cluster_id, "gpu": res.gpu_id,
        "num_gpus": res.num_gpus, "plan": plan_text(plan),
        "tp": plan.tp, "pp": plan.pp, "dp": plan.dp, "cp": plan.cp, "ep": plan.ep, "vp": plan.vp,
        "precision": plan.precision, "seq_len": plan.seq_len, "micro_batch": plan.micro_batch,
        "global_batch": plan.effective_global_batch, "schedule": plan.effective_schedule,
        "status": "ok",
        "step_time_s": res.step_time_s, "step_time_low_s": res.low_s, "step_time_high_s": res.high_s,
        "tokens_per_s_per_gpu": res.tokens_per_s_per_gpu, "samples_per_s_per_gpu": res.samples_per_s_per_gpu,
        "tflops_per_gpu": res.tflops_per_gpu, "hfu_tflops_per_gpu": res.hfu_tflops_per_gpu,
        "mfu": res.mfu, "hfu": res.hfu, "peak_tflops": res.peak_flops_per_s / 1e12,
        "memory_per_gpu_bytes": mem.total_bytes, "memory_capacity_bytes": mem.capacity_bytes,
        "fits_in_memory": res.fits,
        "memory_weights_bytes": mem.weights_bytes, "memory_gradients_bytes": mem.gradients_bytes,
        "memory_optimizer_bytes": mem.optimizer_bytes, "memory_activations_bytes": mem.activations_bytes,
        "memory_comm_buffers_bytes": mem.comm_buffers_bytes, "memory_context_bytes": mem.context_bytes,
        "memory_fragmentation_bytes": mem.fragmentation_bytes,
        "trainable_params": _trainable_params(res, model),
        "microbatches": res.microbatches, "bubble_frac": res.bubble_frac,
        "stage_imbalance_frac": _stage_imbalance(res),
    }
    for key in BREAKDOWN_KEYS:
        row[key] = float(res.breakdown_s.get(key, 0.0))
    exposed = sum(float(res.breakdown_s.get(k, 0.0)) for k in COMM_KEYS)
    row["comm_exposed_s"] = exposed
    row["comm_exposed_frac"] = exposed / res.step_time_s if res.step_time_s > 0 else 0.0
    for key in COMM_KEYS:
        row[key.removesuffix("_s") + "_total_s"] = float(res.comm_total_s.get(key, 0.0))
    row["comm_total_s"] = float(sum(res.comm_total_s.values()))
    return row


def _compare(row: dict[str, object], metric: str, measured: float, source: str) -> None:
    predicted = row.get(metric)
    row["compared_metric"] = metric
    row[f"measured_{metric}"] = measured
    row["measured_source"] = source
    if isinstance(predicted, (int, float)) and measured > 0 and math.isfinite(float(predicted)):
        row["error_frac"] = float(predicted) / measured - 1.0


def run_plan(run: TrainingRun) -> ParallelPlan:
    """The run's plan; a precision the file leaves out is the checkpoint's, as ``perfcast train`` chooses it
    (:func:`perfcast.catalog.defaults.default_dtype` on the cluster's GPU). The shipped suite states its bf16."""
    if "precision" in run.plan.model_fields_set:
        return run.plan
    from perfcast.catalog.defaults import default_dtype
    from perfcast.system.cluster import load_cluster

    dtype = default_dtype(load_model(run.model), load_cluster(run.cluster).hardware())
    return run.plan.model_copy(update={"precision": dtype.value})


def _run_row(run: TrainingRun) -> dict[str, object]:
    try:
        res = simulate_training(run.model, run.cluster, run_plan(run), nodes=run.nodes)
    except PerfcastError as exc:
        return {"label": run.label, "model": run.model, "cluster": run.cluster, "plan": plan_text(run.plan),
                "status": "error", "error": str(exc)}
    row = training_row(res, run.model, label=run.label)
    if run.published is not None:
        _compare(row, run.published.metric, run.published.value, run.published.source)
    return row


def _table_rows(sc: TrainingScenario) -> tuple[list[dict[str, str]], str]:
    """The ground-truth rows ``table_rows`` selects, or none and why."""
    from perfcast.groundtruth.files import find_groundtruth

    assert sc.groundtruth is not None and sc.table_rows is not None
    root = find_groundtruth(required=False)
    path = root / sc.groundtruth if root is not None else Path(sc.groundtruth)
    if root is None or not path.is_file():
        return [], (f"ground-truth table {sc.groundtruth} not found (set PERFCAST_GROUNDTRUTH to the "
                    "shared/groundtruth folder); this scenario's runs are that table's rows")
    with path.open(encoding="utf-8", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if sc.table_rows.framework_contains in r.get("framework", "")]
    return rows, "" if rows else f"no row of {sc.groundtruth} has {sc.table_rows.framework_contains!r} in framework"


def _measured_target(row: dict[str, str]) -> tuple[str, float] | None:
    """The first measured column of a training.csv row, as (the predicted row key it compares with, value)."""
    from perfcast.groundtruth.training_tables import counts_recompute

    for column in ("tflops_per_gpu", "tokens_per_s_per_gpu", "mfu", "hfu", "step_time_s"):
        try:
            value = float((row.get(column) or "").strip())
        except ValueError:
            continue
        if value > 0 and math.isfinite(value):
            if column == "tflops_per_gpu" and counts_recompute(row):
                return "hfu_tflops_per_gpu", value
            return column, value
    return None


def _table_row(row: dict[str, str], table: str) -> dict[str, object]:
    from perfcast.groundtruth.training_tables import model_for_row, predict_row

    label = (row.get("model") or row.get("model_id") or "").split(" (")[0]
    try:
        res = predict_row(row)
    except PerfcastError as exc:
        return {"label": label, "model": row.get("model_id") or row.get("model", ""), "cluster": row.get("gpu_id", ""),
                "status": "error", "error": str(exc)}
    out = training_row(res, model_for_row(row, res.plan.seq_len), label=label)
    target = _measured_target(row)
    if target is not None:
        _compare(out, target[0], target[1], f"{table}: {row.get('source', '')}".strip())
    return out


def run_training_scenario(sc: TrainingScenario) -> ScenarioResult:
    """Predict every run (and every selected table row); one failure does not stop the others."""
    res = ScenarioResult(sc.id, sc.title, "ok", kind="training")
    for run in sc.runs:
        res.rows.append(_run_row(run))
    if sc.table_rows is not None:
        assert sc.groundtruth is not None
        rows, why = _table_rows(sc)
        res.rows.extend(_table_row(r, sc.groundtruth) for r in rows)
        if why:
            res.error = why
    return res.settle()
