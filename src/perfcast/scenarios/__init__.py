"""The scenario suite: YAML files in this package, validated by one typed schema per kind (``model_latency``,
``training``, ``collective``, ``serving``, ``rlhf``, ``diffusion``, ``serving_table``, ``operator_table``,
``search``, ``accel``; see :mod:`perfcast.scenarios.schema`)."""

from perfcast.results.scenario import ScenarioResult
from perfcast.scenarios.run import run_scenario
from perfcast.scenarios.schema import (
    CollectiveScenario,
    LatencyScenario,
    Scenario,
    TrainingScenario,
    list_scenarios,
    load_scenario,
)

__all__ = ["CollectiveScenario", "LatencyScenario", "Scenario", "ScenarioResult", "TrainingScenario",
           "list_scenarios", "load_scenario", "run_scenario"]
