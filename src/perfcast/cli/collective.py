"""``perfcast collective``: the time of one collective over a group of GPUs on a cluster."""

from __future__ import annotations

import typer

from perfcast.cli.app import _console, _table, app, emit_json, handled

__all__ = ["collective"]


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
