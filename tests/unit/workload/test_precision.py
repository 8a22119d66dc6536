"""Training precision recipes: each recipe's GEMM datapath and extra kernels, bytes and FLOPs from their
definitions (perfcast.workload.precision's docstring)."""

from __future__ import annotations

import pytest

from perfcast.catalog.hardware import load_hardware
from perfcast.catalog.models import load_model
from perfcast.dtypes import DType
from perfcast.errors import ConfigError, UnsupportedError
from perfcast.workload.backward import backward_ops
from perfcast.workload.build import WorkloadSpec, build_workload
from perfcast.workload.precision import (
    RECIPE_NAMES,
    RECIPES,
    check_recipe_hardware,
    get_recipe,
    recipe_backward_ops,
    to_recipe,
)
from perfcast.workload.transforms import to_fp8
from perfcast.workload.types import Mode, Op, OpKind, Phase

M, K, N = 128, 4096, 4096  # tokens, input and output features of llama-2-7b's o_proj at micro-batch 1 x 128


@pytest.fixture(scope="module")
def forward() -> list[Op]:
    spec = WorkloadSpec(Mode.TRAINING, 1, M, dtype=DType.BF16, style="engine", attention="flash", optimizer="none",
                        loss=True)
    return list(build_workload(load_model("llama-2-7b"), spec).phase(Phase.FORWARD))


def _named(ops: list[Op], prefix: str) -> dict[str, Op]:
    return {op.name.removeprefix(prefix): op for op in ops if op.name.startswith(prefix)}


def test_recipes_are_the_names_the_plan_takes() -> None:
    assert set(RECIPES) == set(RECIPE_NAMES)
    assert get_recipe("nvfp4").fprop is DType.FP4
    with pytest.raises(ConfigError, match="unknown precision recipe 'fp6'"):
        get_recipe("fp6")


@pytest.mark.parametrize("name", ["bf16", "fp16", "fp32"])
def test_high_precision_recipes_change_nothing(forward: list[Op], name: str) -> None:
    assert to_recipe(forward, RECIPES[name]) == forward
    assert recipe_backward_ops(forward, RECIPES[name]) == []


def test_fp8_is_the_per_tensor_cast_it_always_was(forward: list[Op]) -> None:
    out = to_recipe(forward, RECIPES["fp8"])
    assert out == to_fp8(forward)
    o = _named(out, "layers.attn.o_proj")
    cast = o[".cast_fp8"]
    assert (cast.op, cast.bytes_read, cast.bytes_written, cast.flops) == ("cast", M * K * 2.0, M * K * 1.0, M * K)
    base = _named(forward, "layers.attn.o_proj")[""]
    assert o[""].dtype is DType.FP8 and o[""].bytes_read == base.bytes_read / 2
    assert recipe_backward_ops(out, RECIPES["fp8"]) == []  # its gradient cast is autograd's derived one
    assert sum(op.op == "cast" for op in backward_ops(out)) == sum(op.op == "cast" for op in out)
    # lm head, attention and norms stay in bf16
    assert all(op.dtype is DType.BF16 for op in out if not op.name.startswith("layers") or op.kind is OpKind.ATTENTION)


def test_fp8_cs_adds_an_amax_pass_before_each_cast_forward_and_backward(forward: list[Op]) -> None:
    fp8 = to_recipe(forward, RECIPES["fp8"])
    cs = to_recipe(forward, RECIPES["fp8-cs"])
    assert [op for op in cs if op.op != "amax"] == fp8  # the same casts and GEMMs
    amax = [op for op in cs if op.op == "amax"]
    assert len(amax) == sum(op.op == "cast" for op in fp8)
    o = _named(cs, "layers.attn.o_proj")[".amax_fp8"]
    assert (o.bytes_read, o.flops, o.phase) == (M * K * 2.0, M * K, Phase.FORWARD)  # a full read of the input
    back = recipe_backward_ops(cs, RECIPES["fp8-cs"])
    assert len(back) == len(amax) and all(op.phase is Phase.BACKWARD and op.op == "amax" for op in back)
    assert not any(op.name.startswith(tuple(a.name for a in amax)) for op in backward_ops(cs))  # no autograd


@pytest.mark.parametrize(("name", "dtype", "per", "weight_per", "amax", "hadamard"), [
    ("fp8-block", DType.FP8, 1 + 4 / 128, 1 + 4 / 128**2, False, 0),
    ("mxfp8", DType.FP8, 1 + 1 / 32, 1 + 1 / 32, False, 0),
    ("nvfp4", DType.FP4, 0.5 + 1 / 16, 0.5 + 1 / 16, True, 16),
])
def test_block_scaled_recipes_quantize_both_orientations(forward: list[Op], name: str, dtype: DType, per: float,
                                                         weight_per: float, amax: bool, hadamard: int) -> None:
    r = RECIPES[name]
    assert (r.element_bytes, r.weight_element_bytes) == pytest.approx((per, weight_per))
    out = to_recipe(forward, r)
    o = _named(out, "layers.attn.o_proj")
    q = o[".quantize_input"]
    assert q.bytes_read == M * K * 2.0
    assert q.bytes_written == pytest.approx(2 * M * K * per)  # row-wise and column-wise copies
    assert q.flops == pytest.approx(2 * M * K + 2 * hadamard * M * K)
    assert (".amax_input" in o) is amax
    if amax:
        assert o[".amax_input"].bytes_read == M * K * 2.0
    base = _named(forward, "layers.attn.o_proj")[""]
    gemm = o[""]
    assert gemm.dtype is dtype and gemm.get("weight_dtype") == dtype.value
    assert gemm.weight_bytes == pytest.approx(K * N * weight_per)
    assert gemm.bytes_read == pytest.approx(M * K * per + K * N * weight_per)
    assert gemm.flops == base.flops
    # the backward's GEMMs run on the same datapath; the quantize kernels have no autograd backward
    derived = _named(backward_ops(out), "layers.attn.o_proj")
    assert {op.dtype for op in derived.values() if op.kind is OpKind.GEMM} == {dtype}
    assert not any(key.startswith((".quantize", ".amax")) for key in derived)
    # the output gradient (m x n) is quantized in the backward, both orientations
    back = _named(recipe_backward_ops(out, r), "layers.attn.o_proj")
    g = back[".quantize_grad_output"]
    assert (g.phase, g.bytes_read, g.tp_split) == (Phase.BACKWARD, M * N * 2.0, "none")  # row-parallel output
    assert g.bytes_written == pytest.approx(2 * M * N * per)
    assert (".amax_grad_output" in back) is amax
    qkv = _named(recipe_backward_ops(out, r), "layers.attn.qkv_proj")[".quantize_grad_output"]
    assert qkv.dims == (1, M * 3 * K) and qkv.tp_split == "column"  # column-parallel: the gradient is split
    # lm head and routers untouched
    assert _named(out, "head.lm_head")[""].dtype is DType.BF16


def test_saved_inputs_follow_the_gemm_format() -> None:
    """A quantized linear layer keeps its input for the weight gradient in the GEMM's format."""
    from perfcast.workload.backward import SavedActivations
    gemm = Op(name="layers.mlp.down_proj", op="linear", kind=OpKind.GEMM, dims=(1, M, K, N), dtype=DType.BF16,
              flops=2.0 * M * K * N, bytes_read=(M * K + K * N) * 2.0, bytes_written=M * N * 2.0,
              weight_bytes=K * N * 2.0, params=K * N, count=1, phase=Phase.FORWARD, tp_split="row")
    saved = {}
    for name in ("bf16", "fp8", "mxfp8", "nvfp4"):
        s = SavedActivations()
        saved[name] = sum(s.add(op) for op in to_recipe([gemm], RECIPES[name]))
    assert saved == {"bf16": M * K * 2.0, "fp8": M * K * 1.0, "mxfp8": M * K * 1.0, "nvfp4": M * K * 0.5}


def test_weight_copies_cached_across_micro_batches() -> None:
    assert {n: RECIPES[n].weight_copy_bytes_per_param for n in ("bf16", "fp8", "fp8-cs")} == \
        {"bf16": 0.0, "fp8": 1.0, "fp8-cs": 1.0}
    assert RECIPES["mxfp8"].weight_copy_bytes_per_param == pytest.approx(2 * (1 + 1 / 32))
    assert RECIPES["nvfp4"].weight_copy_bytes_per_param == pytest.approx(2 * (0.5 + 1 / 16))


@pytest.mark.parametrize("name", ["mxfp8", "nvfp4"])
def test_mx_recipes_need_blackwell_tensor_cores(name: str) -> None:
    for gpu in ("b200", "gb200", "b300-sxm", "rtx-pro-6000-blackwell"):
        check_recipe_hardware(RECIPES[name], load_hardware(gpu))
    for gpu, has in (("h100-sxm-80gb", "compute capability 9"), ("mi355x", "amd cdna4")):
        with pytest.raises(UnsupportedError) as err:
            check_recipe_hardware(RECIPES[name], load_hardware(gpu))
        msg = str(err.value)
        assert "\n" not in msg and f"precision {name} needs MX block-scaled tensor cores" in msg and has in msg


def test_per_tensor_and_block_fp8_run_on_hopper() -> None:
    for name in ("fp8", "fp8-cs", "fp8-block", "bf16"):
        check_recipe_hardware(RECIPES[name], load_hardware("h100-sxm-80gb"))
