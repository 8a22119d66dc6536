"""``perfcast calibrate``: this machine's CPU as the catalog device ``local-cpu``."""

from __future__ import annotations

from pathlib import Path

import typer

from perfcast.cli.app import _console, app, emit_json, handled
from perfcast.cli.output_paths import check_output_paths

__all__: list[str] = []


@app.command()
@handled
def calibrate(
    out: Path = typer.Option(None, "--out", "-o", help="Hardware YAML to write (default: local-cpu.yaml in the "
                                                       "user catalog the hardware catalog reads: "
                                                       "~/.perfcast/catalog/hardware/, or $PERFCAST_CATALOG's)."),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing file."),
    quick: bool = typer.Option(False, "--quick", help="A few benchmarks per family (seconds, less accurate)."),
    threads: int = typer.Option(None, "--threads", help="torch threads to calibrate for (default: all cores); "
                                "with 1, CPU time is measured: robust on a busy machine."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Run microbenchmarks with PyTorch on this CPU, fit its rates, write the hardware YAML local-cpu."""
    import time

    from perfcast.calibrate.machine import default_path, user_catalog_has
    from perfcast.calibrate.write import calibrate_to

    path = out or default_path()
    check_output_paths(path, force=force, create_folders=out is None)  # the user catalog's folders are made
    start = time.perf_counter()
    if as_json:
        hw, n = calibrate_to(path, quick=quick, threads=threads)
    else:
        with _console(stderr=True).status("benchmarking") as status:
            hw, n = calibrate_to(path, quick=quick, threads=threads,
                                 progress=lambda m: status.update(f"benchmarking {m}"))
    elapsed = time.perf_counter() - start
    assert hw.cpu is not None
    data = {"hardware": hw.id, "file": str(path), "threads": hw.cpu.threads, "benchmarks": n,
            "calibration_time_s": elapsed, "peak_fp32_flops_per_s": hw.peak_flops_per_s.fp32,
            "memory_bandwidth_Bps": hw.memory_bandwidth_Bps, "cache_bandwidth_Bps": hw.cpu.cache_bandwidth_Bps,
            "fit_error_frac": hw.cpu.fit_error_frac}
    if as_json:
        emit_json(data)
        return
    c = _console()
    c.print(f"wrote {path} ({n} benchmarks, {elapsed:.0f} s, {hw.cpu.threads} threads)", markup=False)
    c.print(f"  GEMM peak {hw.peak_flops_per_s.fp32 / 1e9:.1f} GFLOP/s, streaming "
            f"{hw.cpu.cache_bandwidth_Bps / 1e9:.1f} GB/s in cache, {hw.memory_bandwidth_Bps / 1e9:.1f} GB/s beyond",
            markup=False)
    c.print("  fit error (median): " + ", ".join(f"{k} {100 * v:.0f}%" for k, v in hw.cpu.fit_error_frac.items()),
            markup=False)
    if user_catalog_has(path):
        c.print(f"  use it by name: --hardware {hw.id}", markup=False)
    else:
        c.print(f"  use it as --hardware {path}, or by name after export PERFCAST_CATALOG={path.parent.parent}",
                markup=False)
