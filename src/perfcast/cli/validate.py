"""``perfcast validate``: predict the measured tables (or measure here with ``--local``) and print the errors."""

from __future__ import annotations

from pathlib import Path

import typer

from perfcast.cli.app import _console, _progress, _table, app, emit_json, handled
from perfcast.cli.output_paths import check_output_folder
from perfcast.results.serialize import to_json

__all__ = ["validate"]


def _validate_local(as_json: bool) -> None:
    from perfcast.groundtruth.local import validate_local
    from perfcast.report.text import pct

    if as_json:
        emit_json(to_json(validate_local()))
        return
    with _console(stderr=True).status("measuring") as status:
        rep = validate_local(progress=lambda m: status.update(f"measuring {m}"))
    tbl = _table(title=f"{rep.hardware_id}: measured here with PyTorch ({rep.threads} threads) vs predicted")
    for c in ("case", "measured", "predicted", "error"):
        tbl.add_column(c, justify="left" if c == "case" else "right")
    for r in rep.results:
        tbl.add_row(r.case.label, f"{r.measured_s * 1e3:.1f} ms", f"{r.predicted_s * 1e3:.1f} ms",
                    f"{100 * r.error_frac:+.1f}%")
    for m in rep.models:
        tbl.add_row(f"[b]{m}[/b] MAPE", "", "", pct(rep.mape_frac(m)))
    tbl.add_row("[b]all[/b] MAPE", "", "", pct(rep.mape_frac()))
    _console().print(tbl)


@app.command()
@handled
def validate(
    tables: list[Path] = typer.Argument(None, help="Tables to validate (default: every visible table)."),
    out_dir: Path = typer.Option(None, "--out", help="Also write validation.json (for `perfcast report`) here."),
    force: bool = typer.Option(False, "--force", help="Overwrite a validation.json perfcast did not write."),
    local: bool = typer.Option(False, "--local", help="Measure BERT-base, GPT-2 and ResNet-50 here with PyTorch "
                                                      "and compare with local-cpu's predictions (after calibrate)."),
    adapt_samples: int = typer.Option(None, "--adapt-samples", min=1, help="Also adapt each GPU of the "
                                      "end-to-end tables to N of its rows and report the rest (leave-one-GPU-out; "
                                      "perfcast adapt)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Predict the measured tables and print the error per table and device."""

    if local:
        _validate_local(as_json)
        return

    from perfcast.report.text import pct
    from perfcast.validate.export import check_validation_path, write_validation
    from perfcast.validate.report import run_validation

    if out_dir is not None:
        check_output_folder(out_dir, protect=(), force=force)
        check_validation_path(out_dir, force=force)
    if as_json:
        rep = run_validation(list(tables) if tables else None, adapt_samples=adapt_samples)
        written = write_validation(rep, out_dir) if out_dir is not None else None
        emit_json({**to_json(rep), **({"validation_file": str(written)} if written else {})})
        return
    with _progress() as prog:
        task = prog.add_task("validating", total=None)
        rep = run_validation(list(tables) if tables else None,
                             progress=lambda m: prog.update(task, description=f"validating {m}"),
                             adapt_samples=adapt_samples)
    if out_dir is not None:
        _console(stderr=True).print(f"wrote {write_validation(rep, out_dir)}", markup=False)
    from rich.markup import escape

    for t in rep.tables:  # escaped: "[split=test]" or "[leave-one-GPU-out]" in a name is not markup
        tbl = _table(title=escape(f"{t.table}: {t.target}"), caption=escape(t.note))
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
