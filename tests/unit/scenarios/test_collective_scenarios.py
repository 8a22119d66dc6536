"""The shipped collective scenarios: R2's ratios and scaling, R11 beside VIDUR's measured tables."""

from __future__ import annotations

from functools import cache

import pytest

from perfcast.coefficients.bundle import Calibration
from perfcast.groundtruth.files import find_groundtruth
from perfcast.scenarios import ScenarioResult, load_scenario, run_scenario

needs_groundtruth = pytest.mark.skipif(find_groundtruth(required=False) is None,
                                       reason="ground truth not found (set PERFCAST_GROUNDTRUTH)")
MiB, GiB = 2**20, 2**30


@cache
def result(sid: str) -> ScenarioResult:
    return run_scenario(load_scenario(sid))


def time_of(sid: str, op: str, size: int, n: int) -> float:
    (row,) = [r for r in result(sid).rows if r["op"] == op and r["size_bytes"] == size and r["group_size"] == n]
    assert row["status"] == "ok"
    return float(str(row["time_s"]))


def test_r2_predicts_every_op_size_and_group() -> None:
    res = result("R2")
    assert res.status == "ok" and res.kind == "collective"
    assert len(res.rows) == 4 * 3 * 10 and all(r["status"] == "ok" for r in res.rows)
    for r in res.rows:
        assert float(str(r["time_s"])) > 0 and float(str(r["busbw_Bps"])) > 0 and r["algorithm"]


def test_r2_ratios_at_1_mib_on_8_gpus_are_reported_beside_the_reference() -> None:
    rows = {r["op"]: r for r in result("R2").rows if r["size_bytes"] == MiB and r["group_size"] == 8}
    assert rows["all_reduce"]["ratio_to_all_reduce"] == 1.0
    for op in ("all_gather", "reduce_scatter", "all_to_all"):
        assert float(str(rows[op]["ratio_to_all_reduce"])) == pytest.approx(
            time_of("R2", op, MiB, 8) / time_of("R2", "all_reduce", MiB, 8))
        assert rows[op]["reference_ratio_to_all_reduce"] is not None
    # the reference is shown only where it applies
    assert not any("reference_ratio_to_all_reduce" in r for r in result("R2").rows if r["group_size"] != 8)


def test_r2_reduce_scatter_moves_half_an_all_reduce() -> None:
    # ring on both (2 GPUs): a reduce-scatter is the first half of a ring all-reduce
    assert time_of("R2", "reduce_scatter", GiB, 2) / time_of("R2", "all_reduce", GiB, 2) == pytest.approx(0.5, abs=0.05)
    # on 8 GPUs the all-reduce may reduce in the NVSwitch (NVLS): never slower than twice the reduce-scatter
    ratio = time_of("R2", "reduce_scatter", GiB, 8) / time_of("R2", "all_reduce", GiB, 8)
    assert 0.45 <= ratio <= 1.0


def test_r2_all_to_all_beyond_a_node_costs_more_than_all_reduce_at_large_sizes() -> None:
    for n in (16, 64, 1024):
        assert time_of("R2", "all_to_all", GiB, n) > time_of("R2", "all_reduce", GiB, n)


def test_r2_times_grow_with_the_group() -> None:
    for op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
        times = [time_of("R2", op, MiB, n) for n in (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)]
        assert all(a <= b * (1 + 1e-9) for a, b in zip(times, times[1:], strict=False)), (op, times)


@needs_groundtruth
def test_r11_compares_with_vidur_as_validate_prices_it() -> None:
    import csv

    from perfcast.groundtruth.collective_tables import predict_collective_rows, vidur_network_rows

    res = result("R11")
    measured = [r for r in res.rows if r.get("measured_time_s") is not None]
    # every a100-dgx row has a measurement (the sizes are on the measured grid); the H100 rows have none
    assert len(measured) == len([r for r in res.rows if r["cluster"] == "a100-dgx"]) == 90
    assert not any(r.get("measured_time_s") is not None for r in res.rows if r["cluster"] == "dgx-h100")
    root = find_groundtruth(required=False)
    assert root is not None
    with (root / "vidur/network/a100_dgx/send_recv.csv").open(encoding="utf-8", newline="") as fh:
        table = vidur_network_rows(list(csv.DictReader(fh)))
    pred = predict_collective_rows(table, Calibration.shipped().collectives)
    row = next(r for r in measured if r["op"] == "send_recv" and r["size_bytes"] == MiB and r["gpus_per_node"] == 1)
    i = next(i for i in range(len(table)) if table.size[i] == MiB and table.g[i] == 1)
    assert float(str(row["time_s"])) == pytest.approx(float(pred[i]))
    assert float(str(row["measured_time_s"])) == pytest.approx(float(table.measured_s[i]))
    assert res.headline()["mape_frac"] is not None and len(res.notes) == 2


def test_a_vidur_node_the_catalog_lacks_is_built_from_its_gpu() -> None:
    """A network table of a VIDUR node SKU perfcast has no cluster for is priced on its GPU's node with the
    table's devices per node (issue 17), not refused; an unknown GPU still is."""
    from perfcast.groundtruth.collective_tables import vidur_network_rows

    row = {"gpu_id": "h100-pcie-80gb", "cluster_id": "h100_pairwise_nvlink", "collective": "all_reduce",
           "num_workers": "4", "devices_per_node": "4", "max_devices_per_node": "4", "size": "1048576",
           "time_stats.all_reduce.median": "0.1"}
    table = vidur_network_rows([row])
    assert table.status == ["ok"]
    assert table.cluster[0].endswith("+h100_pairwise_nvlink") and table.n[0] == 4
    assert vidur_network_rows([{**row, "cluster_id": "a100_dgx", "gpu_id": "a100-sxm-80gb"}]).cluster[0] == "a100-dgx"
    bad = vidur_network_rows([{**row, "gpu_id": "no-such-gpu"}])
    assert bad.status[0].startswith("unsupported: unknown")
