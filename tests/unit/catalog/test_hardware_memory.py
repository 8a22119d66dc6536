"""Memory variants: the explicit override ``<hardware>@<size>gb`` and the catalog's own variant entries."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from perfcast.catalog.hardware import base_hardware_id, load_hardware, with_memory
from perfcast.compose.predict import StepRequest, predict
from perfcast.errors import CatalogError, ConfigError, UnknownNameError
from perfcast.system.cluster import cluster_for_gpu
from perfcast.workload.types import Mode

GiB = 2**30
# the fields an override may change: everything else is the base entry's
CHANGED = {"id", "name", "aliases", "memory_bytes", "notes"}


@pytest.mark.parametrize(("name", "base", "gib"), [
    ("h100-sxm-80gb@94gb", "h100-sxm-80gb", 94),
    ("H100@94GB", "h100-sxm-80gb", 94),  # an alias, any case
    ("h100 @ 94 gb", "h100-sxm-80gb", 94),
    ("gh200@120gb", "gh200-96gb", 120),
    ("mi300x@128gib", "mi300x", 128),
    ("b200@192gb", "b200-sxm-180gb", 192),
    ("h100-pcie-80gb@93.5gb", "h100-pcie-80gb", 93.5),
])
def test_an_override_is_the_base_entry_with_only_its_memory_replaced(name: str, base: str, gib: float) -> None:
    hw, entry = load_hardware(name), load_hardware(base)
    assert hw.memory_bytes == gib * GiB
    assert hw.id == f"{base}@{gib:g}gb" and base_hardware_id(hw.id) == base
    assert hw.aliases == () and f"{gib:g} GB" in hw.name and f"{gib:g} GiB" in hw.notes
    assert hw.model_dump(exclude=CHANGED) == entry.model_dump(exclude=CHANGED)


def test_an_overridden_id_reads_back_to_the_same_device() -> None:
    hw = load_hardware("h100@93.5gb")
    assert load_hardware(hw.id) == hw
    assert with_memory(hw, 94 * GiB).id == "h100-sxm-80gb@94gb"  # an override of an override replaces it


@pytest.mark.parametrize("name", ["h100@80gb", "h100-sxm-80gb@80GiB", "gh200-144gb@141gb"])
def test_an_override_to_the_entrys_own_memory_is_the_entry(name: str) -> None:
    assert load_hardware(name) == load_hardware(name.split("@")[0])


@pytest.mark.parametrize("name", ["h100@abc", "h100@0gb", "h100@-3gb", "h100@94", "h100@94tb", "h100@1e2gb",
                                  "h100@", "@94gb", "h100@80gb@94gb", "h100@0.0000001gb"])
def test_a_bad_override_is_one_line_naming_what_is_accepted(name: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_hardware(name)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"bad hardware override {name!r}: ") and "h100-sxm-80gb@94gb" in message


def test_an_override_of_an_unknown_device_names_the_device() -> None:
    with pytest.raises(UnknownNameError, match="unknown hardware 'nope'"):
        load_hardware("nope@94gb")


def test_with_memory_refuses_less_than_a_mebibyte() -> None:
    with pytest.raises(ConfigError, match="at least 1 MiB"):
        with_memory("h100", 1000.0)


def test_a_hardware_file_cannot_carry_an_override_in_its_id(tmp_path: Path) -> None:
    data = load_hardware("h100").model_dump(mode="json")
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({**data, "id": "mine@94gb", "aliases": []}))
    with pytest.raises(CatalogError, match="carries a memory override"):
        load_hardware(path)


def test_a_hardware_file_cannot_carry_an_override_in_an_alias(tmp_path: Path) -> None:
    data = load_hardware("h100").model_dump(mode="json")
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({**data, "id": "mine", "aliases": ["mine@94gb"]}))
    with pytest.raises(CatalogError, match="an alias may not contain '@'"):
        load_hardware(path)


def test_an_override_applies_to_a_hardware_file(tmp_path: Path) -> None:
    data = load_hardware("h100").model_dump(mode="json")
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({**data, "id": "mine", "aliases": []}))
    assert load_hardware(f"{path}@94gb").id == "mine@94gb"


@pytest.mark.parametrize(("name", "cluster"), [
    ("h100-sxm-80gb@94gb", "dgx-h100"),
    ("gb200@192gb", "gb200-nvl72"),  # its own rack, not an 8-GPU node of the same generation
    ("mi300x@128gb", "mi300x"),
])
def test_an_overridden_gpu_sits_in_its_entrys_cluster(name: str, cluster: str) -> None:
    hw = load_hardware(name)
    node = cluster_for_gpu(hw)
    assert node.id == f"{cluster}+{hw.id}" and node.gpu == hw.id
    assert node.hardware() == hw


def test_the_override_moves_what_memory_decides() -> None:
    """Llama-2-7B full training (about 110 GiB) does not fit an 80 GiB H100, and fits one given 120 GiB."""
    small = predict(StepRequest("llama-2-7b", "h100", mode=Mode.TRAINING, seq_len=512))
    large = predict(StepRequest("llama-2-7b", "h100@120gb", mode=Mode.TRAINING, seq_len=512))
    assert small.memory is not None and large.memory is not None
    assert not small.memory.fits and large.memory.fits
    assert large.memory.capacity_bytes == 120 * GiB
    assert large.hardware_id == "h100-sxm-80gb@120gb"
    assert large.time_s == pytest.approx(small.time_s)  # memory is all that changed


# ----------------------------------------------------------------------------- the catalog's variant entries

@pytest.mark.parametrize(("variant", "sibling", "same", "differs"), [
    # same silicon and memory, NVLink cut for export
    ("a800-sxm-80gb", "a100-sxm-80gb", ("memory_bytes", "memory_bandwidth_Bps", "tdp_W"), ("interconnect",)),
    ("a800-pcie-80gb", "a100-pcie-80gb", ("memory_bytes", "memory_bandwidth_Bps", "tdp_W"), ("interconnect",)),
    # the PCIe H200: SXM's memory, H100 NVL's compute
    ("h200-nvl-141gb", "h200-sxm-141gb", ("memory_bytes", "memory_bandwidth_Bps", "num_sms"),
     ("tdp_W", "peak_flops_per_s", "form_factor")),
    ("h200-nvl-141gb", "h100-nvl-94gb", ("peak_flops_per_s", "boost_clock_hz"), ("memory_bytes", "tdp_W")),
    # AD102 boards: same memory, L40 at half the L40S tensor rate
    ("l40", "l40s", ("memory_bytes", "memory_bandwidth_Bps", "num_sms"), ("peak_flops_per_s", "tdp_W")),
    # CDNA 4: MI350X is MI355X at a lower clock and power
    ("mi350x", "mi355x", ("memory_bytes", "memory_bandwidth_Bps", "num_sms", "interconnect"),
     ("boost_clock_hz", "tdp_W", "peak_flops_per_s")),
    # GH200 GPU memory variants
    ("gh200-96gb", "gh200-144gb", ("num_sms", "peak_flops_per_s"), ("memory_bytes", "memory_bandwidth_Bps")),
])
def test_variant_entries_differ_from_their_sibling_where_the_datasheets_do(
        variant: str, sibling: str, same: tuple[str, ...], differs: tuple[str, ...]) -> None:
    a, b = load_hardware(variant).model_dump(), load_hardware(sibling).model_dump()
    assert {k: a[k] for k in same} == {k: b[k] for k in same}
    assert all(a[k] != b[k] for k in differs), [k for k in differs if a[k] == b[k]]


def test_cdna4_peaks_scale_with_the_clock() -> None:
    """MI350X and MI355X are one die at 2200 and 2400 MHz: every datasheet peak keeps that ratio (to rounding)."""
    mi350x, mi355x = load_hardware("mi350x"), load_hardware("mi355x")
    ratio = mi350x.boost_clock_hz / mi355x.boost_clock_hz
    for fmt, value in mi355x.peak_flops_per_s.model_dump().items():
        if value is not None:
            assert getattr(mi350x.peak_flops_per_s, fmt) / value == pytest.approx(ratio, rel=2e-3), fmt


@pytest.mark.parametrize(("name", "hw_id"), [
    ("gh200", "gh200-96gb"), ("NVIDIA GH200 120GB", "gh200-96gb"), ("NVIDIA H200 NVL", "h200-nvl-141gb"),
    ("NVIDIA L40", "l40"), ("a800", "a800-sxm-80gb"), ("AMD Instinct MI350X", "mi350x"),
])
def test_variant_names(name: str, hw_id: str) -> None:
    assert load_hardware(name).id == hw_id
