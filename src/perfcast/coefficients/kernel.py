"""Fitted kernel-model coefficients: a versioned JSON file, never pickle.

``data/coefficients/kernel.json`` in this package is what ``perfcast fit`` wrote; it names
the command and the ground-truth rows it was fitted on. A file with another
``schema_version`` is refused (DataError) rather than misread.

``held_out`` keeps, per GPU (catalog id), the coefficients the NeuSight kernel stages fit without that GPU's
rows, by dotted path: ``perfcast validate`` predicts each GPU of the end-to-end and kernel tables with
:meth:`Coefficients.without` it, so no GPU is scored with coefficients its own measurements moved.
"""

from __future__ import annotations

import copy
import json
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from perfcast.coefficients.dotted import set_path
from perfcast.datafiles import data_path
from perfcast.jsonio import load_versioned

__all__ = ["SCHEMA_VERSION", "Coefficients", "GemmPath", "load_coefficients"]

SCHEMA_VERSION = 1


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PowerCoefficients(_Model):
    """Sustained clock under the power limit (see :mod:`perfcast.kernel.power`) and per-op energy
    (:mod:`perfcast.kernel.energy`)."""

    energy_pJ_per_flop_7nm: dict[str, float] = Field(description="per datapath: simt, matrix, tensor")
    process_exponent: float = Field(description="energy per FLOP scales as (process_nm / 7) ** exponent")
    leakage_frac: float = Field(description="share of TDP taken by leakage, I/O and the rest of the board")
    memory_pJ_per_bit: dict[str, float] = Field(description="DRAM interface energy per bit moved, by memory kind")
    flop_per_dram_byte: float = Field(description="FLOPs per DRAM byte of a compute-bound GEMM: sets the DRAM "
                                      "traffic (and its interface power) that goes with the math units' rate")
    vmin_frac: float = Field(description="voltage at zero clock as a fraction of the boost voltage")
    simt_per_tensor_energy: float = Field(default=6.0, gt=0.0, description="energy of one CUDA-core FP32 FLOP "
                                          "over one tensor-core FLOP's, on a GPU whose base clock anchors its power "
                                          "(perfcast.kernel.power)")
    idle_frac: float | None = Field(default=None, ge=0.0, le=1.0, description="energy model only: share of "
                                    "TDP a GPU draws while it is held with no kernel running (host gaps, "
                                    "an engine's CPU work, bubbles); None: leakage_frac")
    active_frac: float = Field(default=0.2, ge=0.0, le=1.0,
                               description="energy model only (a prior, no power measurements to fit): share of "
                               "the dynamic budget (TDP minus static power) drawn while any kernel runs at boost "
                               "clock, whatever it computes (clock tree, issue, caches, on-chip traffic, "
                               "regulator losses); scales with clock x voltage^2")


class GemmPath(_Model):
    """GEMM efficiency on one datapath (simt = CUDA cores, matrix = AMD MFMA FP32, tensor = tensor cores)."""

    max_efficiency: float = Field(description="fraction of the sustained peak a large 128x128 tile reaches")
    k_overhead: float = Field(description="per-tile fixed cost, in K-loop steps (prologue/epilogue)")
    tile_ai0: float = Field(description="tile efficiency = ai / (ai + tile_ai0), ai = tm*tn/(tm+tn)")
    batched_tiles: list[tuple[int, int]]
    linear_tiles: list[tuple[int, int]]
    split_k: list[int]
    memory_efficiency: float = Field(description="fraction of peak DRAM bandwidth a GEMM streams its operands at")


class GemmCoefficients(_Model):
    paths: dict[str, GemmPath]


class VectorCoefficients(_Model):
    """Memory-bound kernels: ``bytes / (bandwidth * memory_efficiency * op_factor[op])`` plus
    ``elements * sm_cycles_per_elem[op] / (num_sms * boost_clock)`` (issue/latency-bound work the
    memory stream does not hide)."""

    memory_efficiency: dict[str, float] = Field(description="by memory kind: hbm, gddr")
    op_factor: dict[str, float] = Field(description="relative streaming efficiency per op (default 1)")
    sm_cycles_per_elem: dict[str, float] = Field(default_factory=dict, description="SM cycles per output element")
    issue_lane_exponent: float = Field(default=0.0, description="issue rate grows as (fp32 lanes per SM / 64) "
                                       "to this power: 0 = per-SM issue bound, 1 = ALU bound")
    combine_p: float = Field(default=2.0, description="memory and issue times combine as (m**p + i**p)**(1/p): "
                             "1 = they add, large = the longer hides the shorter")
    combine_p_op: dict[str, float] = Field(default_factory=dict, description="per-op exponent where it differs: "
                                           "1 for row reductions, whose second pass waits for the first")
    min_time_s: dict[str, float] = Field(default_factory=dict,
                                         description="shortest time of a kernel of this op, seconds (reductions "
                                         "and gathers have longer fixed latencies than a plain launch)")
    l2_hit_frac: float = Field(default=0.0, description="fraction of the L2 cache that holds just-produced "
                               "operands a kernel reads again")
    l2_cost_frac: float = Field(default=0.35, description="cost of a byte read from L2 relative to DRAM")
    row_overhead_elems: float = Field(description="row reductions lose efficiency as cols / (cols + this)")


class AttentionCoefficients(_Model):
    """Fused (FlashAttention-style) kernels."""

    compute_efficiency: float = Field(description="fraction of the sustained matrix peak for the score/value math")
    backward_efficiency: float
    training_efficiency: float = Field(
        default=0.55, description="forward of training attention (FlashAttention-2 / cuDNN fused kernels over whole "
                                  "sequences; serving kernels over paged caches are slower)")
    memory_efficiency: float = Field(description="fraction of DRAM bandwidth when reading the KV cache")
    fixed_s: float = Field(default=0.0, description="fixed cost of one call (block-table setup, split-KV reduce)")
    per_sequence_s: float = Field(default=0.0, description="cost per sequence in the batch (paged decode)")


class ConvCoefficients(_Model):
    """Convolutions priced as implicit GEMMs (cuDNN), with a Winograd speedup for 3x3 stride 1."""

    efficiency: float
    winograd_speedup: float
    memory_factor: float = Field(default=1.0, description="DRAM traffic relative to reading the input and writing "
                                 "the output once (im2col/Winograd transforms move more)")
    kernels_per_call: float = Field(default=1.0, description="kernels a convolution launches (transforms + GEMM)")


class LaunchCoefficients(_Model):
    """Fixed costs of a kernel and of the framework call that launches it."""

    kernel_min_s: float = Field(description="shortest GPU time of any kernel (launch + tail), seconds")
    dispatch_s: dict[str, float] = Field(description="host time of one isolated, event-timed framework call, by "
                                         "op class, seconds (for isolated-kernel benchmark tables)")


class MeasurementCoefficients(_Model):
    """How isolated-kernel benchmarks differ from steady state (used only to predict such tables)."""

    burst_tau_s: float = Field(description="kernels much shorter than this run at boost clock before throttling")


class Coefficients(_Model):
    """All fitted coefficients of the kernel layer."""

    schema_version: int
    produced_by: str
    fitted_on: dict[str, str]
    power: PowerCoefficients
    gemm: GemmCoefficients
    vector: VectorCoefficients
    attention: AttentionCoefficients
    conv: ConvCoefficients
    launch: LaunchCoefficients
    measurement: MeasurementCoefficients
    held_out: dict[str, dict[str, float]] = Field(
        default_factory=dict, description="per GPU (catalog id): the kernel-table stages' coefficients fitted "
                                          "without its rows, by dotted path")

    def without(self, gpu: str) -> Coefficients:
        """These coefficients as fitted without ``gpu``'s rows (catalog id; themselves when no fold is stored,
        i.e. no fitted row was that GPU's)."""
        fold = self.held_out.get(gpu)
        if not fold:
            return self
        raw = copy.deepcopy(self.model_dump(mode="json"))
        for path, value in fold.items():
            set_path(raw, path, value)
        raw["held_out"] = {}
        return Coefficients.model_validate(raw)

    def to_json(self) -> str:
        """The canonical JSON text of these coefficients."""
        return json.dumps(self.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"


def _default_path() -> Path:
    return data_path("coefficients", "kernel.json")


def load_coefficients(path: str | Path | None = None) -> Coefficients:
    """Load coefficients (the package's own when ``path`` is None)."""
    if path is None:
        return _load_default()
    return _load(Path(path))


@lru_cache(maxsize=1)
def _load_default() -> Coefficients:
    return _load(_default_path())


def _load(path: Path) -> Coefficients:
    return load_versioned(path, Coefficients, version=SCHEMA_VERSION, what="kernel coefficients")
