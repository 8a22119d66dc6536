"""perfcast.accel: specs, hand-counted access counts, the golden R5 figures, the mapper and the errors."""

from __future__ import annotations

import pytest

from perfcast.accel import evaluate, layer_problem, load_arch, load_mapping, search_mappings
from perfcast.accel.problem import Problem
from perfcast.accel.spec import Architecture, MappingSpec
from perfcast.datafiles import data_dir
from perfcast.errors import ConfigError
from perfcast.yamlio import safe_load

DATA = data_dir("accelerators")

TINY_ARCH = """
name: tiny
technology: test
source: [hand-made numbers for a test]
word_bits: 16
clock_Hz: 1.0e9
mac_energy_pJ: 1.0
levels:
  - {name: DRAM, kind: dram, tensors: [weights, inputs, outputs], read_energy_pJ: 100, write_energy_pJ: 100,
     bandwidth_words_per_cycle: 1000}
  - {name: BUF, kind: sram, tensors: [weights, inputs, outputs], capacity_words: 64, read_energy_pJ: 10,
     write_energy_pJ: 10, bandwidth_words_per_cycle: 1000, network_energy_pJ_per_word: 0,
     fanout: {x: {size: 4, dims: [K, C]}}}
"""


def _arch(text: str = TINY_ARCH) -> Architecture:
    return Architecture.model_validate(safe_load(text))


def _mapping(levels: dict[str, object]) -> MappingSpec:
    return MappingSpec.model_validate({"levels": levels})


# a GEMM: M = 4 rows (P), Kr = 2 reduction (C), Nc = 3 columns (K)
GEMM = Problem("gemm", (1, 1, 4, 1, 2, 3, 1))


def test_gemm_all_in_buffer_hand_counts() -> None:
    """Everything temporal at BUF, order K (outer), P, C (inner): DRAM is read once per word and written once
    per output; the MAC reads one weight and one input per MAC, and the accumulator keeps each output over the
    C loop, so BUF gets one partial-sum write per (k, p) pair."""
    arch = _arch()
    m = _mapping({"BUF": {"temporal": {"K": 3, "P": 4, "C": 2}, "order": ["K", "P", "C"]}})
    r = evaluate(arch, GEMM, m)
    dram, buf = r.levels
    assert dram.reads == {"weights": 6.0, "inputs": 8.0, "outputs": 0.0}
    assert dram.writes == {"weights": 0.0, "inputs": 0.0, "outputs": 12.0}
    assert buf.writes["weights"] == 6.0 and buf.writes["inputs"] == 8.0
    # MAC operands: 24 MACs; C innermost indexes both weights and inputs, so each MAC reads both
    assert buf.reads["weights"] == 24.0 and buf.reads["inputs"] == 24.0
    # outputs: 12 accumulator visits (C innermost is irrelevant to outputs), each written to BUF once, never
    # read back (every visit is the value's first arrival); BUF reads each output once to send it to DRAM
    assert buf.writes["outputs"] == 12.0
    assert buf.reads["outputs"] == 12.0
    assert r.compute_cycles == 24 and r.cycles == 24


def test_stationary_order_avoids_reloads() -> None:
    """Inputs outer over the irrelevant K loop reload from DRAM; with K innermost at DRAM they stay."""
    arch = _arch()
    base = {"BUF": {"temporal": {"C": 2}}}
    k_outer = _mapping({**base, "DRAM": {"temporal": {"K": 3, "P": 4}, "order": ["K", "P"]}})
    k_inner = _mapping({**base, "DRAM": {"temporal": {"K": 3, "P": 4}, "order": ["P", "K"]}})
    outer = evaluate(arch, GEMM, k_outer).levels[0].reads["inputs"]
    inner = evaluate(arch, GEMM, k_inner).levels[0].reads["inputs"]
    assert inner == 8.0  # each input word once
    assert outer == 24.0  # once per K step


def test_spatial_multicast_and_reduction() -> None:
    """K on the fanout: the 4 children (3 used) share inputs (one DRAM read each) and PEs count as used."""
    arch = _arch()
    m = _mapping({"BUF": {"temporal": {"P": 4, "C": 2}, "spatial": {"x": {"K": 3}}}})
    r = evaluate(arch, GEMM, m)
    assert r.pes_used == 3 and r.num_pes == 4
    assert r.compute_cycles == 8
    assert r.levels[0].reads["inputs"] == 8.0
    assert r.utilization == pytest.approx(24 / 4 / 8)


def test_utilization_at_most_one_and_energy_sums() -> None:
    arch = load_arch("eyeriss")
    p = layer_problem("resnet50.conv1")
    r = evaluate(arch, p, load_mapping(DATA / "mappings" / "eyeriss-resnet50-conv1.yaml"))
    assert 0 < r.utilization <= 1
    assert sum(r.energy_breakdown().values()) == pytest.approx(r.energy_J, rel=1e-12)
    assert sum(r.energy_shares().values()) == pytest.approx(1.0)
    assert r.energy_per_mac_fJ == pytest.approx(r.energy_J / r.macs * 1e15)


def test_golden_resnet50_conv1_ideal_cycles() -> None:
    """7x7 stride 2, 3 -> 64 channels, 112 x 112 outputs: 118,013,952 MACs / 168 PEs = 702,464 cycles."""
    p = layer_problem("resnet50.conv1")
    assert p.dims == (7, 7, 112, 112, 3, 64, 1) and p.stride_h == 2
    assert p.macs == 118_013_952
    r = evaluate(load_arch("eyeriss"), p, load_mapping(DATA / "mappings" / "eyeriss-resnet50-conv1.yaml"))
    assert r.ideal_cycles == 702_464
    # the row-stationary mapping uses 7 of 12 rows and all 14 columns
    assert r.pes_used == 98 and r.utilization == pytest.approx(7 / 12)
    # DRAM traffic: the padded input (3 x 229 x 229) once, the outputs once
    assert r.levels[0].reads["inputs"] == 3 * 229 * 229
    assert r.levels[0].writes["outputs"] == 64 * 112 * 112


def test_layer_names() -> None:
    assert layer_problem("resnet50.layer1.0.conv2").dims == (3, 3, 56, 56, 64, 64, 1)
    assert layer_problem("resnet-50.layer1.2.conv2").dims == layer_problem("resnet50.stage1.block1-2.conv2").dims
    assert layer_problem("resnet50.fc").dims == (1, 1, 1, 1, 2048, 1000, 1)
    with pytest.raises(ConfigError, match="closest known"):
        layer_problem("resnet50.layer1.0.conv9")


def test_mapper_no_worse_than_a_valid_mapping() -> None:
    """The exhaustive search over the tiny arch's pruned space finds an EDP at most a given valid mapping's."""
    arch = _arch()
    given = evaluate(arch, GEMM, _mapping({"BUF": {"temporal": {"K": 3, "P": 4, "C": 2}}}))
    for strategy in ("exhaustive", "random"):
        found = search_mappings(arch, GEMM, strategy=strategy, samples=500, seed=3)
        assert found.best.energy_J * found.best.cycles <= given.energy_J * given.cycles * (1 + 1e-12)
        assert found.evaluated > 0
        evaluate(arch, GEMM, found.mapping)  # the written mapping is valid


def test_mapper_is_reproducible() -> None:
    arch = load_arch("eyeriss")
    p = layer_problem("resnet50.layer3.0.conv1")
    a = search_mappings(arch, p, samples=150, seed=7)
    b = search_mappings(arch, p, samples=150, seed=7)
    assert a.mapping == b.mapping and a.best.energy_J == b.best.energy_J


def test_exhaustive_refuses_a_space_larger_than_samples() -> None:
    with pytest.raises(ConfigError, match="raise --samples or use --search random"):
        search_mappings(load_arch("eyeriss"), layer_problem("resnet50.conv1"), strategy="exhaustive", samples=10)


@pytest.mark.parametrize(("levels", "message"), [
    ({"BUF": {"temporal": {"K": 3, "P": 4, "C": 4}}}, "dim C: the mapping's factors multiply to 4"),
    ({"L2": {"temporal": {"K": 3}}}, "names level 'L2'.*its levels are DRAM, BUF"),
    ({"BUF": {"temporal": {"P": 4}, "spatial": {"x": {"K": 3, "C": 2}}}}, "multiplying to 6 but the array has 4"),
    ({"BUF": {"spatial": {"x": {"P": 4}}, "temporal": {"K": 3, "C": 2}}}, "does not take dim P"),
    ({"BUF": {"spatial": {"y": {"K": 3}}}}, "no spatial fanout axis 'y'"),
])
def test_invalid_mappings_rejected(levels: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        evaluate(_arch(), GEMM, _mapping(levels))


def test_spatial_fanout_beyond_the_array() -> None:
    p = Problem("gemm", (1, 1, 4, 1, 8, 3, 1))
    with pytest.raises(ConfigError, match="multiplying to 8 but the array has 4"):
        evaluate(_arch(), p, _mapping({"BUF": {"spatial": {"x": {"C": 8}}, "temporal": {"K": 3, "P": 4}}}))


def test_tile_larger_than_its_buffer() -> None:
    p = Problem("gemm", (1, 1, 16, 1, 8, 3, 1))  # 24 weights + 128 inputs + 48 outputs > 64 words
    with pytest.raises(ConfigError, match=r"tile too large: level BUF holds 200 words .* capacity is 64 words"):
        evaluate(_arch(), p, _mapping({"BUF": {"temporal": {"K": 3, "P": 16, "C": 8}}}))
    # the row-stationary mapping with two output columns per PE: 16 filters x 2 columns = 32 partial sums > 24
    bad = {"DRAM": {"temporal": {"P": 8, "K": 4}},
           "GLB": {"temporal": {"Q": 56, "C": 3}, "spatial": {"y": {"R": 7}, "x": {"P": 14}}},
           "PE": {"temporal": {"K": 16, "S": 7, "Q": 2}, "order": ["Q", "K", "S"]}}
    with pytest.raises(ConfigError, match="level PE holds 32 words of outputs but its outputs capacity is 24 words"):
        evaluate(load_arch("eyeriss"), layer_problem("resnet50.conv1"), _mapping(bad))


def test_architecture_needs_its_backing_store() -> None:
    raw = safe_load(TINY_ARCH)
    raw["levels"] = raw["levels"][1:]
    with pytest.raises(ValueError, match="must be the backing store"):
        Architecture.model_validate(raw)
    raw = safe_load(TINY_ARCH)
    raw["levels"] = []
    with pytest.raises(ValueError):
        Architecture.model_validate(raw)


def test_shipped_architecture_states_its_sources() -> None:
    arch = load_arch("eyeriss")
    assert arch.num_macs == 168
    assert any("Eyeriss" in s for s in arch.source) and any("Horowitz" in s for s in arch.source)
    assert arch.technology == "65 nm"


# -- the batch counts and the mapper's search ------------------------------------------------------------------


@pytest.mark.parametrize(("arch_text", "problem"), [
    (None, Problem("conv1-like", (7, 7, 112, 112, 3, 64, 1), 2, 2)),
    (None, Problem("dilated", (3, 3, 12, 10, 8, 6, 2), 2, 1, 2, 3)),
    (TINY_ARCH, Problem("gemm", (1, 1, 12, 1, 8, 6, 1))),
])
def test_batch_counts_match_the_scalar_evaluator(arch_text: str | None, problem: Problem) -> None:
    """Random draws counted as arrays agree with evaluate_nest, and fit exactly when build_nest accepts them."""
    import numpy as np

    from perfcast.accel.batch import BatchModel
    from perfcast.accel.evaluate import evaluate_nest
    from perfcast.accel.mapspace import draw, to_nest
    from perfcast.accel.nest import nest_to_spec

    arch = load_arch("eyeriss") if arch_text is None else _arch(arch_text)
    model = BatchModel(arch, problem)
    m = draw(model, np.random.default_rng(1), 400)
    ok = model.valid(m)
    energy, cycles = model.cost(m)
    assert ok.any() and not ok.all()
    for row in range(len(m)):
        nest = to_nest(model, m, row)
        if ok[row]:
            evaluate(arch, problem, nest_to_spec(arch, problem, nest))  # the written mapping is valid
            r = evaluate_nest(arch, problem, nest)
            assert r.energy_J == pytest.approx(energy[row], rel=1e-12)
            assert r.cycles == pytest.approx(cycles[row], rel=1e-12)
        else:
            with pytest.raises(ConfigError):
                evaluate(arch, problem, nest_to_spec(arch, problem, nest))


def test_neighbors_keep_every_dim_whole() -> None:
    """Each one-move neighbor still factors every dim into the problem's size, with orders as permutations."""
    import numpy as np

    from perfcast.accel.batch import BatchModel
    from perfcast.accel.mapspace import draw, neighbors, refills

    model = BatchModel(load_arch("eyeriss"), layer_problem("resnet50.layer2.0.conv2"))
    m = draw(model, np.random.default_rng(0), 200)
    one = m.take([int(np.nonzero(model.valid(m))[0][0])])
    nb = neighbors(model, one)
    assert len(nb) > 50 and len(refills(model, one)) > 0
    total = nb.temporal.prod(axis=1) * nb.spatial.prod(axis=(1, 2))
    assert (total == model.dims).all()
    assert (np.sort(nb.rank, axis=2) == np.arange(7)).all()
    assert not (nb.spatial > 1)[:, ~model.allowed].any()  # no dim on an axis that does not take it


def test_spatial_fills_include_row_stationary() -> None:
    """The fills of eyeriss for conv1 include the row-stationary split (R on the 12 rows, P on the 14 columns)."""
    import numpy as np

    from perfcast.accel.batch import BatchModel
    from perfcast.accel.mapspace import spatial_fills

    model = BatchModel(load_arch("eyeriss"), layer_problem("resnet50.conv1"))
    fills = spatial_fills(model)
    assert (fills.prod(axis=3) <= model.axis_size).all()
    rs = np.ones_like(fills[0])
    rs[1, model.axes[1].index("y"), 0] = 7  # R = 7 on y
    rs[1, model.axes[1].index("x"), 2] = 14  # P = 14 on x
    assert any((f == rs).all() for f in fills)


def test_mapper_defaults_match_the_hand_mapping_on_conv1() -> None:
    """With the CLI's defaults the search's EDP and energy are within 5% of the row-stationary mapping's."""
    arch, p = load_arch("eyeriss"), layer_problem("resnet50.conv1")
    hand = evaluate(arch, p, load_mapping(DATA / "mappings" / "eyeriss-resnet50-conv1.yaml"))
    found = search_mappings(arch, p)
    assert found.best.edp_Js <= 1.05 * hand.edp_Js
    assert found.best.energy_J <= 1.05 * hand.energy_J
    assert found.best.ideal_cycles == hand.ideal_cycles == 702_464


def test_exhaustive_and_random_agree_on_a_small_space() -> None:
    """On the tiny arch the descent finds the optimum of the exhaustive pruned space (or better)."""
    arch, p = _arch(), Problem("gemm", (1, 1, 12, 1, 8, 6, 1))
    ex = search_mappings(arch, p, strategy="exhaustive", samples=100_000)
    rnd = search_mappings(arch, p, samples=200, seed=1)
    assert rnd.best.edp_Js <= ex.best.edp_Js * (1 + 1e-9)
    for objective in ("energy", "delay"):
        found = search_mappings(arch, p, samples=200, objective=objective)
        assert found.objective == objective and found.evaluated > 0


def test_search_reports_progress() -> None:
    """progress(done, total) climbs; exhaustive ends at its whole pruned space, random within its budget."""
    arch, p = _arch(), Problem("gemm", (1, 1, 12, 1, 8, 6, 1))
    for strategy in ("exhaustive", "random"):
        calls: list[tuple[int, int]] = []
        found = search_mappings(arch, p, strategy=strategy, samples=100_000 if strategy == "exhaustive" else 100,
                                progress=lambda done, total, calls=calls: calls.append((done, total)))
        assert calls and all(done <= total for done, total in calls)
        assert [d for d, _ in calls] == sorted(d for d, _ in calls)
        assert calls[-1][0] == found.evaluated if strategy == "exhaustive" else calls[-1][0] <= found.evaluated
