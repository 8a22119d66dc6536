"""Unit tests of the ResNet catalog entries and ``perfcast.workload.models.hf_resnet``.

Expected numbers are published (torchvision's parameter counts, He et al. 2016) or worked out by hand
below from the layer shapes; none was produced by perfcast.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfcast.catalog.models import load_model
from perfcast.compose.predict import StepRequest, predict
from perfcast.dtypes import DType
from perfcast.errors import CatalogError, UnsupportedError
from perfcast.workload.build import WorkloadSpec, build_workload
from perfcast.workload.types import Mode, OpKind, Phase, Workload

# Hand count of ResNet-50 (v1.5, 224x224) forward multiply-accumulates per image, conv and fc only
# (MACs = out_h * out_w * out_ch * in_ch * k * k):
#   stem 7x7/2 3->64, 112x112 out:                    112*112*64*3*49               =   118,013,952
#   a stage's first block (1x1 in->w, 3x3 w->w with the stride, 1x1 w->4w, 1x1 shortcut in->4w):
#     stage 1 (in 64,  w 64,  56x56):  12,845,056 + 115,605,504 + 51,380,224 +  51,380,224 = 231,211,008
#     stage 2 (in 256, w 128, 56->28): 102,760,448 + 115,605,504 + 51,380,224 + 102,760,448 = 372,506,624
#     stage 3 (in 512, w 256, 28->14): the same 372,506,624;  stage 4 (in 1024, w 512, 14->7): 372,506,624
#   every other block (1x1 4w->w, 3x3 w->w, 1x1 w->4w) at any stage: 51,380,224 + 115,605,504 + 51,380,224
#                                                                    = 218,365,952, and there are 2+3+5+2 = 12
#   fc 2048->1000:                                                                   2,048,000
#   total = 118,013,952 + 231,211,008 + 3 * 372,506,624 + 12 * 218,365,952 + 2,048,000 = 4,089,184,256
# i.e. 4.089 GMACs = 8.178 GFLOPs (the 4.1 GMACs usually quoted; torchvision's docs list 4.09 "GFLOPS").
RESNET50_FWD_MACS = 4.089e9
FLOP_TOLERANCE = 0.02

# torchvision.models.resnet{18,34,50,101,152}: parameter counts listed in the torchvision model docs
# (weights pages, "num_params"); BatchNorm running statistics are buffers, not parameters.
TORCHVISION_PARAMS = {
    "resnet-18": 11_689_512,
    "resnet-34": 21_797_672,
    "resnet-50": 25_557_032,
    "resnet-101": 44_549_160,
    "resnet-152": 60_192_808,
}
# torchvision docs, "GFLOPS" column (which counts multiply-accumulates): 1.81, 3.66, 4.09, 7.80, 11.51
TORCHVISION_GMACS = {"resnet-18": 1.81, "resnet-34": 3.66, "resnet-50": 4.09, "resnet-101": 7.80, "resnet-152": 11.51}
PARAM_TOLERANCE = 0.01


def _matmul_flops(w: Workload, phase: Phase) -> float:
    """FLOPs of convolutions and linear layers (bias adds included; 1,000 per image for the classifier)."""
    return sum(o.flops * o.count for o in w.ops if o.kind in (OpKind.CONV, OpKind.GEMM) and o.phase is phase)


@pytest.mark.parametrize("name", ["resnet-50", "resnet50", "resnet_50", "microsoft/resnet-50", "ResNet-50"])
def test_resnet50_names_resolve(name: str) -> None:
    cfg = load_model(name)
    assert cfg.id == "resnet-50"
    assert (cfg.model_type, cfg.kind, cfg.norm, cfg.num_layers, cfg.hidden_size, cfg.vocab_size) == (
        "resnet", "cnn", "batchnorm", 16, 2048, 1000)
    assert cfg.resnet is not None
    assert cfg.resnet.depths == (3, 4, 6, 3) and cfg.resnet.hidden_sizes == (256, 512, 1024, 2048)
    assert cfg.resnet.image_size_px == 224


@pytest.mark.parametrize("model", sorted(TORCHVISION_PARAMS))
def test_catalog_params_match_torchvision(model: str) -> None:
    assert load_model(model).num_params() == pytest.approx(TORCHVISION_PARAMS[model], rel=PARAM_TOLERANCE)


@pytest.mark.parametrize("model", sorted(TORCHVISION_GMACS))
def test_forward_macs_match_torchvision(model: str) -> None:
    w = build_workload(model, WorkloadSpec(Mode.INFERENCE, 1, 224))
    assert _matmul_flops(w, Phase.FORWARD) / 2 / 1e9 == pytest.approx(TORCHVISION_GMACS[model], rel=FLOP_TOLERANCE)


def test_resnet50_forward_flops_per_image_match_the_hand_count() -> None:
    for batch in (1, 8):
        w = build_workload("resnet-50", WorkloadSpec(Mode.INFERENCE, batch, 224))
        per_image = _matmul_flops(w, Phase.FORWARD) / batch
        assert per_image == pytest.approx(2 * RESNET50_FWD_MACS, rel=FLOP_TOLERANCE)


def test_resnet50_training_builds_forward_backward_and_optimizer() -> None:
    batch = 32
    w = build_workload("resnet-50", WorkloadSpec(Mode.TRAINING, batch, 224))
    fwd, bwd, opt = (w.phase(p) for p in (Phase.FORWARD, Phase.BACKWARD, Phase.OPTIMIZER))
    assert fwd and bwd and opt
    # trainable parameters: every conv weight, BatchNorm weight and bias, the classifier (torchvision 25,557,032)
    params = sum(o.params * o.count for o in fwd)
    assert params == pytest.approx(25.5e6, rel=PARAM_TOLERANCE)
    assert params == load_model("resnet-50").num_params()
    assert opt[0].dims == (1, params)
    # each conv has a data and a weight gradient of the forward's FLOPs; the classifier dX and dW
    bias_flops = batch * 1000
    assert _matmul_flops(w, Phase.BACKWARD) == pytest.approx(2 * (_matmul_flops(w, Phase.FORWARD) - bias_flops),
                                                            rel=1e-12)
    # the loss is a cross-entropy over one row of 1,000 logits per image
    loss = [o for o in fwd if o.group == "loss"]
    assert [o.op for o in loss] == ["softmax", "cross_entropy"] and loss[0].dims == (batch, 1000)
    # every BatchNorm, pool and activation has its backward kernel
    for op, grad in (("batchnorm", "batchnorm_backward"), ("maxpool", "maxpool_backward"),
                     ("avgpool", "avgpool_backward"), ("relu", "relu_backward")):
        assert sum(o.count for o in fwd if o.op == op) == sum(o.count for o in bwd if o.op == grad) > 0
    assert w.seq_len == 224


def test_launch_order_and_short_op_list() -> None:
    w = build_workload("resnet-50", WorkloadSpec(Mode.INFERENCE, 2, 224))
    ops = [o.op for o in w.ops]
    assert ops[:4] == ["conv2d", "batchnorm", "relu", "maxpool"]
    assert ops[-2:] == ["avgpool", "linear"]
    # a bottleneck with a projection: three conv+bn(+relu), the shortcut conv+bn, add, relu
    first = [o.op for o in w.ops if o.name.startswith("stage1.block0.")]
    assert first == ["conv2d", "batchnorm", "relu", "conv2d", "batchnorm", "relu", "conv2d", "batchnorm",
                     "conv2d", "batchnorm", "add", "relu"]
    # v1.5: the stride sits on the 3x3 convolution of each later stage's first block
    stride = {o.name: o.dims[5] for o in w.ops if o.kind is OpKind.CONV}
    assert stride["stage2.block0.conv1"] == 1 and stride["stage2.block0.conv2"] == 2
    assert stride["stage2.block0.shortcut"] == 2
    # repeated blocks are emitted once with a count: 16 blocks, 53 convolutions, under 100 ops
    convs = [o for o in w.ops if o.kind is OpKind.CONV]
    assert sum(o.count for o in convs) == 1 + 16 * 3 + 4
    assert len(w.ops) < 100


def test_batchnorm_reads_its_input_twice_in_training_once_in_inference() -> None:
    b, ch, hw = 4, 64, 112
    numel = b * ch * hw * hw
    for mode, reads in ((Mode.TRAINING, 2), (Mode.INFERENCE, 1)):
        w = build_workload("resnet-50", WorkloadSpec(mode, b, 224, dtype=DType.BF16))
        bn = next(o for o in w.ops if o.op == "batchnorm")
        assert bn.dims == (ch, b * hw * hw)
        assert bn.bytes_read == (reads * numel + 2 * ch) * 2
        assert bn.bytes_written == numel * 2
        assert bn.params == 2 * ch


def test_seq_len_does_not_change_the_image() -> None:
    a = build_workload("resnet-50", WorkloadSpec(Mode.TRAINING, 4, 512))
    b = build_workload("resnet-50", WorkloadSpec(Mode.TRAINING, 4, 64))
    assert a.ops == b.ops and a.seq_len == b.seq_len == 224


def test_image_size_comes_from_the_config(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "resnet", "architectures": ["ResNetForImageClassification"],
                                "num_labels": 1000, "image_size": 448}))
    cfg = load_model(path)  # ResNetConfig defaults are ResNet-50's
    w = build_workload(cfg, WorkloadSpec(Mode.INFERENCE, 1, 224))
    assert w.seq_len == 448
    assert _matmul_flops(w, Phase.FORWARD) == pytest.approx(4 * 2 * RESNET50_FWD_MACS, rel=FLOP_TOLERANCE)


@pytest.mark.parametrize("bad", [
    {"depths": [3, 4], "hidden_sizes": [256, 512, 1024]},
    {"layer_type": "preactivation"},
    {"hidden_sizes": [256, 512, 1024, 2050]},
    {"image_size": 0},
    {"depths": 7},
])
def test_malformed_resnet_configs_are_refused(tmp_path: Path, bad: dict[str, object]) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "resnet", **bad}))
    with pytest.raises(CatalogError):
        load_model(path)


def test_decode_is_refused_for_a_cnn() -> None:
    with pytest.raises(UnsupportedError):
        build_workload("resnet-50", WorkloadSpec(Mode.DECODE, 1, 224))


@pytest.mark.parametrize("fused", [False, True])
def test_resnet50_training_step_is_predicted(fused: bool) -> None:
    st = predict(StepRequest(model="resnet-50", hardware="a100-sxm-80gb", mode=Mode.TRAINING, batch_size=64,
                             dtype="bf16", fused=fused))
    assert st.time_s > 0 and st.device_busy_s > 0
    # 3 x the forward's 8.18 GFLOPs per image (forward, data and weight gradients), plus the small vector ops
    assert st.flops / 64 == pytest.approx(3 * 2 * RESNET50_FWD_MACS, rel=0.05)
