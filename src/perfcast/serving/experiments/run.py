"""One entry point for every experiment built on the serving simulator: the CLI, the scenarios, the sweep and
validation describe what they want as a typed experiment and call :func:`run_experiment`.

==================  ===================================================  =====================================
experiment          what it runs                                         result
==================  ===================================================  =====================================
``Simulation``      one simulation (its timeline or time breakdown too)  :class:`~perfcast.serving.result.ServingResult`
``MaxQpsSearch``    the highest load within the SLOs, in steady state    :class:`~.search.QPSSearch`
``Colocation``      two models on the same GPUs, to a fixed point        :class:`~.colocation.ColocatedResult`
``MLPerfScenario``  an MLPerf preset's scenario on a deployment          :class:`~.mlperf.MLPerfResult`
``RLHFIteration``   one PPO iteration (generation, scoring, training)    :class:`~.rlhf.RLHFResult`
==================  ===================================================  =====================================
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, overload

from perfcast.coefficients.bundle import Calibration
from perfcast.serving.config import ServingConfig
from perfcast.serving.engine import simulate_serving
from perfcast.serving.experiments.colocation import ColocatedResult, simulate_colocated
from perfcast.serving.experiments.mlperf import MLPerfResult, run_mlperf
from perfcast.serving.experiments.rlhf import RLHFConfig, RLHFResult, simulate_rlhf_iteration
from perfcast.serving.experiments.search import QPSSearch, find_max_qps
from perfcast.serving.result import ServingResult

__all__ = ["Colocation", "Experiment", "MLPerfScenario", "MaxQpsSearch", "RLHFIteration", "Simulation",
           "run_experiment"]


@dataclass(frozen=True)
class Simulation:
    """One simulation of ``config``; ``keep_events`` keeps every iteration (the timeline), ``explain`` sums the
    iterations' time by part, ``calibration`` prices it (the shipped one when None)."""

    config: ServingConfig
    keep_events: bool = False
    explain: bool = False
    calibration: Calibration | None = None


@dataclass(frozen=True)
class MaxQpsSearch:
    """The highest load ``config``'s deployment sustains within its SLOs, searched from ``start_qps``
    (requests/s; by default from the saturated throughput)."""

    config: ServingConfig
    start_qps: float | None = None


@dataclass(frozen=True)
class Colocation:
    """``first`` and ``second`` served on the same GPUs (``memory_frac``: the first model's share)."""

    first: ServingConfig
    second: ServingConfig
    mode: Literal["time_sliced", "shared"] = "time_sliced"
    memory_frac: float = 0.5


@dataclass(frozen=True)
class MLPerfScenario:
    """MLPerf scenario ``workload`` (``mlperf:<benchmark>:<scenario>``) on ``config``'s deployment; ``qps``
    (requests/s) judges that load instead of searching one."""

    config: ServingConfig
    workload: str
    num_requests: int | None = None
    qps: float | None = None


@dataclass(frozen=True)
class RLHFIteration:
    """One PPO iteration of ``config``."""

    config: RLHFConfig


Experiment = Simulation | MaxQpsSearch | Colocation | MLPerfScenario | RLHFIteration


@overload
def run_experiment(experiment: Simulation) -> ServingResult: ...
@overload
def run_experiment(experiment: MaxQpsSearch) -> QPSSearch: ...
@overload
def run_experiment(experiment: Colocation) -> ColocatedResult: ...
@overload
def run_experiment(experiment: MLPerfScenario) -> MLPerfResult: ...
@overload
def run_experiment(experiment: RLHFIteration) -> RLHFResult: ...


def run_experiment(experiment: Experiment) -> ServingResult | QPSSearch | ColocatedResult | MLPerfResult | RLHFResult:
    """Run ``experiment`` (see the module docstring for what each returns)."""
    if isinstance(experiment, Simulation):
        return simulate_serving(experiment.config, keep_events=experiment.keep_events, explain=experiment.explain,
                                calibration=experiment.calibration)
    if isinstance(experiment, MaxQpsSearch):
        return find_max_qps(experiment.config, start_qps=experiment.start_qps)
    if isinstance(experiment, Colocation):
        return simulate_colocated(experiment.first, experiment.second, mode=experiment.mode,
                                  memory_frac=experiment.memory_frac)
    if isinstance(experiment, MLPerfScenario):
        return run_mlperf(experiment.config, experiment.workload, num_requests=experiment.num_requests,
                          qps=experiment.qps)
    return simulate_rlhf_iteration(experiment.config)
