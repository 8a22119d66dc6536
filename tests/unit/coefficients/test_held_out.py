"""Held-out kernel fits: ``Coefficients.held_out`` / ``without`` and how ``perfcast fit`` keeps them."""

from __future__ import annotations

import pytest

from perfcast.coefficients.kernel import load_coefficients
from perfcast.validate.fit import GEMM_STAGE, with_held_out


def test_without_applies_the_gpus_own_fold_and_nothing_else() -> None:
    co = load_coefficients()
    assert "v100-pcie-32gb" in co.held_out  # the shipped file keeps one fold per GPU with fitted kernel rows
    fold = co.held_out["v100-pcie-32gb"]
    v100 = co.without("v100-pcie-32gb")
    assert v100.gemm.paths["simt"].max_efficiency == pytest.approx(fold["gemm.paths.simt.max_efficiency"])
    assert v100.power.simt_per_tensor_energy == pytest.approx(fold["power.simt_per_tensor_energy"])
    assert v100.held_out == {}  # a fold is not a bundle of folds
    assert v100.attention == co.attention and v100.gemm.paths["tensor"] == co.gemm.paths["tensor"]
    assert co.without("h100-sxm-80gb") is co  # no row of its was fitted: the full fit is its held-out fit


def test_a_refit_replaces_the_fold_values_and_drops_stale_ones() -> None:
    co = load_coefficients()
    stale = {**co.held_out["t4"], "power.energy_pJ_per_flop_7nm.simt": 99.0}
    co = co.model_copy(update={"held_out": {**co.held_out, "t4": stale}})
    out = with_held_out(co, {"t4": {"gemm.paths.simt.tile_ai0": 12.5}})
    assert "power.energy_pJ_per_flop_7nm.simt" not in out.held_out["t4"]  # no stage fits it any more
    assert out.held_out["t4"]["gemm.paths.simt.tile_ai0"] == 12.5
    kept = {p for p, _ in GEMM_STAGE.params} - {"gemm.paths.simt.tile_ai0"}
    assert all(out.held_out["t4"][p] == co.held_out["t4"][p] for p in kept)
    assert "held_out" in out.fitted_on


def test_fit_held_out_refits_each_gpus_stages_without_its_rows() -> None:
    from perfcast.coefficients.bundle import Calibration
    from perfcast.groundtruth.files import find_groundtruth
    from perfcast.validate.fit import CONV_STAGE, POWER_STAGE, fit_held_out

    root = find_groundtruth(required=False)
    if root is None:
        pytest.skip("ground truth not found")
    cal = Calibration.shipped()
    folds = fit_held_out(cal, root, stages=("conv",), per_group=200, log=lambda _m: None)
    assert set(folds) == {"a100-pcie-80gb", "p100-pcie-16gb", "t4", "v100-pcie-32gb"}  # the conv table's GPUs
    for fold in folds.values():  # a convolution's clock comes from the CUDA-core energy ratio, refitted with it
        assert set(fold) == {p for p, _ in CONV_STAGE.params + POWER_STAGE.params}
    # each fold saw other rows: no two agree with each other
    values = [tuple(f.values()) for f in folds.values()]
    assert len(set(values)) == len(values)
