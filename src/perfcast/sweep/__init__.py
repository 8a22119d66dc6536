"""Design-space search: training plans (vectorized pricing, exact re-ranking, Pareto front) and serving
deployments (max goodput per GPU under an SLO). Local by default; Ray for a cluster (optional extra)."""

from perfcast.sweep.evaluate import PlanScores, Pricer, evaluate_plans
from perfcast.sweep.search import OBJECTIVES, PlanRow, Reference, SearchResult, pareto_front, search_training
from perfcast.sweep.space import CONSTRAINTS, PlanArrays, SearchSpace, enumerate_plans

__all__ = ["CONSTRAINTS", "OBJECTIVES", "PlanArrays", "PlanRow", "PlanScores", "Pricer", "Reference", "SearchResult",
           "SearchSpace", "enumerate_plans", "evaluate_plans", "pareto_front", "search_training"]
