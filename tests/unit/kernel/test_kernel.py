"""Unit and property tests of the kernel layer (``perfcast.kernel``): per-op device time.

Invariants (style guide, "Property"): a kernel is never faster than its roofline; more bandwidth or more
FLOP/s is never slower; time grows with the problem; the sustained clock is a fraction in (0, 1]; a format
without a datasheet peak is refused; a coefficient file of another schema is refused.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfcast.catalog.hardware import Hardware, list_hardware, load_hardware
from perfcast.coefficients.bundle import Calibration
from perfcast.coefficients.kernel import SCHEMA_VERSION, load_coefficients
from perfcast.dtypes import DType
from perfcast.errors import DataError, UnsupportedError
from perfcast.kernel.power import datapath, sustained_clock_frac
from perfcast.kernel.predict import KernelTime, predict_kernel, predict_ops
from perfcast.workload.graph import Graph
from perfcast.workload.types import Op

# datacenter and consumer, NVIDIA and AMD, HBM and GDDR, Pascal to Hopper
GPUS = ["a100-pcie-40gb", "h100-sxm-80gb", "v100-sxm2-32gb", "p100-pcie-16gb", "t4", "l4", "mi250", "mi300x"]
VECTOR_OPS = ["add", "mul", "gelu", "copy", "softmax", "layernorm", "rmsnorm", "rope", "silu_mul", "dropout"]


def _linear(m: int, k: int, n: int, dtype: DType = DType.FP16, bias: bool = False) -> Op:
    return Graph(dtype).linear("fc", m, k, n, bias=bias)


def _bmm(b: int, m: int, k: int, n: int, dtype: DType = DType.FP16) -> Op:
    return Graph(dtype).bmm("bmm", b, m, k, n)


def _vector(op: str, rows: int, cols: int, dtype: DType = DType.FP16) -> Op:
    g = Graph(dtype, training=True)
    if op in ("softmax", "layernorm", "rmsnorm"):
        return g.reduction(op, op, rows, cols)
    if op == "dropout":
        out = g.dropout("drop", rows * cols)
        assert out is not None
        return out
    return g.pointwise(op, op, rows * cols, rows=rows, inputs=2 if op in ("add", "mul", "silu_mul") else 1)


def _dtype_for(hw: Hardware, preferred: DType) -> DType:
    return preferred if preferred.value in hw.supported_dtypes() or preferred is DType.FP32 else DType.FP32


def _roofline_s(op: Op, hw: Hardware) -> float:
    """max(FLOPs / peak, DRAM bytes / bandwidth) at boost clock; at most an L2's worth of bytes can be
    served from cache instead of DRAM, so those do not count toward the memory bound."""
    compute = op.flops / hw.peak(op.dtype) if op.kind.value in ("gemm", "attention") else 0.0
    memory = max(0.0, op.bytes - hw.l2_cache_bytes) / hw.memory_bandwidth_Bps
    return max(compute, memory)


# -- roofline lower bound -----------------------------------------------------------------------------------
@pytest.mark.parametrize("gpu", GPUS)
@pytest.mark.parametrize("shape", [(1, 1, 1), (128, 128, 128), (4096, 4096, 4096), (8192, 1024, 28672),
                                   (1, 8192, 8192), (16, 4096, 11008), (2048, 64, 2048)])
@pytest.mark.parametrize("dtype", [DType.FP32, DType.FP16])
def test_gemm_never_beats_its_roofline(gpu: str, shape: tuple[int, int, int], dtype: DType) -> None:
    hw = load_hardware(gpu)
    op = _linear(*shape, dtype=_dtype_for(hw, dtype), bias=True)
    kt = predict_kernel(op, hw)
    assert kt.time_s >= _roofline_s(op, hw)
    assert kt.time_s > 0


@pytest.mark.parametrize("gpu", GPUS)
@pytest.mark.parametrize("shape", [(96, 512, 64, 512), (1, 1, 1, 1), (384, 2048, 128, 2048)])
def test_bmm_never_beats_its_roofline(gpu: str, shape: tuple[int, int, int, int]) -> None:
    hw = load_hardware(gpu)
    op = _bmm(*shape, dtype=_dtype_for(hw, DType.FP16))
    assert predict_kernel(op, hw).time_s >= _roofline_s(op, hw)


@pytest.mark.parametrize("gpu", GPUS)
@pytest.mark.parametrize("op", VECTOR_OPS)
@pytest.mark.parametrize("size", [(1, 1), (4096, 4096), (16384, 50257), (65536, 128)])
def test_vector_never_beats_its_roofline(gpu: str, op: str, size: tuple[int, int]) -> None:
    hw = load_hardware(gpu)
    o = _vector(op, *size)
    assert predict_kernel(o, hw).time_s >= _roofline_s(o, hw)


@pytest.mark.parametrize("gpu", ["a100-sxm-80gb", "h100-sxm-80gb", "mi300x"])
@pytest.mark.parametrize(("q_len", "kv_len"), [(4096, 4096), (1, 8192), (512, 512)])
def test_attention_never_beats_its_roofline(gpu: str, q_len: int, kv_len: int) -> None:
    hw = load_hardware(gpu)
    op = Graph(DType.BF16).attention("attn", 8, 32, 8, q_len, kv_len, 128)
    assert predict_kernel(op, hw).time_s >= _roofline_s(op, hw)


def test_kernel_time_fields() -> None:
    op = _linear(4096, 4096, 4096)
    kt = predict_kernel(op, "h100-sxm-80gb")
    assert isinstance(kt, KernelTime)
    assert kt.flops == op.flops and kt.bytes == op.bytes
    assert kt.bound == "compute"
    tiny = predict_kernel(_linear(1, 8, 8), "h100-sxm-80gb")
    assert tiny.bound == "latency"
    stream = predict_kernel(_vector("add", 8192, 8192), "h100-sxm-80gb")
    assert stream.bound == "memory"


def test_predict_ops_matches_predict_kernel_one_by_one() -> None:
    ops = [_linear(512, 1024, 1024), _vector("gelu", 512, 4096), _bmm(16, 128, 64, 128), _vector("add", 7, 9)]
    batch = predict_ops(ops, "a100-pcie-40gb")
    single = [predict_kernel(o, "a100-pcie-40gb") for o in ops]
    assert [k.time_s for k in batch] == pytest.approx([k.time_s for k in single], rel=1e-12)


# -- more hardware is never slower ----------------------------------------------------------------------------
def _scaled_peaks(hw: Hardware, factor: float) -> Hardware:
    peaks = hw.peak_flops_per_s
    update = {k: v * factor for k, v in peaks.model_dump().items() if v}
    return hw.model_copy(update={"peak_flops_per_s": peaks.model_copy(update=update)})


def _ops_mix(dtype: DType) -> list[Op]:
    return [_linear(1, 4096, 4096, dtype), _linear(4096, 4096, 4096, dtype), _linear(64, 8192, 1024, dtype),
            _bmm(128, 1024, 64, 1024, dtype), _vector("softmax", 4096, 1024, dtype), _vector("add", 1024, 4096, dtype),
            Graph(dtype).attention("attn", 4, 32, 32, 1024, 1024, 128)]


@pytest.mark.parametrize("gpu", GPUS)
@pytest.mark.parametrize("factor", [1.5, 2.0, 10.0])
def test_more_flops_is_never_slower(gpu: str, factor: float) -> None:
    hw = load_hardware(gpu)
    dtype = _dtype_for(hw, DType.FP16)
    ops = _ops_mix(dtype)
    base = predict_ops(ops, hw)
    faster = predict_ops(ops, _scaled_peaks(hw, factor))
    for op, a, b in zip(ops, base, faster, strict=True):
        assert b.time_s <= a.time_s * (1 + 1e-12), op.name


@pytest.mark.parametrize("gpu", GPUS)
@pytest.mark.parametrize("factor", [1.25, 2.0, 4.0, 10.0])
def test_more_bandwidth_is_never_slower_for_memory_bound_kernels(gpu: str, factor: float) -> None:
    hw = load_hardware(gpu)
    more = hw.model_copy(update={"memory_bandwidth_Bps": hw.memory_bandwidth_Bps * factor})
    dtype = _dtype_for(hw, DType.FP16)
    ops = [_vector(o, 4096, 4096, dtype) for o in VECTOR_OPS] + [_linear(1, 8192, 8192, dtype)]
    for op, a, b in zip(ops, predict_ops(ops, hw), predict_ops(ops, more), strict=True):
        assert b.time_s <= a.time_s * (1 + 1e-12), op.name
        assert b.time_s < a.time_s, op.name  # and these really are bandwidth-bound


@pytest.mark.parametrize(("gpu", "shape", "factor"), [
    ("h100-sxm-80gb", (8192, 8192, 8192), 1.5), ("a100-pcie-40gb", (8192, 8192, 8192), 4.0),
    ("a100-pcie-40gb", (1, 8192, 8192), 10.0), ("mi300x", (4096, 4096, 4096), 10.0),
])
def test_more_bandwidth_is_never_slower_for_compute_bound_kernels(gpu: str, shape: tuple[int, int, int],
                                                                 factor: float) -> None:
    """The power model must not charge DRAM power for bandwidth a kernel does not use (before 8301d6b a
    device with 4x the bandwidth sustained a lower clock: H100 8k^3 bf16 went from 1.46 to 1.74 ms)."""
    hw = load_hardware(gpu)
    more = hw.model_copy(update={"memory_bandwidth_Bps": hw.memory_bandwidth_Bps * factor})
    op = _linear(*shape, dtype=DType.BF16)
    assert predict_kernel(op, more).time_s <= predict_kernel(op, hw).time_s * (1 + 1e-12)


# -- monotone in problem size -------------------------------------------------------------------------------
@pytest.mark.property
@settings(max_examples=60, deadline=None)
@given(m=st.integers(1, 20000), k=st.integers(1, 20000), n=st.integers(1, 20000),
       axis=st.sampled_from([0, 1, 2]), grow=st.integers(1, 5000),
       gpu=st.sampled_from(["a100-pcie-40gb", "h100-sxm-80gb", "t4", "mi250"]),
       dtype=st.sampled_from([DType.FP32, DType.FP16]))
def test_property_gemm_time_monotone_in_size(m: int, k: int, n: int, axis: int, grow: int, gpu: str,
                                             dtype: DType) -> None:
    dims = [m, k, n]
    bigger = list(dims)
    bigger[axis] += grow
    a, b = predict_ops([_linear(*dims, dtype=dtype), _linear(*bigger, dtype=dtype)], gpu)
    assert b.time_s >= a.time_s * (1 - 1e-12)


@pytest.mark.property
@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 100_000), cols=st.integers(1, 100_000), grow=st.integers(1, 10_000),
       axis=st.sampled_from([0, 1]), op=st.sampled_from(VECTOR_OPS),
       gpu=st.sampled_from(["a100-pcie-40gb", "h100-sxm-80gb", "t4", "mi250"]))
def test_property_vector_time_monotone_in_size(rows: int, cols: int, grow: int, axis: int, op: str,
                                               gpu: str) -> None:
    bigger = [rows, cols]
    bigger[axis] += grow
    a, b = predict_ops([_vector(op, rows, cols), _vector(op, *bigger)], gpu)
    assert b.time_s >= a.time_s * (1 - 1e-12)


@pytest.mark.parametrize("gpu", GPUS)
def test_attention_time_grows_with_context(gpu: str) -> None:
    hw = load_hardware(gpu)
    dtype = _dtype_for(hw, DType.FP16)
    ops = [Graph(dtype).attention("a", 8, 32, 8, 1, kv, 128) for kv in (128, 1024, 8192, 65536)]
    times = [k.time_s for k in predict_ops(ops, hw)]
    assert times == sorted(times) and times[-1] > times[0]


# -- sustained clock --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("hw", list_hardware(), ids=lambda h: h.id)
def test_sustained_clock_fraction_in_unit_interval(hw: Hardware) -> None:
    co = load_coefficients()
    for path in ("simt", "matrix", "tensor"):
        x = sustained_clock_frac(hw, path, co)
        assert 0.0 < x <= 1.0, (hw.id, path)


def test_tighter_power_limit_lowers_the_clock() -> None:
    co = load_coefficients()
    hw = load_hardware("h100-sxm-80gb")
    low_power = hw.model_copy(update={"tdp_W": hw.tdp_W / 2})
    assert sustained_clock_frac(low_power, "tensor", co) < sustained_clock_frac(hw, "tensor", co)
    op = _linear(8192, 8192, 8192, DType.BF16)
    assert predict_kernel(op, low_power).time_s > predict_kernel(op, hw).time_s


def test_the_base_clock_sets_how_far_cuda_core_fp32_throttles() -> None:
    """Two boards of one process node (12 nm) throttle as their datasheets say: the 250 W V100, base 1230 of
    1380 MHz, keeps its boost clock on FP32 GEMMs; the 70 W T4, base 585 of 1590 MHz, runs them far below it.
    A board whose datasheet gives no base clock (AMD) keeps the process-node energy."""
    from perfcast.kernel.power import base_clock_simt_energy_J, energy_per_flop_J

    co = load_coefficients()
    v100, t4 = load_hardware("v100-pcie-32gb"), load_hardware("t4")
    assert base_clock_simt_energy_J(v100, co) is not None and base_clock_simt_energy_J(t4, co) is not None
    assert sustained_clock_frac(v100, "simt", co) > 0.95
    x_t4 = sustained_clock_frac(t4, "simt", co)
    assert t4.base_clock_hz / t4.boost_clock_hz <= x_t4 < 0.6  # never below the guaranteed base clock
    assert base_clock_simt_energy_J(load_hardware("mi100"), co) is None
    no_base = t4.model_copy(update={"base_clock_hz": None})
    assert base_clock_simt_energy_J(no_base, co) is None
    assert energy_per_flop_J(no_base, "simt", co) != energy_per_flop_J(t4, "simt", co)


def test_a_power_limit_below_tdp_lowers_the_anchored_fp32_clock() -> None:
    """The base clock is specified at TDP: a board capped below it loses FP32 clock (the anchor stays at TDP)."""
    from perfcast.catalog.hardware import with_power_limit

    co = load_coefficients()
    hw = load_hardware("a100-pcie-40gb")
    capped = with_power_limit(hw, 150.0)
    assert sustained_clock_frac(capped, "simt", co) < sustained_clock_frac(hw, "simt", co)


def test_fp32_gemms_pick_among_their_architectures_library_tiles() -> None:
    """Pascal's cuBLAS has only 32x128, 64x64 and 128x32 tiles for linear layers (maxwell_sgemm_*_tn): a large
    FP32 linear layer on a P100 is slower than the generic tile list would price it; FP16 and architectures the
    table does not list keep the generic tiles."""
    from perfcast.catalog.blas_tiles import fp32_tiles
    from perfcast.kernel.gemm import gemm_times

    co = load_coefficients()
    p100 = load_hardware("p100-pcie-16gb")
    assert fp32_tiles("pascal") is not None and fp32_tiles("hopper") is None
    unknown = p100.model_copy(update={"architecture": "not-in-the-table"})
    args = (np.array([1.0]), np.array([4096.0]), np.array([4096.0]), np.array([4096.0]))
    own = gemm_times(*args, p100, DType.FP32, co, batched=False).time_s[0]
    generic = gemm_times(*args, unknown, DType.FP32, co, batched=False).time_s[0]
    assert own > generic
    assert gemm_times(*args, p100, DType.FP16, co, batched=False).time_s[0] == pytest.approx(
        gemm_times(*args, unknown, DType.FP16, co, batched=False).time_s[0])


def test_fp32_gemms_on_single_issue_128_lane_sms_lose_the_slots_other_instructions_take() -> None:
    """Hopper, Ada and Ampere GA10x feed 32 FP32 lanes per scheduler: a GEMM's loads take FFMA slots there.
    GA100 and GV100 (16 lanes per scheduler), Pascal's dual-issue GP104 and AMD do not lose them."""
    from perfcast.kernel.power import FFMA_ISSUE_SHARE, simt_issue_share

    for hid in ("h100-sxm-80gb", "l4", "a40"):
        assert simt_issue_share(load_hardware(hid)) == FFMA_ISSUE_SHARE
    for hid in ("a100-sxm-40gb", "v100-pcie-32gb", "p4", "mi250"):
        assert simt_issue_share(load_hardware(hid)) == 1.0
    h100 = load_hardware("h100-sxm-80gb")
    eight_k = _linear(8192, 8192, 8192, DType.FP32)
    achieved = eight_k.flops / predict_kernel(eight_k, h100).time_s
    assert achieved < FFMA_ISSUE_SHARE * h100.peak(DType.FP32)


def test_datapath_by_dtype() -> None:
    assert datapath(load_hardware("a100-pcie-40gb"), DType.FP32) == "simt"
    assert datapath(load_hardware("mi250"), DType.FP32) == "matrix"  # MFMA FP32
    assert datapath(load_hardware("a100-pcie-40gb"), DType.BF16) == "tensor"


# -- unsupported formats are refused -----------------------------------------------------------------------------
@pytest.mark.parametrize(("gpu", "dtype"), [("p100-pcie-16gb", DType.BF16), ("v100-sxm2-32gb", DType.BF16),
                                            ("a100-pcie-40gb", DType.FP8), ("t4", DType.FP4)])
def test_dtype_without_a_peak_raises_unsupported(gpu: str, dtype: DType) -> None:
    hw = load_hardware(gpu)
    assert dtype.value not in hw.supported_dtypes()
    with pytest.raises(UnsupportedError, match=rf"{gpu} has no {dtype.value} peak"):
        predict_kernel(_linear(128, 128, 128, dtype), hw)


def test_unsupported_message_lists_supported_formats() -> None:
    with pytest.raises(UnsupportedError) as info:
        predict_kernel(_linear(64, 64, 64, DType.BF16), "p100-pcie-16gb")
    assert "fp32" in str(info.value) and "fp16" in str(info.value)
    assert "\n" not in str(info.value)


# -- coefficients file -------------------------------------------------------------------------------------------
def _default_json() -> dict:
    return json.loads(load_coefficients().to_json())


def test_packaged_coefficients_round_trip(tmp_path: Path) -> None:
    co = load_coefficients()
    assert co.schema_version == SCHEMA_VERSION
    assert co.produced_by and co.fitted_on
    path = tmp_path / "c.json"
    path.write_text(co.to_json(), encoding="utf-8")
    assert load_coefficients(path) == co


@pytest.mark.parametrize("version", [SCHEMA_VERSION + 1, 0, "1", None])
def test_wrong_schema_version_is_data_error(tmp_path: Path, version: object) -> None:
    raw = _default_json()
    raw["schema_version"] = version
    path = tmp_path / "coefficients.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    with pytest.raises(DataError, match="schema_version"):
        load_coefficients(path)


def test_missing_schema_version_is_data_error(tmp_path: Path) -> None:
    raw = _default_json()
    del raw["schema_version"]
    path = tmp_path / "c.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    with pytest.raises(DataError, match="re-run `perfcast fit`"):
        load_coefficients(path)


@pytest.mark.parametrize("text", ["{not json", "[]", ""])
def test_unreadable_coefficients_are_data_errors(tmp_path: Path, text: str) -> None:
    path = tmp_path / "c.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DataError):
        load_coefficients(path)


def test_missing_field_and_missing_file_are_data_errors(tmp_path: Path) -> None:
    raw = _default_json()
    del raw["gemm"]
    path = tmp_path / "c.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    with pytest.raises(DataError, match="gemm"):
        load_coefficients(path)
    with pytest.raises(DataError, match="cannot read"):
        load_coefficients(tmp_path / "absent.json")


def test_custom_coefficients_change_the_prediction(tmp_path: Path) -> None:
    """Coefficients are inputs: halving the vector streaming efficiency slows a streaming kernel."""
    raw = _default_json()
    raw["vector"]["memory_efficiency"] = {k: v / 2 for k, v in raw["vector"]["memory_efficiency"].items()}
    path = tmp_path / "c.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    op = _vector("add", 8192, 8192)
    slow = predict_kernel(op, "a100-pcie-40gb", Calibration.shipped().with_kernel(load_coefficients(path))).time_s
    assert slow > 1.5 * predict_kernel(op, "a100-pcie-40gb").time_s


# -- model terms from the kernels PyTorch and the boards actually run ---------------------------------------------
def test_short_softmax_rows_stream_like_an_elementwise_op() -> None:
    """Rows of at most 1024 elements take PyTorch's warp-per-row softmax: one read and one write per element, the
    time of a one-input elementwise op over the same bytes; longer rows take the block kernel, slower per byte."""
    from perfcast.kernel.vector import PERSISTENT_SOFTMAX_MAX_COLS, vector_times

    co = load_coefficients()
    hw = load_hardware("a100-pcie-40gb")
    rows = 81920
    per_byte = []
    for cols in (PERSISTENT_SOFTMAX_MAX_COLS, 2 * PERSISTENT_SOFTMAX_MAX_COLS):
        nbytes = rows * cols * 4.0 * 2
        soft = vector_times(["softmax"], np.array([nbytes]), np.array([cols]), hw, co)[0]
        relu = vector_times(["relu"], np.array([nbytes]), np.array([cols]), hw, co)[0]
        per_byte.append(soft / nbytes)
        if cols <= PERSISTENT_SOFTMAX_MAX_COLS:
            assert soft == pytest.approx(relu, rel=1e-12)
        else:
            assert soft > relu * 1.2
    assert per_byte[1] > per_byte[0]


def test_fp32_matrix_cores_count_the_per_tile_cost_at_their_own_rate() -> None:
    """The FP32 MFMA path takes the tensor-core per-tile cost (a time counted in K steps at the FP16 matrix rate):
    on a device whose FP16 rate were its FP32 matrix rate, that cost is the coefficient itself."""
    from perfcast.kernel.gemm import gemm_times

    co = load_coefficients()
    hw = load_hardware("mi250")
    p = hw.peak_flops_per_s
    ratio = p.fp32_matrix / p.fp16
    assert ratio == pytest.approx(0.25, rel=1e-3)  # CDNA 2: FP32 MFMA at a quarter of the FP16 rate
    same_rate = hw.model_copy(update={"peak_flops_per_s": p.model_copy(update={"fp16": p.fp32_matrix,
                                                                              "bf16": p.fp32_matrix})})
    raw = co.model_dump(mode="json")
    raw["gemm"]["paths"]["matrix"]["k_overhead"] *= ratio
    scaled = type(co).model_validate(raw)
    dims = [np.array([v], dtype=float) for v in (80, 1024, 64, 1024)]  # attention scores: K = head size
    t = gemm_times(*dims, hw, DType.FP32, co, batched=True).time_s[0]
    assert t == pytest.approx(gemm_times(*dims, same_rate, DType.FP32, scaled, batched=True).time_s[0], rel=1e-12)
    assert t < gemm_times(*dims, same_rate, DType.FP32, co, batched=True).time_s[0]


def test_one_die_of_a_shared_board_may_draw_what_its_idle_sibling_leaves() -> None:
    """MI250: two GCDs under one board power limit, each described with half of it. Used alone (a single-device
    run), a GCD sustains the clock of a die with the whole board's budget; a single-die device is unchanged."""
    from perfcast.catalog.hardware import alone_on_board

    co = load_coefficients()
    gcd = load_hardware("mi250")
    alone = alone_on_board(gcd)
    assert alone.siblings_idle and alone.id == gcd.id
    whole = gcd.model_copy(update={"tdp_W": gcd.tdp_W * gcd.dies_per_board, "dies_per_board": 1})
    x_alone = sustained_clock_frac(alone, "matrix", co)
    assert x_alone == pytest.approx(sustained_clock_frac(whole, "matrix", co), rel=1e-9)
    assert x_alone > sustained_clock_frac(gcd, "matrix", co)
    # its power may then exceed its half of the board: the board's limit less the idle sibling's static power
    from perfcast.kernel.energy import power_model
    from perfcast.kernel.power import static_power_W

    cap = power_model(alone, co).tdp_W
    assert cap == pytest.approx(2 * gcd.tdp_W - static_power_W(gcd, co)) and cap > power_model(gcd, co).tdp_W
    single = load_hardware("mi210")
    assert alone_on_board(single) is single
