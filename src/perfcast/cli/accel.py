"""``perfcast accel``: a layer on a spatial accelerator: cycles, utilization, energy by component, fJ/MAC."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from perfcast.cli.app import _console, _table, app, emit_json, handled
from perfcast.cli.output_paths import refuse_overwrite
from perfcast.results.serialize import to_json

__all__ = ["accel"]


@app.command()
@handled
def accel(
    arch: str = typer.Option("eyeriss", "--arch", "-a", help="Architecture: a shipped name or a YAML file."),
    layer: str | None = typer.Option(None, "--layer", "-l", help="A catalog layer (resnet50.conv1) or a "
                                                                 "problem YAML file."),
    mapping: Path | None = typer.Option(None, "--mapping", help="Evaluate this mapping YAML instead of searching."),
    search: str = typer.Option("random", "--search", help="random | exhaustive (over the pruned space)."),
    samples: int = typer.Option(2000, "--samples", help="Random draws before the descent (which counts at "
                                                         "most 60x as many), or the most mappings exhaustive may "
                                                         "try."),
    objective: str = typer.Option("edp", "--objective", help="edp | energy | delay."),
    seed: int = typer.Option(0, "--seed", help="Seed of the random search."),
    batch_size: int = typer.Option(1, "--batch-size", "-b", help="Images (or sequences) of a catalog layer."),
    out: Path | None = typer.Option(None, "--out", help="Write the mapping used as YAML to this file."),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing --out file."),
    list_archs: bool = typer.Option(False, "--list-archs", help="List the shipped architectures."),
    list_layers: str | None = typer.Option(None, "--list-layers", help="List a catalog model's layers."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Map a conv or GEMM layer onto a spatial accelerator (the mapper's best, or --mapping) and print its
    cycles, utilization and energy by component."""
    import perfcast.accel as acc
    from perfcast.errors import ConfigError

    if list_archs or list_layers:
        names = acc.list_archs() if list_archs else acc.list_layers(str(list_layers))
        if as_json:
            emit_json({"archs" if list_archs else "layers": names})
        else:
            _console().print("\n".join(names))
        return
    if layer is None:
        raise ConfigError("--layer is required: a catalog layer such as resnet50.conv1 or a problem YAML file "
                          "(list them: perfcast accel --list-layers resnet50)")
    refuse_overwrite(out, force=force)
    spec = acc.load_arch(arch)
    problem = acc.load_problem(layer, batch_size=batch_size)
    found = None
    mapper = [flag for flag, value, default in (("--search", search, "random"), ("--samples", samples, 2000),
                                                ("--objective", objective, "edp"), ("--seed", seed, 0))
              if value != default]
    if mapping is not None and mapper:
        raise ConfigError(f"{', '.join(mapper)} set the mapper's search; --mapping evaluates the given mapping "
                          "without one (drop them, or drop --mapping)")
    if search == "exhaustive" and seed != 0:
        raise ConfigError("--seed draws the random search's mappings; --search exhaustive tries every mapping of "
                          "the pruned space in order (drop --seed)")
    if mapping is not None:
        chosen = acc.load_mapping(mapping)
        result = acc.evaluate(spec, problem, chosen)
    else:
        found = _search(spec, problem, quiet=as_json, strategy=search, samples=samples, objective=objective,
                        seed=seed)
        chosen, result = found.mapping, found.best
    if out is not None:
        import yaml

        out.write_text(yaml.safe_dump(chosen.model_dump(exclude_defaults=True), sort_keys=False), encoding="utf-8")
    data = to_json(result)
    data["mapping"] = chosen.model_dump(exclude_defaults=True)
    if found is not None:
        data["search"] = {"strategy": found.strategy, "objective": found.objective, "evaluated": found.evaluated,
                          "drawn": found.drawn, "search_time_s": found.search_time_s,
                          "mappings_per_s": found.mappings_per_s, "seed": seed}
    if as_json:
        emit_json(data)
        return
    _print(result, found)


def _search(spec: object, problem: object, *, quiet: bool, **options: Any) -> Any:
    """The mapper's search, with a progress display on stderr once it has run for a second (not with --json):
    a bar over the pruned space for exhaustive, the mappings counted so far for random (its descent ends when
    kicks stop finding better mappings, so it has no known total)."""
    import time

    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    import perfcast.accel as acc

    start = time.perf_counter()
    bar: list[tuple[Progress, Any]] = []
    known_total = options.get("strategy") == "exhaustive"

    def tick(done: int, total: int) -> None:
        if quiet or not _console(stderr=True).is_terminal:
            return
        if not bar:
            if time.perf_counter() - start < 1.0:
                return
            prog = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                            TextColumn("{task.completed:,} mappings counted"), TimeElapsedColumn(),
                            console=_console(stderr=True), transient=True)
            prog.start()
            bar.append((prog, prog.add_task(f"{options.get('strategy')} mapping search",
                                            total=total if known_total else None)))
        prog, task = bar[0]
        prog.update(task, completed=done, total=total if known_total else None)

    try:
        return acc.search_mappings(spec, problem, progress=tick, **options)  # type: ignore[arg-type]
    finally:
        if bar:
            bar[0][0].stop()


def _print(r: object, found: object) -> None:
    from perfcast.accel import AccelResult, SearchResult

    assert isinstance(r, AccelResult)
    t = _table(title=f"{r.problem} on {r.arch}", show_header=False)
    t.add_column("quantity", no_wrap=True)
    t.add_column("value", justify="right")
    t.add_row("MACs", f"{r.macs:,}")
    t.add_row("PEs used", f"{r.pes_used} of {r.num_pes} ({100 * r.spatial_utilization:.1f}%)")
    t.add_row("ideal cycles", f"{r.ideal_cycles:,.0f}")
    t.add_row("cycles", f"{r.cycles:,.0f} ({r.bound} bound)")
    t.add_row("utilization", f"{100 * r.utilization:.1f}%")
    t.add_row("time", f"{1e3 * r.time_s:.3f} ms")
    t.add_row("energy", f"{1e6 * r.energy_J:.1f} uJ")
    t.add_row("energy per MAC", f"{r.energy_per_mac_fJ:,.0f} fJ")
    for name, joules in r.energy_breakdown().items():
        t.add_row(f"  {name}", f"{1e6 * joules:.1f} uJ ({100 * joules / r.energy_J:.1f}%)")
    shares = r.energy_shares()
    t.add_row("DRAM / buffers / MAC", " / ".join(f"{100 * shares[k]:.1f}%" for k in ("dram", "buffers", "mac")))
    if isinstance(found, SearchResult):
        t.add_row("mapper", f"{found.strategy}, {found.objective}: {found.evaluated:,} mappings in "
                            f"{found.search_time_s:.2f} s ({found.mappings_per_s:,.0f}/s)")
    _console().print(t)
