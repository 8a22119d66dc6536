"""The energy model's fitted coefficients: ``data/coefficients/energy.json``, versioned JSON, never pickle.

The host time per eager PyTorch kernel (``compose.json``'s ``host.eager_op_s``), fitted on the latency of the
measured eager runs (batch-1 generation, diffusers pipelines) that set how long their GPUs are held, and the
power model's energy-only terms (:class:`~perfcast.coefficients.kernel.PowerCoefficients`): ``idle_frac``,
the share of TDP a GPU draws while held with no kernel running, and ``active_frac``, the share of its dynamic
budget any running kernel draws whatever it computes. Neither changes a clock or a time (the sustained clock
uses the leakage share and the datapaths' energy per FLOP, fitted on kernel times), so they are fitted on
measured power alone (``perfcast fit --stages energy``, :mod:`perfcast.validate.fit_energy`). The values fitted
on every visible row are also written into ``kernel.json``'s ``power`` block, which every prediction reads;
``held_out`` keeps, per GPU, the same fit without that GPU's rows, which ``perfcast validate`` predicts that
GPU's rows with (leave-one-GPU-out). ``fitted_on`` says what each was fitted on.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from perfcast.coefficients.compose import ComposeCoefficients
from perfcast.coefficients.kernel import Coefficients
from perfcast.datafiles import data_path
from perfcast.jsonio import CanonicalJson, versioned_loader

__all__ = ["ENERGY_SCHEMA_VERSION", "EnergyCoefficients", "EnergyFit", "load_energy_coefficients"]

ENERGY_SCHEMA_VERSION = 1


class EnergyFit(BaseModel):
    """One fit of the power model's energy-only terms (shares of TDP and of the dynamic budget)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    idle_frac: float = Field(ge=0.0, le=1.0)
    active_frac: float = Field(ge=0.0, le=1.0)
    eager_op_s: float | None = Field(default=None, gt=0.0, description="host time per eager PyTorch kernel "
                                     "(s), fitted on the measured batch-1 runs' latency (None: compose.json's)")
    diffusers_op_s: float | None = Field(default=None, gt=0.0, description="the same in diffusers pipelines (s), "
                                         "fitted on the diffusion runs' latency (None: compose.json's)")

    def apply(self, coeffs: Coefficients) -> Coefficients:
        """``coeffs`` with this fit's terms in its power block."""
        power = coeffs.power.model_copy(update={"idle_frac": self.idle_frac, "active_frac": self.active_frac})
        return coeffs.model_copy(update={"power": power})

    def apply_host(self, compose: ComposeCoefficients) -> ComposeCoefficients:
        """``compose`` with this fit's host times per eager kernel (those it has)."""
        update = {k: v for k, v in (("eager_op_s", self.eager_op_s), ("diffusers_op_s", self.diffusers_op_s))
                  if v is not None}
        return compose.model_copy(update={"host": compose.host.model_copy(update=update)}) if update else compose


class EnergyCoefficients(EnergyFit, CanonicalJson):
    """The fit on every visible row, its per-GPU held-out fits and what they were fitted on."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: int
    produced_by: str
    fitted_on: dict[str, str]
    held_out: dict[str, EnergyFit] = {}

    def without(self, gpu: str) -> EnergyFit:
        """The fit without ``gpu``'s rows (the fit on every row when none is stored)."""
        return self.held_out.get(gpu, EnergyFit(idle_frac=self.idle_frac, active_frac=self.active_frac,
                                                eager_op_s=self.eager_op_s, diffusers_op_s=self.diffusers_op_s))


_LOAD = versioned_loader(data_path("coefficients", "energy.json"), EnergyCoefficients,
                         version=ENERGY_SCHEMA_VERSION, what="energy coefficients")


def load_energy_coefficients(path: str | Path | None = None) -> EnergyCoefficients:
    """Load the energy coefficients (the package's own when ``path`` is None)."""
    return _LOAD(path)
