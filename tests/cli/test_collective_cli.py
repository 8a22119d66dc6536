"""CLI: ``perfcast collective``, ``perfcast clusters list|show`` and the ``collectives`` fit stage.

A user error prints exactly one ``error: ...`` line to stderr and exits 2; ``--json`` prints one JSON
object whose keys carry their units.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import invoke, parse_json, user_error, with_flags

from perfcast.groundtruth.files import find_groundtruth
from perfcast.system.cluster import list_clusters
from perfcast.system.collectives import collective_time, load_collective_coefficients


@pytest.mark.parametrize("cmd", [["collective"], ["clusters"], ["clusters", "list"], ["clusters", "show"]])
def test_help(cmd: list[str]) -> None:
    res = invoke([*cmd, "--help"])
    assert res.exit_code == 0 and "Usage" in res.stdout


def test_collective_json_matches_the_api() -> None:
    data = parse_json(invoke(["collective", "--op", "all_reduce", "--bytes", "1MB", "--gpus", "8",
                              "--cluster", "dgx-h100", "--json"]))
    expected = collective_time("all_reduce", 1e6, 8, "dgx-h100")
    assert data["time_s"] == pytest.approx(expected.time_s)
    assert data["algbw_Bps"] == pytest.approx(1e6 / expected.time_s)
    assert data["busbw_Bps"] == pytest.approx(data["algbw_Bps"] * 2 * 7 / 8)
    assert data["algorithm"] == expected.algorithm and data["size_bytes"] == 1e6 and data["group_size"] == 8


def test_collective_text_across_nodes_with_an_algorithm() -> None:
    res = invoke(["collective", "--op", "all_reduce", "--bytes", "64MiB", "--gpus", "32", "--cluster", "dgx-a100",
                  "--nodes", "4", "--algorithm", "ring"])
    assert res.exit_code == 0, res.stderr
    assert "ring" in res.stdout and "GB/s" in res.stdout and "32 GPUs" in res.stdout


def test_collective_one_gpu_per_node() -> None:
    data = parse_json(invoke(["collective", "--op", "send_recv", "--bytes", "16MiB", "--gpus", "2", "--cluster",
                              "dgx-h100", "--nodes", "2", "--gpus-per-node", "1", "--json"]))
    assert data["gpus_per_node"] == 1 and data["algorithm"] == "direct" and data["time_s"] > 0


@pytest.mark.parametrize(("args", "fragment"), [
    (["--cluster", "dgx-h10"], "closest known: dgx-h100"),
    (["--gpus", "16"], "does not fit dgx-h100"),
    (["--gpus", "9" * 400, "--cluster", "gb200-nvl72"], "does not fit gb200-nvl72"),  # the fuzz: a float overflowed
    (["--gpus", "12", "--nodes", "2", "--gpus-per-node", "8"], "do not split evenly"),
    (["--op", "allreduc"], "valid: all_reduce"),
    (["--algorithm", "rign"], "valid: direct"),
    (["--algorithm", "nvls", "--cluster", "dgx-a100"], "in-switch reduction"),
    (["--op", "all_to_all", "--algorithm", "tree"], "does not implement all_to_all"),
    (["--bytes", "lots"], "cannot read 'lots' as a size"),
    (["--bytes", "-5"], "cannot read"),
    (["--gpus", "0"], "positive whole number"),
    (["--nodes", "0"], "--nodes must be a positive integer"),
    (["--gpus-per-node", "16"], "exceeds the 8-GPU scale-up domain"),
])
def test_collective_bad_input_is_one_error_line(args: list[str], fragment: str) -> None:
    base = ["--op", "all_reduce", "--bytes", "1MB", "--gpus", "8", "--cluster", "dgx-h100"]
    line = user_error(invoke(with_flags(["collective"], base, args)))
    assert fragment in line


def test_clusters_list_json() -> None:
    data = parse_json(invoke(["clusters", "list", "--json"]))
    ids = [c["id"] for c in data["clusters"]]
    assert ids == sorted(c.id for c in list_clusters())
    assert {"dgx-h100", "gb200-nvl72", "a100-dgx", "mi300x"} <= set(ids)
    h100 = next(c for c in data["clusters"] if c["id"] == "dgx-h100")
    assert h100["intra_node_bandwidth_Bps"] == 450e9 and h100["inter_bandwidth_per_gpu_Bps"] == 50e9


def test_clusters_list_text() -> None:
    res = invoke(["clusters", "list"])
    assert res.exit_code == 0 and "gb200-nvl72" in res.stdout and "clusters" in res.stdout


def test_clusters_show_by_alias() -> None:
    data = parse_json(invoke(["clusters", "show", "a100_dgx", "--json"]))
    assert data["id"] == "a100-dgx" and data["inter_node"]["transport"] == "staged" and data["source"]
    res = invoke(["clusters", "show", "gb200-nvl72"])
    assert res.exit_code == 0 and "scale_up_domain" in res.stdout


def test_clusters_show_unknown() -> None:
    assert "closest known" in user_error(invoke(["clusters", "show", "dgx-a10"]))


def test_fit_collectives_needs_an_output() -> None:
    assert "--collectives-out " in user_error(invoke(["fit", "--stages", "collectives"]))


@pytest.mark.skipif(find_groundtruth(required=False) is None, reason="ground truth not found")
def test_fit_collectives_writes_versioned_coefficients(tmp_path: Path) -> None:
    out = tmp_path / "collectives.json"
    data = parse_json(invoke(["fit", "--stages", "collectives", "--collectives-out", str(out), "--json"]))
    assert out.exists() and data["collectives"]["schema_version"] == 1
    fitted = load_collective_coefficients(out)
    shipped = load_collective_coefficients()
    assert fitted.produced_by == "perfcast fit --stages collectives"
    # refitting starts from the recorded priors, so it reproduces the shipped file
    assert fitted.link_efficiency_frac == pytest.approx(shipped.link_efficiency_frac, rel=1e-6)
    assert any("fit collectives" in line for line in data["log"])
