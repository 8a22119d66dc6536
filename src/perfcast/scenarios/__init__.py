"""The scenario suite: YAML files in this package, validated by one typed schema."""

from perfcast.scenarios.run import ScenarioResult, run_scenario
from perfcast.scenarios.schema import Scenario, list_scenarios, load_scenario

__all__ = ["Scenario", "ScenarioResult", "list_scenarios", "load_scenario", "run_scenario"]
