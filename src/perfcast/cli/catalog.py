"""The catalog commands: ``hardware``, ``models`` and ``clusters``, each with ``list`` and ``show``."""

from __future__ import annotations

import json
from typing import Any

import typer

from perfcast.cli.app import _console, _table, app, emit_json, handled

__all__ = ["clusters_app", "hardware_app", "models_app"]

hardware_app = typer.Typer(no_args_is_help=True, help="The hardware catalog.")
models_app = typer.Typer(no_args_is_help=True, help="The model catalog.")
clusters_app = typer.Typer(no_args_is_help=True, help="The cluster catalog.")
app.add_typer(hardware_app, name="hardware")
app.add_typer(models_app, name="models")
app.add_typer(clusters_app, name="clusters")


def _print_fields(title: str, data: dict[str, Any]) -> None:
    """A two-column table of a record's fields (nested values as JSON)."""
    t = _table(title=title, show_header=False)
    t.add_column("field", no_wrap=True)
    t.add_column("value")
    for k, v in data.items():
        t.add_row(k, json.dumps(v) if isinstance(v, (dict, list)) else str(v))
    _console().print(t)


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
    data["layer_types"] = list(m.layer_types())
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

