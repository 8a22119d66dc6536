"""``perfcast adapt``: fit a device's corrections to a few of its own measurements and write it as hardware YAML."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from perfcast.cli.app import app, emit_json, handled
from perfcast.cli.output_paths import check_output_paths

__all__ = ["adapt_cmd"]


@app.command("adapt")
@handled
def adapt_cmd(
    samples: Path = typer.Argument(..., help="A table in one of predict-batch's schemas, its measured columns "
                                             "filled, run on the device(s) to adapt to."),
    output: Path = typer.Option(..., "-o", "--out", help="The hardware YAML to write (one device), or an existing "
                                                         "folder for one <id>.yaml per device."),
    new_id: str = typer.Option(None, "--id", help="The adapted device's id (default: <catalog id>-adapted; one "
                                                  "device only)."),
    force: bool = typer.Option(False, "--force", help="Overwrite files that exist."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Adapt the samples' device(s): write hardware YAML any command takes as --hardware path/to/device.yaml."""
    from perfcast.errors import ConfigError
    from perfcast.validate.adapt import adapted_entry, fit_samples, hardware_yaml, read_samples

    to_folder = output.is_dir()
    if not to_folder:
        check_output_paths(output, force=force)
    data = read_samples(samples)
    devices = fit_samples(data)
    if len(devices) > 1 and not to_folder:
        raise ConfigError(f"the samples ran on {len(devices)} devices ({', '.join(d.catalog_id for d in devices)}): "
                          "give -o an existing folder to write one <id>.yaml each")
    if new_id is not None and len(devices) > 1:
        raise ConfigError("--id names one device; the samples ran on "
                          f"{len(devices)} ({', '.join(d.catalog_id for d in devices)})")
    entries = [adapted_entry(d, data, new_id=new_id) for d in devices]
    paths = [output / f"{hw.id}.yaml" for hw in entries] if to_folder else [output]
    check_output_paths(*paths, force=force)
    for hw, path in zip(entries, paths, strict=True):
        path.write_text(hardware_yaml(hw))
    if as_json:
        emit_json({"samples": str(samples), "kind": data.kind.name, "fitted_target": data.fitted_target,
                   "devices": [{"catalog_id": d.catalog_id, "id": hw.id, "output": str(path), "sample_rows": d.rows,
                                "fitted_rows": d.fit.runs, **d.corrections.model_dump(),
                                "fitted": list(d.fit.fitted), "rms_log_error_before": d.fit.rms_log_before,
                                "rms_log_error_after": d.fit.rms_log_after}
                               for d, hw, path in zip(devices, entries, paths, strict=True)]})
        return
    for d, hw, path in zip(devices, entries, paths, strict=True):
        c = d.corrections
        sys.stdout.write(f"{d.catalog_id}: {d.fit.runs} measured rows ({data.fitted_target}) -> {hw.id} in {path}\n"
                         f"  matrix throughput x{c.matrix_throughput:.3f}, memory bandwidth x{c.memory_bandwidth:.3f}, "
                         f"host time per kernel x{c.host_overhead:.3f}; rms error "
                         f"{100 * d.fit.rms_log_before:.1f}% -> {100 * d.fit.rms_log_after:.1f}% (log)\n")
        unseen = [n for n in c.model_dump() if n not in d.fit.fitted]
        if unseen:
            sys.stdout.write(f"  the samples do not depend on {', '.join(unseen)}: kept at 1\n")
