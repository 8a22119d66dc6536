"""``perfcast validate``: predict the visible measured tables and report the error honestly.

For each table and device: rows, coverage (rows predicted), MAPE, median and
max absolute error, and how often the measurement falls inside the predicted
interval. What was fitted on what is stated per table:

- NeuSight kernel tables: coefficients are fitted on ``split=train`` rows;
  errors are reported on ``split=test`` rows (and on train rows, marked as such).
- NeuSight end-to-end rows: never fitted on; intervals for their coverage are
  derived leave-one-GPU-out from the other GPUs' residuals.
- VIDUR per-op tables: each GPU is predicted with tensor-path coefficients
  fitted on the other GPU only (leave-one-GPU-out).
- Collective tables (VIDUR network, published collectives): the collectives stage is
  fitted on every visible row, so they are reported in-sample per cluster, and again
  leave-one-cluster-out (each cluster predicted with coefficients refitted without it).
- Published training runs: the four training coefficients are fitted on every visible
  row, so the table is reported in-sample, and again leave-one-GPU-out (each GPU's
  rows predicted with coefficients refitted on the other GPUs' rows): the transfer figure.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from perfcast.coefficients.bundle import Calibration, resolve_calibration
from perfcast.groundtruth.files import find_groundtruth
from perfcast.groundtruth.predict_batch import BatchResult, predict_batch
from perfcast.groundtruth.tables import TablePrediction
from perfcast.validate.fit_energy import ENERGY_FILES, POWER_TARGETS
from perfcast.validate.metrics import ErrorSummary, summarize

__all__ = ["MAX_POINTS", "Points", "ReportSummary", "TableReport", "TableSummary", "ValidationReport", "default_tables",
           "run_validation"]


@dataclass
class GroupReport:
    """Errors of one device (or split) within a table."""

    group: str
    summary: ErrorSummary


@dataclass
class TableReport:
    """Errors of one table, overall and per device."""

    table: str
    kind: str
    target: str
    note: str
    overall: ErrorSummary
    groups: list[GroupReport] = field(default_factory=list)
    status: str = "ok"
    points: Points | None = None  # the predicted and measured rows (evenly sampled), for the HTML report


MAX_POINTS = 2000  # rows per table report kept for the HTML report's scatter


@dataclass(frozen=True)
class Points:
    """Rows with a finite prediction and a positive measurement, in the table's unit: at most
    :data:`MAX_POINTS`, taken evenly over the table's order (``total`` counts them all)."""

    device: list[str]
    predicted: list[float]
    measured: list[float]
    total: int


def _points(measured: np.ndarray, predicted: np.ndarray, device: np.ndarray,
            mask: np.ndarray | None = None) -> Points:
    ok = np.isfinite(measured) & (measured > 0) & np.isfinite(predicted)
    idx = np.flatnonzero(ok if mask is None else ok & mask)
    keep = idx[np.unique(np.linspace(0, idx.size - 1, MAX_POINTS).astype(int))] if idx.size > MAX_POINTS else idx
    return Points([str(d) for d in device[keep]], [float(v) for v in predicted[keep]],
                  [float(v) for v in measured[keep]], int(idx.size))


def _res_points(res: BatchResult, target: str, mask: np.ndarray | None = None) -> Points:
    return _points(res.measured(target), res.prediction.pred[target], np.array(res.prediction.groups), mask)


@dataclass
class ValidationReport:
    """Every table's report."""

    tables: list[TableReport]

    def json_view(self) -> ReportSummary:
        """Every table's figures, overall and per group (the points stay out)."""
        return ReportSummary(tuple(TableSummary(t.table, t.kind, t.target, t.note, t.status, t.overall,
                                                {g.group: g.summary for g in t.groups}) for t in self.tables))


@dataclass(frozen=True)
class TableSummary:
    """One table as ``perfcast validate --json`` reports it."""

    table: str
    kind: str
    target: str
    note: str
    status: str
    overall: ErrorSummary
    groups: dict[str, ErrorSummary]


@dataclass(frozen=True)
class ReportSummary:
    """Every table's summary."""

    tables: tuple[TableSummary, ...]


def default_tables(root: Path) -> list[Path]:
    """The visible tables validate runs by default."""
    out = [root / "neusight" / "e2e.csv", root / "neusight" / "e2e_extra.csv",
           root / "neusight" / "kernels_gemm.csv.gz", root / "neusight" / "kernels_vector.csv.gz",
           root / "neusight" / "kernels_conv.csv.gz"]
    out += sorted((root / "vidur" / "compute").glob("*/*/mlp.csv*"))
    out += sorted((root / "vidur" / "legacy" / "compute").glob("*/attention_*.csv*"))
    out += [root / "published" / "gemm.csv", root / "published" / "training.csv",
            root / "published" / "inference.csv", root / "published" / "collectives.csv",
            root / "serving_online" / "serving_online.csv"]
    out += [root / "energy" / name for name in ENERGY_FILES]
    out += sorted((root / "vidur" / "network").glob("*/*.csv"))
    return [p for p in out if p.exists()]


def _logo_interval_coverage(measured: np.ndarray, pred: np.ndarray, groups: np.ndarray,
                            q: tuple[float, float] = (0.05, 0.95)) -> float:
    """Interval coverage when each group's interval comes from the other groups' log residuals."""
    ok = np.isfinite(measured) & (measured > 0) & np.isfinite(pred) & (pred > 0)
    if not ok.any():
        return float("nan")
    lr = np.log(measured[ok] / pred[ok])
    g = groups[ok]
    hits = []
    for grp in np.unique(g):
        other = lr[g != grp]
        if other.size < 5:
            continue
        lo, hi = np.quantile(other, q)
        hits.extend(((lr[g == grp] >= lo) & (lr[g == grp] <= hi)).tolist())
    return float(np.mean(hits)) if hits else float("nan")


def _summaries(res: BatchResult, target: str, mask: np.ndarray | None = None,
               logo_coverage: bool = False) -> tuple[ErrorSummary, list[GroupReport]]:
    meas = res.measured(target)
    p = res.prediction
    pred, lo, hi = p.pred[target], p.low[target], p.high[target]
    groups = np.array(p.groups)
    m = np.ones(len(meas), dtype=bool) if mask is None else mask
    overall = summarize(meas[m], pred[m], lo[m], hi[m])
    if logo_coverage:
        cov = _logo_interval_coverage(meas[m], pred[m], groups[m])
        overall = ErrorSummary(overall.rows, overall.predicted, overall.mape, overall.median_ape, overall.max_ape,
                               overall.bias, cov)
    out = []
    for g in sorted(set(groups[m].tolist())):
        gm = m & (groups == g)
        s = summarize(meas[gm], pred[gm], lo[gm], hi[gm])
        if logo_coverage:
            ok = m & np.isfinite(meas) & np.isfinite(pred) & (meas > 0)
            other = np.log(meas[ok & (groups != g)] / pred[ok & (groups != g)])
            if other.size >= 5:
                qlo, qhi = np.quantile(other, (0.05, 0.95))
                sel = gm & ok
                lr = np.log(meas[sel] / pred[sel])
                cov = float(np.mean((lr >= qlo) & (lr <= qhi))) if lr.size else float("nan")
                s = ErrorSummary(s.rows, s.predicted, s.mape, s.median_ape, s.max_ape, s.bias, cov)
        out.append(GroupReport(g, s))
    return overall, out


def _vidur_logo(paths: list[Path], root: Path, cal: Calibration, log: Callable[[str], None]
                ) -> list[TableReport]:
    from perfcast.groundtruth.files import read_rows
    from perfcast.groundtruth.tables import predict_table, recognize
    from perfcast.validate.fit import fit_coefficients

    gpus = sorted({p.parent.parent.name for p in paths})
    reports = []
    by_gpu: dict[str, list[Path]] = {g: [p for p in paths if p.parent.parent.name == g] for g in gpus}
    tables = {}
    for g, ps in by_gpu.items():
        rows = [r for p in ps for r in read_rows(p)]
        tables[g] = rows
    gpu_ids = {g: tables[g][0]["gpu_id"] for g in gpus if tables[g]}
    for g in gpus:
        others = [gpu_ids[o] for o in gpus if o != g and o in gpu_ids]
        if others:
            log(f"fitting tensor-path coefficients on {', '.join(others)} to predict {gpu_ids[g]}")
            co = fit_coefficients(root, calibration=cal, stages=("tensor",), tensor_gpus=others, per_group=600,
                                  log=lambda _m: None)
            note = f"leave-one-GPU-out: tensor coefficients fitted on {', '.join(others)} only"
        else:
            co, note = cal.kernel, "single GPU: in-sample"
        rows = tables[g]
        kind = recognize(list(rows[0].keys()))
        pred = predict_table(kind, rows, cal.with_kernel(co))
        meas = np.concatenate([np.array([float(r[t]) if r.get(t, "") not in ("", None) else np.nan for r in rows])
                               for t in pred.pred])
        pr = np.concatenate([pred.pred[t] for t in pred.pred])
        lo = np.concatenate([pred.low[t] for t in pred.pred])
        hi = np.concatenate([pred.high[t] for t in pred.pred])
        ops = np.concatenate([[t.split(".")[1]] * len(rows) for t in pred.pred])
        overall = summarize(meas, pr, lo, hi)
        groups = [GroupReport(op, summarize(meas[ops == op], pr[ops == op], lo[ops == op], hi[ops == op]))
                  for op in dict.fromkeys(ops.tolist())]
        reports.append(TableReport(f"vidur/compute/{g}/*/mlp.csv", "vidur_compute", "time_stats.*.median (ms)",
                                   note, overall, groups,
                                   points=_points(meas, pr, np.full(meas.size, gpu_ids.get(g, g)))))
    return reports


_COLLECTIVE_KINDS = ("vidur_network", "published_collectives")


def _training_memory_note(status: list[str]) -> str:
    """The memory verdicts of the published training runs: how many are predicted out of memory (each of them ran,
    so the target is none) and how many fit only with a recompute their source did not publish, assumed."""
    runs = [s for s in status if s.startswith("ok")]
    oom = sum(1 for s in runs if "predicted out of memory" in s)
    assumed = sum(1 for s in runs if "recompute not published" in s)
    return (f"; memory: {oom} of {len(runs)} published runs predicted out of memory (all of them ran), "
            f"{assumed} fit with their unpublished recompute assumed (the least that fits)")


def _kernel_held_out(res: BatchResult, cal: Calibration) -> BatchResult:
    """A NeuSight table re-predicted GPU by GPU with the kernel coefficients fitted without that GPU's rows
    (:meth:`~perfcast.coefficients.kernel.Coefficients.without`); ``res`` itself when none is stored."""
    from perfcast.catalog.hardware import load_hardware
    from perfcast.errors import PerfcastError
    from perfcast.groundtruth.tables import predict_table

    if res.kind.predict is None:
        return res
    folds: dict[str, str] = {}
    for g in set(res.prediction.groups):
        try:
            gpu = load_hardware(g).id
        except PerfcastError:
            continue
        if gpu in cal.kernel.held_out:
            folds[g] = gpu
    if not folds:
        return res

    def predict(g: str, rows: list[dict[str, str]]) -> TablePrediction:
        return predict_table(res.kind, rows, cal.with_kernel(cal.kernel.without(folds[g])))

    out = _held_out(res, sorted(folds), predict)
    keep = ~np.isin(np.array(res.prediction.groups, dtype=object), sorted(folds))
    for t in res.targets:  # GPUs without a fold keep their prediction (no row of theirs was fitted)
        for mine, theirs in ((out.prediction.pred, res.prediction.pred), (out.prediction.low, res.prediction.low),
                             (out.prediction.high, res.prediction.high)):
            mine[t][keep] = theirs[t][keep]
    return out


def _held_out(res: BatchResult, groups: list[str],
              predict_group: Callable[[str, list[dict[str, str]]], TablePrediction]) -> BatchResult:
    """``res`` re-predicted group by group, each group by ``predict_group(group, its rows)``."""
    n = len(res.rows)
    where = np.array(res.prediction.groups, dtype=object)
    pred = TablePrediction({t: np.full(n, np.nan) for t in res.targets},
                           {t: np.full(n, np.nan) for t in res.targets},
                           {t: np.full(n, np.nan) for t in res.targets},
                           status=list(res.prediction.status), groups=list(res.prediction.groups))
    for g in groups:
        idx = np.flatnonzero(where == g)
        if not idx.size:
            continue
        sub = predict_group(g, [res.rows[i] for i in idx])
        for t in res.targets:
            pred.pred[t][idx], pred.low[t][idx], pred.high[t][idx] = sub.pred[t], sub.low[t], sub.high[t]
    return type(res)(res.kind, res.header, res.rows, res.targets, pred)


def _reports(res: BatchResult, table: str, note: str) -> list[TableReport]:
    """One report per target of ``res`` that has measured rows, grouped by its prediction's groups."""
    reports = []
    for target in res.targets:
        overall, group_reports = _summaries(res, target)
        if overall.rows:
            reports.append(TableReport(table, res.kind.name, target, note, overall, group_reports,
                                       points=_res_points(res, target)))
    return reports


def _held_out_reports(res: BatchResult, groups: list[str],
                      predict_group: Callable[[str, list[dict[str, str]]], TablePrediction],
                      table: str, note: str) -> list[TableReport]:
    """Reports of ``res`` re-predicted group by group, each group by ``predict_group(group, its rows)``."""
    return _reports(_held_out(res, groups, predict_group), table, note)


def _regrouped(res: BatchResult, groups: list[str]) -> BatchResult:
    """``res`` with its rows grouped by ``groups`` (one label per row) instead of by device."""
    p = res.prediction
    return type(res)(res.kind, res.header, res.rows, res.targets,
                     TablePrediction(p.pred, p.low, p.high, status=p.status, groups=groups))


def _collective_loco(paths: list[Path], root: Path, name: Callable[[Path], str], cal: Calibration,
                     log: Callable[[str], None]) -> list[TableReport]:
    """Collective tables predicted leave-one-cluster-out (refits on the other clusters' visible rows)."""
    from perfcast.groundtruth.tables import predict_published_collectives, predict_vidur_network
    from perfcast.validate.fit_collectives import fit_collectives, load_collective_rows

    rows, labels = load_collective_rows(root)
    clusters = sorted({str(g) for g in rows.group})
    fitted = {}
    for c in clusters:
        log(f"fitting collective coefficients without {c}")
        fitted[c] = fit_collectives(calibration=cal, exclude_clusters=[c], rows=(rows, labels), log=lambda _m: None)
    packaged = cal.collectives
    note = f"each cluster predicted with collective coefficients fitted on the other clusters' rows " \
           f"({', '.join(clusters)})"
    reports = []
    for p in paths:
        res = predict_batch(p, cal)
        fn = predict_vidur_network if res.kind.name == "vidur_network" else predict_published_collectives
        reports += _held_out_reports(
            res, sorted(set(res.prediction.groups)),
            lambda g, part, fn=fn: fn(part, cal.with_collectives(fitted.get(g, packaged))),  # type: ignore[misc]
            f"{name(p)} [leave-one-cluster-out]", note)
    return reports


# the serving_online targets validate prints (predict-batch writes every one): the fitted three in-sample,
# these leave-one-GPU-out
ONLINE_REPORTED = ("total_tput_tok_s_per_gpu", "output_tput_tok_s_per_gpu", "ttft_ms_mean", "ttft_ms_median",
                   "ttft_ms_p99", "tpot_ms_mean", "tpot_ms_median", "tpot_ms_p99", "itl_ms_mean", "e2el_ms_mean",
                   "e2el_ms_median", "e2el_ms_p99")


def _only(res: BatchResult, targets: tuple[str, ...]) -> BatchResult:
    return type(res)(res.kind, res.header, res.rows, [t for t in res.targets if t in targets], res.prediction)


def _online_reports(res: BatchResult, name: str, cal: Calibration) -> list[TableReport]:
    """Online serving benchmarks: in-sample for the fitted figures, then leave-one-GPU-out (each GPU's rows
    predicted with the serving coefficients fitted without them, ``held_out`` in the shipped file), by GPU and
    engine."""
    from perfcast.groundtruth.tables import predict_serving_online
    from perfcast.validate.fit_serving import FIT_TARGETS

    sc = cal.serving
    reports = _reports(_only(res, FIT_TARGETS), f"{name} [in-sample]",
                       "in-sample: the engines' CPU and front-end times, the custom all-reduce latency and ROCm's "
                       "kernel efficiency are fitted on these rows")
    labels = sorted(set(res.prediction.groups))
    held = [lab for lab in labels if lab.split(" ")[0] in sc.held_out]

    def predict_group(label: str, part: list[dict[str, str]]) -> TablePrediction:
        return predict_serving_online(part, cal.with_serving(sc.without(label.split(" ")[0])))

    gpus = sorted(sc.held_out)
    note = (f"each GPU predicted with serving coefficients fitted on the other GPUs' rows ({', '.join(gpus)})"
            if held else "no held-out fits in the serving coefficients: run perfcast fit --stages serving")
    if held:
        reports += _held_out_reports(_only(res, ONLINE_REPORTED), held, predict_group,
                                     f"{name} [leave-one-GPU-out]", note)
    return reports


def energy_fold(cal: Calibration, gpu: str) -> Calibration:
    """``cal`` as fitted without ``gpu``'s rows for the energy tables: the power model's idle and active shares
    and the host time per eager kernel (the shipped ``energy.json``'s ``held_out``) and the serving engines' CPU
    times (``serving.json``'s)."""
    from perfcast.coefficients.energy import load_energy_coefficients

    fold = load_energy_coefficients().without(gpu)
    return (cal.with_kernel(fold.apply(cal.kernel)).with_compose(fold.apply_host(cal.compose))
            .with_serving(cal.serving.without(gpu)))


def _energy_reports(path: Path, name: str, cal: Calibration) -> list[TableReport]:
    """A measured-energy table leave-one-GPU-out only: each GPU's rows predicted with the energy fit (and the
    serving engines' CPU times) fitted without them (one pass: the in-sample pass would double a long run)."""
    from perfcast.coefficients.energy import load_energy_coefficients
    from perfcast.groundtruth.files import read_header, read_rows
    from perfcast.groundtruth.tables import predict_table, recognize, target_columns

    header = read_header(path)
    kind = recognize(header)
    rows = list(read_rows(path))
    gpus = sorted({(r.get("gpu_id") or "").strip() for r in rows})
    n = len(rows)
    pred: TablePrediction | None = None
    for g in gpus:
        idx = np.flatnonzero(np.array([(r.get("gpu_id") or "").strip() == g for r in rows]))
        sub = predict_table(kind, [rows[i] for i in idx], energy_fold(cal, g))
        if pred is None:
            pred = TablePrediction({t: np.full(n, np.nan) for t in sub.pred}, {t: np.full(n, np.nan) for t in sub.pred},
                                   {t: np.full(n, np.nan) for t in sub.pred}, status=[""] * n, groups=[""] * n)
        for t in sub.pred:
            pred.pred[t][idx], pred.low[t][idx], pred.high[t][idx] = sub.pred[t], sub.low[t], sub.high[t]
        for j, i in enumerate(idx):
            pred.status[i], pred.groups[i] = sub.status[j], sub.groups[j] if sub.groups else g
    assert pred is not None
    targets = [t for t in target_columns(kind, header) if t in pred.pred]
    held = sorted(load_energy_coefficients().held_out)
    note = (f"each GPU predicted with the power model's idle/active shares, the eager host time and vLLM 0.5's CPU "
            "times fitted on the "
            f"other GPUs' energy rows ({', '.join(held)}); {POWER_TARGETS.get(kind.name, 'power')} is the fitted "
            "target, the rest follow" if held else
            "no held-out energy fits shipped: run perfcast fit --stages energy")
    return _reports(BatchResult(kind, header, rows, targets, pred), f"{name} [leave-one-GPU-out]", note)


def _training_logo(paths: list[Path], name: Callable[[Path], str], cal: Calibration,
                   log: Callable[[str], None]) -> list[TableReport]:
    """Published training tables predicted leave-one-GPU-out (refits on the other GPUs' rows)."""
    from perfcast.groundtruth.tables import predict_published_training
    from perfcast.groundtruth.training_tables import source_label
    from perfcast.validate.fit_training import TrainingCase, fit_training, training_cases

    reports = []
    for p in paths:
        res = predict_batch(p, cal)
        cases = training_cases(p)
        gpus = sorted({c.gpu_id for c in cases})

        def held_out(gpu: str, part: list[dict[str, str]], cases: list[TrainingCase] = cases) -> TablePrediction:
            log(f"fitting training coefficients without {gpu}")
            train = [c for c in cases if c.gpu_id != gpu]
            tc = fit_training(train, cal, label=f"{len(train)} rows, {gpu} held out")
            return predict_published_training(part, cal.with_training(tc))

        logo = _held_out(res, gpus, held_out)
        reports += _reports(logo, f"{name(p)} [leave-one-GPU-out]",
                            f"each GPU predicted with training coefficients fitted on the other GPUs' rows "
                            f"({', '.join(gpus)})")
        reports += _reports(_regrouped(logo, [source_label(r) for r in res.rows]),
                            f"{name(p)} [leave-one-GPU-out, per source]",
                            "the leave-one-GPU-out predictions above, grouped by the document each row was "
                            "published in")
    return reports


def _adapted_report(path: Path, name: str, cal: Calibration, samples: int,
                    log: Callable[[str], None]) -> TableReport:
    """An end-to-end table adapted leave-one-GPU-out to ``samples`` rows per GPU
    (:mod:`perfcast.validate.adapt_logo`)."""
    from perfcast.validate.adapt_logo import adapt_logo

    s = adapt_logo(path, cal, samples=samples, log=log)
    return TableReport(f"{name} [adapted: {samples} samples per GPU]", s.kind, s.target, s.note, s.overall,
                       [GroupReport(g, summary) for g, summary in s.groups],
                       points=_points(s.measured, s.predicted, s.labels))


def run_validation(tables: list[Path] | None = None, *, calibration: Calibration | None = None,
                   log: Callable[[str], None] = lambda _m: None,
                   progress: Callable[[str], None] = lambda _m: None,
                   adapt_samples: int | None = None) -> ValidationReport:
    """Validate the given (default: all visible) tables with ``calibration`` (the shipped one when None).

    ``adapt_samples``: also report each end-to-end table adapted leave-one-GPU-out to that many of each GPU's
    rows (:mod:`perfcast.validate.adapt_logo`)."""
    root = find_groundtruth(required=not tables)
    cal = resolve_calibration(calibration)
    paths = tables or default_tables(root)  # type: ignore[arg-type]
    vidur = [p for p in paths if "vidur" in p.parts and "compute" in p.parts and "legacy" not in p.parts]
    others = [p for p in paths if p not in vidur]
    reports: list[TableReport] = []

    def table_name(p: Path) -> str:
        return str(p.relative_to(root)) if root is not None and root in p.parents else str(p)

    collective_paths: list[Path] = []
    training_paths: list[Path] = []
    for p in others:
        progress(str(p))
        name = table_name(p)
        if p.name in ENERGY_FILES:
            progress(f"{name} (leave-one-GPU-out)")
            reports += _energy_reports(p, name, cal)
            continue
        res = predict_batch(p, cal)
        if res.kind.name == "serving_online":
            progress(f"{name} (leave-one-GPU-out)")
            reports += _online_reports(res, name, cal)
            continue
        if res.kind.name in _COLLECTIVE_KINDS:
            collective_paths.append(p)
        if res.kind.name == "published_training":
            training_paths.append(p)
        if res.kind.predict is None:
            n = len(res.rows)
            empty = ErrorSummary(n, 0, float("nan"), float("nan"), float("nan"), float("nan"), float("nan"))
            reports.append(TableReport(name, res.kind.name, ",".join(res.targets), res.kind.unsupported, empty,
                                       status="unsupported"))
            continue
        held = _kernel_held_out(res, cal) if res.kind.name.startswith("neusight_") else res
        for target in res.targets:
            if res.kind.name.startswith("neusight_") and "split" in res.header:
                split = np.array([r.get("split", "") for r in res.rows])
                for sp, note, scored in (
                        ("test", "leave-one-GPU-out: each GPU's rows predicted with coefficients fitted on the "
                                 "other GPUs' split=train rows", held),
                        ("train", "in-sample: these rows were used to fit", res)):
                    m = split == sp
                    if not m.any():
                        continue
                    overall, groups = _summaries(scored, target, m)
                    reports.append(TableReport(f"{name} [split={sp}]", res.kind.name, target, note, overall,
                                               groups, points=_res_points(scored, target, m)))
            else:
                e2e = res.kind.name == "neusight_e2e"
                note = {
                    "neusight_e2e": "never fitted on; leave-one-GPU-out: each GPU predicted with kernel "
                                    "coefficients fitted without its kernel rows (interval coverage too)",
                    "vidur_attention": "in-sample: the attention stage is fitted on this table (the only one)",
                    "published_gemm": "not fitted on: tensor path fitted on VIDUR tables only",
                    "vidur_network": "in-sample: the collectives stage is fitted on every visible collective row",
                    "published_collectives": "in-sample: the collectives stage is fitted on every visible "
                                             "collective row",
                    "published_training": "in-sample: the training coefficients are fitted on every visible row "
                                          "(TFLOP/s per the source's convention)",
                    "published_inference": "not fitted on: each benchmark's load simulated with prior engine "
                                           "coefficients (TensorRT-LLM defaults; batch size unpublished)",
                }.get(res.kind.name, "")
                if res.kind.name == "published_training":
                    note += _training_memory_note(res.prediction.status)
                scored = held if e2e else res
                overall, groups = _summaries(scored, target, logo_coverage=e2e)
                if overall.rows:
                    reports.append(TableReport(name, res.kind.name, target, note, overall, groups,
                                               points=_res_points(scored, target)))
        if adapt_samples and res.kind.name == "neusight_e2e":
            progress(f"{name} (adapted to {adapt_samples} samples, leave-one-GPU-out)")
            reports.append(_adapted_report(p, name, cal, adapt_samples, log))
    if collective_paths:
        progress("collectives (leave-one-cluster-out)")
        fit_root = root or find_groundtruth()
        assert fit_root is not None
        reports += _collective_loco(collective_paths, fit_root, table_name, cal, log)
    if training_paths:
        progress("training (leave-one-GPU-out)")
        reports += _training_logo(training_paths, table_name, cal, log)
    if vidur:
        progress("vidur/compute (leave-one-GPU-out)")
        fit_root = root or find_groundtruth()  # the leave-one-GPU-out refit reads the other GPUs' tables
        assert fit_root is not None
        reports += _vidur_logo(vidur, fit_root, cal, log)
    return ValidationReport(reports)
