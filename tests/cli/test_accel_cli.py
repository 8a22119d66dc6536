"""perfcast accel: the JSON keys, the table, the mapping file, and one-line errors with exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from perfcast.cli import app
from perfcast.datafiles import data_path

runner = CliRunner()
MAPPING = data_path("accelerators", "mappings", "eyeriss-resnet50-conv1.yaml")


def _run(*args: str) -> object:
    return runner.invoke(app, ["accel", *args])


def test_json_keys() -> None:
    res = _run("--arch", "eyeriss", "--layer", "resnet50.conv1", "--mapping", str(MAPPING), "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    for key in ("ideal_cycles", "cycles", "utilization", "energy_J", "energy_per_mac_fJ", "energy_breakdown"):
        assert key in data
    assert data["ideal_cycles"] == 702464
    assert sum(data["energy_breakdown"].values()) == pytest.approx(data["energy_J"])


def test_search_table_and_out(tmp_path: Path) -> None:
    out = tmp_path / "m.yaml"
    res = _run("--layer", "resnet50.layer4.0.conv1", "--samples", "100", "--out", str(out))
    assert res.exit_code == 0, res.output
    assert "energy per MAC" in res.stdout and out.exists()
    again = _run("--layer", "resnet50.layer4.0.conv1", "--mapping", str(out), "--json")
    assert again.exit_code == 0 and json.loads(again.stdout)["utilization"] <= 1
    refused = _run("--layer", "resnet50.layer4.0.conv1", "--samples", "10", "--out", str(out))
    assert refused.exit_code == 2 and "--force" in refused.output


def test_lists() -> None:
    assert "eyeriss" in json.loads(_run("--list-archs", "--json").stdout)["archs"]
    assert "resnet50.conv1" in json.loads(_run("--list-layers", "resnet50", "--json").stdout)["layers"]


def _one_line_error(res: object, needle: str) -> None:
    assert res.exit_code == 2  # type: ignore[attr-defined]
    lines = [ln for ln in res.output.splitlines() if ln.strip()]  # type: ignore[attr-defined]
    assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], lines


def test_arch_missing_a_level(tmp_path: Path) -> None:
    arch = tmp_path / "nodram.yaml"
    text = (MAPPING.parent.parent / "eyeriss.yaml").read_text()
    start = text.index("  - name: DRAM")
    arch.write_text(text[:start] + text[text.index("  - name: GLB"):])
    _one_line_error(_run("--arch", str(arch), "--layer", "resnet50.conv1"), "backing store")
    mapping = tmp_path / "m.yaml"
    mapping.write_text(MAPPING.read_text().replace("  PE:", "  RF:"))
    _one_line_error(_run("--layer", "resnet50.conv1", "--mapping", str(mapping)), "names level 'RF'")


def test_bad_mappings(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_text(MAPPING.read_text().replace("temporal: {K: 16, S: 7}", "temporal: {K: 16, S: 7, Q: 2}")
                   .replace("temporal: {Q: 112, C: 3}", "temporal: {Q: 56, C: 3}"))
    _one_line_error(_run("--layer", "resnet50.conv1", "--mapping", str(big)), "tile too large: level PE")
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(MAPPING.read_text().replace("{P: 8, K: 4}", "{P: 4, K: 4}"))
    _one_line_error(_run("--layer", "resnet50.conv1", "--mapping", str(wrong)), "dim P")
    extra = tmp_path / "extra.yaml"
    extra.write_text(MAPPING.read_text().replace("levels:", "level_s: 1\nlevels:"))
    _one_line_error(_run("--layer", "resnet50.conv1", "--mapping", str(extra)), "unknown key")


def test_bad_names() -> None:
    _one_line_error(_run("--arch", "eyeris", "--layer", "resnet50.conv1"), "closest known: eyeriss")
    _one_line_error(_run("--layer", "resnet50.conv7"), "unknown layer")
    _one_line_error(_run("--layer", "resnet50.conv1", "--objective", "speed"), "objective")
    _one_line_error(_run("--layer", "resnet50.conv1", "--search", "exhaustive", "--samples", "5"), "--samples")
    _one_line_error(_run("--json"), "--layer is required")


@pytest.mark.parametrize(("args", "fragment"), [
    # the given mapping was evaluated and the mapper's settings dropped
    (["--mapping", str(MAPPING), "--seed", "3"], "--seed set the mapper's search"),
    (["--mapping", str(MAPPING), "--objective", "energy", "--samples", "10"], "--samples, --objective set"),
    (["--search", "exhaustive", "--seed", "5"], "--search exhaustive tries every mapping"),
])
def test_mapper_settings_without_a_search_are_refused(args: list[str], fragment: str) -> None:
    res = _run("--layer", "resnet50.conv1", *args)
    lines = res.stderr.splitlines()
    assert res.exit_code == 2 and len(lines) == 1 and fragment in lines[0], res.stderr
