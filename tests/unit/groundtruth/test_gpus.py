"""A ground-truth row's GPU: its gpu_id, with the row's stated memory when it is not the catalog entry's."""

from __future__ import annotations

import pytest

from perfcast.catalog.hardware import load_hardware
from perfcast.errors import ConfigError
from perfcast.groundtruth.files import find_groundtruth, read_rows
from perfcast.groundtruth.gpus import row_gpu_id
from perfcast.groundtruth.training_tables import predict_row


@pytest.mark.parametrize(("row", "expected"), [
    ({"gpu_id": "h100-sxm-80gb"}, "h100-sxm-80gb"),  # no memory column
    ({"gpu_id": "h100", "gpu_memory_gib_catalog": ""}, "h100"),  # an empty cell states nothing
    ({"gpu_id": "h100", "gpu_memory_gib_catalog": "80"}, "h100"),  # the catalog's own memory
    ({"gpu_id": "mi300x", "gpu_memory_gib_catalog": "192"}, "mi300x"),
    ({"gpu_id": "gh200-144gb", "gpu_memory_GB": "144"}, "gh200-144gb"),  # the label of the 141 GiB enabled
    ({"gpu_id": "h100", "gpu_memory_gib": "94"}, "h100-sxm-80gb@94gb"),
    ({"gpu_id": "a100", "gpu_memory_GB": "40"}, "a100-sxm-80gb@40gb"),
    ({"gpu_id": "b200-sxm-180gb", "gpu_memory_gib_catalog": "192"}, "b200-sxm-180gb@192gb"),  # 6.7 %: a variant
    # gpu_memory_gib wins over the catalog column when a row has both
    ({"gpu_id": "h100", "gpu_memory_gib": "94", "gpu_memory_gib_catalog": "80"}, "h100-sxm-80gb@94gb"),
])
def test_row_gpu_id(row: dict[str, str], expected: str) -> None:
    assert row_gpu_id(row) == expected
    load_hardware(expected)


def test_the_override_is_the_memory_priced() -> None:
    assert load_hardware(row_gpu_id({"gpu_id": "gh200-96gb", "gpu_memory_gib": "120"})).memory_bytes == 120 * 2**30


def test_another_id_column() -> None:
    assert row_gpu_id({"device": "H100-SXM-80GB", "gpu_memory_gib": "94"}, "device") == "h100-sxm-80gb@94gb"


@pytest.mark.parametrize(("row", "message"), [
    ({"gpu_id": ""}, "the row gives no gpu_id"),
    ({"gpu_id": "h100", "gpu_memory_gib": "lots"}, "gpu_memory_gib 'lots' is not a positive number of GiB"),
    ({"gpu_id": "h100", "gpu_memory_GB": "0"}, "gpu_memory_GB '0' is not a positive number of GiB"),
    ({"gpu_id": "h100", "gpu_memory_GB": "inf"}, "gpu_memory_GB 'inf' is not a positive number of GiB"),
])
def test_a_bad_row_is_refused(row: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        row_gpu_id(row)
    assert str(info.value) == message


@pytest.mark.skipif(find_groundtruth(required=False) is None, reason="ground truth not found")
def test_a_training_row_that_states_its_memory_is_priced_with_it() -> None:
    root = find_groundtruth()
    assert root is not None
    rows = list(read_rows(root / "published" / "training.csv"))
    row = next(r for r in rows if r["gpu_id"] == "h100-sxm-80gb" and r["seq_len"] and r["precision"])
    assert predict_row(row).memory.capacity_bytes == 80 * 2**30
    assert predict_row({**row, "gpu_memory_gib": "94"}).memory.capacity_bytes == 94 * 2**30
