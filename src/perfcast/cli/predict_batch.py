"""``perfcast predict-batch``: predict every row of a ground-truth table and write the predicted CSV."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from perfcast.cli.app import app, emit_json, handled
from perfcast.cli.output_paths import check_output_paths

__all__ = ["predict_batch_cmd"]


@app.command("predict-batch")
@handled
def predict_batch_cmd(
    table: Path = typer.Argument(..., help="A CSV or CSV.gz in one of the ground-truth schemas."),
    output: Path = typer.Option(..., "-o", "--out", help="Where to write the predicted CSV (.gz to compress)."),
    force: bool = typer.Option(False, "--force", help="Overwrite OUTPUT if it exists."),
    adapt: Path = typer.Option(None, "--adapt", help="A table of the same kind with measured rows on the "
                                                     "device(s) to adapt to: their corrections are fitted to it first "
                                                     "(see perfcast adapt)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object (summary)."),
) -> None:
    """Predict every row of a table; writes the rows plus pred_X, pred_X_low, pred_X_high and status."""
    from perfcast.groundtruth.predict_batch import predict_batch, write_predictions
    from perfcast.results.serialize import to_json
    from perfcast.validate.metrics import summarize

    check_output_paths(output, force=force)
    adapted: list[dict[str, object]] = []
    if adapt is None:
        res = predict_batch(table)
    else:
        from perfcast.validate.adapt import predict_adapted

        res, devices = predict_adapted(table, adapt)
        adapted = [{"catalog_id": d.catalog_id, "fitted_rows": d.fit.runs, **d.corrections.model_dump()}
                   for d in devices]
    path = write_predictions(res, output, force=True)  # checked before the work
    ok = sum(1 for s in res.prediction.status if s == "ok")
    oom = sum(1 for s in res.prediction.status if s.startswith("out of memory"))
    targets: dict[str, dict[str, float | int]] = {}
    for t in res.targets:
        s = summarize(res.measured(t), res.prediction.pred[t], res.prediction.low[t], res.prediction.high[t])
        targets[t] = to_json(s)
    if as_json:
        emit_json({"table": str(table), "kind": res.kind.name, "rows": len(res.rows), "predicted_rows": ok,
                   "out_of_memory_rows": oom, "output": str(path), "targets": targets,
                   **({"adapted": adapted} if adapt is not None else {})})
        return
    also = f" ({oom} more out of memory: see their status)" if oom else ""
    sys.stdout.write(f"{res.kind.name}: {len(res.rows)} rows, {ok} predicted{also} -> {path}\n")
    for a in adapted:
        sys.stdout.write(f"  adapted {a['catalog_id']} to {a['fitted_rows']} rows of {adapt}: matrix throughput "
                         f"x{a['matrix_throughput']:.3f}, memory bandwidth x{a['memory_bandwidth']:.3f}, host time "
                         f"per kernel x{a['host_overhead']:.3f}\n")
    for t, d in targets.items():
        if d["predicted_rows"]:
            sys.stdout.write(f"  {t}: MAPE {100 * d['mape_frac']:.1f}% over {d['predicted_rows']} measured rows\n")
