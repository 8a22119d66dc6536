"""The accelerator mapper on catalog layers: how good its best mapping is and how long it takes.

Run from the repository root::

    .venv/bin/python benchmarks/accel_mapper.py                 # the table
    .venv/bin/python benchmarks/accel_mapper.py --json          # exactly one JSON object on stdout
    .venv/bin/python benchmarks/accel_mapper.py --reference     # also a long search per layer (best known)
    git show <rev>:src/perfcast/accel/mapper.py > /tmp/old_mapper.py
    .venv/bin/python benchmarks/accel_mapper.py --compare /tmp/old_mapper.py   # beside another mapper module

For each layer (ResNet-50 convolutions, its classifier, GPT-2 and BERT GEMMs, conv1 at batch 4) on the
eyeriss architecture: the shipped hand-written mapping when there is one, and the mapper with the CLI's
defaults (random strategy, 2,000 draws, EDP) at several seeds: energy per MAC, cycles, EDP and search time.
``--compare`` runs the same through the ``search_mappings`` of another mapper module file (e.g. an older
revision's); ``--reference`` adds the best of longer searches (more starts, more patience, 5x the draws, four
seeds) and each run's gap to it. Timings are wall-clock on a possibly shared machine: compare runs made back
to back. Standard library + perfcast (numpy) only; speed is measured here, never asserted in tests.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

# (catalog layer, batch size)
LAYERS: list[tuple[str, int]] = [
    ("resnet50.conv1", 1), ("resnet50.conv1", 4), ("resnet50.layer1.0.conv1", 1), ("resnet50.layer1.0.conv2", 1),
    ("resnet50.layer2.0.conv2", 1), ("resnet50.layer3.0.conv2", 1), ("resnet50.layer4.0.conv1", 1),
    ("resnet50.layer4.0.conv2", 1), ("resnet50.fc", 1), ("gpt2.h.attn.c_attn", 1), ("gpt2.h.mlp.c_fc", 1),
    ("bert-base.layer.ffn.intermediate", 1),
]
ARCH = "eyeriss"


def _load_module(path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location("compared_mapper", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"error: cannot load a Python module from {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    if not hasattr(mod, "search_mappings"):
        raise SystemExit(f"error: {path} has no search_mappings")
    return mod


def _hand_mappings(arch_name: str) -> dict[str, Path]:
    """Shipped mappings by the layer they were written for."""
    from perfcast.accel import load_mapping
    from perfcast.datafiles import data_dir

    out = {}
    for path in sorted((data_dir("accelerators") / "mappings").glob("*.yaml")):
        spec = load_mapping(path)
        if spec.arch == arch_name and spec.problem:
            out[spec.problem] = path
    return out


def _figures(r: Any) -> dict[str, float]:
    return {"energy_per_mac_fJ": r.energy_per_mac_fJ, "cycles": r.cycles, "utilization": r.utilization,
            "edp_Js": r.edp_Js}


def _runs(search: Any, arch: Any, problem: Any, seeds: list[int]) -> dict[str, Any]:
    runs = []
    for seed in seeds:
        t0 = time.perf_counter()
        found = search(arch, problem, seed=seed)
        dt = time.perf_counter() - t0
        runs.append({"seed": seed, "time_s": dt, "evaluated": found.evaluated, **_figures(found.best)})
    worst = max(runs, key=lambda r: r["edp_Js"])
    return {"runs": runs, "median_time_s": statistics.median(r["time_s"] for r in runs),
            "max_time_s": max(r["time_s"] for r in runs), "worst_edp_Js": worst["edp_Js"],
            "best_edp_Js": min(r["edp_Js"] for r in runs), "worst": worst}


def _reference(arch: Any, problem: Any) -> float:
    """The best EDP of longer searches (more starts, patience and draws, four seeds)."""
    from perfcast.accel.batch import BatchModel
    from perfcast.accel.descent import descend_search

    model = BatchModel(arch, problem)
    best = float("inf")
    for seed in range(100, 104):
        found = descend_search(model, "edp", 10_000, seed, starts=16, patience=30, kick_moves=4,
                               budget_per_sample=100)
        if found is not None:
            best = min(best, found.key[0] / arch.clock_Hz)  # the key is energy x cycles
    return best


def log(msg: str, quiet: bool) -> None:
    if not quiet:
        print(msg, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    ap.add_argument("--seeds", type=int, default=3, help="seeds per layer and mapper (default 3)")
    ap.add_argument("--compare", metavar="MAPPER_PY", help="another mapper module file to run beside this one")
    ap.add_argument("--reference", action="store_true", help="also a long search per layer (the best known)")
    ap.add_argument("--layers", nargs="*", help="only these catalog layers (at batch 1)")
    args = ap.parse_args(argv)
    quiet = args.json

    from perfcast.accel import evaluate, load_arch, load_mapping, load_problem, search_mappings

    arch = load_arch(ARCH)
    hands = _hand_mappings(arch.name)
    other = _load_module(args.compare) if args.compare else None
    seeds = list(range(args.seeds))
    layers = [(name, 1) for name in args.layers] if args.layers else LAYERS
    rows = []
    for name, batch in layers:
        problem = load_problem(name, batch_size=batch)
        row: dict[str, Any] = {"layer": name, "batch_size": batch, "macs": problem.macs,
                               "ideal_cycles": problem.macs / arch.num_macs}
        if batch == 1 and name in hands:
            row["hand"] = _figures(evaluate(arch, problem, load_mapping(hands[name])))
        row["mapper"] = _runs(search_mappings, arch, problem, seeds)
        if other is not None:
            row["compared"] = _runs(other.search_mappings, arch, problem, seeds)
        if args.reference:
            ref = min(_reference(arch, problem), row["mapper"]["best_edp_Js"])
            row["reference_edp_Js"] = ref
            row["mapper"]["worst_gap_frac"] = row["mapper"]["worst_edp_Js"] / ref - 1
            if other is not None:
                row["compared"]["worst_gap_frac"] = row["compared"]["worst_edp_Js"] / ref - 1
        rows.append(row)
        m = row["mapper"]
        log(f"{name} (batch {batch}): worst EDP {m['worst_edp_Js']:.4g} J*s over {len(seeds)} seeds, "
            f"median {m['median_time_s']:.2f} s", quiet)
    res = {"arch": arch.name, "seeds": seeds, "cpu_count": os.cpu_count(),
           "load_avg_1min": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
           "compared_module": args.compare, "layers": rows,
           "max_median_time_s": max(r["mapper"]["median_time_s"] for r in rows)}
    if args.json:
        sys.stdout.write(json.dumps(res) + "\n")
    else:
        print_table(res)
    return 0


def _cell(f: dict[str, float]) -> str:
    return f"{f['energy_per_mac_fJ']:>9,.0f} {f['cycles']:>11,.0f} {f['edp_Js']:>9.3g}"


def print_table(res: dict[str, Any]) -> None:
    p = print
    p(f"mapper on {res['arch']}: worst of {len(res['seeds'])} seeds (fJ/MAC, cycles, EDP J*s) and median time;"
      f" load {res['load_avg_1min']}")
    head = f"{'layer':<38} {'hand mapping':>31} | {'mapper':>31} {'time s':>6}"
    if res["compared_module"]:
        head += f" | {'compared':>31} {'time s':>6}"
    if any("reference_edp_Js" in r for r in res["layers"]):
        head += f" | {'best known EDP':>14} {'gap':>6}"
    p(head)
    for r in res["layers"]:
        label = r["layer"] + (f" (batch {r['batch_size']})" if r["batch_size"] != 1 else "")
        hand = _cell(r["hand"]) if "hand" in r else f"{'-':>31}"
        m = r["mapper"]
        line = f"{label:<38} {hand} | {_cell(m['worst'])} {m['median_time_s']:6.2f}"
        if "compared" in r:
            c = r["compared"]
            line += f" | {_cell(c['worst'])} {c['median_time_s']:6.2f}"
        if "reference_edp_Js" in r:
            line += f" | {r['reference_edp_Js']:>14.4g} {100 * m['worst_gap_frac']:5.1f}%"
        p(line)


if __name__ == "__main__":
    raise SystemExit(main())
