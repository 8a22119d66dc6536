"""``perfcast capture``: the user's own model (a torch.nn.Module factory or an ONNX file) as a workload."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from perfcast.cli.app import _console, _table, app, emit_json, handled
from perfcast.cli.output_paths import refuse_overwrite

__all__: list[str] = []


def _parse_shapes(items: list[str]) -> tuple[list[tuple[int, ...]], dict[str, tuple[int, ...]]]:
    """``1x128`` (positional) or ``name=1x128`` (named) shapes."""
    from perfcast.errors import ConfigError

    positional: list[tuple[int, ...]] = []
    named: dict[str, tuple[int, ...]] = {}
    for item in items:
        name, _, dims = item.rpartition("=")
        try:
            shape = tuple(int(d) for d in dims.lower().split("x"))
        except ValueError:
            raise ConfigError(f"--input-shape {item!r}: use dims joined by x, e.g. 1x128 or input_ids=1x128") \
                from None
        if any(d < 1 for d in shape):
            raise ConfigError(f"--input-shape {item!r}: every dim must be a positive integer")
        if name:
            named[name] = shape
        else:
            positional.append(shape)
    return positional, named


def _torch_inputs(positional: list[tuple[int, ...]], named: dict[str, tuple[int, ...]], dtype: str) -> Any:
    from perfcast.calibrate.bench import import_torch
    from perfcast.errors import ConfigError

    torch = import_torch()
    g = torch.Generator().manual_seed(0)

    def make(shape: tuple[int, ...]) -> Any:
        if dtype == "int64":
            return torch.randint(0, 100, shape, generator=g)
        if dtype != "float32":
            raise ConfigError(f"--input-dtype {dtype!r}: use float32 or int64")
        return torch.randn(*shape, generator=g)

    if named:
        return {k: make(v) for k, v in named.items()}
    return tuple(make(s) for s in positional)


@app.command()
@handled
def capture(
    target: str = typer.Argument(..., help="model.onnx, or FILE.py:FUNCTION returning a torch.nn.Module or "
                                           "(module, example_inputs)."),
    input_shape: list[str] = typer.Option([], "--input-shape", "-i",
                                          help="Input shape, e.g. 1x3x224x224 or input_ids=1x128 (repeatable)."),
    input_dtype: str = typer.Option("float32", "--input-dtype", help="float32 | int64 (random inputs)."),
    method: str = typer.Option("auto", "--method", help="auto | fx | export (torch modules)."),
    merge: bool = typer.Option(True, "--merge/--no-merge", help="Merge identical consecutive layers into ops "
                                                                "with count = layers (same FLOPs and kernels)."),
    out: Path = typer.Option(None, "--out", "-o", help="Write the workload JSON here (for predict --workload)."),
    force: bool = typer.Option(False, "--force", help="Overwrite --out if it exists."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Capture a model's inference forward as a workload (ops with shapes, FLOPs and bytes; identical layers
    merged). Predict it with `predict --workload`, train it with `train --workload`."""
    from perfcast.capture import block_runs, capture_module, capture_onnx, load_factory, save_workload
    from perfcast.errors import ConfigError

    refuse_overwrite(out, force=force)
    positional, named = _parse_shapes(input_shape)
    if target.endswith(".onnx"):
        if positional:
            raise ConfigError("--input-shape for an ONNX file names its input: NAME=1x128")
        w = capture_onnx(target, input_shapes=named, merge=merge)
    else:
        factory = load_factory(target)
        try:
            made = factory()
        except Exception as exc:  # noqa: BLE001 - the user's factory failing is one line
            raise ConfigError(f"{target}() failed: {type(exc).__name__}: {exc}") from None
        if isinstance(made, tuple) and len(made) == 2:
            module, example = made
            if input_shape:
                example = _torch_inputs(positional, named, input_dtype)
        else:
            module = made
            if not input_shape:
                raise ConfigError(f"{target} returns a module without example inputs; give --input-shape "
                                  "(e.g. 1x3x224x224) or return (module, example_inputs)")
            example = _torch_inputs(positional, named, input_dtype)
        if not hasattr(module, "forward"):
            raise ConfigError(f"{target} returned {type(module).__name__}, not a torch.nn.Module")
        w = capture_module(module, example, method=method, model_id=target.rpartition(":")[2], merge=merge)
    written = save_workload(w, out, source=target) if out is not None else None
    runs = block_runs(w)
    by_kind: dict[str, float] = {}
    for o in w.ops:
        by_kind[o.kind.value] = by_kind.get(o.kind.value, 0.0) + o.flops * o.count
    if as_json:
        emit_json({"model": w.model_id, "source": target, "num_ops": len(w.ops), "flops": w.flops, "bytes": w.bytes,
                   "flops_by_kind": by_kind, "batch_size": w.batch_size, "seq_len": w.seq_len, "dtype": w.dtype.value,
                   "repeated_layers": [{"module": m, "layers": n} for m, n in runs],
                   "workload_file": str(written) if written else None})
        return
    t = _table(title=f"{w.model_id}: {len(w.ops)} ops, {w.flops / 1e9:.3f} GFLOP, {w.bytes / 1e6:.1f} MB moved")
    for c in ("kind", "ops", "GFLOP"):
        t.add_column(c, justify="left" if c == "kind" else "right")
    for kind, fl in by_kind.items():
        t.add_row(kind, str(sum(1 for o in w.ops if o.kind.value == kind)), f"{fl / 1e9:.3f}")
    _console().print(t)
    for m, n in runs:
        _console().print(f"{m}: {n} identical layers merged (ops run {n} times)", markup=False)
    if written:
        _console().print(f"wrote {written}; predict it with `perfcast predict --workload {written} -H <device>`",
                         markup=False)
