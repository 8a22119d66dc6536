"""The calibration bundle: one frozen value whose digest names its content, and caches keyed on content."""

from __future__ import annotations

import gc
import json
import subprocess
import sys

import pytest

from perfcast.catalog.hardware import load_hardware
from perfcast.coefficients.bundle import Calibration, resolve_calibration
from perfcast.coefficients.kernel import Coefficients
from perfcast.digest import content_digest
from perfcast.dtypes import DType
from perfcast.kernel.predict import predict_kernel
from perfcast.workload.graph import Graph
from perfcast.workload.types import Op


def _gemm() -> Op:
    return Graph(DType.FP16).linear("proj", 4096, 4096, 4096)


def _slower_gemms(co: Coefficients, factor: float) -> Coefficients:
    """``co`` with every GEMM path's efficiency divided by ``factor`` (a new object, equal content for equal
    factors)."""
    raw = json.loads(co.to_json())
    for path in raw["gemm"]["paths"].values():
        path["max_efficiency"] /= factor
    return Coefficients.model_validate(raw)


def test_shipped_is_one_value_and_the_default() -> None:
    cal = Calibration.shipped()
    assert Calibration.shipped() is cal
    assert resolve_calibration(None) is cal
    assert len(cal.digest) == 64 and cal.schema_version == 1


def test_replacing_a_part_makes_a_new_bundle_with_another_digest() -> None:
    cal = Calibration.shipped()
    other = cal.with_kernel(_slower_gemms(cal.kernel, 2.0))
    assert other is not cal and other.digest != cal.digest
    assert other.compose is cal.compose and other.training is cal.training
    assert Calibration.shipped().kernel is cal.kernel  # the shipped bundle is unchanged
    with pytest.raises(AttributeError):
        cal.kernel = other.kernel  # type: ignore[misc]


def test_equal_content_is_an_equal_bundle() -> None:
    cal = Calibration.shipped()
    a = cal.with_kernel(_slower_gemms(cal.kernel, 2.0))
    b = cal.with_kernel(_slower_gemms(cal.kernel, 2.0))
    assert a.kernel is not b.kernel
    assert a == b and a.digest == b.digest and hash(a) == hash(b)
    assert cal.with_kernel(cal.kernel.model_copy()) == cal


def test_from_files_reads_the_fitted_part(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cal = Calibration.shipped()
    path = tmp_path / "coefficients.json"
    path.write_text(_slower_gemms(cal.kernel, 3.0).to_json(), encoding="utf-8")
    fitted = Calibration.from_files(kernel=path)
    assert fitted.kernel == _slower_gemms(cal.kernel, 3.0) and fitted.serving is cal.serving
    assert fitted.digest != cal.digest


def test_a_modified_kernel_coefficient_changes_the_kernel_time_and_equal_ones_share_it() -> None:
    op = _gemm()
    base = predict_kernel(op, "h100-sxm-80gb").time_s
    cal = Calibration.shipped()
    slow = predict_kernel(op, "h100-sxm-80gb", cal.with_kernel(_slower_gemms(cal.kernel, 2.0))).time_s
    assert slow > 1.5 * base
    again = predict_kernel(op, "h100-sxm-80gb", cal.with_kernel(_slower_gemms(cal.kernel, 2.0))).time_s
    assert again == slow
    assert predict_kernel(op, "h100-sxm-80gb").time_s == base


def test_a_freed_object_cannot_return_a_stale_cached_time() -> None:
    """Coefficients freed and reallocated (possibly at the same id) are priced by their own content."""
    op = _gemm()
    cal = Calibration.shipped()
    times = []
    for factor in (2.0, 4.0, 8.0):
        co = _slower_gemms(cal.kernel, factor)
        times.append(predict_kernel(op, "h100-sxm-80gb", cal.with_kernel(co)).time_s)
        del co
        gc.collect()
    assert times[0] < times[1] < times[2]


def test_hardware_with_the_same_id_but_other_content_is_priced_apart() -> None:
    op = _gemm()
    hw = load_hardware("h100-sxm-80gb")
    copy = hw.model_copy()
    assert content_digest(copy) == content_digest(hw)
    peaks = hw.peak_flops_per_s.model_copy(update={k: v / 4 for k, v in hw.peak_flops_per_s.model_dump().items()
                                                   if isinstance(v, float)})
    weaker = hw.model_copy(update={"peak_flops_per_s": peaks})
    assert weaker.id == hw.id and content_digest(weaker) != content_digest(hw)
    assert predict_kernel(op, weaker).time_s > 2 * predict_kernel(op, hw).time_s


def test_the_digest_is_stable_across_processes() -> None:
    code = "from perfcast.coefficients.bundle import Calibration; print(Calibration.shipped().digest)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == Calibration.shipped().digest
