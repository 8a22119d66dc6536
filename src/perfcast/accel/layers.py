"""Problems from the layers of catalog models: ``resnet50.conv1``, ``resnet50.layer1.0.conv2``, ``gpt2.h.0...``.

A layer name is ``<model>.<layer>``: the model is a catalog id or alias (``resnet50``, ``resnet-50``), the
layer either the op's name in perfcast's workload graph (``stage1.block0.conv2``) or, for ResNets,
torchvision's module name (``conv1``, ``layer1.0.conv2``, ``layer2.0.downsample.0``, ``fc``). Convolutions
and linear layers qualify (``perfcast accel --list-layers resnet50`` lists them). The graph is the
inference forward pass at ``batch_size`` images (or sequences of ``seq_len`` tokens).
"""

from __future__ import annotations

import re

from perfcast.accel.problem import Problem
from perfcast.catalog.models import load_model
from perfcast.errors import ConfigError, PerfcastError, UnknownNameError, UnsupportedError
from perfcast.workload.build import WorkloadSpec, build_workload
from perfcast.workload.types import Mode, Op

__all__ = ["layer_problem", "list_layers"]

_MAPPED_OPS = ("conv2d", "linear")


def _split(name: str) -> tuple[str, str]:
    """(model id, layer) for the longest leading part of ``name`` that is a catalog model."""
    parts = name.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        model = ".".join(parts[:cut])
        try:
            return load_model(model).id, ".".join(parts[cut:])
        except PerfcastError:
            continue
    raise ConfigError(f"layer {name!r}: expected <model>.<layer> with a catalog model, e.g. resnet50.conv1 "
                      "(models: `perfcast models list`)")


def _ops(model: str, batch_size: int, seq_len: int) -> dict[str, Op]:
    w = build_workload(model, WorkloadSpec(mode=Mode.INFERENCE, batch_size=batch_size, seq_len=seq_len))
    return {op.name: op for op in w.ops if op.op in _MAPPED_OPS}


def _torchvision_names(ops: dict[str, Op]) -> dict[str, str]:
    """torchvision ResNet module names -> graph op names (blocks 1.. of a stage share one graph op)."""
    out: dict[str, str] = {}
    for name in ops:
        if name == "embedder.conv":
            out["conv1"] = name
        elif name == "head.classifier":
            out["fc"] = name
        m = re.fullmatch(r"stage(\d+)\.block(\d+)(?:-(\d+))?\.(conv\d|shortcut)", name)
        if m:
            stage, first, last, conv = m.groups()
            for b in range(int(first), int(last or first) + 1):
                out[f"layer{stage}.{b}.{'downsample.0' if conv == 'shortcut' else conv}"] = name
    return out


def list_layers(model: str, batch_size: int = 1, seq_len: int = 512) -> list[str]:
    """The layer names of ``model`` that map to a problem (torchvision names for ResNets, graph names else)."""
    cfg = load_model(model)
    ops = _ops(cfg.id, batch_size, seq_len)
    tv = _torchvision_names(ops) if cfg.kind == "cnn" else {}
    key = next(iter(cfg.aliases), cfg.id) if cfg.kind == "cnn" else cfg.id
    names = list(tv) if tv else list(ops)
    return [f"{key}.{n}" for n in names]


def _problem(name: str, op: Op) -> Problem:
    if op.op == "conv2d":
        batch, cin, cout, kernel, in_hw, stride, padding, groups = op.dims
        if groups != 1:
            raise UnsupportedError(f"layer {name!r} is a grouped convolution (groups {groups}); the accelerator "
                                   "model maps dense convolutions and GEMMs only")
        out_hw = (in_hw + 2 * padding - kernel) // stride + 1
        return Problem(name, (kernel, kernel, out_hw, out_hw, cin, cout, batch), stride, stride)
    _, tokens, fin, fout = op.dims
    return Problem(name, (1, 1, tokens, 1, fin, fout, 1))


def layer_problem(name: str, batch_size: int = 1, seq_len: int = 512) -> Problem:
    """The loop nest of a catalog layer (see the module docstring); raises ConfigError naming the choices."""
    model, layer = _split(name)
    ops = _ops(model, batch_size, seq_len)
    tv = _torchvision_names(ops)
    op_name = tv.get(layer, layer)
    if op_name not in ops:
        raise UnknownNameError(f"layer of {model}", layer, list(tv) or list(ops),
                               list_command=f"perfcast accel --list-layers {model}")
    return _problem(name, ops[op_name])
