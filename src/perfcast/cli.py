"""The perfcast command line: one Typer app, one thin function per command.

Every command that prints results takes ``--json`` and then prints exactly one
JSON object whose keys name the quantity and its unit. A user error prints one
line (``error: ...``) to stderr and exits 2; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import functools
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import typer

from perfcast.errors import PerfcastError

if TYPE_CHECKING:
    from rich.console import Console

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  help="Predict the performance of ML workloads on hardware you may not have.")
hardware_app = typer.Typer(no_args_is_help=True, help="The hardware catalog.")
models_app = typer.Typer(no_args_is_help=True, help="The model catalog.")
app.add_typer(hardware_app, name="hardware")
app.add_typer(models_app, name="models")

_STATE = {"debug": False}
_CONSOLES: dict[str, Console] = {}


def _console(stderr: bool = False) -> Console:
    """A rich console, created on first use (rich is imported only by commands that print tables)."""
    key = "err" if stderr else "out"
    if key not in _CONSOLES:
        from rich.console import Console

        _CONSOLES[key] = Console(stderr=stderr, highlight=False)
    return _CONSOLES[key]


def _table(*args: Any, **kwargs: Any) -> Any:
    from rich.table import Table

    return Table(*args, **kwargs)


def _print_fields(title: str, data: dict[str, Any]) -> None:
    """A two-column table of a record's fields (nested values as JSON)."""
    t = _table(title=title, show_header=False)
    t.add_column("field", no_wrap=True)
    t.add_column("value")
    for k, v in data.items():
        t.add_row(k, json.dumps(v) if isinstance(v, (dict, list)) else str(v))
    _console().print(t)
F = TypeVar("F", bound=Callable[..., Any])


def _clean(obj: Any) -> Any:
    if isinstance(obj, float):
        return None if math.isnan(obj) or math.isinf(obj) else obj
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def emit_json(obj: dict[str, Any]) -> None:
    """Print exactly one JSON object."""
    sys.stdout.write(json.dumps(_clean(obj), sort_keys=False) + "\n")


def handled(fn: F) -> F:
    """Turn PerfcastError into one stderr line and exit code 2."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except PerfcastError as exc:
            if _STATE["debug"]:
                raise
            sys.stderr.write(f"error: {exc}\n")
            if exc.hint:
                sys.stderr.write(f"hint: {exc.hint}\n")
            raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]


@app.callback()
def _main(debug: bool = typer.Option(False, "--debug", help="Show tracebacks of user errors.")) -> None:
    _STATE["debug"] = debug


# -- catalogs ---------------------------------------------------------------------------
@hardware_app.command("list")
@handled
def hardware_list(as_json: bool = typer.Option(False, "--json", help="Print one JSON object.")) -> None:
    """List every device in the catalog."""
    from perfcast.catalog.hardware import list_hardware

    devices = list_hardware()
    if as_json:
        emit_json({"hardware": [{"id": h.id, "name": h.name, "vendor": h.vendor, "memory_bytes": h.memory_bytes,
                                 "memory_bandwidth_Bps": h.memory_bandwidth_Bps,
                                 "peak_bf16_flops_per_s": h.peak_flops_per_s.bf16,
                                 "peak_fp32_flops_per_s": h.peak_flops_per_s.fp32, "tdp_W": h.tdp_W}
                                for h in devices]})
        return
    t = _table(title=f"{len(devices)} devices")
    for c in ("id", "name", "memory", "bandwidth", "bf16 dense", "fp32", "TDP"):
        t.add_column(c, justify="left" if c in ("id", "name") else "right", no_wrap=c == "id")
    for h in devices:
        p = h.peak_flops_per_s
        t.add_row(h.id, h.name, f"{h.memory_bytes / 2**30:.0f} GiB", f"{h.memory_bandwidth_Bps / 1e12:.2f} TB/s",
                  f"{p.bf16 / 1e12:.0f} TF" if p.bf16 else "-", f"{p.fp32 / 1e12:.1f} TF", f"{h.tdp_W:.0f} W")
    _console().print(t)


@hardware_app.command("show")
@handled
def hardware_show(hardware_id: str = typer.Argument(..., help="Device id or alias."),
                  as_json: bool = typer.Option(False, "--json", help="Print one JSON object.")) -> None:
    """Show one device's specs (base SI units)."""
    from perfcast.catalog.hardware import load_hardware

    h = load_hardware(hardware_id)
    data = h.model_dump(mode="json")
    if as_json:
        emit_json(data)
        return
    _print_fields(f"{h.id}: {h.name}", data)


@models_app.command("list")
@handled
def models_list(as_json: bool = typer.Option(False, "--json", help="Print one JSON object.")) -> None:
    """List every model in the catalog."""
    from perfcast.catalog.models import list_models

    models = list_models()
    if as_json:
        emit_json({"models": [{"id": m.id, "hf_id": m.hf_id, "model_type": m.model_type, "kind": m.kind,
                               "num_layers": m.num_layers, "hidden_size": m.hidden_size,
                               "params": m.num_params(), "active_params": m.num_active_params()} for m in models]})
        return
    t = _table(title=f"{len(models)} models")
    for c in ("id", "hf id", "type", "layers", "hidden", "params", "active"):
        t.add_column(c, justify="right" if c in ("layers", "hidden", "params", "active") else "left",
                     no_wrap=c == "id")
    for m in models:
        t.add_row(m.id, m.hf_id or "-", m.model_type, str(m.num_layers), str(m.hidden_size),
                  f"{m.num_params() / 1e9:.2f} B", f"{m.num_active_params() / 1e9:.2f} B")
    _console().print(t)


@models_app.command("show")
@handled
def models_show(model: str = typer.Argument(..., help="Model id, alias, HF repo id or path to a config.json."),
                as_json: bool = typer.Option(False, "--json", help="Print one JSON object.")) -> None:
    """Show one model's normalized architecture."""
    from perfcast.catalog.models import load_model

    m = load_model(model)
    data = m.model_dump(mode="json", exclude={"hf_config"})
    data["params"] = m.num_params()
    data["active_params"] = m.num_active_params()
    if as_json:
        emit_json(data)
        return
    _print_fields(m.id, data)


# -- predictions -------------------------------------------------------------------------
@app.command()
@handled
def predict(
    model: str = typer.Option(..., "--model", "-m", help="Model id, alias, HF repo id or config.json path."),
    hardware: str = typer.Option(..., "--hardware", "-H", help="Device id, alias or hardware YAML path."),
    mode: str = typer.Option("inference", "--mode", help="inference | training | prefill | decode"),
    batch_size: int = typer.Option(1, "--batch-size", "-b", help="Sequences per step."),
    seq_len: int = typer.Option(512, "--seq-len", "-s", help="Tokens per sequence (context length for decode)."),
    dtype: str = typer.Option("fp32", "--dtype", help="fp32 | tf32 | fp16 | bf16 | fp8 ..."),
    fused: bool = typer.Option(False, "--fused", help="Compiler fusion (torch.compile)."),
    parallelism: str = typer.Option("none", "--parallelism", help="none | dpN | tpN | ppN (GPUs of one node)."),
    microbatches: int | None = typer.Option(None, "--microbatches", help="Pipeline micro-batches (ppN)."),
    optimizer: str = typer.Option("adam", "--optimizer", help="Training optimizer step: adam | sgd | none."),
    attention: str | None = typer.Option(None, "--attention", help="eager | sdpa | flash (default by style)."),
    style: str | None = typer.Option(None, "--style", help="hf (eager PyTorch) | engine (fused serving kernels)."),
    explain: bool = typer.Option(False, "--explain", help="Show the top ops, their bound and share."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Predict one step of a model on one device (or a 4-GPU node with --parallelism)."""
    from perfcast.compose.predict import StepRequest
    from perfcast.compose.predict import predict as run
    from perfcast.errors import ConfigError
    from perfcast.report.text import step_table, top_ops_table
    from perfcast.workload.types import Mode

    try:
        mode_v = Mode(mode)
    except ValueError:
        raise ConfigError(f"unknown mode {mode!r}; use one of {', '.join(m.value for m in Mode)}") from None
    st = run(StepRequest(model=model, hardware=hardware, mode=mode_v, batch_size=batch_size, seq_len=seq_len,
                         dtype=dtype, fused=fused, parallelism=parallelism, microbatches=microbatches,
                         optimizer=optimizer, attention=attention, style=style))
    if as_json:
        data: dict[str, Any] = {
            "model": st.model_id, "hardware": st.hardware_id, "mode": st.mode, "batch_size": st.batch_size,
            "seq_len": st.seq_len, "dtype": st.dtype, "fused": st.fused, "parallelism": st.parallelism,
            "step_time_s": st.time_s, "step_time_low_s": st.low_s, "step_time_high_s": st.high_s,
            "device_busy_s": st.device_busy_s, "host_s": st.host_s, "comm_s": st.comm_s,
            "flops": st.flops, "achieved_flops_per_s": st.achieved_flops_per_s, "num_kernels": st.num_kernels,
            "time_by_phase_s": st.by_phase_s, "time_by_group_s": st.by_group_s,
        }
        if explain:
            busy = st.device_busy_s or 1.0
            data["top_ops"] = [{"name": o.op.name, "op": o.op.op, "dims": list(o.op.dims), "count": o.op.count,
                                "time_s": o.total_s, "share_frac": o.total_s / busy, "bound": o.kernel.bound,
                                "flops": o.op.flops * o.op.count, "bytes": o.op.bytes * o.op.count}
                               for o in st.top_ops(12)]
        emit_json(data)
        return
    _console().print(step_table(st))
    if explain:
        _console().print(top_ops_table(st))


@app.command("predict-batch")
@handled
def predict_batch_cmd(
    table: Path = typer.Argument(..., help="A CSV or CSV.gz in one of the ground-truth schemas."),
    output: Path = typer.Option(..., "-o", "--output", help="Where to write the predicted CSV (.gz to compress)."),
    force: bool = typer.Option(False, "--force", help="Overwrite OUTPUT if it exists."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object (summary)."),
) -> None:
    """Predict every row of a table; writes the rows plus pred_X, pred_X_low, pred_X_high and status."""
    from perfcast.validate.metrics import summarize
    from perfcast.validate.predict_batch import predict_batch, write_predictions

    res = predict_batch(table)
    path = write_predictions(res, output, force=force)
    ok = sum(1 for s in res.prediction.status if s == "ok")
    targets: dict[str, dict[str, float | int]] = {}
    for t in res.targets:
        s = summarize(res.measured(t), res.prediction.pred[t], res.prediction.low[t], res.prediction.high[t])
        targets[t] = s.as_dict()
    if as_json:
        emit_json({"table": str(table), "kind": res.kind.name, "rows": len(res.rows), "predicted_rows": ok,
                   "output": str(path), "targets": targets})
        return
    sys.stdout.write(f"{res.kind.name}: {len(res.rows)} rows, {ok} predicted -> {path}\n")
    for t, d in targets.items():
        if d["predicted_rows"]:
            sys.stdout.write(f"  {t}: MAPE {100 * d['mape_frac']:.1f}% over {d['predicted_rows']} measured rows\n")


@app.command()
@handled
def validate(
    tables: list[Path] = typer.Argument(None, help="Tables to validate (default: every visible table)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Predict the measured tables and print the error per table and device."""
    from rich.progress import Progress

    from perfcast.report.text import pct
    from perfcast.validate.report import run_validation

    if as_json:
        rep = run_validation(list(tables) if tables else None)
        emit_json(rep.as_dict())
        return
    with Progress(console=_console(stderr=True), transient=True) as prog:
        task = prog.add_task("validating", total=None)
        rep = run_validation(list(tables) if tables else None,
                             progress=lambda m: prog.update(task, description=f"validating {m}"))
    for t in rep.tables:
        tbl = _table(title=f"{t.table}: {t.target}", caption=t.note)
        for c in ("device", "rows", "coverage", "MAPE", "median", "max", "in interval"):
            tbl.add_column(c, justify="left" if c == "device" else "right")
        s = t.overall
        for g in t.groups:
            gs = g.summary
            tbl.add_row(g.group, str(gs.rows), pct(gs.coverage), pct(gs.mape), pct(gs.median_ape), pct(gs.max_ape),
                        pct(gs.interval_coverage))
        tbl.add_row("[b]all[/b]", str(s.rows), pct(s.coverage), pct(s.mape), pct(s.median_ape), pct(s.max_ape),
                    pct(s.interval_coverage))
        _console().print(tbl)


@app.command()
@handled
def fit(
    output: Path = typer.Option(None, "-o", "--output", help="Where to write coefficients (default: print only)."),
    stages: str = typer.Option("vector,gemm,conv,tensor,attention", "--stages",
                               help="Comma-separated stages: vector, gemm, conv, tensor, attention (kernel "
                                    "tables) and host "
                                    "(host time per eager kernel, from end-to-end rows of your own machine); "
                                    "none = keep the current coefficients (e.g. to recompute --intervals)."),
    intervals: Path = typer.Option(None, "--intervals", help="Also write prediction intervals to this JSON."),
    compose_output: Path = typer.Option(None, "--compose-output",
                                        help="Where the host stage writes composition coefficients."),
    force: bool = typer.Option(False, "--force", help="Overwrite existing output files."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Fit the kernel coefficients on the visible kernel tables (train split / VIDUR) and write them as JSON."""
    from perfcast.errors import ConfigError
    from perfcast.kernel.coefficients import load_coefficients
    from perfcast.validate.fit import fit_coefficients, fit_host, fit_intervals

    for p in (output, intervals, compose_output):
        if p is not None and p.exists() and not force:
            raise ConfigError(f"{p} exists; pass --force to overwrite it")
    chosen = [s.strip() for s in stages.split(",") if s.strip() and s.strip() != "none"]
    known = {"vector", "gemm", "conv", "tensor", "attention", "host"}
    if set(chosen) - known or (not chosen and stages.strip() != "none"):
        raise ConfigError(f"unknown fit stages {sorted(set(chosen) - known) or chosen}; use {', '.join(sorted(known))}")
    if "host" in chosen and compose_output is None:
        raise ConfigError("the host stage needs --compose-output PATH for the composition coefficients")
    lines: list[str] = []
    logger = lines.append if as_json else _console().print
    kernel_stages = [s for s in chosen if s != "host"]
    co = fit_coefficients(stages=kernel_stages, log=logger) if kernel_stages else load_coefficients()
    if output is not None:
        output.write_text(co.to_json(), encoding="utf-8")
    if "host" in chosen and compose_output is not None:
        compose_output.write_text(fit_host(co, log=logger).to_json(), encoding="utf-8")
    iv = None
    if intervals is not None:
        iv = fit_intervals(co)
        intervals.write_text(json.dumps(iv, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    if as_json:
        emit_json({"coefficients": co.model_dump(mode="json"), "log": lines, "intervals": iv,
                   "output": str(output) if output else None})
    elif output is None:
        _console().print(co.to_json())


@app.command()
@handled
def suite(
    only: str = typer.Option("", "--only", help="Comma-separated scenario ids (default: all)."),
    out_dir: Path = typer.Option(None, "--out", help="Write results.json and results.csv into this folder."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Run the scenario suite and print one row per scenario."""
    from rich.progress import Progress

    from perfcast.report.results import write_results
    from perfcast.report.text import pct
    from perfcast.scenarios import list_scenarios, load_scenario, run_scenario

    scenarios = [load_scenario(s.strip()) for s in only.split(",") if s.strip()] if only else list_scenarios()
    results = []
    with Progress(console=_console(stderr=True), transient=True, disable=as_json) as prog:
        task = prog.add_task("suite", total=len(scenarios))
        for sc in scenarios:
            prog.update(task, description=f"scenario {sc.id}")
            results.append(run_scenario(sc))
            prog.advance(task)
    if out_dir is not None:
        write_results(results, out_dir)
    if as_json:
        emit_json({"scenarios": [{"id": r.id, "status": r.status, **r.headline(), "rows": r.rows}
                                 for r in results]})
        return
    t = _table(title="perfcast suite")
    for c in ("id", "title", "predictions", "vs measured", "MAPE", "status"):
        t.add_column(c)
    for r in results:
        h = r.headline()
        mape = h["mape_frac"]
        t.add_row(r.id, r.title, str(h["predictions"]), str(h["with_measurement"]),
                  pct(float(mape)) if isinstance(mape, (int, float)) else "-", r.status)
    _console().print(t)
    for r in results:
        measured = [row for row in r.rows if row.get("measured_step_time_s") is not None]
        failed = [row for row in r.rows if row["status"] != "ok"]
        if measured:
            detail = _table(title=f"{r.id}: predicted vs measured step time")
            for c in ("model", "mode", "b", "seq", "hardware", "predicted", "measured", "error"):
                detail.add_column(c, no_wrap=c in ("model", "hardware"),
                                  justify="right" if c in ("b", "seq", "predicted", "measured", "error") else "left")
            for row in measured:
                mode = {"inference": "infer", "training": "train"}.get(str(row["mode"]), str(row["mode"]))
                mode += "+fused" if row["fused"] else ""
                detail.add_row(str(row["model"]), mode, str(row["batch_size"]), str(row["seq_len"]),
                               str(row["hardware"]), f"{1e3 * float(str(row['step_time_s'])):.0f} ms",
                               f"{1e3 * float(str(row['measured_step_time_s'])):.0f} ms",
                               pct(float(str(row["error_frac"]))))
            _console().print(detail)
        for row in failed:
            _console().print(f"{r.id}: {row['model']} on {row['hardware']}: {row.get('error', '')}", markup=False)
        others = [row for row in r.rows if row["status"] == "ok" and row.get("measured_step_time_s") is None]
        if others and len(others) <= 24:
            extra = _table(title=f"{r.id}: predicted step time")
            for c in ("model", "mode", "b", "seq", "hardware", "predicted", "interval"):
                extra.add_column(c, no_wrap=c in ("model", "hardware"),
                                 justify="right" if c in ("b", "seq", "predicted", "interval") else "left")
            for row in others:
                extra.add_row(str(row["model"]), str(row["mode"]), str(row["batch_size"]), str(row["seq_len"]),
                              str(row["hardware"]), f"{1e3 * float(str(row['step_time_s'])):.1f} ms",
                              f"{1e3 * float(str(row['step_time_low_s'])):.1f}-"
                              f"{1e3 * float(str(row['step_time_high_s'])):.1f} ms")
            _console().print(extra)
        elif others:
            where = f"{out_dir}/results.csv" if out_dir is not None else "`perfcast suite --out DIR` or --json"
            _console().print(f"{r.id}: {len(others)} more predictions on devices without visible measurements: "
                             f"{where}")


def _usage_error_types() -> tuple[type[BaseException], ...]:
    """Click's UsageError (Typer vendors Click in recent releases; older ones depend on it)."""
    return tuple(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")


def main() -> None:
    """Entry point of the ``perfcast`` script: usage errors become one ``error:`` line and exit 2."""
    usage = _usage_error_types()
    try:
        code = app(standalone_mode=False)
    except usage as exc:  # type: ignore[misc]
        if type(exc).__name__ == "NoArgsIsHelpError":  # bare `perfcast`: the help text, success
            sys.stdout.write(str(exc.format_message()) + "\n")  # type: ignore[attr-defined]
            sys.exit(0)
        ctx = getattr(exc, "ctx", None)
        where = f"perfcast {ctx.command_path.split(' ', 1)[1]}" if ctx and " " in ctx.command_path else "perfcast"
        message = " ".join(str(exc.format_message()).split())  # type: ignore[attr-defined]
        sys.stderr.write(f"error: {message} (see `{where} --help`)\n")
        sys.exit(2)
    except KeyboardInterrupt:
        sys.stderr.write("error: interrupted\n")
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
