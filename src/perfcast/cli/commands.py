"""Catalog, prediction, validation and suite commands (one thin function per command)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer

from perfcast.cli.app import (
    _console,
    _print_fields,
    _progress,
    _table,
    app,
    check_output_folder,
    check_output_paths,
    clusters_app,
    does_not_fit,
    emit_json,
    handled,
    hardware_app,
    models_app,
    one_of,
    scenarios_failed,
)

__all__: list[str] = []


# -- catalogs ---------------------------------------------------------------------------
@hardware_app.command("list")
@handled
def hardware_list(as_json: bool = typer.Option(False, "--json", help="Print one JSON object.")) -> None:
    """List every device in the catalog."""
    from perfcast.catalog.hardware import list_hardware

    devices = list_hardware()
    if as_json:
        emit_json({"hardware": [{"id": h.id, "name": h.name, "vendor": h.vendor, "memory_bytes": h.memory_bytes,
                                 "memory_bandwidth_Bps": h.memory_bandwidth_Bps,
                                 "peak_bf16_flops_per_s": h.peak_flops_per_s.bf16,
                                 "peak_fp32_flops_per_s": h.peak_flops_per_s.fp32, "tdp_W": h.tdp_W}
                                for h in devices]})
        return
    t = _table(title=f"{len(devices)} devices")
    for c in ("id", "name", "memory", "bandwidth", "bf16 dense", "fp32", "TDP"):
        t.add_column(c, justify="left" if c in ("id", "name") else "right", no_wrap=c == "id")
    for h in devices:
        p = h.peak_flops_per_s
        t.add_row(h.id, h.name, f"{h.memory_bytes / 2**30:.0f} GiB", f"{h.memory_bandwidth_Bps / 1e12:.2f} TB/s",
                  f"{p.bf16 / 1e12:.0f} TF" if p.bf16 else "-", f"{p.fp32 / 1e12:.1f} TF", f"{h.tdp_W:.0f} W")
    _console().print(t)


@hardware_app.command("show")
@handled
def hardware_show(hardware_id: str = typer.Argument(..., help="Device id or alias."),
                  as_json: bool = typer.Option(False, "--json", help="Print one JSON object.")) -> None:
    """Show one device's specs (base SI units)."""
    from perfcast.catalog.hardware import load_hardware

    h = load_hardware(hardware_id)
    data = h.model_dump(mode="json")
    if as_json:
        emit_json(data)
        return
    _print_fields(f"{h.id}: {h.name}", data)


@models_app.command("list")
@handled
def models_list(as_json: bool = typer.Option(False, "--json", help="Print one JSON object.")) -> None:
    """List every model in the catalog."""
    from perfcast.catalog.models import list_models

    models = list_models()
    if as_json:
        emit_json({"models": [{"id": m.id, "hf_id": m.hf_id, "model_type": m.model_type, "kind": m.kind,
                               "num_layers": m.num_layers, "hidden_size": m.hidden_size,
                               "params": m.num_params(), "active_params": m.num_active_params()} for m in models]})
        return
    t = _table(title=f"{len(models)} models")
    for c in ("id", "hf id", "type", "layers", "hidden", "params", "active"):
        t.add_column(c, justify="right" if c in ("layers", "hidden", "params", "active") else "left",
                     no_wrap=c == "id")
    for m in models:
        t.add_row(m.id, m.hf_id or "-", m.model_type, str(m.num_layers), str(m.hidden_size),
                  f"{m.num_params() / 1e9:.2f} B", f"{m.num_active_params() / 1e9:.2f} B")
    _console().print(t)


@models_app.command("show")
@handled
def models_show(model: str = typer.Argument(..., help="Model id, alias, HF repo id or path to a config.json."),
                as_json: bool = typer.Option(False, "--json", help="Print one JSON object.")) -> None:
    """Show one model's normalized architecture."""
    from perfcast.catalog.models import load_model

    m = load_model(model)
    data = m.model_dump(mode="json", exclude={"hf_config"})
    data["params"] = m.num_params()
    data["active_params"] = m.num_active_params()
    if as_json:
        emit_json(data)
        return
    _print_fields(m.id, data)


@clusters_app.command("list")
@handled
def clusters_list(as_json: bool = typer.Option(False, "--json", help="Print one JSON object.")) -> None:
    """List every cluster in the catalog."""
    from perfcast.system.cluster import list_clusters

    clusters = list_clusters()
    if as_json:
        emit_json({"clusters": [{
            "id": c.id, "name": c.name, "gpu": c.gpu, "gpus_per_node": c.gpus_per_node, "nodes": c.nodes,
            "scale_up_domain": c.domain, "intra_node_fabric": c.intra_node.fabric,
            "intra_node_bandwidth_Bps": c.intra_node.bandwidth_Bps, "nics_per_node": c.inter_node.nics_per_node,
            "nic_bandwidth_Bps": c.inter_node.nic_bandwidth_Bps,
            "inter_bandwidth_per_gpu_Bps": c.inter_bandwidth_per_gpu_Bps} for c in clusters]})
        return
    t = _table(title=f"{len(clusters)} clusters (bandwidths per GPU per direction)")
    for col in ("id", "gpu", "GPUs/node", "domain", "scale-up", "network"):
        t.add_column(col, justify="left" if col in ("id", "gpu", "scale-up") else "right",
                     no_wrap=col in ("id", "gpu"))
    for c in clusters:
        intra = c.intra_node
        net = c.inter_node
        network = (f"{net.nics_per_node} x {net.nic_bandwidth_Bps * 8 / 1e9:.0f} Gb/s" if net.nics_per_node else "-")
        t.add_row(c.id, c.gpu, str(c.gpus_per_node), str(c.domain),
                  f"{intra.fabric} {intra.topology} {intra.bandwidth_Bps / 1e9:.0f} GB/s", network)
    _console().print(t)


@clusters_app.command("show")
@handled
def clusters_show(cluster_id: str = typer.Argument(..., help="Cluster id, alias or cluster YAML path."),
                  as_json: bool = typer.Option(False, "--json", help="Print one JSON object.")) -> None:
    """Show one cluster (base SI units; bandwidths per GPU per direction)."""
    from perfcast.system.cluster import load_cluster

    c = load_cluster(cluster_id)
    data = c.model_dump(mode="json")
    data["scale_up_domain"] = c.domain
    data["num_gpus"] = c.num_gpus
    data["inter_bandwidth_per_gpu_Bps"] = c.inter_bandwidth_per_gpu_Bps
    if as_json:
        emit_json(data)
        return
    _print_fields(f"{c.id}: {c.name}", data)


# -- predictions -------------------------------------------------------------------------
@app.command()
@handled
def collective(
    op: str = typer.Option(..., "--op", help="all_reduce | all_gather | reduce_scatter | all_to_all | broadcast | "
                                             "send_recv"),
    size: str = typer.Option(..., "--bytes", help="Size as nccl-tests counts it, e.g. 1MB, 64MiB, 2e9."),
    gpus: int = typer.Option(..., "--gpus", help="GPUs in the group."),
    cluster: str = typer.Option(..., "--cluster", help="Cluster id, alias or cluster YAML path."),
    nodes: int | None = typer.Option(None, "--nodes", help="Nodes in the cluster (default: the catalog's)."),
    gpus_per_node: int | None = typer.Option(None, "--gpus-per-node",
                                             help="Group members per scale-up domain (default: as many as fit)."),
    algorithm: str | None = typer.Option(None, "--algorithm",
                                         help="ring | tree | halving_doubling | direct | hierarchical | nvls "
                                              "(default: what NCCL would pick)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Predict the time of one collective over a group of GPUs on a cluster."""
    from perfcast.system.cluster import load_cluster
    from perfcast.system.collectives import collective_time
    from perfcast.system.collectives.model import check_buffer_fits
    from perfcast.units import format_bytes, format_time, parse_bytes

    c = load_cluster(cluster, nodes=nodes)
    nbytes = parse_bytes(size)
    check_buffer_fits(nbytes, c)
    t = collective_time(op, nbytes, gpus, c, gpus_per_node=gpus_per_node, algorithm=algorithm)
    if as_json:
        emit_json({"op": t.op, "algorithm": t.algorithm, "protocol": t.protocol, "cluster": c.id,
                   "size_bytes": t.size_bytes, "group_size": t.group_size, "gpus_per_node": t.gpus_per_node,
                   "time_s": t.time_s, "algbw_Bps": t.algbw_Bps, "busbw_Bps": t.busbw_Bps})
        return
    tbl = _table(title=f"{t.op} of {format_bytes(t.size_bytes)} over {t.group_size} GPUs on {c.id} "
                       f"({t.gpus_per_node} per scale-up domain)", show_header=False)
    tbl.add_column("quantity")
    tbl.add_column("value", justify="right")
    tbl.add_row("algorithm", f"{t.algorithm} ({t.protocol})")
    tbl.add_row("time", format_time(t.time_s))
    tbl.add_row("algorithm bandwidth", f"{t.algbw_Bps / 1e9:.2f} GB/s")
    tbl.add_row("bus bandwidth", f"{t.busbw_Bps / 1e9:.2f} GB/s")
    _console().print(tbl)


@app.command()
@handled
def predict(
    model: str = typer.Option(None, "--model", "-m", help="Model id, alias, HF repo id or config.json path."),
    hardware: str = typer.Option(..., "--hardware", "-H", help="Device id, alias or hardware YAML path."),
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
    from perfcast.kernel.energy import ENERGY_STATUS
    from perfcast.report.text import step_table, top_ops_table
    from perfcast.system.predict import predict as run
    from perfcast.workload.types import Mode

    try:
        mode_v = Mode(mode)
    except ValueError:
        raise ConfigError(f"unknown mode {mode!r}; use one of {', '.join(m.value for m in Mode)}") from None
    if (model is None) == (workload is None):
        raise ConfigError("give either --model (a catalog model) or --workload (a captured workload JSON)")
    parallelism = _with_tp(parallelism, tp)
    _check_node(parallelism, hardware)
    if optimizer != "adam" and mode_v is not Mode.TRAINING:
        raise ConfigError(f"--optimizer {optimizer} is the optimizer step of --mode training; --mode {mode} has none")
    if workload is not None:
        from perfcast.capture.io import load_workload

        if quantization != "auto":
            raise ConfigError("--quantization applies to catalog models (--model); a captured workload runs in --dtype")
        given = [flag for flag, value, default in (("--batch-size", batch_size, 1), ("--seq-len", seq_len, 512),
                                                   ("--attention", attention, None), ("--style", style, None),
                                                   ("--microbatches", microbatches, None)) if value != default]
        if given:
            raise ConfigError(f"{', '.join(given)}: a captured workload keeps the shapes and kernels it was captured "
                              "with; capture it again with other example inputs")
        st = _predict_captured(load_workload(workload), hardware, mode_v, dtype, parallelism, optimizer, fused)
    else:
        st = run(StepRequest(model=model, hardware=hardware, mode=mode_v, batch_size=batch_size, seq_len=seq_len,
                             dtype=dtype, fused=fused, parallelism=parallelism, microbatches=microbatches,
                             optimizer=optimizer, attention=attention, style=style, quantization=quantization))
    if as_json:
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
        emit_json(data)
    else:
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
    if st.memory is not None and not st.memory.fits:
        gib = 2**30
        does_not_fit(f"out of memory: the step needs {st.memory.total_bytes / gib:.1f} GiB per GPU and "
                     f"{st.hardware_id} has {st.memory.capacity_bytes / gib:.1f} GiB; use more GPUs (--tp, "
                     "--parallelism ppN), a smaller batch or sequence, or a narrower --dtype")


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
    from perfcast.compose.energy import with_energy
    from perfcast.compose.memory import step_memory
    from perfcast.compose.predict import parse_parallelism
    from perfcast.dtypes import parse_dtype
    from perfcast.errors import ConfigError
    from perfcast.kernel.coefficients import load_coefficients
    from perfcast.system.coefficients import load_training_coefficients
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
    if par.kind == "dp":  # each GPU runs the captured batch
        co = load_coefficients()
        node = NodeStep(hw, co, LayerComm(node_for(hw, par.degree)), load_training_coefficients(), fused=fused)
        step = predict_data_parallel(lambda _: step_w, step_w.batch_size * par.degree, par.degree, node)
        return replace(with_energy(step, hw, co, gpus=par.degree), memory=memory)
    from perfcast.compose.step import predict_step

    return replace(with_energy(predict_step(step_w, hw, fused=fused), hw), memory=memory)  # as for catalog models


@app.command("predict-batch")
@handled
def predict_batch_cmd(
    table: Path = typer.Argument(..., help="A CSV or CSV.gz in one of the ground-truth schemas."),
    output: Path = typer.Option(..., "-o", "--out", help="Where to write the predicted CSV (.gz to compress)."),
    force: bool = typer.Option(False, "--force", help="Overwrite OUTPUT if it exists."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object (summary)."),
) -> None:
    """Predict every row of a table; writes the rows plus pred_X, pred_X_low, pred_X_high and status."""
    from perfcast.groundtruth.predict_batch import predict_batch, write_predictions
    from perfcast.validate.metrics import summarize

    check_output_paths(output, force=force)
    res = predict_batch(table)
    path = write_predictions(res, output, force=True)  # checked before the work
    ok = sum(1 for s in res.prediction.status if s == "ok")
    oom = sum(1 for s in res.prediction.status if s.startswith("out of memory"))
    targets: dict[str, dict[str, float | int]] = {}
    for t in res.targets:
        s = summarize(res.measured(t), res.prediction.pred[t], res.prediction.low[t], res.prediction.high[t])
        targets[t] = s.as_dict()
    if as_json:
        emit_json({"table": str(table), "kind": res.kind.name, "rows": len(res.rows), "predicted_rows": ok,
                   "out_of_memory_rows": oom, "output": str(path), "targets": targets})
        return
    also = f" ({oom} more out of memory: see their status)" if oom else ""
    sys.stdout.write(f"{res.kind.name}: {len(res.rows)} rows, {ok} predicted{also} -> {path}\n")
    for t, d in targets.items():
        if d["predicted_rows"]:
            sys.stdout.write(f"  {t}: MAPE {100 * d['mape_frac']:.1f}% over {d['predicted_rows']} measured rows\n")


def _validate_local(as_json: bool) -> None:
    from perfcast.groundtruth.local import validate_local
    from perfcast.report.text import pct

    if as_json:
        emit_json(validate_local().as_dict())
        return
    with _console(stderr=True).status("measuring") as status:
        rep = validate_local(progress=lambda m: status.update(f"measuring {m}"))
    tbl = _table(title=f"{rep.hardware_id}: measured here with PyTorch ({rep.threads} threads) vs predicted")
    for c in ("case", "measured", "predicted", "error"):
        tbl.add_column(c, justify="left" if c == "case" else "right")
    for r in rep.results:
        tbl.add_row(r.case.label, f"{r.measured_s * 1e3:.1f} ms", f"{r.predicted_s * 1e3:.1f} ms",
                    f"{100 * r.error_frac:+.1f}%")
    for m in rep.models:
        tbl.add_row(f"[b]{m}[/b] MAPE", "", "", pct(rep.mape_frac(m)))
    tbl.add_row("[b]all[/b] MAPE", "", "", pct(rep.mape_frac()))
    _console().print(tbl)


@app.command()
@handled
def validate(
    tables: list[Path] = typer.Argument(None, help="Tables to validate (default: every visible table)."),
    out_dir: Path = typer.Option(None, "--out", help="Also write validation.json (for `perfcast report`) here."),
    force: bool = typer.Option(False, "--force", help="Overwrite a validation.json perfcast did not write."),
    local: bool = typer.Option(False, "--local", help="Measure BERT-base, GPT-2 and ResNet-50 here with PyTorch "
                                                      "and compare with local-cpu's predictions (after calibrate)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Predict the measured tables and print the error per table and device."""

    if local:
        _validate_local(as_json)
        return

    from perfcast.report.text import pct
    from perfcast.validate.export import check_validation_path, write_validation
    from perfcast.validate.report import run_validation

    if out_dir is not None:
        check_output_folder(out_dir, protect=(), force=force)
        check_validation_path(out_dir, force=force)
    if as_json:
        rep = run_validation(list(tables) if tables else None)
        written = write_validation(rep, out_dir) if out_dir is not None else None
        emit_json({**rep.as_dict(), **({"validation_file": str(written)} if written else {})})
        return
    with _progress() as prog:
        task = prog.add_task("validating", total=None)
        rep = run_validation(list(tables) if tables else None,
                             progress=lambda m: prog.update(task, description=f"validating {m}"))
    if out_dir is not None:
        _console(stderr=True).print(f"wrote {write_validation(rep, out_dir)}", markup=False)
    for t in rep.tables:
        tbl = _table(title=f"{t.table}: {t.target}", caption=t.note)
        for c in ("device", "rows", "coverage", "MAPE", "median", "max", "in interval"):
            tbl.add_column(c, justify="left" if c == "device" else "right")
        s = t.overall
        for g in t.groups:
            gs = g.summary
            tbl.add_row(g.group, str(gs.rows), pct(gs.coverage), pct(gs.mape), pct(gs.median_ape), pct(gs.max_ape),
                        pct(gs.interval_coverage))
        tbl.add_row("[b]all[/b]", str(s.rows), pct(s.coverage), pct(s.mape), pct(s.median_ape), pct(s.max_ape),
                    pct(s.interval_coverage))
        _console().print(tbl)


@app.command()
@handled
def fit(
    output: Path = typer.Option(None, "-o", "--out", help="Where to write coefficients (default: print only)."),
    stages: str = typer.Option("vector,gemm,conv,tensor,attention", "--stages",
                               help="Comma-separated stages: vector, gemm, conv, tensor, attention (kernel "
                                    "tables), host "
                                    "(host time per eager kernel, from end-to-end rows of your own machine) and "
                                    "collectives (VIDUR network and published collective tables), training "
                                    "(published training runs); "
                                    "none = keep the current coefficients (e.g. to recompute --intervals-out)."),
    intervals: Path = typer.Option(None, "--intervals-out", help="Also write prediction intervals to this JSON."),
    compose_output: Path = typer.Option(None, "--compose-out",
                                        help="Where the host stage writes composition coefficients."),
    collectives_output: Path = typer.Option(None, "--collectives-out",
                                            help="Where the collectives stage writes its coefficients."),
    training_output: Path = typer.Option(None, "--training-out",
                                         help="Where the training stage writes its coefficients."),
    intervals_old: Path = typer.Option(None, "--intervals", hidden=True),  # the README's earlier spellings
    compose_old: Path = typer.Option(None, "--compose-output", hidden=True),
    collectives_old: Path = typer.Option(None, "--collectives-output", hidden=True),
    training_old: Path = typer.Option(None, "--training-output", hidden=True),
    force: bool = typer.Option(False, "--force", help="Overwrite existing output files."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Fit the kernel coefficients on the visible kernel tables (train split / VIDUR) and write them as JSON."""
    from perfcast.errors import ConfigError
    from perfcast.kernel.coefficients import load_coefficients
    from perfcast.validate.fit import fit_coefficients, fit_host, fit_intervals

    intervals = one_of("--intervals-out", intervals, "--intervals", intervals_old)
    compose_output = one_of("--compose-out", compose_output, "--compose-output", compose_old)
    collectives_output = one_of("--collectives-out", collectives_output, "--collectives-output", collectives_old)
    training_output = one_of("--training-out", training_output, "--training-output", training_old)
    check_output_paths(output, intervals, compose_output, collectives_output, training_output, force=force)
    chosen = [s.strip() for s in stages.split(",") if s.strip() and s.strip() != "none"]
    known = {"vector", "gemm", "conv", "tensor", "attention", "host", "collectives", "training"}
    if set(chosen) - known or (not chosen and stages.strip() != "none"):
        raise ConfigError(f"unknown fit stages {sorted(set(chosen) - known) or chosen}; use {', '.join(sorted(known))}")
    if "host" in chosen and compose_output is None:
        raise ConfigError("the host stage needs --compose-out PATH for the composition coefficients")
    if "collectives" in chosen and collectives_output is None:
        raise ConfigError("the collectives stage needs --collectives-out PATH for the collective coefficients")
    if "training" in chosen and training_output is None:
        raise ConfigError("the training stage needs --training-out PATH for the training coefficients")
    lines: list[str] = []
    logger = lines.append if as_json else _console(stderr=True).print  # the log is not the result
    kernel_stages = [s for s in chosen if s not in ("host", "collectives", "training")]
    co = fit_coefficients(stages=kernel_stages, log=logger) if kernel_stages else load_coefficients()
    if output is not None:
        output.write_text(co.to_json(), encoding="utf-8")
    if "host" in chosen and compose_output is not None:
        compose_output.write_text(fit_host(co, log=logger).to_json(), encoding="utf-8")
    cc = None
    if "collectives" in chosen and collectives_output is not None:
        from perfcast.validate.fit_collectives import fit_collectives

        cc = fit_collectives(log=logger)
        collectives_output.write_text(cc.to_json(), encoding="utf-8")
    trc = None
    if "training" in chosen and training_output is not None:
        from perfcast.groundtruth.files import find_groundtruth
        from perfcast.validate.fit_training import fit_training, training_cases

        gt = find_groundtruth()
        assert gt is not None
        cases = training_cases(gt / "published" / "training.csv")
        logger(f"fit training: {len(cases)} published rows")
        trc = fit_training(cases, co)
        training_output.write_text(trc.to_json(), encoding="utf-8")
    iv = None
    if intervals is not None:
        iv = fit_intervals(co, collective_coeffs=cc)
        intervals.write_text(json.dumps(iv, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    if as_json:
        emit_json({"coefficients": co.model_dump(mode="json"), "log": lines, "intervals": iv,
                   "collectives": cc.model_dump(mode="json") if cc is not None else None,
                   "training": trc.model_dump(mode="json") if trc is not None else None,
                   "output": str(output) if output else None})
    elif output is None and kernel_stages:
        _console().print(co.to_json())


@app.command()
@handled
def suite(
    only: str | None = typer.Option(None, "--only", help="Comma-separated scenario ids or YAML files (default: all)."),
    out_dir: Path = typer.Option(None, "--out", help="Write results.json, results.csv and report.html into this "
                                                     "folder."),
    validation: Path = typer.Option(None, "--validation", help="validation.json for the report's validation page "
                                                               "(default: the --out folder's, if any)."),
    force: bool = typer.Option(False, "--force", help="Overwrite the --out folder's results.json, results.csv and "
                                                      "a report.html perfcast did not write."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Run the scenario suite and print one row per scenario."""

    from perfcast.cli.report import REPORT_FILE, check_report_path, write_folder_report
    from perfcast.errors import ConfigError
    from perfcast.report.results import collective_tables, serving_table, training_table, write_results
    from perfcast.report.scenario_tables import kind_tables
    from perfcast.report.text import pct
    from perfcast.scenarios import list_scenarios, load_scenario, run_scenario

    if only is not None and not only.replace(",", "").strip():
        raise ConfigError(f"--only {only!r} names no scenario; give ids such as T1.1,R2 (or leave --only out for all)")
    scenarios = [load_scenario(s.strip()) for s in only.split(",") if s.strip()] if only else list_scenarios()
    if validation is not None and not validation.is_file():
        raise ConfigError(f"--validation {validation} does not exist; write it with `perfcast validate --out DIR`")
    if out_dir is not None:  # before the run; the folder's report.html is replaced if perfcast wrote it
        check_output_folder(out_dir, protect=("results.json", "results.csv"), force=force)
        if out_dir.is_dir():
            check_report_path(out_dir / REPORT_FILE, force=force, explicit=False)
    results = []
    with _progress(quiet=as_json) as prog:
        task = prog.add_task("suite", total=len(scenarios))
        for sc in scenarios:
            prog.update(task, description=f"scenario {sc.id}")
            results.append(run_scenario(sc))
            prog.advance(task)
    if out_dir is not None:
        write_results(results, out_dir)
        write_folder_report(out_dir, validation=validation)
    if as_json:
        emit_json({"scenarios": [{"id": r.id, "kind": r.kind, "status": r.status, **r.headline(),
                                  **({"error": r.error} if r.error else {}), "notes": r.notes, "rows": r.rows}
                                 for r in results]})
        _fail_on_errors(results)
        return
    t = _table(title="perfcast suite")
    for c in ("id", "title", "predictions", "vs measured", "MAPE", "status"):
        t.add_column(c)
    for r in results:
        h = r.headline()
        mape = h["mape_frac"]
        t.add_row(r.id, r.title, str(h["predictions"]), str(h["with_measurement"]),
                  pct(float(mape)) if isinstance(mape, (int, float)) else "-", r.status)
    _console().print(t)
    for r in results:
        if r.error:
            _console().print(f"{r.id}: {r.status}: {r.error}", markup=False)
        if r.kind == "serving":
            _console().print(serving_table(r))
        if r.kind != "model_latency":
            tables = [training_table(r)] if r.kind == "training" else (
                collective_tables(r) if r.kind == "collective" else kind_tables(r))
            for table in tables:
                if table is not None:
                    _console().print(table)
            for row in r.rows:
                if row["status"] != "ok":
                    what = row.get("label") or row.get("model") or row.get("op", "")
                    _console().print(f"{r.id}: {what} on {row.get('cluster', '')}: {row.get('error', '')}",
                                     markup=False)
            for note in r.notes:
                _console().print(f"{r.id}: {note}", markup=False)
            continue
        measured = [row for row in r.rows if row.get("measured_step_time_s") is not None]
        failed = [row for row in r.rows if row["status"] != "ok"]
        if measured:
            detail = _table(title=f"{r.id}: predicted vs measured step time")
            for c in ("model", "mode", "b", "seq", "hardware", "predicted", "measured", "error"):
                detail.add_column(c, no_wrap=c in ("model", "hardware"),
                                  justify="right" if c in ("b", "seq", "predicted", "measured", "error") else "left")
            for row in measured:
                mode = {"inference": "infer", "training": "train"}.get(str(row["mode"]), str(row["mode"]))
                mode += "+fused" if row["fused"] else ""
                detail.add_row(str(row["model"]), mode, str(row["batch_size"]), str(row["seq_len"]),
                               str(row["hardware"]), f"{1e3 * float(str(row['step_time_s'])):.0f} ms",
                               f"{1e3 * float(str(row['measured_step_time_s'])):.0f} ms",
                               pct(float(str(row["error_frac"]))))
            _console().print(detail)
        for row in failed:
            _console().print(f"{r.id}: {row['model']} on {row['hardware']}: {row.get('error', '')}", markup=False)
        others = [row for row in r.rows if row["status"] == "ok" and row.get("measured_step_time_s") is None]
        if others and len(others) <= 24:
            extra = _table(title=f"{r.id}: predicted step time")
            for c in ("model", "mode", "b", "seq", "hardware", "predicted", "interval"):
                extra.add_column(c, no_wrap=c in ("model", "hardware"),
                                 justify="right" if c in ("b", "seq", "predicted", "interval") else "left")
            for row in others:
                extra.add_row(str(row["model"]), str(row["mode"]), str(row["batch_size"]), str(row["seq_len"]),
                              str(row["hardware"]), f"{1e3 * float(str(row['step_time_s'])):.1f} ms",
                              f"{1e3 * float(str(row['step_time_low_s'])):.1f}-"
                              f"{1e3 * float(str(row['step_time_high_s'])):.1f} ms")
            _console().print(extra)
        elif others:
            where = f"{out_dir}/results.csv" if out_dir is not None else "`perfcast suite --out DIR` or --json"
            _console().print(f"{r.id}: {len(others)} more predictions on devices without visible measurements: "
                             f"{where}")
    _fail_on_errors(results)


def _fail_on_errors(results: list[Any]) -> None:
    """Exit code 1 (one ``failed:`` line) when a scenario's status is ``error``; out-of-memory answers are answers."""
    failed = [r.id for r in results if r.status == "error"]
    if failed:
        scenarios_failed(f"{len(failed)} of {len(results)} scenarios errored: {', '.join(failed)} (see their error "
                         "above)")


