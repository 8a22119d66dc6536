"""``perfcast suite``: run the scenario suite and print one row per scenario (and each scenario's detail)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from perfcast.cli.app import _console, _progress, _table, app, emit_json, handled, scenarios_failed
from perfcast.cli.output_paths import check_output_folder

__all__ = ["suite"]


@app.command()
@handled
def suite(
    only: str | None = typer.Option(None, "--only", help="Comma-separated scenario ids or YAML files (default: all)."),
    out_dir: Path = typer.Option(None, "--out", help="Write results.json, results.csv and report.html into this "
                                                     "folder."),
    validation: Path = typer.Option(None, "--validation", help="validation.json for the report's validation page "
                                                               "(default: the --out folder's, if any)."),
    force: bool = typer.Option(False, "--force", help="Overwrite the --out folder's results.json, results.csv and "
                                                      "a report.html perfcast did not write."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Run the scenario suite and print one row per scenario."""

    from perfcast.cli.report import REPORT_FILE, check_report_path, write_folder_report
    from perfcast.errors import ConfigError
    from perfcast.report.results import write_results
    from perfcast.scenarios import list_scenarios, load_scenario, run_scenario

    if only is not None and not only.replace(",", "").strip():
        raise ConfigError(f"--only {only!r} names no scenario; give ids such as T1.1,R2 (or leave --only out for all)")
    scenarios = [load_scenario(s.strip()) for s in only.split(",") if s.strip()] if only else list_scenarios()
    if validation is not None and not validation.is_file():
        raise ConfigError(f"--validation {validation} does not exist; write it with `perfcast validate --out DIR`")
    if out_dir is not None:  # before the run; the folder's report.html is replaced if perfcast wrote it
        check_output_folder(out_dir, protect=("results.json", "results.csv"), force=force)
        if out_dir.is_dir():
            check_report_path(out_dir / REPORT_FILE, force=force, explicit=False)
    results = []
    with _progress(quiet=as_json) as prog:
        task = prog.add_task("suite", total=len(scenarios))
        for sc in scenarios:
            prog.update(task, description=f"scenario {sc.id}")
            results.append(run_scenario(sc))
            prog.advance(task)
    if out_dir is not None:
        write_results(results, out_dir)
        write_folder_report(out_dir, validation=validation)
    if as_json:
        emit_json({"scenarios": [{"id": r.id, "kind": r.kind, "status": r.status, **r.headline(),
                                  **({"error": r.error} if r.error else {}), "notes": r.notes, "rows": r.rows}
                                 for r in results]})
        _fail_on_errors(results)
        return
    _print_suite(results, out_dir)
    _fail_on_errors(results)


def _fail_on_errors(results: list[Any]) -> None:
    """Exit code 1 (one ``failed:`` line) when a scenario's status is ``error``; out-of-memory answers are answers."""
    failed = [r.id for r in results if r.status == "error"]
    if failed:
        scenarios_failed(f"{len(failed)} of {len(results)} scenarios errored: {', '.join(failed)} (see their error "
                         "above)")


def _print_suite(results: list[Any], out_dir: Path | None) -> None:
    """The suite as tables: one row per scenario, then each scenario's error, detail tables and notes."""
    from perfcast.report.results import serving_table
    from perfcast.report.text import pct

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
        if r.error:
            _console().print(f"{r.id}: {r.status}: {r.error}", markup=False)
        if r.kind == "serving":
            _console().print(serving_table(r))
        if r.kind != "model_latency":
            _print_kind_rows(r)
        else:
            _print_latency_rows(r, out_dir)


def _print_kind_rows(r: Any) -> None:
    """A training, collective or other non-latency scenario: its tables, failed rows and notes."""
    from perfcast.report.results import collective_tables, training_table
    from perfcast.report.scenario_tables import kind_tables

    tables = [training_table(r)] if r.kind == "training" else (
        collective_tables(r) if r.kind == "collective" else kind_tables(r))
    for table in tables:
        if table is not None:
            _console().print(table)
    for row in r.rows:
        if row["status"] != "ok":
            what = row.get("label") or row.get("model") or row.get("op", "")
            _console().print(f"{r.id}: {what} on {row.get('cluster', '')}: {row.get('error', '')}",
                             markup=False)
    for note in r.notes:
        _console().print(f"{r.id}: {note}", markup=False)


def _print_latency_rows(r: Any, out_dir: Path | None) -> None:
    """A model-latency scenario: predicted vs measured step times, failed rows, the other predictions."""
    from perfcast.report.text import pct

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
