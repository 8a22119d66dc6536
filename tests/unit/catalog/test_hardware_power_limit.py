"""A board's power limit (@<W>w after a hardware id): clocks and energy capped at it, static power the board's."""

from __future__ import annotations

import pytest

from perfcast.catalog.hardware import load_hardware, with_memory, with_power_limit
from perfcast.coefficients.bundle import Calibration
from perfcast.errors import ConfigError
from perfcast.kernel.energy import power_model
from perfcast.kernel.power import static_power_W, sustained_clock_frac


def test_the_suffix_reads_back_and_composes_with_a_memory_override() -> None:
    hw = load_hardware("h100-sxm-80gb@94gb@400w")
    assert (hw.id, hw.memory_bytes, hw.tdp_W, hw.power_limit_W, hw.power_cap_W) == (
        "h100-sxm-80gb@94gb@400w", 94 * 2**30, 700.0, 400.0, 400.0)
    assert load_hardware(hw.id) == hw
    assert with_power_limit("h100-sxm-80gb", 700).id == "h100-sxm-80gb"  # the TDP is no override
    assert with_memory(load_hardware("h100-sxm-80gb@400w"), 94 * 2**30).id == "h100-sxm-80gb@94gb@400w"
    for bad in ("h100-sxm-80gb@3w", "h100-sxm-80gb@400w@94gb", "h100-sxm-80gb@x"):
        with pytest.raises(ConfigError):
            load_hardware(bad)


def test_a_lower_limit_lowers_the_clock_and_caps_the_power_but_not_the_static_share() -> None:
    co = Calibration.shipped().kernel
    full, capped = load_hardware("h100-sxm-80gb"), load_hardware("h100-sxm-80gb@350w")
    assert sustained_clock_frac(capped, "tensor", co) < sustained_clock_frac(full, "tensor", co)
    assert static_power_W(capped, co) == static_power_W(full, co)
    pm = power_model(capped, co)
    assert pm.tdp_W == 350.0 and pm.idle_W == power_model(full, co).idle_W
    energy, _, limited = pm.kernel_energy_J(1.0, 1e16, 1e12, 1e-12, 1.0, 1.0)
    assert float(energy) == pytest.approx(350.0) and bool(limited)
