"""Contract: every shipped hardware YAML parses, is consistent, and covers the ground-truth device names."""

from __future__ import annotations

import csv
import gzip
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from perfcast.catalog import Hardware, load_hardware
from perfcast.catalog.paths import normalize_name
from perfcast.datafiles import data_dir
from perfcast.groundtruth.files import find_groundtruth

HW_DIR = data_dir("hardware")
HW_FILES = sorted(HW_DIR.glob("*.yaml"))

# Devices whose fp32 peak may deviate from num_sms * fp32_lanes_per_sm * 2 * boost_clock_hz by
# more than FP32_TOL, each with the reason (the YAML notes must say the same). Empty today: every
# file keeps fp32 equal to the clock-derived figure and records datasheet disagreements in notes.
FP32_IDENTITY_EXCEPTIONS: dict[str, str] = {}
FP32_TOL = 0.02

# Short names users type, and the device each must mean (from the catalog brief).
GENERIC_ALIASES = {
    "h100": "h100-sxm-80gb",
    "a100": "a100-sxm-80gb",
    "v100": "v100-sxm2-32gb",
    "mi250": "mi250",
    "h200": "h200-sxm-141gb",
    "gh200": "gh200-96gb",
    "a800": "a800-sxm-80gb",
    "b200": "b200-sxm-180gb",
}


def _load(path: Path) -> Hardware:
    with path.open(encoding="utf-8") as fh:
        return Hardware.model_validate(yaml.safe_load(fh))


@pytest.fixture(scope="module")
def catalog() -> dict[str, Hardware]:
    return {p.stem: _load(p) for p in HW_FILES}


def test_catalog_is_not_empty() -> None:
    assert len(HW_FILES) >= 30, f"expected the full device list in {HW_DIR}, found {len(HW_FILES)} files"


@pytest.mark.parametrize("path", HW_FILES, ids=lambda p: p.stem)
def test_yaml_parses_and_stem_is_id(path: Path) -> None:
    hw = _load(path)
    assert hw.id == path.stem, f"{path.name}: id {hw.id!r} must equal the file stem"
    assert load_hardware(path.stem) == hw


@pytest.mark.parametrize("path", HW_FILES, ids=lambda p: p.stem)
def test_source_is_present(path: Path) -> None:
    hw = _load(path)
    assert hw.source and all(s.strip() for s in hw.source)


def test_aliases_are_unique_across_files(catalog: dict[str, Hardware]) -> None:
    owner: dict[str, str] = {}
    clashes: list[str] = []
    for hw_id, hw in catalog.items():
        seen_here: set[str] = set()
        for name in (hw.id, *hw.aliases):
            key = normalize_name(name)
            if key in seen_here:
                if name != hw.id:
                    clashes.append(f"{hw_id}: alias {name!r} repeats the id or another alias after normalization")
                continue
            seen_here.add(key)
            if key in owner and owner[key] != hw_id:
                clashes.append(f"{name!r} ({key}) is claimed by {owner[key]} and {hw_id}")
            owner[key] = hw_id
    assert not clashes, "\n".join(clashes)


@pytest.mark.parametrize(("alias", "hw_id"), sorted(GENERIC_ALIASES.items()))
def test_generic_aliases(alias: str, hw_id: str) -> None:
    assert load_hardware(alias).id == hw_id


@pytest.mark.parametrize("path", HW_FILES, ids=lambda p: p.stem)
def test_fp32_matches_sms_lanes_clock(path: Path) -> None:
    hw = _load(path)
    if hw.id in FP32_IDENTITY_EXCEPTIONS:
        pytest.skip(FP32_IDENTITY_EXCEPTIONS[hw.id])
    derived = hw.num_sms * hw.fp32_lanes_per_sm * 2 * hw.boost_clock_hz
    fp32 = hw.peak_flops_per_s.fp32
    assert abs(derived / fp32 - 1) <= FP32_TOL, (
        f"{hw.id}: fp32 {fp32:.4g} vs num_sms*lanes*2*boost = {derived:.4g} ({derived / fp32 - 1:+.1%})"
    )


@pytest.mark.parametrize("path", HW_FILES, ids=lambda p: p.stem)
def test_half_precision_not_slower_than_fp32(path: Path) -> None:
    hw = _load(path)
    p = hw.peak_flops_per_s
    for name in ("fp16", "bf16"):
        value = getattr(p, name)
        if value is not None:
            assert value >= p.fp32, f"{hw.id}: {name} {value:.4g} < fp32 {p.fp32:.4g}"


@pytest.mark.parametrize("path", HW_FILES, ids=lambda p: p.stem)
def test_peaks_are_ordered(path: Path) -> None:
    """Narrower formats are never slower than wider ones on the same units."""
    hw = _load(path)
    p = hw.peak_flops_per_s
    pairs = [("fp8", "bf16"), ("fp4", "fp8"), ("fp64_tensor", "fp64"), ("fp32_matrix", "fp32")]
    for fast, slow in pairs:
        a, b = getattr(p, fast), getattr(p, slow)
        if a is not None and b is not None:
            assert a >= b, f"{hw.id}: {fast} {a:.4g} < {slow} {b:.4g}"


@pytest.mark.parametrize("path", HW_FILES, ids=lambda p: p.stem)
def test_base_clock_below_boost(path: Path) -> None:
    hw = _load(path)
    if hw.base_clock_hz is not None:
        assert hw.base_clock_hz < hw.boost_clock_hz, f"{hw.id}: base {hw.base_clock_hz} >= boost {hw.boost_clock_hz}"


@pytest.mark.parametrize("path", HW_FILES, ids=lambda p: p.stem)
def test_multi_die_boards_say_so(path: Path) -> None:
    hw = _load(path)
    if hw.dies_per_board > 1:
        assert "board" in hw.notes.lower(), f"{hw.id}: describe the whole board in notes"


# ----------------------------------------------------------------------------- ground truth

GROUNDTRUTH = find_groundtruth(required=False)
needs_groundtruth = pytest.mark.skipif(
    GROUNDTRUTH is None,
    reason="ground-truth folder not found (set PERFCAST_GROUNDTRUTH or place shared/groundtruth above the repo)",
)


def _rows(path: Path) -> Iterator[dict[str, str]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8", newline="") as fh:  # type: ignore[operator]
        yield from csv.DictReader(fh)


def _column_values(pattern: str, *columns: str) -> set[tuple[str, ...]]:
    assert GROUNDTRUTH is not None
    out: set[tuple[str, ...]] = set()
    for path in sorted(GROUNDTRUTH.glob(pattern)):
        for row in _rows(path):
            if all(c in row for c in columns):
                out.add(tuple(row[c] for c in columns))
    return out


@needs_groundtruth
def test_published_gpu_ids_resolve() -> None:
    ids = {v for (v,) in _column_values("published/*.csv", "gpu_id") if v}
    assert ids, "no gpu_id values found in published/*.csv"
    missing = []
    for gpu_id in sorted(ids):
        try:
            hw = load_hardware(gpu_id)
        except Exception as exc:  # noqa: BLE001 - report every miss at once
            missing.append(f"{gpu_id}: {exc}")
            continue
        if hw.id != gpu_id:
            missing.append(f"{gpu_id} resolves to {hw.id}, but gpu_id must be a catalog id")
    assert not missing, "\n".join(missing)


@needs_groundtruth
def test_published_gpu_strings_agree_with_gpu_id() -> None:
    """A descriptive `gpu` string that is also a catalog alias must name the row's own device."""
    pairs = _column_values("published/*.csv", "gpu_id", "gpu")
    wrong = []
    for gpu_id, gpu in sorted(pairs):
        try:
            hw = load_hardware(gpu)
        except Exception:  # noqa: BLE001 - free-text strings need not be aliases
            continue
        if hw.id != gpu_id:
            wrong.append(f"gpu {gpu!r} resolves to {hw.id}, but its rows are gpu_id {gpu_id}")
    assert not wrong, "\n".join(wrong)


@needs_groundtruth
def test_neusight_devices_resolve() -> None:
    pairs = _column_values("neusight/*.csv", "device", "device_name")
    assert pairs, "no device values found in neusight/*.csv"
    problems = []
    for device, device_name in sorted(pairs):
        try:
            by_device = load_hardware(device).id
            by_name = load_hardware(device_name).id
        except Exception as exc:  # noqa: BLE001
            problems.append(f"{device} / {device_name}: {exc}")
            continue
        if by_device != by_name:
            problems.append(f"{device} -> {by_device} but {device_name!r} -> {by_name}")
    assert not problems, "\n".join(problems)


@needs_groundtruth
def test_vidur_gpu_ids_resolve() -> None:
    ids = {v for (v,) in _column_values("vidur/compute/*/*/mlp.csv*", "gpu_id") if v}
    ids |= {v for (v,) in _column_values("vidur/network/*/*.csv*", "gpu_id") if v}
    if not ids:
        pytest.skip("no vidur tables with a gpu_id column in the ground-truth folder")
    missing = [i for i in sorted(ids) if normalize_name(i) != load_hardware(i).id]
    assert not missing, f"vidur gpu_id values that are not catalog ids: {missing}"
