"""``perfcast predict``: one step of a catalog model or a captured workload on one device (or one node)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from perfcast.cli.app import POWER_LIMIT_HELP, _console, app, does_not_fit, emit_json, handled, power_limited

__all__ = ["predict"]


@app.command()
@handled
def predict(
    model: str = typer.Option(None, "--model", "-m", help="Model id, alias, HF repo id or config.json path."),
    hardware: str = typer.Option(..., "--hardware", "-H", help="Device id, alias or hardware YAML path."),
    power_limit_W: float | None = typer.Option(None, "--power-limit-W", "--power-limit-w", help=POWER_LIMIT_HELP),
    workload: Path = typer.Option(None, "--workload", "-w", help="A captured workload JSON (`perfcast capture`) "
                                                                 "instead of --model."),
    mode: str = typer.Option("inference", "--mode", help="inference | training | prefill | decode"),
    batch_size: int = typer.Option(1, "--batch-size", "-b", help="Sequences per step."),
    seq_len: int = typer.Option(512, "--seq-len", "-s", help="Tokens per sequence (context length for decode)."),
    dtype: str | None = typer.Option(None, "--dtype", help="fp32 | tf32 | fp16 | bf16 | fp8 ... (default: the "
                                                             "checkpoint's torch_dtype, as train and serve use)."),
    fused: bool = typer.Option(False, "--fused", help="Compiler fusion (torch.compile)."),
    parallelism: str = typer.Option("none", "--parallelism", help="none | dpN | tpN | ppN (GPUs of one node)."),
    tp: int | None = typer.Option(None, "--tp", help="Tensor-parallel degree (--tp N is --parallelism tpN)."),
    microbatches: int | None = typer.Option(None, "--microbatches", help="Pipeline micro-batches (ppN)."),
    optimizer: str = typer.Option("adam", "--optimizer", help="Training optimizer step: adam | sgd | none."),
    attention: str | None = typer.Option(None, "--attention", help="eager | sdpa | flash (default by style)."),
    style: str | None = typer.Option(None, "--style", help="hf (eager PyTorch) | engine (fused serving kernels)."),
    quantization: str = typer.Option("auto", "--quantization", "-q",
                                     help="Inference modes: auto (the checkpoint's own) | none | w4a16 | w8a16 | "
                                          "w8a8 | fp8 | fp4 | mxfp4. Training runs in --dtype."),
    explain: bool = typer.Option(False, "--explain", help="Show the top ops, their bound and share."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Predict one step of a model on one device (or a 4-GPU node with --parallelism)."""
    from perfcast.compose.predict import StepRequest
    from perfcast.errors import ConfigError
    from perfcast.system.predict import predict as run
    from perfcast.workload.types import Mode

    try:
        mode_v = Mode(mode)
    except ValueError:
        raise ConfigError(f"unknown mode {mode!r}; use one of {', '.join(m.value for m in Mode)}") from None
    if (model is None) == (workload is None):
        raise ConfigError("give either --model (a catalog model) or --workload (a captured workload JSON)")
    parallelism = _with_tp(parallelism, tp)
    hardware = power_limited(hardware, power_limit_W)
    _check_node(parallelism, hardware)
    if optimizer != "adam" and mode_v is not Mode.TRAINING:
        raise ConfigError(f"--optimizer {optimizer} is the optimizer step of --mode training; --mode {mode} has none")
    if workload is not None:
        from perfcast.capture.io import load_workload

        _check_captured_flags(quantization, batch_size, seq_len, attention, style, microbatches)
        st = _predict_captured(load_workload(workload), hardware, mode_v, dtype, parallelism, optimizer, fused)
    else:
        st = run(StepRequest(model=model, hardware=hardware, mode=mode_v, batch_size=batch_size, seq_len=seq_len,
                             dtype=dtype, fused=fused, parallelism=parallelism, microbatches=microbatches,
                             optimizer=optimizer, attention=attention, style=style, quantization=quantization))
    if as_json:
        emit_json(_step_json(st, dtype, explain))
    else:
        _print_step(st, model, hardware, workload, dtype, explain)
    if st.memory is not None and not st.memory.fits:
        gib = 2**30
        does_not_fit(f"out of memory: the step needs {st.memory.total_bytes / gib:.1f} GiB per GPU and "
                     f"{st.hardware_id} has {st.memory.capacity_bytes / gib:.1f} GiB; use more GPUs (--tp, "
                     "--parallelism ppN), a smaller batch or sequence, or a narrower --dtype")


def _check_captured_flags(quantization: str, batch_size: int, seq_len: int, attention: str | None, style: str | None,
                          microbatches: int | None) -> None:
    """A captured workload keeps its shapes, kernels and dtype: the flags that would change them are refused."""
    from perfcast.errors import ConfigError

    if quantization != "auto":
        raise ConfigError("--quantization applies to catalog models (--model); a captured workload runs in --dtype")
    given = [flag for flag, value, default in (("--batch-size", batch_size, 1), ("--seq-len", seq_len, 512),
                                               ("--attention", attention, None), ("--style", style, None),
                                               ("--microbatches", microbatches, None)) if value != default]
    if given:
        raise ConfigError(f"{', '.join(given)}: a captured workload keeps the shapes and kernels it was captured "
                          "with; capture it again with other example inputs")


def _step_json(st: Any, dtype: str | None, explain: bool) -> dict[str, Any]:
    """The ``--json`` object of a step (with the memory verdict, and the top ops with ``--explain``)."""
    from perfcast.kernel.energy import ENERGY_STATUS

    data: dict[str, Any] = {
        "model": st.model_id, "hardware": st.hardware_id, "mode": st.mode, "batch_size": st.batch_size,
        "seq_len": st.seq_len, "dtype": st.dtype, "quantization": st.quantization, "fused": st.fused,
        "parallelism": st.parallelism, "chosen_by_default": [] if dtype is not None else ["dtype"],
        "step_time_s": st.time_s, "step_time_low_s": st.low_s, "step_time_high_s": st.high_s,
        "device_busy_s": st.device_busy_s, "host_s": st.host_s, "comm_s": st.comm_s,
        "flops": st.flops, "achieved_flops_per_s": st.achieved_flops_per_s, "num_kernels": st.num_kernels,
        "time_by_phase_s": st.by_phase_s, "time_by_group_s": st.by_group_s,
        "energy_J": st.energy_J, "avg_power_W": st.avg_power_W, "energy_by_group_J": st.energy_by_group_J,
        "energy_model": ENERGY_STATUS,
    }
    mem = st.memory
    if mem is not None:
        data.update({"fits": mem.fits, "verdict": "fits" if mem.fits else "out_of_memory",
                     "memory_per_gpu_bytes": mem.total_bytes, "memory_capacity_bytes": mem.capacity_bytes})
        data.update({f"memory_{k}": v for k, v in mem.parts().items()})
    if explain:
        busy = st.device_busy_s or 1.0
        data["top_ops"] = [{"name": o.op.name, "op": o.op.op, "dims": list(o.op.dims), "count": o.op.count,
                            "time_s": o.total_s, "share_frac": o.total_s / busy, "bound": o.kernel.bound,
                            "flops": o.op.flops * o.op.count, "bytes": o.op.bytes * o.op.count}
                           for o in st.top_ops(12)]
    return data


def _print_step(st: Any, model: str, hardware: str, workload: Path | None, dtype: str | None,
                explain: bool) -> None:
    """The step as a table (with where the default dtype came from), and the top ops with ``--explain``."""
    from perfcast.report.text import step_table, top_ops_table

    note = None
    if dtype is None and workload is not None:
        note = "the captured model's"
    elif dtype is None:
        from perfcast.catalog.defaults import describe_default_dtype
        from perfcast.catalog.hardware import load_hardware
        from perfcast.catalog.models import load_model
        from perfcast.dtypes import DType

        note = describe_default_dtype(load_model(model), DType(st.dtype), load_hardware(hardware))
    _console().print(step_table(st, dtype_note=note))
    if explain:
        _console().print(top_ops_table(st))


def _check_node(parallelism: str, hardware: str) -> None:
    """``--parallelism`` spans GPUs of one node: its degree is at most the GPUs sharing the node's fabric (the
    GPU's catalog node, as serve takes it)."""
    from perfcast.catalog.hardware import load_hardware
    from perfcast.compose.predict import parse_parallelism
    from perfcast.errors import ConfigError
    from perfcast.system.parallel import node_for

    par = parse_parallelism(parallelism)
    if par.degree == 1:
        return
    try:
        node_for(load_hardware(hardware), par.degree)
    except ConfigError as exc:
        raise ConfigError(f"--parallelism {par}: {exc}") from None


def _with_tp(parallelism: str, tp: int | None) -> str:
    """``--parallelism`` after ``--tp N`` (tensor parallelism is asked with --tp in every command)."""
    from perfcast.compose.predict import parse_parallelism
    from perfcast.errors import ConfigError

    if tp is None:
        return parallelism
    if tp < 1:
        raise ConfigError(f"--tp {tp}: the tensor-parallel degree is a positive integer (1 = one GPU)")
    asked = parse_parallelism(parallelism)
    wanted = "none" if tp == 1 else f"tp{tp}"
    if asked.kind != "none" and str(asked) != wanted:
        raise ConfigError(f"--tp {tp} and --parallelism {parallelism} ask for different layouts; give one of them "
                          f"(--tp {tp} is --parallelism {wanted})")
    return wanted


def _predict_captured(w: Any, hardware: str, mode: Any, dtype: str | None, parallelism: str, optimizer: str,
                      fused: bool) -> Any:
    """A captured workload's inference forward, or its training step (``--mode training``: forward, backward
    and optimizer on one GPU, ``dpN`` adding the gradient all-reduce), in ``--dtype`` (default: the dtype it was
    captured in, the captured model's checkpoint dtype)."""
    from dataclasses import replace

    from perfcast.capture.training import cast_workload, training_workload
    from perfcast.catalog.hardware import load_hardware
    from perfcast.coefficients.bundle import Calibration
    from perfcast.compose.energy import with_energy
    from perfcast.compose.memory import step_memory
    from perfcast.compose.predict import parse_parallelism
    from perfcast.dtypes import parse_dtype
    from perfcast.errors import ConfigError
    from perfcast.system.parallel import NodeStep, node_for, predict_data_parallel
    from perfcast.system.training import LayerComm
    from perfcast.workload.types import Mode

    hw = load_hardware(hardware)
    par = parse_parallelism(parallelism)
    if mode not in (Mode.INFERENCE, Mode.TRAINING):
        raise ConfigError(f"--mode {mode.value}: a captured workload predicts inference or training (prefill and "
                          "decode need a KV cache the captured graph does not have)")
    if par.kind in ("tp", "pp"):
        raise ConfigError(f"--parallelism {parallelism}: a captured workload runs on one GPU or data-parallel (dpN); "
                          "tensor parallelism needs to know which GEMMs to shard, which a captured graph does not say "
                          "(pipeline parallelism: perfcast train --workload --pp)")
    run_dtype = w.dtype if dtype is None else parse_dtype(dtype)
    if mode is Mode.TRAINING:
        step_w = training_workload(w, run_dtype, optimizer=optimizer)
    else:
        step_w = cast_workload(w, run_dtype)
    memory = step_memory(step_w, hw, gpus=par.degree)
    cal = Calibration.shipped()
    if par.kind == "dp":  # each GPU runs the captured batch
        node = NodeStep(hw, cal, LayerComm(node_for(hw, par.degree), cal.collectives), fused=fused)
        step = predict_data_parallel(lambda _: step_w, step_w.batch_size * par.degree, par.degree, node)
        return replace(with_energy(step, hw, cal.kernel, gpus=par.degree), memory=memory)
    from perfcast.compose.step import predict_step

    # as for catalog models
    return replace(with_energy(predict_step(step_w, hw, fused=fused, calibration=cal), hw, cal.kernel), memory=memory)
