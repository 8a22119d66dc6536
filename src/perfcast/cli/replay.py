"""``perfcast replay``: replay a PyTorch profiler (Kineto) trace on its own GPU, another GPU or another DP size."""

from __future__ import annotations

from pathlib import Path

import typer

from perfcast.cli.app import _console, _table, app, emit_json, handled
from perfcast.cli.output_paths import check_output_paths

__all__ = ["replay"]


@app.command()
@handled
def replay(
    trace: Path = typer.Argument(..., help="A torch.profiler Chrome trace (.json or .json.gz)."),
    hardware: str | None = typer.Option(None, "--hardware", help="Reprice the GPU work for this device (id, alias "
                                                                 "or YAML; default: replay on the recorded GPU)."),
    from_hardware: str | None = typer.Option(None, "--from-hardware",
                                             help="The device that recorded the trace, when its name is not in the "
                                                  "catalog."),
    dp: int | None = typer.Option(None, "--dp", "--world-size", min=1,
                                  help="Reprice the NCCL collectives for this data-parallel (world) size."),
    trace_out: Path | None = typer.Option(None, "--trace-out", help="Write the replayed timeline (Perfetto JSON)."),
    force: bool = typer.Option(False, "--force", help="Overwrite --trace-out."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Replay a profiler trace's steps as a dependency graph; with --hardware or --dp, repriced."""
    from perfcast.replay.run import replay_trace, write_replay_trace

    check_output_paths(trace_out, force=force)
    if as_json:
        result = replay_trace(trace, hardware=hardware, from_hardware=from_hardware, world_size=dp)
    else:  # a large trace takes seconds to read, link and simulate: say so on stderr
        with _console(stderr=True).status(f"replaying {trace.name}"):
            result = replay_trace(trace, hardware=hardware, from_hardware=from_hardware, world_size=dp)
    if trace_out is not None:
        write_replay_trace(result, trace_out)
    data = result.to_dict()
    if as_json:
        emit_json(data)
        return
    target = data["hardware"] or data["recorded_device"]
    repriced = hardware is not None or (dp is not None and dp != data["world_size"])
    title = (f"{trace.name}: recorded on {data['recorded_device']}"
             + (f", repriced for {target}" if hardware else "")
             + (f", DP {data['world_size']} -> {data['target_world_size']}" if dp is not None else ""))
    tbl = _table(title=title)
    for col in ("step", "measured", "replayed" if not repriced else "predicted", "vs measured"):
        tbl.add_column(col, justify="left" if col == "step" else "right")
    for s in data["steps"]:
        diff = 100.0 * (s["predicted_s"] - s["measured_s"]) / s["measured_s"] if s["measured_s"] > 0 else 0.0
        tbl.add_row(s["name"], f"{s['measured_s'] * 1e3:.3f} ms", f"{s['predicted_s'] * 1e3:.3f} ms", f"{diff:+.1f}%")
    if len(data["steps"]) > 1:
        tbl.add_row("[b]median[/b]", f"{data['measured_step_time_s'] * 1e3:.3f} ms",
                    f"{data['step_time_s'] * 1e3:.3f} ms", f"{data['error_pct']:+.1f}%")
    con = _console()
    con.print(tbl)
    if data["whole_trace"]:
        con.print("no ProfilerStep annotations: the whole trace is one step (its runtime calls and GPU work)")
    con.print(f"median step: {data['step_time_s'] * 1e3:.3f} ms "
              f"(measured {data['measured_step_time_s'] * 1e3:.3f} ms, {data['error_pct']:+.2f}%)")
    con.print(f"{data['gpu_ops']} GPU ops, {data['host_calls']} runtime calls; host time as recorded; "
              "priced: " + ", ".join(f"{k} {v}" for k, v in data["repriced"].items()))
    if trace_out is not None:
        con.print(f"replayed timeline: {trace_out}")
