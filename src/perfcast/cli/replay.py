"""``perfcast replay``: replay a PyTorch profiler (Kineto) trace on its own GPU, another GPU or another DP size, or
predict the steps of a PyTorch execution trace (ExecutionTraceObserver JSON) on a device."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from perfcast.cli.app import _console, _table, app, emit_json, handled
from perfcast.cli.output_paths import check_output_paths

if TYPE_CHECKING:
    from perfcast.capture.execution_trace import ExecutionTrace

__all__ = ["replay"]


@app.command()
@handled
def replay(
    trace: Path = typer.Argument(..., help="A torch.profiler Chrome trace, or a PyTorch execution trace "
                                           "(ExecutionTraceObserver; not Chakra's protobuf .et), .json or .json.gz."),
    hardware: str | None = typer.Option(None, "--hardware", help="Reprice the GPU work for this device (id, alias "
                                                                 "or YAML; default: replay on the recorded GPU); "
                                                                 "required for an execution trace."),
    from_hardware: str | None = typer.Option(None, "--from-hardware",
                                             help="The device that recorded the trace, when its name is not in the "
                                                  "catalog."),
    dp: int | None = typer.Option(None, "--dp", "--world-size", min=1,
                                  help="Reprice the NCCL collectives for this data-parallel (world) size (an "
                                       "execution trace: their group where it records none)."),
    trace_out: Path | None = typer.Option(None, "--trace-out", help="Write the replayed timeline (Perfetto JSON)."),
    force: bool = typer.Option(False, "--force", help="Overwrite --trace-out."),
    kineto: Path | None = typer.Option(None, "--kineto", help="With an execution trace: a Kineto trace of the same "
                                                              "run, for the measured step times."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Replay a profiler trace's steps as a dependency graph; with --hardware or --dp, repriced. An execution trace
    (no durations) is predicted on --hardware as eager PyTorch steps."""
    from perfcast.capture.execution_trace import ExecutionTrace
    from perfcast.errors import ConfigError
    from perfcast.replay.run import load_trace, replay_trace, write_replay_trace

    check_output_paths(trace_out, force=force)
    if as_json:
        loaded = load_trace(trace)
    else:  # a large trace takes seconds to read, link and simulate: say so on stderr
        with _console(stderr=True).status(f"reading {trace.name}"):
            loaded = load_trace(trace)
    if isinstance(loaded, ExecutionTrace):
        if trace_out is not None or from_hardware is not None:
            raise ConfigError(f"{'--trace-out' if trace_out is not None else '--from-hardware'} applies to a Kineto "
                              "trace; an execution trace records no timeline (use --hardware, --kineto, --dp)")
        _execution_trace(loaded, hardware, kineto, dp, as_json)
        return
    if kineto is not None:
        raise ConfigError("--kineto links a Kineto trace to an execution trace; this trace is a Kineto trace already")
    if as_json:
        result = replay_trace(loaded, hardware=hardware, from_hardware=from_hardware, world_size=dp)
    else:
        with _console(stderr=True).status(f"replaying {trace.name}"):
            result = replay_trace(loaded, hardware=hardware, from_hardware=from_hardware, world_size=dp)
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


def _execution_trace(trace: ExecutionTrace, hardware: str | None, kineto: Path | None, dp: int | None,
                     as_json: bool) -> None:
    """Predict an execution trace's steps on ``hardware``; a table, or one JSON object."""
    from perfcast.replay.execution import replay_execution_trace

    data = replay_execution_trace(trace, hardware=hardware, kineto=kineto, world_size=dp).to_dict()
    if as_json:
        emit_json(data)
        return
    tbl = _table(title=f"{Path(data['trace']).name}: execution trace (schema {data['schema']}) predicted on "
                       f"{data['hardware']} as eager PyTorch steps")
    for col in ("step", "measured", "predicted", "vs measured"):
        tbl.add_column(col, justify="left" if col == "step" else "right")
    for s in data["steps"]:
        m = s["measured_s"]
        tbl.add_row(s["name"], f"{m * 1e3:.3f} ms" if m else "-", f"{s['predicted_s'] * 1e3:.3f} ms",
                    f"{100.0 * (s['predicted_s'] - m) / m:+.1f}%" if m else "-")
    con = _console()
    con.print(tbl)
    if data["whole_trace"]:
        con.print("no ProfilerStep annotations: the whole trace is one step")
    measured = data["measured_step_time_s"]
    con.print(f"median step: {data['step_time_s'] * 1e3:.3f} ms"
              + (f" (measured {measured * 1e3:.3f} ms, {data['error_pct']:+.2f}%)" if measured else
                 " (no measured time: --kineto links a Kineto trace of the same run)"))
    con.print(f"{data['ops']} ops priced: " + ", ".join(f"{k} {v}" for k, v in data["priced"].items())
              + ("; unknown ops priced as memory-bound: " + ", ".join(
                  f"{k} x{v}" for k, v in data["unknown_op_names"].items()) if data["unknown_ops"] else ""))
