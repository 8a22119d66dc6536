"""``perfcast run FILE.yaml``: one scenario file of the user's, through the suite's schema and runners."""

from __future__ import annotations

from pathlib import Path

import typer

from perfcast.cli.app import _console, _table, app, does_not_fit, emit_json, handled, scenarios_failed

__all__: list[str] = []


def _latency_table(rows: list[dict[str, object]], title: str) -> object:
    t = _table(title=title)
    for c in ("model", "mode", "b", "seq", "hardware", "predicted", "measured", "error"):
        t.add_column(c, justify="right" if c in ("b", "seq", "predicted", "measured", "error") else "left")
    for row in rows:
        meas = row.get("measured_step_time_s")
        err = row.get("error_frac")
        t.add_row(str(row["model"]), str(row["mode"]), str(row["batch_size"]), str(row["seq_len"]),
                  str(row["hardware"]), f"{1e3 * float(str(row['step_time_s'])):.1f} ms",
                  f"{1e3 * float(str(meas)):.1f} ms" if meas is not None else "-",
                  f"{100 * float(str(err)):+.1f}%" if err is not None else "-")
    return t


def _detail_tables(r: object) -> list[object]:
    from perfcast.report.results import collective_tables, serving_table, training_table
    from perfcast.report.scenario_tables import kind_tables
    from perfcast.results.scenario import ScenarioResult

    assert isinstance(r, ScenarioResult)
    if r.kind == "training":
        return [training_table(r)]
    if r.kind == "collective":
        return list(collective_tables(r))
    if r.kind == "serving":
        return [serving_table(r)]
    if r.kind == "model_latency":
        ok = [row for row in r.rows if row["status"] == "ok"]
        return [_latency_table(ok, f"{r.id}: predicted step time")] if ok else []
    return kind_tables(r)


@app.command("run")
@handled
def run_file(
    file: Path = typer.Argument(..., help="A scenario YAML file (the schema of the shipped suite's files)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Run one scenario file and print its predictions (status ok, oom or error). Exit code 0 when it answers,
    1 when every run is out of memory (a verdict, its breakdown printed) or the scenario errored, 2 for a bad file."""
    from perfcast.errors import ConfigError
    from perfcast.scenarios import load_scenario, run_scenario

    if file.suffix not in (".yaml", ".yml"):
        raise ConfigError(f"{file}: a scenario file must be YAML (.yaml or .yml); `perfcast suite --only ID` runs "
                          "a shipped scenario by id")
    sc = load_scenario(file)
    r = run_scenario(sc)
    if as_json:
        emit_json({"id": r.id, "title": r.title, "kind": r.kind, "status": r.status, **r.headline(),
                   **({"error": r.error} if r.error else {}), "notes": r.notes, "rows": r.rows})
    else:
        _print_result(r)
    if r.status == "error":
        scenarios_failed(f"{r.id}: " + " ".join((r.error or "every run failed").split()))
    if r.status == "oom":
        oom = next((n for n in r.notes if ": out of memory" in n), "every run is out of memory")
        does_not_fit(f"{r.id}: " + " ".join(oom.split()))


def _print_result(r: object) -> None:
    from perfcast.results.scenario import ScenarioResult

    assert isinstance(r, ScenarioResult)
    h = r.headline()
    con = _console()
    con.print(f"{r.id}: {r.title}: {r.status} ({h['predictions']} predictions, {h['with_measurement']} with a "
              "measurement)", markup=False)
    if r.error:
        con.print(f"{r.id}: {r.status}: {r.error}", markup=False)
    for table in _detail_tables(r):
        if table is not None:
            con.print(table)
    for row in r.rows:
        if row["status"] != "ok":
            what = row.get("label") or row.get("model") or row.get("op", "")
            con.print(f"{r.id}: {what}: {row.get('error', '')}", markup=False)
    for note in r.notes:
        con.print(f"{r.id}: {note}", markup=False)
