"""``perfcast fit``: fit the kernel (and host, collective, training, serving) coefficients and write them as JSON."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from perfcast.cli.app import _console, app, emit_json, handled, one_of
from perfcast.cli.output_paths import check_output_paths

__all__ = ["fit"]


@app.command()
@handled
def fit(
    output: Path = typer.Option(None, "-o", "--out", help="Where to write coefficients (default: print only)."),
    stages: str = typer.Option("vector,gemm,conv,tensor,attention", "--stages",
                               help="Comma-separated stages: vector, gemm, conv, tensor, attention (kernel "
                                    "tables), host "
                                    "(host time per eager kernel, from end-to-end rows of your own machine) and "
                                    "collectives (VIDUR network and published collective tables), training "
                                    "(published training runs), serving (online serving benchmarks, with one "
                                    "fit per held-out GPU), energy (measured GPU energy: the vLLM 0.5 engine's "
                                    "CPU time, the host time per eager kernel and the power model's idle and active "
                                    "shares, with one fit per held-out GPU; writes -o, --compose-out, --serving-out "
                                    "and --energy-out); "
                                    "none = keep the current coefficients (e.g. to recompute --intervals-out)."),
    intervals: Path = typer.Option(None, "--intervals-out", help="Also write prediction intervals to this JSON."),
    compose_output: Path = typer.Option(None, "--compose-out",
                                        help="Where the host stage writes composition coefficients."),
    collectives_output: Path = typer.Option(None, "--collectives-out",
                                            help="Where the collectives stage writes its coefficients."),
    training_output: Path = typer.Option(None, "--training-out",
                                         help="Where the training stage writes its coefficients."),
    serving_output: Path = typer.Option(None, "--serving-out",
                                        help="Where the serving stage writes its coefficients."),
    energy_output: Path = typer.Option(None, "--energy-out",
                                       help="Where the energy stage writes the energy coefficients."),
    intervals_old: Path = typer.Option(None, "--intervals", hidden=True),  # the README's earlier spellings
    compose_old: Path = typer.Option(None, "--compose-output", hidden=True),
    collectives_old: Path = typer.Option(None, "--collectives-output", hidden=True),
    training_old: Path = typer.Option(None, "--training-output", hidden=True),
    force: bool = typer.Option(False, "--force", help="Overwrite existing output files."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Fit the kernel coefficients on the visible kernel tables (train split / VIDUR) and write them as JSON."""
    from perfcast.coefficients.bundle import Calibration
    from perfcast.validate.fit import fit_coefficients, fit_host, fit_intervals

    intervals = one_of("--intervals-out", intervals, "--intervals", intervals_old)
    compose_output = one_of("--compose-out", compose_output, "--compose-output", compose_old)
    collectives_output = one_of("--collectives-out", collectives_output, "--collectives-output", collectives_old)
    training_output = one_of("--training-out", training_output, "--training-output", training_old)
    check_output_paths(output, intervals, compose_output, collectives_output, training_output, serving_output,
                       energy_output, force=force)
    chosen = _chosen_stages(stages, compose_output, collectives_output, training_output, serving_output)
    _check_energy_stage(chosen, output, compose_output, serving_output, energy_output)
    lines: list[str] = []
    logger = lines.append if as_json else _console(stderr=True).print  # the log is not the result
    kernel_stages = [s for s in chosen if s not in ("host", "collectives", "training", "serving", "energy")]
    cal = Calibration.shipped()
    co = fit_coefficients(stages=kernel_stages, log=logger) if kernel_stages else cal.kernel
    cal = cal.with_kernel(co)
    if output is not None:
        output.write_text(co.to_json(), encoding="utf-8")
    if "host" in chosen and compose_output is not None:
        compose_output.write_text(fit_host(cal, log=logger).to_json(), encoding="utf-8")
    cc = None
    if "collectives" in chosen and collectives_output is not None:
        from perfcast.validate.fit_collectives import fit_collectives

        cc = fit_collectives(log=logger)
        collectives_output.write_text(cc.to_json(), encoding="utf-8")
    trc = None
    if "training" in chosen and training_output is not None:
        trc = _fit_training(cal, training_output, logger)
    svc = None
    if "serving" in chosen and serving_output is not None:
        from perfcast.validate.fit_serving import fit_serving

        svc = fit_serving(cal, log=logger)
        serving_output.write_text(svc.to_json(), encoding="utf-8")
    enc = None
    if "energy" in chosen:
        from perfcast.validate.fit_energy import fit_energy

        assert output is not None and serving_output is not None and energy_output is not None
        assert compose_output is not None
        cal, enc = fit_energy(cal, log=logger)
        co, svc = cal.kernel, cal.serving
        output.write_text(co.to_json(), encoding="utf-8")
        compose_output.write_text(cal.compose.to_json(), encoding="utf-8")
        serving_output.write_text(svc.to_json(), encoding="utf-8")
        energy_output.write_text(enc.to_json(), encoding="utf-8")
    iv = None
    if intervals is not None:
        iv = fit_intervals(cal if cc is None else cal.with_collectives(cc))
        intervals.write_text(json.dumps(iv, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    if as_json:
        emit_json({"coefficients": co.model_dump(mode="json"), "log": lines, "intervals": iv,
                   "collectives": cc.model_dump(mode="json") if cc is not None else None,
                   "training": trc.model_dump(mode="json") if trc is not None else None,
                   "serving": svc.model_dump(mode="json") if svc is not None else None,
                   "energy": enc.model_dump(mode="json") if enc is not None else None,
                   "output": str(output) if output else None})
    elif output is None and kernel_stages:
        _console().print(co.to_json())


def _chosen_stages(stages: str, compose_output: Path | None, collectives_output: Path | None,
                   training_output: Path | None, serving_output: Path | None) -> list[str]:
    """The stages ``--stages`` names (``none``: no stage), each known and with the output file it writes."""
    from perfcast.errors import ConfigError

    chosen = [s.strip() for s in stages.split(",") if s.strip() and s.strip() != "none"]
    known = {"vector", "gemm", "conv", "tensor", "attention", "host", "collectives", "training", "serving", "energy"}
    if set(chosen) - known or (not chosen and stages.strip() != "none"):
        raise ConfigError(f"unknown fit stages {sorted(set(chosen) - known) or chosen}; use {', '.join(sorted(known))}")
    if "host" in chosen and compose_output is None:
        raise ConfigError("the host stage needs --compose-out PATH for the composition coefficients")
    if "collectives" in chosen and collectives_output is None:
        raise ConfigError("the collectives stage needs --collectives-out PATH for the collective coefficients")
    if "training" in chosen and training_output is None:
        raise ConfigError("the training stage needs --training-out PATH for the training coefficients")
    if "serving" in chosen and serving_output is None:
        raise ConfigError("the serving stage needs --serving-out PATH for the serving coefficients")
    return chosen


def _check_energy_stage(chosen: list[str], output: Path | None, compose_output: Path | None,
                        serving_output: Path | None, energy_output: Path | None) -> None:
    """The energy stage writes the kernel (-o), composition, serving and energy coefficients, and runs without the
    serving and host stages (they would write the same files)."""
    from perfcast.errors import ConfigError

    if "energy" not in chosen:
        return
    if "serving" in chosen or "host" in chosen:
        raise ConfigError("run the energy stage after the serving and host stages, not with them: they write "
                          "--serving-out and --compose-out too")
    if output is None or compose_output is None or serving_output is None or energy_output is None:
        raise ConfigError("the energy stage needs -o PATH (kernel coefficients: its power block), --compose-out PATH "
                          "(the host time per eager kernel), --serving-out PATH (the vllm-0.5 engine) and "
                          "--energy-out PATH (the energy coefficients)")


def _fit_training(cal: Any, training_output: Path, logger: Callable[[str], Any]) -> Any:
    """The training stage: fit on the published training runs and write the coefficients to ``training_output``."""
    from perfcast.groundtruth.files import find_groundtruth
    from perfcast.validate.fit_training import fit_training, training_cases

    gt = find_groundtruth()
    assert gt is not None
    cases = training_cases(gt / "published" / "training.csv")
    logger(f"fit training: {len(cases)} published rows")
    trc = fit_training(cases, cal)
    training_output.write_text(trc.to_json(), encoding="utf-8")
    return trc
