"""``predict --parallelism dpN | tpN | ppN``: one node's step priced by system's model, the collectives and
pipeline schedules ``train`` uses (:mod:`perfcast.system.parallel`, :mod:`perfcast.system.predict`)."""

from __future__ import annotations

import pytest

from perfcast import StepRequest, predict
from perfcast.catalog.hardware import load_hardware
from perfcast.catalog.models import load_model
from perfcast.coefficients.collectives import load_collective_coefficients
from perfcast.coefficients.training import load_training_coefficients
from perfcast.compose.predict import predict as predict_one_gpu
from perfcast.dtypes import DType
from perfcast.errors import ConfigError
from perfcast.system.cluster import cluster_for_gpu
from perfcast.system.plan import ParallelPlan
from perfcast.system.schedule import simulate_pipeline
from perfcast.system.step import exposed_reduction_s
from perfcast.system.training import LayerComm, simulate_training
from perfcast.workload.build import WorkloadSpec, build_workload
from perfcast.workload.types import Mode, Phase


def test_tp4_predict_and_train_agree_on_the_tp_all_reduces() -> None:
    """The same micro-batch (gpt2-medium, 4 x 1024 tokens, bf16) over tp=4 on an A100 node: predict's exposed
    all-reduces are train's, forward and backward, to the last bit (one collective model)."""
    st = predict(StepRequest(model="gpt2-medium", hardware="a100-sxm-80gb", mode=Mode.TRAINING, batch_size=4,
                             seq_len=1024, dtype="bf16", optimizer="none", parallelism="tp4"))
    tr = simulate_training("gpt2-medium", "dgx-a100", ParallelPlan(tp=4, micro_batch=4, seq_len=1024))
    assert st.comm_s > 0
    assert st.comm_s == tr.comm_total_s["tp_comm_s"] == tr.breakdown_s["tp_comm_s"]
    # inference runs the forward's half of them
    fwd = predict(StepRequest(model="gpt2-medium", hardware="a100-sxm-80gb", batch_size=4, seq_len=1024,
                              dtype="bf16", parallelism="tp4"))
    assert fwd.comm_s == pytest.approx(st.comm_s / 2, rel=1e-12)


def test_tp4_all_reduce_is_nccls_choice_on_the_node() -> None:
    """bert-large on a V100 node: 2 all-reduces of the hidden states per layer and one after the vocab-parallel
    embedding, each priced by the collective NCCL would run on the GPU's own node (no link-bandwidth formula of
    predict's own)."""
    st = predict(StepRequest(model="bert-large", hardware="v100", batch_size=16, seq_len=512,
                             parallelism="tp4"))
    hw = load_hardware("v100")
    comm = LayerComm(cluster_for_gpu(hw).with_nodes(1), load_collective_coefficients())
    one = comm.time("all_reduce", 16 * 512 * 1024 * 4.0, 4, 1)  # tokens x hidden x fp32
    assert st.comm_s == pytest.approx((2 * 24 + 1) * one, rel=1e-12)
    assert st.low_s < st.time_s < st.high_s


def test_dp4_training_exposes_what_the_backward_cannot_hide() -> None:
    """dp4: each GPU runs a quarter of the batch; the gradient all-reduce is train's ZeRO-0 reduction, bucketed
    per layer and overlapped with the backward."""
    req = dict(model="gpt2-large", hardware="a100-pcie-40gb", mode=Mode.TRAINING, batch_size=8, seq_len=512)
    dp4 = predict(StepRequest(**req, parallelism="dp4"))
    per_gpu = predict(StepRequest(**{**req, "batch_size": 2}))
    cfg = load_model("gpt2-large")
    w = build_workload(cfg, WorkloadSpec(Mode.TRAINING, 2, 512, dtype=DType(per_gpu.dtype)))
    grads = sum(o.params * o.count * o.dtype.bytes for o in w.ops if o.phase is Phase.FORWARD)
    comm = LayerComm(cluster_for_gpu(load_hardware("a100-pcie-40gb")).with_nodes(1), load_collective_coefficients())
    total = comm.time("all_reduce", grads, 4, 1)
    want = float(exposed_reduction_s(total, per_gpu.by_phase_s["bwd"], cfg.num_layers,
                                     load_training_coefficients().overlap_interference))
    assert dp4.comm_s == pytest.approx(want, rel=1e-12) and 0 < want < total
    assert dp4.time_s == pytest.approx(per_gpu.time_s + dp4.comm_s, rel=1e-12)
    assert dp4.low_s < dp4.time_s < dp4.high_s


def test_dp4_inference_is_faster_than_one_gpu() -> None:
    one = predict(StepRequest(model="gpt2-large", hardware="a100-sxm-80gb", batch_size=8, seq_len=1024))
    dp4 = predict(StepRequest(model="gpt2-large", hardware="a100-sxm-80gb", batch_size=8, seq_len=1024,
                              parallelism="dp4"))
    assert dp4.parallelism == "dp4" and dp4.batch_size == 8
    assert dp4.time_s < one.time_s
    assert dp4.comm_s == 0.0  # inference: no gradients to all-reduce


def test_tp4_shards_the_work() -> None:
    req = dict(model="gpt2-large", hardware="a100-sxm-80gb", mode=Mode.INFERENCE, batch_size=8, seq_len=1024)
    one = predict(StepRequest(**req))
    tp4 = predict(StepRequest(**req, parallelism="tp4"))
    assert tp4.parallelism == "tp4"
    assert tp4.device_busy_s < one.device_busy_s
    assert tp4.low_s < tp4.time_s < tp4.high_s


def test_tp_not_dividing_heads_is_config_error() -> None:
    """GPT-2 XL has 25 heads: tp4 cannot split them; the message lists the degrees that can."""
    message = r"tp=4 must divide num_attention_heads=25 \(gpt2-xl\); use tp in \{1, 5, 25\}"
    with pytest.raises(ConfigError, match=message):
        predict(StepRequest(model="gpt2-xl", hardware="a100-sxm-80gb", batch_size=1, seq_len=128, parallelism="tp4"))


def test_pp4_runs_microbatches_through_the_simulated_schedule() -> None:
    req = dict(model="gpt2-large", hardware="a100-pcie-40gb", mode=Mode.TRAINING, batch_size=8, seq_len=512)
    pp4 = predict(StepRequest(**req, parallelism="pp4"))
    assert pp4.parallelism == "pp4" and pp4.batch_size == 8
    assert pp4.comm_s > 0
    assert pp4.low_s < pp4.time_s < pp4.high_s
    one = predict(StepRequest(**req))
    # 1F1B over 4 stages of a quarter of the layers, m = 4 micro-batches of 2: less than the whole batch on one
    # GPU, more than a quarter of it
    assert one.time_s / 4 < pp4.time_s < one.time_s
    # more micro-batches fill the pipeline better: a smaller bubble per sequence
    pp4_m8 = predict(StepRequest(**req, parallelism="pp4", microbatches=8))
    assert pp4_m8.time_s < pp4.time_s


def test_pp_inference_is_a_forward_only_pipeline() -> None:
    """Uniform stages without sends: m forwards through p stages take (m + p - 1) stage times."""
    r = simulate_pipeline([1.0] * 4, [0.0] * 4, 4, forward_only=True)
    assert r.time_s == pytest.approx(7.0)
    closed = simulate_pipeline([1.0] * 4, [0.0] * 4, 2048, forward_only=True)  # the steady-state closed form
    assert closed.time_s == pytest.approx(2048 + 3)
    pp2 = predict(StepRequest(model="gpt2-large", hardware="a100-sxm-80gb", batch_size=8, seq_len=512,
                              parallelism="pp2"))
    one = predict(StepRequest(model="gpt2-large", hardware="a100-sxm-80gb", batch_size=8, seq_len=512))
    assert one.time_s / 2 < pp2.time_s < one.time_s * 1.2


def test_pp_needs_enough_layers_and_divisible_microbatches() -> None:
    with pytest.raises(ConfigError, match="pp2 needs at least 2 layers"):
        predict(StepRequest(model="opt-toy-1layer", hardware="a100-pcie-40gb", batch_size=2, seq_len=32,
                            parallelism="pp2"))
    with pytest.raises(ConfigError, match="divisible by 4"):
        predict(StepRequest(model="gpt2", hardware="a100-pcie-40gb", batch_size=6, seq_len=32, parallelism="pp4"))


def test_dp_needs_a_divisible_batch() -> None:
    with pytest.raises(ConfigError, match=r"dp4 needs a batch divisible by 4 \(got 6\)"):
        predict(StepRequest(model="gpt2", hardware="a100-pcie-40gb", batch_size=6, seq_len=32, parallelism="dp4"))


def test_more_gpus_than_the_node_is_config_error() -> None:
    with pytest.raises(ConfigError, match="more than the 8 GPUs of one dgx-h100 node"):
        predict(StepRequest(model="gpt2", hardware="h100", batch_size=16, seq_len=32, parallelism="dp16"))


def test_one_gpu_predict_refuses_a_parallel_request() -> None:
    """compose prices one GPU; a request over several is system's (perfcast.predict)."""
    with pytest.raises(ConfigError, match="spans 4 GPUs"):
        predict_one_gpu(StepRequest(model="gpt2", hardware="a100-pcie-40gb", parallelism="tp4"))
