"""Run an accel scenario: layers mapped onto spatial accelerators (:mod:`perfcast.accel`), beside a reference.

Each run evaluates a given mapping, or searches one (the mapper's best by its objective). A row has
``ideal_cycles``, ``cycles``, ``utilization``, ``energy_J``, ``energy_per_mac_fJ``, the energy shares of
DRAM, on-chip buffers (with their networks) and MACs (``*_energy_frac``), the energy breakdown by
component, and, with the scenario's reference figures (another tool's published numbers, not a
measurement), ``reference_*`` beside them and ``*_diff`` = ours / reference - 1.
"""

from __future__ import annotations

from pathlib import Path

from perfcast.accel import evaluate, load_arch, load_mapping, load_problem, search_mappings
from perfcast.datafiles import data_path
from perfcast.errors import PerfcastError
from perfcast.results.scenario import ScenarioResult
from perfcast.scenarios.schema import AccelReference, AccelRun, AccelScenario

__all__ = ["accel_row", "run_accel_scenario"]


def _mapping_path(name: str) -> Path:
    shipped = data_path("accelerators", name)
    return shipped if shipped.is_file() else Path(name)


def accel_row(run: AccelRun, ref: AccelReference | None = None) -> dict[str, object]:
    """The row of one run (see the module docstring)."""
    arch = load_arch(run.arch)
    problem = load_problem(run.layer)
    row: dict[str, object] = {"label": run.label, "arch": arch.name, "layer": problem.name, "status": "ok"}
    if run.mapping is not None:
        result = evaluate(arch, problem, load_mapping(_mapping_path(run.mapping)))
        row["mapping"] = run.mapping
    else:
        found = search_mappings(arch, problem, strategy=run.search, samples=run.samples, objective=run.objective,
                                seed=run.seed)
        result = found.best
        row.update(mapping=f"{found.strategy} search ({found.objective}, seed {run.seed})",
                   mappings_evaluated=found.evaluated, mappings_per_s=found.mappings_per_s)
    shares = result.energy_shares()
    row.update(macs=result.macs, num_pes=result.num_pes, pes_used=result.pes_used,
               ideal_cycles=result.ideal_cycles, cycles=result.cycles, bound=result.bound,
               utilization=result.utilization, energy_J=result.energy_J,
               energy_per_mac_fJ=result.energy_per_mac_fJ, dram_energy_frac=shares["dram"],
               buffer_energy_frac=shares["buffers"], mac_energy_frac=shares["mac"],
               energy_breakdown_J=result.energy_breakdown())
    if ref is not None:
        for key in ("ideal_cycles", "utilization", "energy_per_mac_fJ", "dram_energy_frac"):
            value = getattr(ref, key)
            if value is not None:
                row[f"reference_{key}"] = value
                row[f"{key}_diff"] = float(str(row[key])) / value - 1.0
        row["reference_source"] = ref.source
    return row


def run_accel_scenario(sc: AccelScenario) -> ScenarioResult:
    """Evaluate every run; one failure does not stop the others."""
    res = ScenarioResult(sc.id, sc.title, "ok", kind="accel", notes=list(sc.notes))
    for run in sc.runs:
        try:
            res.rows.append(accel_row(run, sc.reference))
        except PerfcastError as exc:
            res.rows.append({"label": run.label, "arch": run.arch, "layer": run.layer, "status": "error",
                             "error": str(exc)})
    return res.settle()
