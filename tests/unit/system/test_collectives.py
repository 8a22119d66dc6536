"""Unit tests of ``perfcast.system.collectives``: consistency of the cost model across ops, sizes, group sizes
and bandwidths, the algorithm registry, placements and their errors.

Tolerances: the ring ratios (reduce_scatter = 0.5 x all_reduce, all_to_all = n/4 = 2 x all_reduce on 8 GPUs)
are exact for the bandwidth terms; at 1 GiB the latency terms (14 steps for all_reduce, 7 for the others)
move them by about 1-2 %, so 5 % leaves room for refits without hiding a wrong volume (the next candidates,
e.g. a reduce_scatter counted like an all_gather of the whole buffer, are off by 40 % or more).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from perfcast.coefficients.bundle import Calibration
from perfcast.errors import ConfigError, UnknownNameError
from perfcast.registry import Registry
from perfcast.system.cluster import Cluster, load_cluster
from perfcast.system.collectives import (
    ALGORITHMS,
    CollectiveCoefficients,
    CollectiveOp,
    bus_factor,
    collective_time,
    collective_times,
    load_collective_coefficients,
    parse_op,
)

CO = Calibration.shipped().collectives

GiB = 2.0**30
OPS = [op.value for op in CollectiveOp]
RATIO_TOL = 0.05  # see the module docstring
SIZES = np.geomspace(1.0, 1e10, 60)


def _scaled(c: Cluster, factor: float) -> Cluster:
    """The same cluster with every link and NIC ``factor`` times faster."""
    intra = c.intra_node.model_copy(update={
        "bandwidth_Bps": c.intra_node.bandwidth_Bps * factor,
        "pair_bandwidth_Bps": (c.intra_node.pair_bandwidth_Bps or 0) * factor or None})
    inter = c.inter_node.model_copy(update={"nic_bandwidth_Bps": c.inter_node.nic_bandwidth_Bps * factor})
    return c.model_copy(update={"intra_node": intra, "inter_node": inter})


# -- the consistency checks -------------------------------------------------------------------------------
def test_ring_reduce_scatter_is_half_an_all_reduce() -> None:
    c = load_cluster("dgx-h100")
    ar = collective_time("all_reduce", GiB, 8, c, algorithm="ring").time_s
    rs = collective_time("reduce_scatter", GiB, 8, c, algorithm="ring").time_s
    assert rs / ar == pytest.approx(0.5, rel=RATIO_TOL)


def test_ring_all_to_all_is_twice_an_all_reduce_on_8_gpus() -> None:
    c = load_cluster("dgx-h100")
    ar = collective_time("all_reduce", GiB, 8, c, algorithm="ring").time_s
    a2a = collective_time("all_to_all", GiB, 8, c, algorithm="ring").time_s
    assert a2a / ar == pytest.approx(2.0, rel=RATIO_TOL)


@pytest.mark.parametrize("cluster", ["dgx-h100", "dgx-a100", "mi300x", "a40-pairwise-nvlink"])
@pytest.mark.parametrize("size", [1e3, 1e6, 1e9])
def test_ring_all_reduce_busbw_is_algbw_times_2_n_minus_1_over_n(cluster: str, size: float) -> None:
    t = collective_time("all_reduce", size, 8, load_cluster(cluster), algorithm="ring")
    assert t.algbw_Bps == pytest.approx(size / t.time_s)
    assert t.busbw_Bps == pytest.approx(t.algbw_Bps * 2 * 7 / 8)


def test_ring_all_reduce_moves_2_n_minus_1_over_n_of_the_buffer() -> None:
    """Golden: with zero latencies and lossless links a ring all-reduce takes 2(n-1)/n * S / B."""
    co = load_collective_coefficients()
    raw = co.model_dump(mode="json")
    raw["link_efficiency_frac"] = {k: 1.0 for k in raw["link_efficiency_frac"]}
    for p in raw["protocols"].values():
        p.update(base_latency_s=0.0, hop_latency_frac=0.0)
    ideal = CollectiveCoefficients.model_validate(raw)
    c = load_cluster("dgx-a100")
    for n in (2, 4, 8):
        t = collective_time("all_reduce", 1e9, n, c, algorithm="ring",
                            calibration=Calibration.shipped().with_collectives(ideal)).time_s
        assert t == pytest.approx(2 * (n - 1) / n * 1e9 / c.intra_node.bandwidth_Bps)


@pytest.mark.parametrize(("cluster", "nodes", "n", "g"), [
    ("dgx-h100", 1, 8, 8), ("dgx-a100", 4, 32, 8), ("dgx-h100", 64, 64, 1), ("a40-pairwise-nvlink", 1, 8, 8),
    ("a100-pairwise-nvlink", 1, 4, 4), ("mi300x", 1, 8, 8), ("gb200-nvl72", 36, 144, 72), ("a100-dgx", 2, 16, 8),
    ("p6-b200", 8, 64, 8),
])
@pytest.mark.parametrize("op", OPS)
def test_time_never_decreases_with_size(cluster: str, nodes: int, n: int, g: int, op: str) -> None:
    c = load_cluster(cluster, nodes=nodes)
    t = collective_times(op, SIZES, n, c, gpus_per_node=g, coeffs=CO)
    assert np.all(np.isfinite(t)) and np.all(t > 0)
    assert np.all(np.diff(t) >= 0), t
    for name, alg in ALGORITHMS.items():
        if CollectiveOp(op) in alg.ops:
            try:
                ta = collective_times(op, SIZES, n, c, gpus_per_node=g, algorithm=name, coeffs=CO)
            except ConfigError:
                continue  # not available on this placement
            assert np.all(np.diff(ta) >= 0), name


@pytest.mark.parametrize("cluster", ["dgx-h100", "dgx-a100", "a100-dgx", "gb200-nvl72"])
@pytest.mark.parametrize("per_node", [1, 4, 8])
@pytest.mark.parametrize("size", [1e4, 1e7, 1e10])
@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"])
def test_time_never_decreases_with_more_gpus_across_nodes(cluster: str, per_node: int, size: float, op: str) -> None:
    base = load_cluster(cluster)
    c = base.with_nodes(4096 * base.domain // base.gpus_per_node)  # 4096 scale-up domains
    previous = 0.0
    for domains in (1, 2, 3, 4, 8, 16, 32, 33, 64, 512, 4096):
        n = domains * per_node
        t = collective_time(op, size, n, c, gpus_per_node=per_node).time_s if n > 1 else 0.0
        assert t >= previous * (1 - 1e-12), (domains, t, previous)
        previous = t


@pytest.mark.parametrize("cluster", ["dgx-h100", "dgx-a100", "a40-pairwise-nvlink", "mi300x", "a100-dgx"])
@pytest.mark.parametrize(("n", "g"), [(8, 8), (2, 2), (16, 8), (64, 4)])
@pytest.mark.parametrize("op", OPS)
def test_more_bandwidth_is_never_slower(cluster: str, n: int, g: int, op: str) -> None:
    c = load_cluster(cluster, nodes=16)
    if g > c.domain:
        pytest.skip("more GPUs per node than the cluster has")
    slow = collective_times(op, SIZES, n, c, gpus_per_node=g, coeffs=CO)
    fast = collective_times(op, SIZES, n, _scaled(c, 2.0), gpus_per_node=g, coeffs=CO)
    assert np.all(fast <= slow * (1 + 1e-12))


@pytest.mark.parametrize(("cluster", "nodes"), [("dgx-a100", 2), ("dgx-a100", 16), ("dgx-h100", 4), ("dgx-h100", 128)])
def test_hierarchical_beats_a_flat_ring_across_nodes_for_large_messages(cluster: str, nodes: int) -> None:
    c = load_cluster(cluster, nodes=nodes)
    n = 8 * nodes
    ring = collective_time("all_reduce", GiB, n, c, algorithm="ring").time_s
    hier = collective_time("all_reduce", GiB, n, c, algorithm="hierarchical").time_s
    assert hier < ring


def test_cost_does_not_grow_with_gpu_count() -> None:
    """16,384 GPUs are priced in closed form: a finite, positive answer with the expected busbw scale."""
    c = load_cluster("dgx-h100", nodes=2048)
    for g in (8, 1):
        t = collective_time("all_reduce", GiB, 2048 * g, c, gpus_per_node=g)
        assert t.group_size == 2048 * g and math.isfinite(t.time_s) and t.time_s > 0
        assert 1e9 < t.busbw_Bps < 1e12
    t = collective_time("all_to_all", GiB, 16384, c)
    assert math.isfinite(t.time_s) and t.algorithm == "direct"


def test_vectorized_matches_scalar() -> None:
    c = load_cluster("dgx-a100", nodes=4)
    for op in OPS:
        many = collective_times(op, SIZES, 32, c, coeffs=CO)
        one = [collective_time(op, s, 32, c).time_s for s in SIZES]
        assert many == pytest.approx(one, rel=1e-12)


def test_nothing_to_move_takes_no_time() -> None:
    c = load_cluster("dgx-h100")
    assert collective_time("all_reduce", 1e6, 1, c).time_s == 0.0
    assert collective_time("all_reduce", 0, 8, c).time_s == 0.0
    assert collective_times("all_gather", np.array([0.0, 1e6]), 8, c, coeffs=CO)[0] == 0.0


def test_automatic_choice_follows_nccl() -> None:
    h100 = load_cluster("dgx-h100", nodes=4)
    assert collective_time("all_to_all", 1e8, 8, h100).algorithm == "direct"
    assert collective_time("send_recv", 1e8, 2, h100).algorithm == "direct"
    assert collective_time("all_reduce", 1e9, 8, h100).algorithm == "nvls"  # in-switch reduction on H100
    assert collective_time("all_reduce", 1e9, 8, load_cluster("dgx-a100")).algorithm == "ring"  # no NVLS
    assert collective_time("broadcast", 1e9, 8, h100).algorithm == "ring"
    assert collective_time("all_reduce", 1e9, 32, h100).algorithm in {"ring", "tree", "hierarchical"}
    # halving_doubling and the ring all-to-all are never chosen automatically
    for op in OPS:
        for n in (2, 8, 32):
            assert collective_time(op, 1e6, n, h100).algorithm != "halving_doubling"


def test_network_is_slower_than_nvlink_and_shared_by_the_node() -> None:
    c = load_cluster("dgx-h100", nodes=2)
    inside = collective_time("send_recv", 1e9, 2, c, gpus_per_node=2).time_s
    across = collective_time("send_recv", 1e9, 2, c, gpus_per_node=1).time_s
    assert across > 3 * inside
    one_nic = load_cluster("a100-pairwise-nvlink", nodes=2)
    shared = collective_time("send_recv", 1e9, 2, one_nic, gpus_per_node=1).time_s
    alone = collective_time("send_recv", 1e9, 2, one_nic, gpus_per_node=1, shared_nics=False).time_s
    assert alone <= shared


def test_socket_transfers_burst_at_the_wire_rate_until_the_socket_buffers_fill() -> None:
    """TCP socket transport: a message that fits the socket buffers leaves at the NIC's rate, a large one
    streams at the slower sustained host-path rate; GPUDirect RDMA has one rate at every size."""
    co = load_collective_coefficients()
    c = load_cluster("a100-pairwise-nvlink", nodes=2)
    buf = co.socket_buffer_bytes
    small, large = buf / 8, buf * 64
    t = collective_times("send_recv", np.array([small, 2 * small, large, 2 * large]), 2, c, gpus_per_node=1,
                         shared_nics=False, coeffs=CO)
    burst_bw, sustained_bw = small / (t[1] - t[0]), large / (t[3] - t[2])  # incremental rates (latency cancels)
    wire = c.inter_node.nic_bandwidth_Bps
    assert sustained_bw < 0.6 * burst_bw
    assert burst_bw <= wire * (1 + 1e-9)
    assert sustained_bw <= co.staged_bandwidth_Bps["socket"] * (1 + 1e-9)
    # an RDMA network (GPUDirect) has no such regime: the incremental rate is the same at both sizes
    h = load_cluster("dgx-h100", nodes=2)
    t = collective_times("send_recv", np.array([small, 2 * small, large, 2 * large]), 2, h, gpus_per_node=1, coeffs=CO)
    assert small / (t[1] - t[0]) == pytest.approx(large / (t[3] - t[2]), rel=1e-6)


def test_oversubscription_applies_beyond_one_leaf() -> None:
    c = load_cluster("dgx-h100", nodes=64)
    tapered = c.model_copy(update={"inter_node": c.inter_node.model_copy(update={"oversubscription": 4.0})})
    for nodes in (2, 32):
        assert collective_time("all_reduce", 1e9, nodes, tapered, gpus_per_node=1).time_s == pytest.approx(
            collective_time("all_reduce", 1e9, nodes, c, gpus_per_node=1).time_s)
    assert collective_time("all_reduce", 1e9, 64, tapered, gpus_per_node=1).time_s > \
        2 * collective_time("all_reduce", 1e9, 64, c, gpus_per_node=1).time_s


def test_nvl72_domain_spans_trays() -> None:
    c = load_cluster("gb200-nvl72", nodes=36)
    inside = collective_time("all_reduce", 1e9, 72, c)
    assert inside.gpus_per_node == 72 and inside.algorithm == "nvls"
    across = collective_time("all_reduce", 1e9, 144, c)
    assert across.time_s > inside.time_s


# -- names, registry, errors ----------------------------------------------------------------------------------------
def test_six_algorithms_are_registered() -> None:
    assert set(ALGORITHMS.names()) == {"ring", "tree", "halving_doubling", "direct", "hierarchical", "nvls"}


def test_unknown_algorithm_lists_the_valid_names() -> None:
    with pytest.raises(UnknownNameError) as err:
        collective_time("all_reduce", 1e6, 8, load_cluster("dgx-h100"), algorithm="rnig")
    msg = str(err.value)
    assert "ring" in msg and "halving_doubling" in msg and "closest: ring" in msg


def test_duplicate_registration_raises() -> None:
    reg: Registry[int] = Registry("thing")
    reg.add("one", 1)
    with pytest.raises(ValueError, match="already registered"):
        reg.add("one", 2)
    with pytest.raises(ValueError):
        ALGORITHMS.add("ring", ALGORITHMS.get("ring"))
    assert reg.get("ONE") == 1 and "one" in reg and len(reg) == 1


def test_unknown_op_lists_the_valid_ops() -> None:
    with pytest.raises(UnknownNameError, match="all_reduce, all_gather"):
        parse_op("allreduc")
    assert parse_op("AllReduce") is CollectiveOp.ALL_REDUCE
    assert parse_op("all-to-all") is CollectiveOp.ALL_TO_ALL
    assert parse_op("sendrecv") is CollectiveOp.SEND_RECV


@pytest.mark.parametrize(("kwargs", "fragment"), [
    ({"op": "all_to_all", "algorithm": "tree"}, "does not implement all_to_all"),
    ({"algorithm": "nvls", "cluster": "dgx-a100"}, "in-switch reduction"),
    ({"algorithm": "nvls", "n": 16, "nodes": 2}, "one NVLink domain"),
    ({"algorithm": "halving_doubling", "n": 6}, "power-of-two"),
    ({"n": 16}, "does not fit"),
    ({"n": 12, "nodes": 2, "g": 8}, "do not split evenly"),
    ({"n": 16, "nodes": 2, "g": 16}, "exceeds the 8-GPU scale-up domain"),
    ({"n": 0}, "positive whole number"),
    ({"size": -1.0}, ">= 0 bytes"),
    ({"size": float("nan")}, ">= 0 bytes"),
    ({"n": 4, "nodes": 2, "cluster": "a100-pcie-pair"}, "no inter-node network"),
    ({"n": 8, "nodes": 4, "g": 2, "cluster": "gb200-nvl72"}, "need 4 domains"),
])
def test_bad_requests_are_one_line_config_errors(kwargs: dict, fragment: str) -> None:
    c = load_cluster(kwargs.get("cluster", "dgx-h100"), nodes=kwargs.get("nodes"))
    with pytest.raises(ConfigError) as err:
        collective_time(kwargs.get("op", "all_reduce"), kwargs.get("size", 1e6), kwargs.get("n", 8), c,
                        gpus_per_node=kwargs.get("g"), algorithm=kwargs.get("algorithm"))
    assert fragment in str(err.value) and "\n" not in str(err.value)


def test_bus_factors_follow_nccl_tests() -> None:
    assert bus_factor(CollectiveOp.ALL_REDUCE, 8) == pytest.approx(1.75)
    assert bus_factor(CollectiveOp.ALL_GATHER, 8) == pytest.approx(0.875)
    assert bus_factor(CollectiveOp.ALL_TO_ALL, 8) == pytest.approx(0.875)
    assert bus_factor(CollectiveOp.BROADCAST, 8) == 1.0
    assert bus_factor(CollectiveOp.SEND_RECV, 2) == 1.0


def test_packaged_coefficients_say_what_they_were_fitted_on() -> None:
    co = load_collective_coefficients()
    assert co.schema_version == 1 and co.produced_by and co.fitted_on
    assert co.priors, "fits start from recorded priors"
    for name in ("ll", "ll128", "simple", "p2p_ll", "p2p_simple"):
        assert name in co.protocols


def test_a_group_spreads_evenly_over_partly_used_domains() -> None:
    """128 GPUs of NVL72 racks run as 64 + 64 (whole 4-GPU trays, balanced), 12 GPUs of two DGX nodes as 6 + 6;
    a job filling whole domains keeps the domain's size."""
    from perfcast.system.collectives.placement import place

    nvl = load_cluster("gb200-nvl72", nodes=32)
    assert nvl.domain_share(128) == 64
    assert (place(nvl, 128).g, place(nvl, 128).m) == (64, 2)
    assert load_cluster("gb200-nvl72", nodes=36).domain_share(144) == 72
    assert nvl.domain_share(36) == 36
    assert load_cluster("gb200-nvl72", nodes=5).domain_share(20) == 20
    dgx = load_cluster("dgx-h100", nodes=2)
    assert (place(dgx, 12).g, place(dgx, 12).m) == (6, 2)
    assert collective_time("all_reduce", 1e8, 128, nvl).time_s > collective_time("all_reduce", 1e8, 64, nvl).time_s


@pytest.mark.parametrize(("gpus_per_node", "line_rate_Bps"), [(2, 450e9), (1, 50e9)])
def test_a_copy_never_outruns_the_line_rate(gpus_per_node: int, line_rate_Bps: float) -> None:
    # DGX-H100: NVLink 4 is 450 GB/s per direction, one 400 Gb/s NDR NIC per GPU is 50 GB/s
    c = load_cluster("dgx-h100", nodes=2)
    t = collective_time("send_recv", 8 * GiB, 2, c, gpus_per_node=gpus_per_node, shared_nics=False)
    assert t.algbw_Bps <= line_rate_Bps


def test_small_all_reduce_latency_grows_with_the_network_steps_of_nccl_trees() -> None:
    # NCCL's tree latency (src/graph/tuning.cc): 2 * (intra steps * hwLat[NVLINK] + log2(nodes) * hwLat[NET]);
    # from 2 to 64 nodes, 5 more network steps each way at ~inter_node.latency_s each
    c = load_cluster("dgx-h100", nodes=64)
    two = collective_time("all_reduce", 8.0, 16, c).time_s
    many = collective_time("all_reduce", 8.0, 512, c).time_s
    per_step = CO.protocols["ll"].net_hop_frac * c.inter_node.latency_s
    assert many - two == pytest.approx(2 * 5 * per_step, rel=0.05)


def test_host_staged_networks_pay_their_per_step_latency() -> None:
    base = load_cluster("dgx-a100", nodes=2)
    staged = base.model_copy(update={"inter_node": base.inter_node.model_copy(update={"transport": "staged"})})
    extra = (collective_time("all_reduce", 8.0, 2, staged, gpus_per_node=1).time_s
             - collective_time("all_reduce", 8.0, 2, base, gpus_per_node=1).time_s)
    assert extra == pytest.approx(2 * CO.staged_latency_s["network"], rel=0.05)  # a ring of 2 nodes: 2 steps
