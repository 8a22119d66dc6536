"""Printed tables of the RLHF, diffusion and published-table scenarios (rich tables; `perfcast suite` and
`perfcast run` print them). They read a scenario's rows only; units are converted here, at the edge."""

from __future__ import annotations

from typing import Any

from perfcast.results.scenario import ScenarioResult

__all__ = ["kind_tables"]


def _num(x: object) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x)


def _s(x: object) -> str:
    v = _num(x)
    if v is None:
        return "-"
    return f"{v:.3g} s" if v >= 1 else f"{1e3 * v:.3g} ms"


def _gib(x: object) -> str:
    v = _num(x)
    return "-" if v is None else f"{v / 2**30:.1f} GiB"


def _pct(x: object, signed: bool = False) -> str:
    v = _num(x)
    if v is None:
        return "-"
    return f"{100 * v:+.1f}%" if signed else f"{100 * v:.1f}%"


def _ok(r: ScenarioResult) -> list[dict[str, object]]:
    return [row for row in r.rows if row.get("status") == "ok"]


def _columns(r: ScenarioResult, title: str, lines: list[tuple[str, Any]]) -> Any:
    """One column per run, one line per quantity."""
    from rich.table import Table

    runs = _ok(r)
    if not runs:
        return None
    t = Table(title=title)
    t.add_column("")
    for row in runs:
        t.add_column(str(row.get("label") or row.get("model", "")), justify="right")
    for name, fmt in lines:
        t.add_row(name, *(fmt(row) for row in runs))
    return t


def _rlhf(r: ScenarioResult) -> list[Any]:
    lines: list[tuple[str, Any]] = [
        ("GPUs", lambda row: f"{row['num_gpus']} x {row['gpu']}"),
        ("iteration", lambda row: _s(row["iteration_time_s"])),
        ("reshard (gather actor)", lambda row: f"{_s(row['reshard_s'])} ({_pct(row['reshard_frac'])})"),
        ("generation", lambda row: f"{_s(row['generation_s'])} ({_pct(row['generation_frac'])})"),
        ("  prefill / decode", lambda row: f"{_s(row['generation_prefill_s'])} / {_s(row['generation_decode_s'])}"),
        ("scoring (4 forwards)", lambda row: f"{_s(row['scoring_s'])} ({_pct(row['scoring_frac'])})"),
        ("training", lambda row: f"{_s(row['training_s'])} ({_pct(row['training_frac'])})"),
        ("  actor / critic", lambda row: f"{_s(row['actor_train_s'])} / {_s(row['critic_train_s'])}"),
        ("generated tok/s", lambda row: f"{float(str(row['generated_tokens_per_s'])):,.0f}"),
        ("memory/GPU (peak)", lambda row: f"{_gib(row['memory_per_gpu_bytes'])} of "
                                          f"{_gib(row['memory_capacity_bytes'])}"
                                          + ("" if row["fits_in_memory"] else " OOM")),
        ("peak phase", lambda row: str(row["memory_peak_phase"])),
        ("  actor+critic states", lambda row: _gib(float(str(row["memory_actor_states_bytes"]))
                                                   + float(str(row["memory_critic_states_bytes"])))),
        ("  frozen ref+reward", lambda row: _gib(row["memory_frozen_weights_bytes"])),
        ("  generation / scoring / training", lambda row: " / ".join(
            _gib(row[f"{p}_phase_memory_bytes"]) for p in ("generation", "scoring", "training"))),
    ]
    return [_columns(r, f"{r.id}: one PPO iteration", lines)]


def _diffusion(r: ScenarioResult) -> list[Any]:
    lines: list[tuple[str, Any]] = [
        ("hardware", lambda row: str(row["hardware"])),
        ("images x steps", lambda row: f"{row['batch_size']} x {row['steps']}"),
        ("UNet batch", lambda row: str(row["unet_batch"])),
        ("seconds/image", lambda row: _s(row["seconds_per_image"])),
        ("images/s", lambda row: f"{float(str(row['images_per_s'])):.3g}"),
        ("UNet step", lambda row: _s(row["unet_step_s"])),
        ("UNet, all steps", lambda row: _s(row["unet_s"])),
        ("VAE decode", lambda row: f"{_s(row['vae_decode_s'])} ({_pct(row['vae_frac'])})"),
        ("UNet TFLOP/s", lambda row: f"{float(str(row['unet_achieved_tflops'])):.0f}"),
        ("energy/image", lambda row: f"{float(str(row['energy_per_image_J'])):.3g} J"),
        ("power", lambda row: f"{float(str(row['avg_power_W'])):.0f} W"),
    ]
    return [_columns(r, f"{r.id}: seconds per image", lines)]


def _serving_rows(r: ScenarioResult) -> list[Any]:
    from rich.table import Table

    runs = [row for row in _ok(r) if row.get("error_frac") is not None]
    if not runs:
        return []
    t = Table(title=f"{r.id}: output tokens/s, predicted vs published")
    for c in ("model", "GPU", "TP", "prec", "in/out", "predicted", "published", "error"):
        t.add_column(c, justify="left" if c in ("model", "GPU", "prec") else "right")
    for row in runs:
        t.add_row(str(row["label"]), str(row["gpu"]), str(row["tp"]), str(row["precision"]),
                  f"{row['input_len']}/{row['output_len']}", f"{float(str(row['throughput_tokens_per_s'])):,.0f}",
                  f"{float(str(row['measured_throughput_tokens_per_s'])):,.0f}", _pct(row["error_frac"], True))
    return [t]


def _operators(r: ScenarioResult) -> list[Any]:
    from rich.table import Table

    runs = _ok(r)
    if not runs:
        return []
    t = Table(title=f"{r.id}: per-operator GPU time summed over the table's rows, predicted vs measured")
    for c in ("GPU", "operator", "rows", "measured", "predicted", "error", "MAPE", "median APE"):
        t.add_column(c, justify="left" if c in ("GPU", "operator") else "right")
    for row in runs:
        t.add_row(str(row["gpu"]), str(row["op"]), str(row["table_rows"]), _s(row["measured_time_s"]),
                  _s(row["predicted_time_s"]), _pct(row["error_frac"], True), _pct(row["mape_frac"]),
                  _pct(row["median_ape_frac"]))
    return [t]


def _accel(r: ScenarioResult) -> list[Any]:
    def vs(key: str, fmt: Any) -> Any:
        def cell(row: dict[str, object]) -> str:
            ref = row.get(f"reference_{key}")
            if ref is None:
                return fmt(row[key])
            return f"{fmt(row[key])} (ref {fmt(ref)}, {_pct(row[f'{key}_diff'], True)})"
        return cell

    lines: list[tuple[str, Any]] = [
        ("layer on arch", lambda row: f"{row['layer']} on {row['arch']}"),
        ("mapping", lambda row: str(row["mapping"])),
        ("ideal cycles", vs("ideal_cycles", lambda v: f"{float(str(v)):,.0f}")),
        ("cycles", lambda row: f"{float(str(row['cycles'])):,.0f} ({row['bound']} bound)"),
        ("utilization", vs("utilization", _pct)),
        ("energy", lambda row: f"{1e6 * float(str(row['energy_J'])):.1f} uJ"),
        ("fJ/MAC", vs("energy_per_mac_fJ", lambda v: f"{float(str(v)):,.0f}")),
        ("DRAM share", vs("dram_energy_frac", _pct)),
        ("buffers / MAC share", lambda row: f"{_pct(row['buffer_energy_frac'])} / {_pct(row['mac_energy_frac'])}"),
    ]
    return [_columns(r, f"{r.id}: accelerator mapping and energy", lines)]


def _local_cpu(r: ScenarioResult) -> list[Any]:
    lines: list[tuple[str, Any]] = [
        ("hardware", lambda row: f"{row['hardware']} ({row['threads']} threads)"),
        ("measured here", lambda row: _s(row["measured_s"])),
        ("predicted", lambda row: _s(row["predicted_s"])),
        ("error", lambda row: _pct(row["error_frac"], True)),
    ]
    return [_columns(r, f"{r.id}: inference latency on this CPU, measured with PyTorch vs predicted", lines)]


_TABLES = {"accel": _accel, "rlhf": _rlhf, "diffusion": _diffusion, "serving_table": _serving_rows,
           "operator_table": _operators, "local_cpu": _local_cpu}


def kind_tables(r: ScenarioResult) -> list[Any]:
    """The detail tables of a scenario of one of the kinds above (none for other kinds)."""
    fn = _TABLES.get(r.kind)
    return [t for t in fn(r) if t is not None] if fn is not None else []
