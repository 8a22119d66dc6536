"""Two models served on the same GPUs: memory split, compute time-sliced or shared.

Each model gets a share of the usable GPU memory for its weights and KV cache.
The GPU's compute is either

- ``time_sliced``: the two engines take turns (one iteration each when both
  have work): an iteration of one model waits, with the probability that the
  other is busy, for one of the other's iterations;
- ``shared``: both run at once (MPS-style spatial sharing), each iteration slowed
  while the other runs: by the other's busy share (two saturating workloads
  split the device's bandwidth and SMs evenly).

The coupling is solved as a fixed point: each model is simulated with the
other's busy share and mean iteration time from the previous pass, starting
from each alone, until both busy shares settle (a mean-field approximation of
the interleaving, not an iteration-exact one).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

from perfcast.errors import ConfigError
from perfcast.results.serialize import json_field
from perfcast.serving.config import ServingConfig
from perfcast.serving.engine import simulate_serving
from perfcast.serving.result import ServingResult

__all__ = ["BusyShares", "ColocatedResult", "simulate_colocated"]


@dataclass(frozen=True, slots=True)
class BusyShares:
    """Share of the run each model's iterations hold the GPUs (mean over engines)."""

    first: float
    second: float


@dataclass
class ColocatedResult:
    """Both models' results after the fixed point, and how many passes it took. Its JSON is the first model's
    summary with the co-location's keys, and the second model's summary under ``colocated``."""

    first: ServingResult = field(metadata=json_field(flatten=True))
    second: ServingResult = field(metadata=json_field(key="colocated"))
    mode: str = field(metadata=json_field(key="colocation"))
    passes: int = field(metadata=json_field(key="colocation_passes"))

    JSON_ORDER: ClassVar[tuple[str, ...]] = ("first", "mode", "passes", "gpu_busy_frac", "second")

    @property
    def gpu_busy_frac(self) -> BusyShares:
        """Each model's busy share of the GPUs."""
        return BusyShares(self.first.busy_frac, self.second.busy_frac)


def simulate_colocated(first: ServingConfig, second: ServingConfig, *,
                       mode: Literal["time_sliced", "shared"] = "time_sliced", memory_frac: float = 0.5,
                       passes: int = 6, tol: float = 0.01) -> ColocatedResult:
    """Serve ``first`` and ``second`` on the same GPUs; ``memory_frac`` is the first model's memory share."""
    if not 0 < memory_frac < 1:
        raise ConfigError(f"the first model's memory share must be between 0 and 1 (got {memory_frac})")
    if mode not in ("time_sliced", "shared"):
        raise ConfigError(f"unknown co-location mode {mode!r}; use time_sliced or shared")
    if (first.hardware, first.tensor_parallel_size, first.num_replicas) != (
            second.hardware, second.tensor_parallel_size, second.num_replicas):
        raise ConfigError("co-located models must run on the same GPUs: the same hardware, tensor parallelism "
                          "and replicas")

    def run(cfg: ServingConfig, frac: float, other: ServingResult | None) -> ServingResult:
        if other is None:
            return simulate_serving(cfg, memory_frac=frac)
        busy = other.busy_frac
        if mode == "time_sliced":
            return simulate_serving(cfg, memory_frac=frac, iteration_extra_s=busy * other.mean_iteration_s)
        return simulate_serving(cfg, memory_frac=frac, iteration_scale=1.0 + busy)

    a = run(first, memory_frac, None)
    b = run(second, 1.0 - memory_frac, None)
    done = 1
    for n_pass in range(2, passes + 1):
        done = n_pass
        a_new = run(first, memory_frac, b)
        b_new = run(second, 1.0 - memory_frac, a_new)
        settled = abs(a_new.busy_frac - a.busy_frac) < tol and abs(b_new.busy_frac - b.busy_frac) < tol
        a, b = a_new, b_new
        if settled:
            break
    return ColocatedResult(a, b, mode, done)
