"""Training steps under each precision recipe: GEMMs at their datapath's peak, the recipes' extra kernels priced
through the kernel layer, MX recipes refused where the GPU has no MX tensor cores, memory of the cached
low-precision weight copies, and the search pricing recipes as simulate_training does."""

from __future__ import annotations

import numpy as np
import pytest

from perfcast.catalog.models import load_model
from perfcast.coefficients.bundle import resolve_calibration
from perfcast.dtypes import DType
from perfcast.errors import UnsupportedError
from perfcast.sweep.evaluate import Pricer, evaluate_plans
from perfcast.sweep.space import SearchSpace, enumerate_plans
from perfcast.system.cluster import load_cluster
from perfcast.system.layers import micro_batch_costs
from perfcast.system.plan import ParallelPlan
from perfcast.system.training import simulate_training


def _run(precision: str, cluster: str = "dgx-b200", **kw: object):  # type: ignore[no-untyped-def]
    plan = ParallelPlan(**{"tp": 8, "seq_len": 8192, "micro_batch": 1, "global_batch": 8, "sp": True,
                           "precision": precision, **kw})  # type: ignore[arg-type]
    return simulate_training(load_model("llama-3-70b"), load_cluster(cluster), plan)


def test_lower_precision_datapaths_train_faster_on_b200() -> None:
    """A GEMM-bound step (Llama-3-70B, tp 8, 8k tokens): NVFP4 > FP8 > BF16 in tokens/s, each MFU against the
    peak of its own GEMM datapath."""
    res = {p: _run(p) for p in ("bf16", "fp8", "mxfp8", "nvfp4")}
    tps = {p: r.tokens_per_s_per_gpu for p, r in res.items()}
    assert tps["nvfp4"] > tps["fp8"] > tps["bf16"]
    assert tps["nvfp4"] > tps["mxfp8"] > tps["bf16"]
    hw = load_cluster("dgx-b200").hardware()
    assert res["nvfp4"].peak_flops_per_s == hw.peak(DType.FP4)
    assert res["mxfp8"].peak_flops_per_s == res["fp8"].peak_flops_per_s == hw.peak(DType.FP8)
    assert res["bf16"].peak_flops_per_s == hw.peak(DType.BF16)


@pytest.mark.parametrize("precision", ["mxfp8", "nvfp4"])
def test_mx_recipes_are_refused_on_h100_in_one_line(precision: str) -> None:
    with pytest.raises(UnsupportedError) as err:
        _run(precision, cluster="dgx-h100")
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith(f"precision {precision} needs MX block-scaled tensor cores") and "h100" in msg


def test_fp8_cs_costs_fp8_plus_its_amax_passes() -> None:
    """Current scaling runs the same casts and GEMMs as delayed scaling plus one amax kernel before each cast,
    forward and backward: the same GEMM time, one more kernel per quantized input, a slower step."""
    cfg, cl = load_model("llama-3-8b"), load_cluster("dgx-h100")
    hw = cl.hardware()
    cal = resolve_calibration(None)
    costs = {p: micro_batch_costs(cfg, ParallelPlan(seq_len=4096, precision=p), hw, cal.kernel, cal.compose)
             for p in ("fp8", "fp8-cs")}
    delayed, current = costs["fp8"].part("layers"), costs["fp8-cs"].part("layers")
    assert delayed is not None and current is not None
    assert current.fwd_fp8_s == delayed.fwd_fp8_s and current.bwd_fp8_s == delayed.bwd_fp8_s
    linears = 4  # qkv, o, gate_up, down: one amax per quantized input (forward) and per gradient (backward)
    assert current.fwd_kernels - delayed.fwd_kernels == linears
    assert current.bwd_kernels - delayed.bwd_kernels == linears
    assert current.fwd_s > delayed.fwd_s and current.bwd_s > delayed.bwd_s
    assert current.activation_bytes == delayed.activation_bytes
    plan = ParallelPlan(dp=8, zero=1, seq_len=4096, global_batch=64)
    fp8 = simulate_training(cfg, cl, plan.model_copy(update={"precision": "fp8"}))
    cs = simulate_training(cfg, cl, plan.model_copy(update={"precision": "fp8-cs"}))
    assert cs.step_time_s > fp8.step_time_s
    assert cs.memory.total_bytes == fp8.memory.total_bytes


def test_cached_low_precision_weight_copies_add_to_weight_memory() -> None:
    """Each recipe's weights: the bf16 weights plus its cached quantized copies (per parameter: FP8 1 byte,
    MXFP8 two orientations of 1 + 1/32, NVFP4 two of 0.5 + 1/16)."""
    weights = {p: _run(p, dp=1).memory.weights_bytes for p in ("bf16", "fp8", "mxfp8", "nvfp4", "fp8-block")}
    fp8_extra = weights["fp8"] - weights["bf16"]
    assert fp8_extra > 0
    assert (weights["mxfp8"] - weights["bf16"]) / fp8_extra == pytest.approx(2 * (1 + 1 / 32))
    assert (weights["nvfp4"] - weights["bf16"]) / fp8_extra == pytest.approx(2 * (0.5 + 1 / 16))
    assert (weights["fp8-block"] - weights["bf16"]) / fp8_extra == pytest.approx(2 * (1 + 4 / 128**2))


def test_saved_activations_shrink_with_the_gemm_format() -> None:
    acts = {p: _run(p).memory.activations_bytes for p in ("bf16", "fp8", "nvfp4")}
    assert acts["bf16"] > acts["fp8"] > acts["nvfp4"]


@pytest.mark.parametrize("precision", ["nvfp4", "fp8-cs"])
def test_search_prices_recipes_as_simulate_training(precision: str) -> None:
    space = SearchSpace(model="llama-3-8b", cluster="dgx-b200", gpus=(8,), seq_len=4096, global_batch=32,
                        pp=(1,), cp=(1,), vp=(1,), micro_batch=(1,), recompute=("none",), precision=precision)
    pricer = Pricer(space)
    plans, _, _ = enumerate_plans(space, pricer.cfg, pricer.cluster)
    scores = evaluate_plans(pricer, plans)
    assert len(plans) > 0
    for i in range(len(plans)):
        exact = simulate_training(pricer.cfg, pricer.cluster, plans.plan(i, space))
        assert exact.plan.precision == precision
        assert scores.memory_bytes[i] == pytest.approx(exact.memory.total_bytes, rel=1e-9)
        assert scores.step_time_s[i] == pytest.approx(exact.step_time_s, rel=1e-9)
    assert np.all(np.isfinite(scores.step_time_s))
