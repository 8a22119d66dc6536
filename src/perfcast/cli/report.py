"""``perfcast report DIR``: rebuild ``report.html`` from a suite folder without running anything again."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from perfcast.cli.app import app, emit_json, handled
from perfcast.cli.output_paths import check_output_paths

__all__ = ["REPORT_FILE", "check_report_path", "write_folder_report"]

REPORT_FILE = "report.html"


def check_report_path(path: Path, *, force: bool, explicit: bool) -> None:
    """Before the work: ``path`` can take the report. An existing file is replaced only with ``force``, except that
    a folder's own ``report.html`` (``explicit`` False) may be replaced when perfcast wrote it; the folder must
    exist and be writable (:func:`perfcast.cli.output_paths.check_output_paths`)."""
    from perfcast.errors import ConfigError
    from perfcast.report.html import is_perfcast_report

    if path.is_dir():
        raise ConfigError(f"{path} is a folder; --out needs a file name such as {path / REPORT_FILE}")
    if path.exists() and not force and (explicit or not is_perfcast_report(path)):
        why = "" if explicit else " and is not a perfcast report"
        raise ConfigError(f"{path} exists{why}; pass --force to overwrite it")
    check_output_paths(path, force=True)


def write_folder_report(folder: Path, *, out: Path | None = None, validation: Path | None = None) -> tuple[Path, int]:
    """Build the report of ``folder`` (results.json, validation.json or ``validation``, ``*.search.json``) into
    ``out`` (default ``folder/report.html``); returns the path and the number of figures."""
    from perfcast.report.data import read_inputs
    from perfcast.report.html import write_report

    inputs = read_inputs(folder, validation=validation)
    path = out if out is not None else folder / REPORT_FILE
    built = write_report(inputs, path, title=f"perfcast report: {folder.resolve().name}")
    return path, built.figures


@app.command()
@handled
def report(
    folder: Path = typer.Argument(..., help="A folder `perfcast suite --out DIR` wrote (results.json; also "
                                            "validation.json and *.search.json when present)."),
    out: Path = typer.Option(None, "--out", help="Where to write the HTML (default: DIR/report.html)."),
    validation: Path = typer.Option(None, "--validation",
                                    help="validation.json from `perfcast validate --out` (default: DIR's)."),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing file."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Rebuild the HTML report (one self-contained file) from saved results, without re-running anything."""
    from perfcast.errors import ConfigError

    if not folder.is_dir():
        raise ConfigError(f"{folder} is not a folder; give the folder `perfcast suite --out DIR` wrote")
    path = out if out is not None else folder / REPORT_FILE
    check_report_path(path, force=force, explicit=out is not None)
    written, figures = write_folder_report(folder, out=out, validation=validation)
    if as_json:
        emit_json({"report": str(written), "figures": figures, "size_bytes": written.stat().st_size})
        return
    sys.stdout.write(f"wrote {written} ({figures} figures, {written.stat().st_size / 2**20:.1f} MiB)\n")
