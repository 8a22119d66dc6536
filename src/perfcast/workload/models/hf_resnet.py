"""ResNet (``ResNetForImageClassification`` / torchvision ``resnet*``) as eager PyTorch runs it.

Every kernel of the forward pass, in launch order (see transformers
``models/resnet/modeling_resnet.py`` and torchvision ``models/resnet.py``,
which launch the same kernels): the stem (7x7 stride-2 convolution,
BatchNorm, ReLU, 3x3 stride-2 max pool), then per residual block its
convolutions, each followed by a BatchNorm and (but the last) a ReLU, the
projection shortcut (1x1 convolution + BatchNorm) on a block that changes
width or size, the residual add and a ReLU; finally the global average pool
and the linear classifier. Bottlenecks stride on the 3x3 convolution
(ResNet v1.5, what both libraries build) unless ``downsample_in_bottleneck``.
The architecture is :class:`perfcast.catalog.models.ResNetConfig`;
He et al. 2016 (arXiv:1512.03385) Table 1 has the shapes.

BatchNorm in training normalizes with the batch's statistics: a per-channel
reduction over ``N*H*W`` and then the normalization, priced as one
memory-bound pass that reads the input twice and writes the output once
(``dims`` = channels x ``N*H*W``). In inference the running statistics fold
into a per-channel scale and shift: one read, one write. Under a compiler
the BatchNorm fuses with the ReLU (and the residual add) that follow it.

Image size: the input is a square ``image_size_px`` image (224 unless a
config.json sets ``image_size``). A workload's ``seq_len`` does not set it:
the CLI's sequence-length default (512 tokens) would silently mean 512 px,
and the catalog's other vision towers (LLaVA's CLIP, Llama-4's ViT) also take
their image size from the model config. The builder returns the image side,
which the workload then reports as its ``seq_len``.
"""

from __future__ import annotations

from perfcast.catalog.models import ModelConfig, ResNetConfig
from perfcast.errors import UnsupportedError
from perfcast.workload.graph import Graph
from perfcast.workload.models.common import activation

__all__ = ["build_resnet"]


def build_resnet(g: Graph, cfg: ModelConfig, batch: int) -> int:
    """Emit a ResNet forward over ``batch`` images; returns the image side in pixels."""
    net = cfg.resnet
    if net is None:
        raise UnsupportedError(f"{cfg.id} is not a ResNet (model_type {cfg.model_type!r})")
    hw = net.image_size_px
    stem = net.embedding_size
    with g.scope("embedder", group="embedding"):
        hw = _conv_bn(g, "conv", batch, net.num_channels, stem, 7, hw, stride=2, act=cfg.activation)
        g.pool("maxpool", "maxpool", batch, stem, hw, 3, 2, padding=1)
        hw = _out_hw(hw, 3, 2, 1)
    in_ch = stem
    for i, (out_ch, depth, stride) in enumerate(zip(net.hidden_sizes, net.depths, net.stage_strides(), strict=True)):
        inner = net.inner_sizes[i]
        with g.scope(f"stage{i + 1}", group=f"stage{i + 1}"):
            with g.scope("block0"):
                out_hw = _block(g, net, cfg.activation, batch, in_ch, inner, out_ch, hw, stride)
            if depth > 1:
                # the other blocks of a stage are identical: emitted once, run depth - 1 times
                with g.scope(f"block1-{depth - 1}" if depth > 2 else "block1", count=depth - 1):
                    _block(g, net, cfg.activation, batch, out_ch, inner, out_ch, out_hw, 1)
        hw, in_ch = out_hw, out_ch
    with g.scope("head", group="classifier"):
        # AdaptiveAvgPool2d((1, 1)): one window over the whole last feature map; flatten is a view
        g.pool("avgpool", "avgpool", batch, in_ch, hw, hw, 1)
        g.linear("classifier", batch, in_ch, net.num_labels, bias=True, tp_split="none")
    return net.image_size_px


def _out_hw(in_hw: int, kernel: int, stride: int, padding: int) -> int:
    return (in_hw + 2 * padding - kernel) // stride + 1


def _conv_bn(g: Graph, name: str, batch: int, in_ch: int, out_ch: int, kernel: int, in_hw: int, *,
             stride: int = 1, act: str | None = None, chain: str | None = None) -> int:
    """HF ``ResNetConvLayer``: bias-free convolution (padding ``kernel // 2``), BatchNorm, optional activation.

    With ``act`` the BatchNorm and the activation form a chain; without, the BatchNorm joins ``chain`` (the
    residual add and activation follow). Returns the output side.
    """
    pad = kernel // 2
    g.conv2d(name, batch, in_ch, out_ch, kernel, in_hw, stride=stride, padding=pad)
    hw = _out_hw(in_hw, kernel, stride, pad)
    link = chain or g.new_chain(f"{name}.bn_act")
    _batchnorm(g, f"{name}.bn", batch, out_ch, hw, chain=link)
    if act is not None:
        _activation(g, f"{name}.act", act, batch * out_ch * hw * hw, chain=link)
    return hw


def _batchnorm(g: Graph, name: str, batch: int, channels: int, hw: int, *, chain: str) -> None:
    """``nn.BatchNorm2d``: batch statistics + normalize in training (2 reads, 1 write), scale+shift in eval.

    Fused, it reads its input (and its weight and bias); the op that ends its chain writes the result.
    """
    e = g.esize
    numel = batch * channels * hw * hw
    reads = 2 if g.training else 1
    g.reduction(name, "batchnorm", channels, batch * hw * hw, inputs=reads, params=2 * channels, chain=chain,
                fused_bytes=reads * numel * e + 2 * channels * e)


def _activation(g: Graph, name: str, kind: str, numel: int, *, chain: str) -> None:
    """The block's activation (ReLU) inside a fused chain: it only writes its output there."""
    before = len(g.ops)
    activation(g, name, kind, numel)
    e = g.esize
    # join the preceding BatchNorm's chain: inside it the activation reads nothing from DRAM
    for j in range(before, len(g.ops)):
        last = j == len(g.ops) - 1
        g.ops[j] = g.ops[j].with_(chain=chain, fused_bytes=numel * e if last else 0.0)


def _block(g: Graph, net: ResNetConfig, act: str, batch: int, in_ch: int, inner: int, out_ch: int, hw: int,
           stride: int) -> int:
    """One residual block (``ResNetBottleNeckLayer`` or ``ResNetBasicLayer``); returns the output side."""
    e = g.esize
    if net.layer_type == "bottleneck":
        s1, s3 = (stride, 1) if net.downsample_in_bottleneck else (1, stride)
        h1 = _conv_bn(g, "conv1", batch, in_ch, inner, 1, hw, stride=s1, act=act)
        h2 = _conv_bn(g, "conv2", batch, inner, inner, 3, h1, stride=s3, act=act)
        chain = g.new_chain("residual")
        out_hw = _conv_bn(g, "conv3", batch, inner, out_ch, 1, h2, chain=chain)
    else:
        h1 = _conv_bn(g, "conv1", batch, in_ch, out_ch, 3, hw, stride=stride, act=act)
        chain = g.new_chain("residual")
        out_hw = _conv_bn(g, "conv2", batch, out_ch, out_ch, 3, h1, chain=chain)
    numel = batch * out_ch * out_hw * out_hw
    if in_ch != out_ch or stride != 1:
        # projection shortcut, launched after the main branch. Fused, its BatchNorm joins the add and the
        # activation, and the main branch's BatchNorm (cut off from them by the shortcut's convolution)
        # runs alone and writes its output, which the add then reads: in training 7 passes over the block
        # output where Inductor needs 5 (it also folds the main branch's normalization into the add)
        _conv_bn(g, "shortcut", batch, in_ch, out_ch, 1, hw, stride=stride, chain=chain)
    # ``hidden_state += residual`` then the activation. Fused, the add reads one tensor made outside the
    # chain (the identity residual, or the main branch's normalized output) and the activation writes
    g.pointwise("add", "add", numel, inputs=2, chain=chain, fused_bytes=numel * e)
    _activation(g, "act", act, numel, chain=chain)
    return out_hw
