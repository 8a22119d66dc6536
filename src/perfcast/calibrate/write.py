"""Benchmark, fit and write ``local-cpu.yaml`` in one call."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from pathlib import Path

import yaml

from perfcast.calibrate.bench import run_microbenchmarks
from perfcast.calibrate.fit import fit_cpu
from perfcast.calibrate.machine import probe_machine
from perfcast.catalog.hardware import Hardware

__all__ = ["calibrate_to", "hardware_yaml"]


def hardware_yaml(hw: Hardware) -> str:
    """The YAML text of a hardware entry (base SI units), with a header naming how it was made."""
    body = yaml.safe_dump(hw.model_dump(mode="json", exclude_none=True), sort_keys=False)
    return ("# This machine's CPU, written by `perfcast calibrate` from PyTorch microbenchmarks.\n"
            "# Base SI units. Re-run `perfcast calibrate --force` after changing hardware or threads.\n" + body)


def calibrate_to(path: Path, *, quick: bool = False, threads: int | None = None,
                 progress: Callable[[str], None] | None = None) -> tuple[Hardware, int]:
    """Run the benchmarks, fit them and write the entry to ``path``; returns it and the benchmark count."""
    measurements, used = run_microbenchmarks(quick=quick, threads=threads, progress=progress)
    info = probe_machine()
    fit = fit_cpu(measurements, info, used)
    import torch

    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    families = ", ".join(f"{f} {sum(1 for m in measurements if m.family == f)}" for f in
                         ("gemm", "vector", "conv", "attention"))
    source = (f"perfcast calibrate{' --quick' if quick else ''} on this machine, {when}: {len(measurements)} "
              f"PyTorch {torch.__version__} microbenchmarks in fp32 ({families}), fastest of repeats in 4 "
              f"interleaved passes, private caches flushed before each, {used} threads",)
    notes = (f"peak_flops_per_s.fp32 and the bandwidths are fitted achieved rates, not datasheet peaks; "
             f"tdp_W is an estimate (a server core's share of package TDP), not measured. CPU: {info.name}.")
    hw = fit.hardware(info, source=source, notes=notes)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(hardware_yaml(hw))
    return hw, len(measurements)
