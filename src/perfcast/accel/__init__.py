"""Spatial accelerators: loop-nest mapping, access counts, cycles and energy (Timeloop/Accelergy's ideas).

Three specs (:mod:`~perfcast.accel.spec`): an architecture (storage levels, PE array, per-access energies
with their source), a problem (a conv or GEMM as a 7-dim loop nest, :mod:`~perfcast.accel.problem`, or a
catalog layer, :mod:`~perfcast.accel.layers`) and a mapping (per-level tiling, loop order, spatial
unrolling). :func:`evaluate` checks a mapping and counts it (:mod:`~perfcast.accel.evaluate`);
:func:`~perfcast.accel.mapper.search_mappings` finds a good one: it counts candidates in numpy batches
(:mod:`~perfcast.accel.batch`, the evaluator's rules on arrays) over Timeloop-style mapspace moves
(:mod:`~perfcast.accel.mapspace`) with random-pruned draws and descent (:mod:`~perfcast.accel.descent`).
"""

from __future__ import annotations

from pathlib import Path

from perfcast.accel.evaluate import AccelResult, LevelAccess, evaluate_nest
from perfcast.accel.layers import layer_problem, list_layers
from perfcast.accel.mapper import Objective, SearchResult, search_mappings
from perfcast.accel.nest import Nest, build_nest
from perfcast.accel.problem import Problem
from perfcast.accel.spec import (
    Architecture,
    MappingSpec,
    ProblemSpec,
    list_archs,
    load_arch,
    load_mapping,
    load_problem_file,
)

__all__ = ["AccelResult", "Architecture", "LevelAccess", "MappingSpec", "Nest", "Objective", "Problem",
           "ProblemSpec", "SearchResult", "build_nest", "evaluate", "evaluate_nest", "layer_problem", "list_archs",
           "list_layers", "load_arch", "load_mapping", "load_problem", "load_problem_file", "search_mappings"]


def load_problem(layer_or_path: str | Path, batch_size: int = 1) -> Problem:
    """A problem from a YAML file (``*.yaml``) or a catalog layer name (``resnet50.conv1``)."""
    text = str(layer_or_path)
    if text.endswith((".yaml", ".yml")):
        return Problem.from_spec(load_problem_file(text))
    return layer_problem(text, batch_size=batch_size)


def evaluate(arch: Architecture, problem: Problem, mapping: MappingSpec) -> AccelResult:
    """Check ``mapping`` (ConfigError in one line if it does not fit) and count its accesses, cycles, energy."""
    return evaluate_nest(arch, problem, build_nest(arch, problem, mapping))
