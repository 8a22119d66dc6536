"""``perfcast serve``'s run: which experiment a command line asks for, and :class:`ServeReport`, what the command
reports (a typed value; its ``--json`` object is :func:`perfcast.results.serialize.to_json` of it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from perfcast.results.serialize import json_field

if TYPE_CHECKING:
    from perfcast.serving.config import ServingConfig
    from perfcast.serving.experiments.colocation import ColocatedResult
    from perfcast.serving.experiments.mlperf import MLPerfResult
    from perfcast.serving.experiments.search import LoadCheck, QPSSearch, SteadyState
    from perfcast.serving.result import ServingResult

__all__ = ["ServeReport", "ServeRequest", "run_serve"]

# a plain run's steady-state verdict in the words ``load_verdict`` reports it with
_LOAD_WORDS = {"meets": "sustained", "misses": "misses_slo"}


@dataclass(frozen=True)
class ServeRequest:
    """What the command line asks beyond the deployment: an MLPerf preset, a QPS search, a second model on the
    same GPUs, and whether the iterations are kept (a timeline) or summed by part (``--explain``)."""

    workload: str | None = None
    num_requests: int | None = None
    qps: float | None = None
    find_max_qps: bool = False
    colocate_model: str | None = None
    colocation: str = "time_sliced"
    colocate_memory_frac: float = 0.5
    keep_events: bool = False
    explain: bool = False


@dataclass
class ServeReport:
    """What ``perfcast serve`` reports: the run (or the co-located pair), what ``auto`` resolved to, and the QPS
    search, the steady-state check of a plain run's load or the MLPerf scenario's figures that produced it. The
    keys of the run and of each experiment sit at the top level of the JSON object."""

    run: ServingResult | ColocatedResult = field(metadata=json_field(flatten=True))
    weights_format: str | None = field(default=None, metadata=json_field(omit_none=True))
    kv_cache_dtype: str | None = field(default=None, metadata=json_field(omit_none=True))
    search: QPSSearch | None = field(default=None, metadata=json_field(flatten=True))
    search_check: LoadCheck | None = field(default=None, metadata=json_field(key="steady_state", omit_none=True))
    load_verdict: str | None = field(default=None, metadata=json_field(omit_none=True))
    steady: SteadyState | None = field(default=None, metadata=json_field(flatten=True))
    mlperf: dict[str, Any] | None = field(default=None, metadata=json_field(flatten=True))  # mlperf_* figures
    max_qps: float | None = field(default=None, metadata=json_field(omit_none=True))  # an MLPerf search's load
    qps_evaluated: tuple[LoadCheck, ...] | None = field(default=None, metadata=json_field(omit_none=True))
    mlperf_check: LoadCheck | None = field(default=None, metadata=json_field(key="steady_state", omit_none=True))
    missed: str = field(default="", metadata=json_field(skip=True))  # why no load meets the SLO ("": one does)

    @property
    def result(self) -> ServingResult:
        """The simulation reported (the first model's when two share the GPUs)."""
        from perfcast.serving.experiments.colocation import ColocatedResult

        return self.run.first if isinstance(self.run, ColocatedResult) else self.run


def run_serve(cfg: ServingConfig, req: ServeRequest) -> ServeReport:
    """Run the experiment ``req`` asks for on ``cfg``'s deployment."""
    from perfcast.serving.experiments.run import Colocation, MaxQpsSearch, MLPerfScenario, run_experiment

    if req.colocate_model is not None:
        other = cfg.model_copy(update={"model": req.colocate_model, "speculative_model": None,
                                       "workload": cfg.workload.model_copy(update={"seed": cfg.workload.seed + 1})})
        return ServeReport(run_experiment(Colocation(cfg, other, mode=req.colocation,  # type: ignore[arg-type]
                                                     memory_frac=req.colocate_memory_frac)))
    if req.workload is not None:
        mlperf = run_experiment(MLPerfScenario(cfg, req.workload, num_requests=req.num_requests, qps=req.qps))
        cfg = mlperf.result.config
        return _with_mlperf(_resolved(ServeReport(_simulated(cfg, req, mlperf.result)), cfg), mlperf)
    if req.find_max_qps:
        search = run_experiment(MaxQpsSearch(cfg))
        cfg = search.config  # no load meets the SLO (no result): the run at the configured load is reported
        report = _resolved(ServeReport(_simulated(cfg, req, search.result)), cfg)
        report.search, report.missed = search, search.verdict
        if search.check is not None and search.max_qps > 0:
            report.search_check = search.check
        return report
    return _with_steady_state(cfg, _resolved(ServeReport(_simulated(cfg, req, None)), cfg))


def _simulated(cfg: ServingConfig, req: ServeRequest, ran: ServingResult | None) -> ServingResult:
    """The run an experiment ``ran`` at ``cfg``, or a fresh one where there is none or the command needs the
    iterations kept (a timeline) or summed by part (``--explain``)."""
    from perfcast.serving.experiments.run import Simulation, run_experiment

    if ran is not None and not (req.keep_events or req.explain):
        return ran
    return run_experiment(Simulation(cfg, keep_events=req.keep_events, explain=req.explain))


def _resolved(report: ServeReport, cfg: ServingConfig) -> ServeReport:
    """What ``auto`` resolved to: the weights' format and the KV cache's dtype."""
    from perfcast.catalog.hardware import load_hardware
    from perfcast.catalog.models import load_model
    from perfcast.dtypes import DType
    from perfcast.serving.iteration import kv_cache_dtype
    from perfcast.workload.quantization import resolve_quantization

    model = load_model(cfg.model)
    report.weights_format = resolve_quantization(model, cfg.quantization, load_hardware(cfg.hardware)).label
    report.kv_cache_dtype = kv_cache_dtype(None if cfg.kv_cache_dtype == "auto" else DType(cfg.kv_cache_dtype),
                                           cfg.quantization, DType(report.result.dtype), model.quantization).value
    return report


def _with_steady_state(cfg: ServingConfig, report: ServeReport) -> ServeReport:
    """A plain run's load, judged in steady state (a run whose requests all arrive at once has no load to judge)."""
    from perfcast.serving.experiments.search import steady_state

    steady = steady_state(cfg, report.result)
    if steady is not None:
        verdict = steady.check.verdict
        report.load_verdict, report.steady = _LOAD_WORDS.get(verdict, str(verdict)), steady
    return report


def _with_mlperf(report: ServeReport, mlperf: MLPerfResult) -> ServeReport:
    """An MLPerf scenario's figures under ``mlperf_*`` keys, and the load it searched or judged."""
    report.mlperf = {k if k.startswith("mlperf_") else f"mlperf_{k}": v for k, v in mlperf.as_dict().items()}
    if mlperf.qps_evaluated:
        report.max_qps, report.qps_evaluated = mlperf.qps, mlperf.qps_evaluated
    report.mlperf_check = mlperf.check
    return report
