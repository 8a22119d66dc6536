"""Write suite results as JSON and CSV, and build the suite's per-kind detail tables."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

from perfcast.errors import ConfigError
from perfcast.results.scenario import ScenarioResult

__all__ = ["collective_tables", "serving_table", "training_table", "write_results"]


def _finite(x: object) -> object:
    """JSON has no NaN or infinity: such a value is written as null."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


def _scalar(v: object) -> bool:
    return not isinstance(v, (list, tuple, dict))


def write_results(results: list[ScenarioResult], folder: Path) -> None:
    """results.json (a list of objects with id, kind, status, metrics, notes and rows) and
    results.csv (one row per prediction; the columns are the union of every row's scalar keys, empty where a row
    has no such key; nested series such as a serving run's latency quantiles are in results.json only)."""
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"{folder} is a file; --out needs a folder")
    folder.mkdir(parents=True, exist_ok=True)
    data = [{"id": r.id, "title": r.title, "kind": r.kind, "status": r.status, "error": r.error,
             "metrics": r.headline(), "notes": r.notes, "rows": r.rows} for r in results]
    (folder / "results.json").write_text(json.dumps(_finite(data), indent=2, allow_nan=False) + "\n",
                                         encoding="utf-8")
    keys: list[str] = ["scenario"]
    for r in results:
        for row in r.rows:
            for k, v in row.items():
                if k not in keys and _scalar(v):
                    keys.append(k)
    with (folder / "results.csv").open("w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=keys, restval="", lineterminator="\n", extrasaction="ignore")
        w.writeheader()
        for r in results:
            for row in r.rows:
                w.writerow({"scenario": r.id, **{k: "" if v is None else v for k, v in row.items()}})


# -- the suite's detail tables (rich tables; printed by `perfcast suite`) ---------------------------------------


def _seconds(x: object) -> str:
    v = _num(x)
    if v is None:
        return "-"
    if v == 0:
        return "0"
    if v >= 1:
        return f"{v:.3g} s" if v < 100 else f"{v:.0f} s"
    if v >= 1e-3:
        return f"{1e3 * v:.3g} ms"
    return f"{1e6 * v:.3g} µs"


def _num(x: object) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x)


def _pct(x: object, signed: bool = False) -> str:
    v = _num(x)
    if v is None:
        return "-"
    return f"{100 * v:+.1f}%" if signed else f"{100 * v:.1f}%"


def _size(b: object) -> str:
    v = _num(b)
    if v is None:
        return "-"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if v >= scale:
            return f"{v / scale:.3g} {unit}"
    return f"{v:.0f} B"


def _largest(row: dict[str, object], keys: tuple[str, ...], suffix: str) -> str:
    """The name of the largest of ``keys`` (``tp_comm_s`` -> ``tp``), or empty when all are zero."""
    vals = [(_num(row.get(k)) or 0.0, k) for k in keys]
    top = max(vals)
    return top[1].removesuffix(suffix).removesuffix("_comm").removesuffix("_send") if top[0] > 0 else ""


_COMM = ("tp_comm_s", "cp_comm_s", "ep_comm_s", "fsdp_comm_s", "pp_send_s", "dp_comm_s")
_METRIC_NAMES = {"tflops_per_gpu": "TFLOP/s", "hfu_tflops_per_gpu": "HFU TFLOP/s", "mfu": "MFU", "hfu": "HFU",
                 "step_time_s": "step", "tokens_per_s_per_gpu": "tok/s/GPU"}


def _metric(metric: str, x: object) -> str:
    v = _num(x)
    if v is None:
        return "-"
    if metric in ("mfu", "hfu"):
        return _pct(v)
    if metric == "step_time_s":
        return _seconds(v)
    return f"{v:.0f}"


def _span(low: object, high: object) -> str:
    """``low-high`` in one unit (the unit of ``high``)."""
    lo, hi = _num(low), _num(high)
    if lo is None or hi is None:
        return "-"
    unit, scale = ("s", 1.0) if hi >= 1 else ("ms", 1e3) if hi >= 1e-3 else ("µs", 1e6)
    return f"{lo * scale:.3g}-{hi * scale:.3g} {unit}"


def _count(x: object) -> str:
    v = _num(x)
    if v is None:
        return "-"
    return f"{v:,.0f}" if v >= 100 else f"{v:.3g}"


def _training_cells(row: dict[str, object]) -> dict[str, str]:
    """A training row's values as short texts, by column name."""
    mem = _num(row.get("memory_per_gpu_bytes")) or 0.0
    all_top = _largest(row, tuple(k.removesuffix("_s") + "_total_s" for k in _COMM), "_total_s")
    exp_top = _largest(row, _COMM, "_s")
    cells = {"run": str(row.get("label") or row.get("model")), "GPUs": str(row.get("num_gpus")),
             "step": _seconds(row.get("step_time_s")),
             "interval": _span(row.get("step_time_low_s"), row.get("step_time_high_s")),
             "tok/s/GPU": _count(row.get("tokens_per_s_per_gpu")), "TFLOP/s": _count(row.get("tflops_per_gpu")),
             "MFU": _pct(row.get("mfu")),
             "memory/GPU": f"{mem / 2**30:.1f} GiB{'' if row.get('fits_in_memory') else ' OOM'}",
             "activations": f"{(_num(row.get('memory_activations_bytes')) or 0.0) / 2**30:.1f} GiB",
             "bubble": _pct(row.get("bubble_frac")),
             "stage imbalance": _pct(row.get("stage_imbalance_frac")),
             "comm all": f"{_seconds(row.get('comm_total_s'))} {all_top}".strip(),
             "comm exposed": f"{_seconds(row.get('comm_exposed_s'))} {_pct(row.get('comm_exposed_frac'))} "
                             f"{exp_top}".strip()}
    n = _num(row.get("trainable_params"))
    cells["trainable"] = f"{n / 1e6:,.1f} M" if n is not None else "-"
    metric = str(row.get("compared_metric") or "")
    if metric:
        cells["predicted"] = _metric(metric, row.get(metric))
        cells["published"] = f"{_metric(metric, row.get('measured_' + metric))} {_METRIC_NAMES.get(metric, metric)}"
        cells["error"] = _pct(row.get("error_frac"), signed=True)
    return cells


_TRANSPOSE_MAX_RUNS = 4


def training_table(r: ScenarioResult) -> Any:
    """The predicted training steps: a column per run (a few runs), else a line per run with the main numbers
    (None when no run was predicted)."""
    from rich.table import Table

    ok = [row for row in r.rows if row["status"] == "ok"]
    if not ok:
        return None
    compared = any(row.get("compared_metric") for row in ok)
    cells = [_training_cells(row) for row in ok]
    t = Table(title=f"{r.id}: {r.title}")
    if len(ok) <= _TRANSPOSE_MAX_RUNS:
        names = ["GPUs", "step", "interval", "tok/s/GPU", "TFLOP/s", "MFU", "memory/GPU", "activations", "bubble"]
        names += ["stage imbalance"] if any(int(str(row.get("pp", 1))) > 1 for row in ok) else []
        names += ["comm all", "comm exposed"]
        names += ["trainable"] if any("lora_rank" in str(row.get("plan", "")) for row in ok) else []
        names += ["predicted", "published", "error"] if compared else []
        t.add_column("")
        for c in cells:
            t.add_column(c["run"], justify="right")
        for name in names:
            t.add_row(name, *(c.get(name, "-") for c in cells))
        return t
    cols = ["run", "GPUs", "step", "MFU", "memory/GPU"]
    cols += ["predicted", "published", "error"] if compared else ["tok/s/GPU", "bubble", "comm exposed"]
    for col in cols:
        t.add_column(col, justify="left" if col in ("run", "memory/GPU", "comm exposed", "published") else "right")
    for c in cells:
        t.add_row(*(c.get(col, "-") for col in cols))
    return t


def _placement_sizes(rows: list[dict[str, object]]) -> list[int]:
    sizes = sorted({int(str(row["size_bytes"])) for row in rows})
    if len(sizes) <= 3:
        return sizes
    mid = min(sizes, key=lambda s: abs(s - 2**20))
    return sorted({sizes[0], mid, sizes[-1]})


def collective_tables(r: ScenarioResult) -> list[Any]:
    """Per cluster, a line per placement (op, group): the time at a few sizes (with the error where measured),
    and the ratios to all-reduce where another tool's reference ratios are given."""
    from rich.table import Table

    ok = [row for row in r.rows if row["status"] == "ok"]
    if not ok:
        return []
    out = []
    for cluster in dict.fromkeys(str(row["cluster"]) for row in ok):
        mine = [row for row in ok if row["cluster"] == cluster]
        sizes = _placement_sizes(mine)
        measured = any(row.get("measured_time_s") is not None for row in mine)
        groups: dict[tuple[object, ...], list[dict[str, object]]] = {}
        for row in mine:
            groups.setdefault((row["op"], row["group_size"], row["gpus_per_node"]), []).append(row)
        title = f"{r.id} on {cluster}: predicted time" + (" (error vs measured)" if measured else "")
        t = Table(title=title)
        cols = ["op", "GPUs (per node)", *([] if measured else ["algorithm"]), *(_size(s) for s in sizes)]
        for c in cols:
            t.add_column(c, justify="left" if c in ("op", "algorithm") else "right")
        if measured:
            t.add_column("MAPE (n)", justify="right")
        for (op, n, g), rows in groups.items():
            by_size = {int(str(row["size_bytes"])): row for row in rows}
            cells = []
            for s in sizes:
                at = by_size.get(s)
                if at is None:
                    cells.append("-")
                    continue
                err = _num(at.get("error_frac"))
                cells.append(_seconds(at["time_s"]) + (f" ({100 * err:+.0f}%)" if err is not None else ""))
            line = [str(op), f"{n} ({g})"]
            if not measured:
                line.append(",".join(dict.fromkeys(str(row["algorithm"]) for row in rows)))
            line += cells
            if measured:
                errs = [abs(float(str(row["error_frac"]))) for row in rows if row.get("error_frac") is not None]
                line.append(f"{_pct(sum(errs) / len(errs))} ({len(errs)})" if errs else "-")
            t.add_row(*line)
        out.append(t)
    refs = [row for row in ok if row.get("reference_ratio_to_all_reduce") is not None]
    if refs:
        ref = refs[0]
        same = [row for row in ok if row["cluster"] == ref["cluster"] and row["group_size"] == ref["group_size"]
                and row["gpus_per_node"] == ref["gpus_per_node"] and row.get("ratio_to_all_reduce") is not None]
        all_sizes = sorted({int(str(row["size_bytes"])) for row in same})
        rt = Table(title=f"{r.id}: time / all-reduce time on {ref['group_size']} GPUs of {ref['cluster']}")
        rt.add_column("op")
        for s in all_sizes:
            rt.add_column(_size(s), justify="right")
        rt.add_column(f"reference at {_size(ref['size_bytes'])}", justify="right")
        for op in dict.fromkeys(str(row["op"]) for row in same):
            by_size = {int(str(row["size_bytes"])): row for row in same if row["op"] == op}
            ref_ratio = next((row.get("reference_ratio_to_all_reduce") for row in by_size.values()
                              if row.get("reference_ratio_to_all_reduce") is not None), None)
            rt.add_row(op, *(f"{float(str(by_size[s]['ratio_to_all_reduce'])):.3f}" if s in by_size else "-"
                             for s in all_sizes),
                       f"{float(str(ref_ratio)):.3f}" if ref_ratio is not None else "-")
        out.append(rt)
    return out


def _number(x: object, digits: str = ",.0f") -> str:
    v = _num(x)
    return "-" if v is None else format(v, digits)


def _ratio(x: object) -> str:
    v = _num(x)
    return "-" if v is None else f"{v:.2f}x"


def _differ(runs: list[dict[str, object]], key: str) -> bool:
    return len({v for v in (_num(row.get(key)) for row in runs) if v is not None}) > 1


def _any(runs: list[dict[str, object]], key: str) -> bool:
    return any((_num(row.get(key)) or 0.0) > 0 for row in runs)


def _per_request(row: dict[str, object]) -> str:
    n, total = _num(row.get("preemptions")), _num(row.get("requests_total"))
    return "-" if n is None or not total else f"{n / total:.3g}"


_SERVING_RUNS_PER_TABLE = 6


def serving_table(r: ScenarioResult) -> Any:
    """One column per serving run (at most six per table, and as many as fit the console's width: more runs
    go to further tables), one row per quantity: latency percentiles, throughput and preemptions always; the
    rest only where a scenario's runs have them (a QPS search, KV capacity, prefix caching, speculative
    decoding, co-location, disaggregation, retrieval) or differ in them."""
    runs = [row for row in r.rows if row.get("status") == "ok"]
    return _packed_runs(r.id, runs, _serving_lines(runs))


def _serving_lines(runs: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    """The serving table's rows: (label, how a run's cell reads), those a scenario's runs have or differ in."""
    lines: list[tuple[str, Any]] = []

    def line(label: str, fmt: Any, show: bool = True) -> None:
        if show:
            lines.append((label, fmt))

    line("offered QPS", lambda row: _number(row.get("qps"), ".3g") if row.get("qps") is not None else "burst",
         _differ(runs, "qps") or _any(runs, "max_qps"))
    line("max QPS (sustained)", lambda row: _number(row.get("max_qps"), ".3g"), _any(runs, "max_qps"))
    for key, label in (("ttft_s.p50", "TTFT p50"), ("ttft_s.p99", "TTFT p99"), ("tpot_s.p50", "TPOT p50"),
                       ("tpot_s.p99", "TPOT p99"), ("e2e_s.p50", "E2E p50"), ("e2e_s.p99", "E2E p99")):
        line(label, lambda row, key=key: _seconds(row.get(key)))
    line("requests completed", lambda row: f"{row.get('requests_completed')}/{row.get('requests_total')}")
    line("requests rejected", lambda row: _number(row.get("requests_rejected")), _any(runs, "requests_rejected"))
    line("throughput (tok/s)", lambda row: _number(row.get("throughput_tokens_per_s")))
    slo = any(row.get("slo_ttft_s") is not None or row.get("slo_tpot_s") is not None for row in runs)
    line("goodput (req/s)", lambda row: "n/a" if row.get("slo_ttft_s") is None and row.get("slo_tpot_s") is None
         else _number(row.get("goodput_requests_per_s"), ".3g"), slo)  # no SLO: nothing to meet
    line("preemptions", lambda row: _number(row.get("preemptions")))
    line("preemptions/request", _per_request, _any(runs, "preemptions"))
    kv = _differ(runs, "kv_bytes_per_token") or _differ(runs, "max_concurrent_sequences")
    line("KV per token/GPU", lambda row: _size(row.get("kv_bytes_per_token")), kv)
    line("max concurrent seqs", lambda row: _number(row.get("max_concurrent_sequences")), kv)
    line("weights per GPU", lambda row: _size(row.get("weight_bytes_per_gpu")), _differ(runs, "weight_bytes_per_gpu"))
    busy = _any(runs, "preemptions") or _differ(runs, "block_size")
    line("KV use mean", lambda row: _pct(row.get("kv_utilization_frac.mean")), busy)
    line("KV fragmentation", lambda row: f"{100 * (_num(row.get('kv_fragmentation_mean_frac')) or 0):.2f}%",
         busy)
    line("prefix hit (tokens)", lambda row: _pct(row.get("prefix_hit_frac")), _any(runs, "prefix_hit_frac"))
    line("prefix cache", lambda row: _size(row.get("prefix_cache_bytes")), _any(runs, "prefix_cache_bytes"))
    line("tokens per spec step", lambda row: _number(row.get("spec_tokens_per_step"), ".2f")
         if _any([row], "spec_tokens_per_step") else "-",
         _any(runs, "spec_tokens_per_step"))
    for name in ("ttft", "tpot", "e2e"):
        line(f"speedup {name.upper()}", lambda row, name=name: _ratio(row.get(f"speedup_x.{name}")),
             _any(runs, f"speedup_x.{name}"))
    for name in ("ttft", "tpot", "e2e"):
        line(f"slowdown {name.upper()}", lambda row, name=name: _ratio(row.get(f"slowdown_x.{name}")),
             _any(runs, f"slowdown_x.{name}"))
    line("GPU busy", lambda row: _pct(row.get("gpu_busy_frac")), _any(runs, "gpu_busy_frac"))
    line("KV transfer mean", lambda row: _seconds(row.get("kv_transfer_mean_s")), _any(runs, "kv_transfer_mean_s"))
    line("retrieval mean", lambda row: _seconds(row.get("retrieval_mean_s")), _any(runs, "retrieval_mean_s"))
    line("retrieval share E2E", lambda row: _pct(row.get("retrieval_share_frac")),
         _any(runs, "retrieval_share_frac"))

    return lines

def _packed_runs(scenario_id: str, runs: list[dict[str, Any]], lines: list[tuple[str, Any]]) -> Any:
    """``runs`` as columns of ``lines``' rows, packed into tables as wide as the console (at most
    :data:`_SERVING_RUNS_PER_TABLE` runs each)."""
    from rich.console import Group
    from rich.table import Table

    cells = [[fmt(row) for label, fmt in lines] for row in runs]
    names = [str(row.get("label") or row.get("scheduler")) for row in runs]
    first = max(len(label) for label, _ in lines) + 4  # the quantity column, its borders and padding
    widths = [max(len(name), *(len(c) for c in col)) + 3 for name, col in zip(names, cells, strict=True)]

    def tables(max_width: int) -> list[Any]:
        """The runs packed left to right into tables no wider than ``max_width`` (at least one run each)."""
        chunks: list[list[int]] = [[]]
        width = first
        for i, w in enumerate(widths):
            if chunks[-1] and (width + w > max_width or len(chunks[-1]) >= _SERVING_RUNS_PER_TABLE):
                chunks.append([])
                width = first
            chunks[-1].append(i)
            width += w
        out = []
        for n, chunk in enumerate(chunks, 1):
            part = f" ({n}/{len(chunks)})" if len(chunks) > 1 else ""
            t = Table(title=f"{scenario_id}: serving runs{part}")
            t.add_column("quantity", no_wrap=True)
            for i in chunk:
                t.add_column(names[i], justify="right", no_wrap=True)
            for k, (label, _) in enumerate(lines):
                t.add_row(label, *(cells[i][k] for i in chunk))
            out.append(t)
        return out

    class _Packed:
        """Rendered at the console's width: as many runs per table as fit."""

        def __rich_console__(self, console: Any, options: Any) -> Any:
            yield Group(*tables(options.max_width))

    return _Packed()
