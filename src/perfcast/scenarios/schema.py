"""Typed scenario files: the same schema checks the shipped suite and a user's own file.

A scenario's ``kind`` picks its schema:

- ``model_latency``: one model step per (run, device) (:class:`LatencyScenario`);
- ``training``: one distributed training step per run, a model on a cluster under a
  parallel plan (:class:`TrainingScenario`); or the runs of a published table
  (``table_rows``), rebuilt the way ``perfcast validate`` rebuilds them;
- ``collective``: one collective per (op, size, group size) of each run
  (:class:`CollectiveScenario`);
- ``serving``: serving simulations (:class:`ServingScenario`);
- ``rlhf``: one PPO iteration per run (:class:`RLHFScenario`);
- ``diffusion``: seconds per image of a latent-diffusion pipeline (:class:`DiffusionScenario`);
- ``serving_table`` / ``operator_table``: the rows of a published serving-throughput table or of VIDUR's
  per-operator tables, predicted beside the measurement (:class:`ServingTableScenario`,
  :class:`OperatorTableScenario`);
- ``search``: a design-space search of training plans (:class:`SearchScenario`);
- ``accel``: layers on a spatial accelerator, beside another tool's published figures (:class:`AccelScenario`).
- ``local_cpu``: models measured on this machine beside their prediction on ``local-cpu`` (:class:`LocalCpuScenario`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from perfcast.datafiles import data_dir
from perfcast.errors import ConfigError, UnknownNameError
from perfcast.serving.config import ServingConfig
from perfcast.serving.experiments.rlhf import RLHFConfig
from perfcast.sweep.space import SearchSpace
from perfcast.system.plan import ParallelPlan
from perfcast.yamlio import read_yaml, validation_message

__all__ = ["AccelReference", "AccelRun", "AccelScenario",
           "CollectiveRun", "CollectiveScenario", "DiffusionRun", "DiffusionScenario", "ExpectedOrder", "LatencyRun",
           "LatencyScenario", "LocalCpuCase", "LocalCpuScenario",
           "OperatorTableScenario", "PublishedValue", "RLHFRun", "RLHFScenario", "ReferenceRatios",
           "Scenario", "SearchScenario", "ServingRun", "ServingScenario", "ServingTableScenario", "TableRows",
           "TrainingRun", "TrainingScenario", "list_scenarios", "load_scenario", "scenario_from_dict"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _ScenarioHead(_Strict):
    """What every scenario file starts with: its id (as scenarios.md names it) and a title."""

    id: str
    title: str


# -- model_latency ---------------------------------------------------------------------------------------------


class LatencyRun(_Strict):
    """One model step to predict on every scenario device."""

    model: str
    mode: Literal["inference", "training", "prefill", "decode"] = "inference"
    batch_size: int = Field(gt=0)
    seq_len: int = Field(gt=0)
    fused: bool = False
    parallelism: str = "none"


class LatencyScenario(_ScenarioHead):
    """A scenario: an id, what it asks, and the runs that answer it."""

    kind: Literal["model_latency"]
    groundtruth: str | None = Field(default=None, description="table (relative to shared/groundtruth) to compare with")
    dtype: str = "fp32"
    optimizer: Literal["adam", "sgd", "none"] = "adam"
    hardware: list[str] = Field(min_length=1)
    runs: list[LatencyRun] = Field(min_length=1)


# -- training --------------------------------------------------------------------------------------------------

TrainingMetric = Literal["tflops_per_gpu", "hfu_tflops_per_gpu", "mfu", "hfu", "step_time_s", "tokens_per_s_per_gpu"]


class PublishedValue(_Strict):
    """A figure a source published for a run that no ground-truth table carries."""

    metric: TrainingMetric = Field(description="the predicted row key it is compared with")
    value: float = Field(gt=0)
    source: str = Field(min_length=1, description="where the figure was published")


class TrainingRun(_Strict):
    """One training step: a model on a cluster under a parallel plan."""

    label: str = Field(default="", description="what this run is, shown beside its numbers")
    model: str
    cluster: str
    nodes: int | None = Field(default=None, ge=1, description="cluster size (default: the GPUs the plan needs)")
    plan: ParallelPlan = Field(default_factory=ParallelPlan)
    published: PublishedValue | None = None


class TableRows(_Strict):
    """Rows of the scenario's ground-truth table, predicted as ``perfcast validate`` rebuilds them."""

    framework_contains: str = Field(min_length=1, description="keep rows whose framework column contains this")


class TrainingScenario(_ScenarioHead):
    """Training steps, each named explicitly or taken from the rows of a published table."""

    kind: Literal["training"]
    groundtruth: str | None = Field(default=None, description="table (relative to shared/groundtruth) of table_rows")
    table_rows: TableRows | None = None
    runs: list[TrainingRun] = Field(default_factory=list)

    @model_validator(mode="after")
    def _has_runs(self) -> TrainingScenario:
        if not self.runs and self.table_rows is None:
            raise ValueError("a training scenario needs runs or table_rows")
        if self.table_rows is not None and not self.groundtruth:
            raise ValueError("table_rows needs the groundtruth table they come from")
        return self


# -- collective ------------------------------------------------------------------------------------------------


class CollectiveRun(_Strict):
    """Collectives on one cluster: every (op, size, group size) combination is one prediction."""

    cluster: str
    ops: list[str] = Field(min_length=1)
    sizes_bytes: list[int] = Field(min_length=1)
    group_sizes: list[int] = Field(min_length=1)
    gpus_per_node: int | None = Field(default=None, ge=1,
                                      description="group members per scale-up domain (default: as many as fit)")
    algorithm: str | None = None


class ReferenceRatios(_Strict):
    """Another tool's time ratios to all_reduce for one size and group, shown beside perfcast's (not a measurement)."""

    ratios: dict[str, float] = Field(min_length=1, description="op -> time / all_reduce time")
    size_bytes: int = Field(gt=0)
    group_size: int = Field(gt=1)
    source: str = Field(min_length=1)


class CollectiveScenario(_ScenarioHead):
    """Collective times, beside the measured NCCL tables where they have the same run."""

    kind: Literal["collective"]
    groundtruth: list[str] = Field(default_factory=list,
                                   description="VIDUR network tables (relative to shared/groundtruth)")
    shared_nics: bool = Field(default=True, description="every GPU of a node uses the network at once (training); "
                                                        "False: the group's members have the NICs to themselves")
    reference: ReferenceRatios | None = None
    runs: list[CollectiveRun] = Field(min_length=1)


# -- serving ---------------------------------------------------------------------------------------------------


class ServingRun(_Strict):
    """One serving simulation: a deployment under a load (:class:`~perfcast.serving.config.ServingConfig`).

    ``search_max_qps`` searches the highest QPS meeting the config's SLOs instead (the row is that load);
    ``colocate`` serves a second model on the same GPUs (two rows: ``label`` and ``colocate_label``);
    ``baseline`` names another run this one is compared with (the row gets ``speedup_x`` ratios).
    """

    label: str = Field(default="", description="what this run is, shown beside its numbers")
    config: ServingConfig
    search_max_qps: bool = Field(default=False, description="search the highest Poisson QPS at which the config "
                                                            "meets its SLOs (from the workload's qps up or down); "
                                                            "the row reports max_qps and the metrics at that load")
    colocate: ServingConfig | None = Field(default=None, description="a second model served on the same GPUs")
    colocation: Literal["time_sliced", "shared"] = Field(default="time_sliced",
                                                         description="how the co-located models share compute")
    memory_frac: float = Field(default=0.5, gt=0, lt=1,
                               description="co-location: the first model's share of the usable GPU memory")
    colocate_label: str = Field(default="", description="label of the second model's row (default: "
                                                        "label:model)")
    baseline: str | None = Field(default=None, description="label of a run to compare with: the row gets "
                                                           "speedup_x.{ttft,tpot,e2e} = baseline mean / this mean")

    @model_validator(mode="after")
    def _one_mode(self) -> ServingRun:
        if self.search_max_qps and self.colocate is not None:
            raise ValueError("a run either searches the max QPS or co-locates a second model, not both")
        if self.search_max_qps and self.config.slo_ttft_s is None and self.config.slo_tpot_s is None:
            raise ValueError("search_max_qps needs an SLO in the config (slo_ttft_s or slo_tpot_s)")
        return self

    @property
    def labels(self) -> list[str]:
        """The labels of this run's rows (two when a second model is co-located)."""
        if self.colocate is None:
            return [self.label]
        return [self.label, self.colocate_label or f"{self.label}:{self.colocate.model}"]


class ExpectedOrder(_Strict):
    """An ordering a reference reports between two runs: ``lower`` has the smaller ``metric``."""

    metric: str = Field(description="a key of the run's JSON, dotted for percentiles, e.g. ttft_s.p99")
    lower: str = Field(description="label of the run expected lower")
    higher: str = Field(description="label of the run expected higher")
    source: str = Field(min_length=1)


class ServingScenario(_ScenarioHead):
    """Serving simulations, each a deployment under a load, with orderings a reference reports."""

    kind: Literal["serving"]
    expected: list[ExpectedOrder] = Field(default_factory=list)
    runs: list[ServingRun] = Field(min_length=1)

    @model_validator(mode="after")
    def _labels_resolve(self) -> ServingScenario:
        labels = [lab for run in self.runs for lab in run.labels]
        dup = sorted({lab for lab in labels if lab and labels.count(lab) > 1})
        if dup:
            raise ValueError(f"run labels must be unique; repeated: {', '.join(map(repr, dup))}")
        for run in self.runs:
            if run.baseline is not None and run.baseline not in labels:
                raise ValueError(f"run {run.label!r}: baseline {run.baseline!r} is not a run label")
        for exp in self.expected:
            for lab in (exp.lower, exp.higher):
                if lab not in labels:
                    raise ValueError(f"expected {exp.metric}: {lab!r} is not a run label")
        return self


# -- rlhf ------------------------------------------------------------------------------------------------------


class RLHFRun(_Strict):
    """One PPO iteration (:class:`~perfcast.serving.experiments.rlhf.RLHFConfig`)."""

    label: str = Field(default="", description="what this run is, shown beside its numbers")
    config: RLHFConfig


class RLHFScenario(_ScenarioHead):
    """PPO iterations, each the four RLHF models on one cluster."""

    kind: Literal["rlhf"]
    notes: list[str] = Field(default_factory=list, description="assumptions shown with the results")
    runs: list[RLHFRun] = Field(min_length=1)


# -- diffusion -------------------------------------------------------------------------------------------------


class DiffusionRun(_Strict):
    """Text-to-image generation: ``steps`` UNet passes per batch, then the VAE decoder once per image."""

    label: str = Field(default="", description="what this run is, shown beside its numbers")
    unet: str = Field(description="the denoising UNet (catalog id)")
    vae: str | None = Field(default=None, description="the VAE whose decoder turns latents into pixels")
    hardware: str
    batch_size: int = Field(gt=0, description="images generated together")
    steps: int = Field(default=50, gt=0, description="denoising steps")
    guidance: bool = Field(default=True, description="classifier-free guidance: each step runs the UNet on the "
                                                     "conditional and the unconditional batch (2 x batch_size)")
    dtype: Literal["fp16", "bf16", "fp32"] = "fp16"


class DiffusionScenario(_ScenarioHead):
    """Seconds per image of latent-diffusion runs."""

    kind: Literal["diffusion"]
    notes: list[str] = Field(default_factory=list, description="assumptions shown with the results")
    runs: list[DiffusionRun] = Field(min_length=1)


# -- published tables ------------------------------------------------------------------------------------------


class ServingTableScenario(_ScenarioHead):
    """Rows of a published serving-throughput table (TensorRT-LLM style), each simulated beside its value."""

    kind: Literal["serving_table"]
    groundtruth: str = Field(default="published/inference.csv",
                             description="table (relative to shared/groundtruth)")
    model_contains: str = Field(default="", description="keep rows whose model_id contains this (any case)")
    gpus: list[str] = Field(default_factory=list, description="keep rows on these gpu_ids (empty: every GPU)")
    num_requests: int = Field(default=1000, gt=0, description="requests simulated per row")
    max_rows: int | None = Field(default=None, gt=0, description="predict at most this many rows (table order)")


class OperatorTableScenario(_ScenarioHead):
    """VIDUR's per-operator GPU times (``vidur/compute/<gpu>/<model>/mlp.csv``) beside perfcast's, per op and GPU."""

    kind: Literal["operator_table"]
    groundtruth: str = Field(default="vidur/compute", description="folder (relative to shared/groundtruth)")
    gpus: list[str] = Field(min_length=1, description="GPU folders of the table (a100, a40, h100 ...)")
    models: list[str] = Field(default_factory=list, description="model folders to keep (empty: every model)")
    row_stride: int = Field(default=1, ge=1, description="predict every n-th row of each table (1: all)")


# -- search ----------------------------------------------------------------------------------------------------


class SearchScenario(_ScenarioHead):
    """A design-space search of training plans (:mod:`perfcast.sweep`): the best plans, re-ranked exactly, beside
    the published plan of the same run when ``data/presets/published_plans.yaml`` has one."""

    kind: Literal["search"]
    space: SearchSpace
    objective: Literal["tflops", "step-time", "cost"] = "tflops"
    top: int = Field(default=5, ge=1, description="best plans reported")


# -- accel -----------------------------------------------------------------------------------------------------


class AccelRun(_Strict):
    """One layer on a spatial accelerator (:mod:`perfcast.accel`): a given mapping, or the mapper's best."""

    label: str = Field(default="", description="what this run is, shown beside its numbers")
    arch: str = Field(description="a shipped architecture (eyeriss) or a YAML file")
    layer: str = Field(description="a catalog layer (resnet50.conv1) or a problem YAML file")
    mapping: str | None = Field(default=None, description="a mapping YAML (relative to perfcast/data/accelerators for "
                                                          "shipped ones); absent: search")
    search: Literal["random", "exhaustive"] = "random"
    samples: int = Field(default=2000, gt=0)
    objective: Literal["edp", "energy", "delay"] = "edp"
    seed: int = 0


class AccelReference(_Strict):
    """Another tool's published figures for the same layer and architecture (not a measurement)."""

    ideal_cycles: float | None = Field(default=None, gt=0)
    utilization: float | None = Field(default=None, gt=0, le=1)
    energy_per_mac_fJ: float | None = Field(default=None, gt=0)
    dram_energy_frac: float | None = Field(default=None, ge=0, le=1)
    source: str = Field(min_length=1)


class AccelScenario(_ScenarioHead):
    """Layers mapped onto spatial accelerators, beside a reference tool's figures."""

    kind: Literal["accel"]
    notes: list[str] = Field(default_factory=list, description="assumptions shown with the results")
    reference: AccelReference | None = None
    runs: list[AccelRun] = Field(min_length=1)


class LocalCpuCase(_Strict):
    """One inference forward measured on this machine: a catalog model, batch and sequence length."""

    model: str
    batch_size: int = Field(default=1, gt=0)
    seq_len: int = Field(default=0, ge=0, description="tokens per sequence (0 for image models)")


class LocalCpuScenario(_ScenarioHead):
    """Models measured here with PyTorch beside their prediction on ``local-cpu`` (after ``perfcast calibrate``)."""

    kind: Literal["local_cpu"]
    notes: list[str] = Field(default_factory=list, description="assumptions shown with the results")
    cases: list[LocalCpuCase] = Field(min_length=1)
    min_time_s: float = Field(default=0.2, gt=0, description="minimum measuring time per case, seconds")


Scenario = (LatencyScenario | TrainingScenario | CollectiveScenario | ServingScenario | RLHFScenario
            | DiffusionScenario | ServingTableScenario | OperatorTableScenario | SearchScenario | AccelScenario
            | LocalCpuScenario)
_ScenarioClass = (type[LatencyScenario] | type[TrainingScenario] | type[CollectiveScenario] | type[ServingScenario]
                  | type[RLHFScenario] | type[DiffusionScenario] | type[ServingTableScenario]
                  | type[OperatorTableScenario] | type[SearchScenario] | type[AccelScenario]
                  | type[LocalCpuScenario])

_KINDS: dict[str, _ScenarioClass] = {
    "model_latency": LatencyScenario, "training": TrainingScenario, "collective": CollectiveScenario,
    "serving": ServingScenario, "rlhf": RLHFScenario, "diffusion": DiffusionScenario,
    "serving_table": ServingTableScenario, "operator_table": OperatorTableScenario,
    "search": SearchScenario, "accel": AccelScenario, "local_cpu": LocalCpuScenario}


def _kind_class(raw: object, where: str) -> _ScenarioClass:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: a scenario must be a YAML mapping of keys")
    kind = raw.get("kind")
    if not isinstance(kind, str) or kind not in _KINDS:
        raise ConfigError(f"{where}: key kind: {kind!r} is not a scenario kind; use one of {', '.join(_KINDS)}")
    return _KINDS[str(kind)]


def scenario_from_dict(raw: object, where: str = "scenario") -> Scenario:
    """Validate plain data as the scenario its ``kind`` names (raises ConfigError naming the key)."""
    cls = _kind_class(raw, where)
    try:
        return cls.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"{where}: {validation_message(exc, cls)}") from None


def _scenario_dir() -> Path:
    return data_dir("scenarios")


def load_scenario(name: str | Path) -> Scenario:
    """Load a shipped scenario by id, or a user's YAML file by path (raises ConfigError with file and key)."""
    text = str(name)
    path = Path(text)
    if not text.endswith((".yaml", ".yml")):
        ids = {p.stem: p for p in _scenario_dir().glob("*.yaml")}
        if text not in ids:
            raise UnknownNameError("scenario", text, ids.keys())
        path = ids[text]
    if not path.is_file():
        raise ConfigError(f"scenario file {path} does not exist")
    return scenario_from_dict(read_yaml(path, what="scenario", error=ConfigError), str(path))


def _order(path: Path) -> tuple[object, ...]:
    """The design document's order: the LLM suite (T, I, E) before the reference experiments (R); numbers
    compare as numbers (R2 before R11)."""
    stem = path.stem
    group = "TIER".find(stem[:1]) if stem[:1] in "TIER" else 4
    return (group, *((0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", stem) if t))


def list_scenarios() -> list[Scenario]:
    """Every shipped scenario, in the design document's order (T, I, E, then R; R2 before R11)."""
    return [load_scenario(p) for p in sorted(_scenario_dir().glob("*.yaml"), key=_order)]
