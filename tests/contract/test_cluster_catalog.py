"""Contract: every shipped cluster YAML parses, is named by its id, uses a catalog GPU, cites its sources, and
the clusters the issue and the ground-truth tables name exist."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from perfcast.catalog.hardware import load_hardware
from perfcast.catalog.paths import normalize_name
from perfcast.datafiles import data_dir
from perfcast.groundtruth.files import find_groundtruth
from perfcast.system.cluster import Cluster, list_clusters, load_cluster
from perfcast.yamlio import safe_load

CLUSTER_DIR = data_dir("clusters")
CLUSTER_FILES = sorted(CLUSTER_DIR.glob("*.yaml"))
# the catalog the issue asks for (issue 3, Inputs) plus the systems published/collectives.csv names
REQUIRED = ["dgx-a100", "dgx-h100", "dgx-b200", "dgx-b300", "hgx-h200", "gb200-nvl72", "gb300-nvl72",
            "a100-pcie-pair", "a100-dgx", "a100-pairwise-nvlink", "a40-pairwise-nvlink", "mi300x", "p6-b200"]


def _load(path: Path) -> Cluster:
    return Cluster.model_validate(safe_load(path.read_text(encoding="utf-8")))


@pytest.mark.parametrize("path", CLUSTER_FILES, ids=lambda p: p.stem)
def test_yaml_parses_and_id_is_the_file_name(path: Path) -> None:
    c = _load(path)
    assert c.id == path.stem
    assert load_cluster(path.stem) == c


@pytest.mark.parametrize("path", CLUSTER_FILES, ids=lambda p: p.stem)
def test_gpu_is_a_catalog_id(path: Path) -> None:
    c = _load(path)
    assert load_hardware(c.gpu).id == c.gpu, f"{c.id}: gpu {c.gpu!r} must be a hardware catalog id, not an alias"


@pytest.mark.parametrize("path", CLUSTER_FILES, ids=lambda p: p.stem)
def test_sources_are_present(path: Path) -> None:
    c = _load(path)
    assert c.source and all(s.strip() for s in c.source)


@pytest.mark.parametrize("path", CLUSTER_FILES, ids=lambda p: p.stem)
def test_values_are_base_si_and_plausible(path: Path) -> None:
    c = _load(path)
    assert 1e9 <= c.intra_node.bandwidth_Bps <= 1e13, "per-direction bytes/s, not GB/s"
    if c.inter_node.nics_per_node:
        assert 1e9 <= c.inter_node.nic_bandwidth_Bps <= 1e12
    assert c.domain % c.gpus_per_node == 0 or c.domain == c.gpus_per_node
    assert 0 <= c.intra_node.latency_s < 1e-3 and 0 <= c.inter_node.latency_s < 1e-3


def test_ids_and_aliases_are_unique() -> None:
    owner: dict[str, str] = {}
    for c in list_clusters():
        for name in {normalize_name(a) for a in (c.id, *c.aliases)}:
            assert owner.setdefault(name, c.id) == c.id, f"{name} claimed by {owner[name]} and {c.id}"


@pytest.mark.parametrize("cluster_id", REQUIRED)
def test_required_clusters_exist(cluster_id: str) -> None:
    assert load_cluster(cluster_id).id == cluster_id


def test_vidur_network_clusters_resolve() -> None:
    root = find_groundtruth(required=False)
    if root is None or not (root / "vidur" / "network").is_dir():
        pytest.skip("VIDUR network tables not in the ground-truth folder")
    for folder in sorted((root / "vidur" / "network").iterdir()):
        for table in sorted(folder.glob("*.csv")):
            with table.open(encoding="utf-8", newline="") as fh:
                row = next(csv.DictReader(fh))
            c = load_cluster(row["cluster_id"])
            assert load_hardware(row["gpu_id"]).id == load_hardware(c.gpu).id, (table, c.id)
            assert int(row["max_devices_per_node"]) == c.gpus_per_node, (table, c.id)
