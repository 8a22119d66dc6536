"""The energy fit's solvers (perfcast.validate.fit_energy) recover known coefficients from synthetic rows, and the
energy coefficients apply where the models read them."""

from __future__ import annotations

import math

import numpy as np
import pytest

from perfcast.coefficients.bundle import Calibration
from perfcast.coefficients.energy import EnergyFit, load_energy_coefficients
from perfcast.validate.fit_energy import _HOST_GRID, _best_host, fit_power


def test_the_power_shares_are_recovered_from_rows_linear_in_them() -> None:
    rng = np.random.default_rng(0)
    n = 200
    slopes = np.column_stack([rng.uniform(100, 600, n), rng.uniform(50, 300, n)])  # W per unit share
    p0 = rng.uniform(80, 200, n)  # at the priors 0.15 and 0.2
    truth = np.array([0.25, 0.45])
    measured = p0 + slopes @ (truth - np.array([0.15, 0.2]))
    fit = fit_power(np.log(measured), p0, slopes)
    # from priors 0.15 and 0.2, which still pull a little against 200 exact rows: within 5 %
    assert fit.idle_frac == pytest.approx(0.25, rel=0.05) and fit.active_frac == pytest.approx(0.45, rel=0.05)
    assert abs(fit.idle_frac - 0.25) < abs(0.15 - 0.25) / 5


def test_the_host_time_is_the_grid_minimum_refined() -> None:
    truth = 2.3e-5
    # rows whose log latency error is (host - truth) x a row's share of host-bound time, for 30 rows
    share = np.linspace(0.1, 0.9, 30)[:, None]
    resid = share * np.log(_HOST_GRID / truth)[None, :]
    assert _best_host(resid) == pytest.approx(truth, rel=0.08)


def test_a_fit_applies_to_the_power_block_and_the_host_time() -> None:
    cal = Calibration.shipped()
    fit = EnergyFit(idle_frac=0.3, active_frac=0.5, eager_op_s=2e-5)
    assert fit.apply(cal.kernel).power.idle_frac == 0.3 and fit.apply(cal.kernel).power.active_frac == 0.5
    assert fit.apply_host(cal.compose).host.eager_op_s == 2e-5
    assert EnergyFit(idle_frac=0.3, active_frac=0.5).apply_host(cal.compose) == cal.compose
    shipped = load_energy_coefficients()
    # the shipped fit is what every prediction reads (kernel.json's power block), and a GPU without a held-out fit
    # gets the fit on every row
    assert math.isclose(cal.kernel.power.active_frac, shipped.active_frac)
    assert shipped.without("no-such-gpu").idle_frac == shipped.idle_frac
