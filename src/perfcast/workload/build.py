"""Entry point of layer 0: (model, mode, batch, sequence, dtype) -> Workload."""

from __future__ import annotations

from dataclasses import dataclass

from perfcast.catalog.models import ModelConfig, check_context, load_model
from perfcast.digest import content_digest
from perfcast.dtypes import DType, parse_dtype
from perfcast.errors import ConfigError, UnsupportedError
from perfcast.workload.backward import backward_ops, optimizer_ops
from perfcast.workload.graph import Graph
from perfcast.workload.models.common import lm_loss
from perfcast.workload.models.decoder import DecoderShape, build_decoder
from perfcast.workload.models.deltanet import build_delta_net_decoder
from perfcast.workload.models.hf_bert import build_bert
from perfcast.workload.models.hf_gpt2 import build_gpt2
from perfcast.workload.models.hf_opt import build_opt
from perfcast.workload.models.hf_resnet import build_resnet
from perfcast.workload.models.hf_switch import build_switch
from perfcast.workload.models.ssm import build_ssm_decoder
from perfcast.workload.models.unet import build_diffusion
from perfcast.workload.quantization import Quantization, resolve_quantization
from perfcast.workload.transforms import quantize_weights
from perfcast.workload.types import Mode, Phase, Workload

__all__ = ["WorkloadSpec", "build_workload"]

_HF_BUILDERS = {"gpt2": build_gpt2, "opt": build_opt}
_ATTENTION = ("eager", "sdpa", "flash")
_STYLES = ("hf", "engine")
_OPTIMIZERS = ("adam", "sgd", "none")
_MAX_BATCH = 2**31  # sequences per step; larger counts would overflow the FLOP arithmetic (floats)


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    """What to build.

    ``seq_len`` is tokens per sequence; for ``decode`` it is the context length
    (cached tokens including the one being generated). ``style`` is ``hf``
    (eager PyTorch as Hugging Face writes the model) or ``engine`` (fused
    serving/training kernels); ``attention`` is ``eager`` (explicit scores) or
    ``sdpa``/``flash`` (one fused kernel). Defaults: ``hf``+``eager`` for
    inference/training, ``engine``+``flash`` for prefill/decode.

    ``quantization`` applies to the inference modes (inference, prefill, decode):
    ``auto`` (default) is the checkpoint's own (its ``quantization_config``; none for
    an unquantized checkpoint), or a scheme name or a resolved
    :class:`~perfcast.workload.quantization.Quantization` (which knows whether the GPU
    has FP8 math; a name alone assumes it does). A training step ignores it and runs
    in ``dtype``, the training precision (the workload's ``quantization`` label says so).
    ``check_context`` refuses a ``seq_len`` beyond the model's context
    (:func:`~perfcast.catalog.models.check_context`); serving's iteration tables turn
    it off, as they price a batch of tokens from many sequences as one sequence's
    token-parallel work and check each request's length themselves.
    """

    mode: Mode
    batch_size: int
    seq_len: int
    dtype: DType = DType.FP32
    style: str | None = None
    attention: str | None = None
    optimizer: str = "adam"
    loss: bool = True
    accumulate_grads: bool = False
    quantization: str | Quantization = "auto"
    check_context: bool = True
    mtp_layers: int = 0  # training: multi-token-prediction modules after the LM head (decoder-only attention models)

    @property
    def resolved_style(self) -> str:
        """The launch style after defaults."""
        if self.style:
            return self.style
        return "engine" if self.mode in (Mode.PREFILL, Mode.DECODE) else "hf"

    @property
    def resolved_attention(self) -> str:
        """The attention implementation after defaults."""
        if self.attention:
            return self.attention
        return "flash" if self.resolved_style == "engine" else "eager"


def _check(cfg: ModelConfig, spec: WorkloadSpec) -> None:
    if spec.batch_size < 1:
        raise ConfigError(f"batch size must be a positive integer (got {spec.batch_size})")
    if spec.batch_size > _MAX_BATCH:
        raise ConfigError(f"batch size {spec.batch_size} is beyond what perfcast models (at most {_MAX_BATCH})")
    if spec.seq_len < 1:
        raise ConfigError(f"sequence length must be a positive integer (got {spec.seq_len})")
    if spec.check_context:
        check_context(cfg, spec.seq_len)
    if spec.resolved_style not in _STYLES:
        raise ConfigError(f"unknown style {spec.resolved_style!r}; use one of {', '.join(_STYLES)}")
    if spec.resolved_attention not in _ATTENTION:
        raise ConfigError(f"unknown attention {spec.resolved_attention!r}; use one of {', '.join(_ATTENTION)}")
    if spec.optimizer not in _OPTIMIZERS:
        raise ConfigError(f"unknown optimizer {spec.optimizer!r}; use one of {', '.join(_OPTIMIZERS)}")
    if spec.mode is Mode.TRAINING and cfg.linear_attention is not None:
        raise UnsupportedError(f"{cfg.id}: training a model with linear-attention (Gated DeltaNet) layers is not "
                               "modelled (the gated delta rule's backward has no op yet); use an inference, prefill "
                               "or decode mode")
    if spec.mtp_layers < 0:
        raise ConfigError(f"mtp_layers must be 0 or more (got {spec.mtp_layers})")
    if spec.mtp_layers and (spec.mode is not Mode.TRAINING or cfg.kind != "decoder" or cfg.ssm is not None
                            or cfg.linear_attention is not None
                            or (spec.resolved_style == "hf" and cfg.model_type in _HF_BUILDERS)):
        raise UnsupportedError(f"{cfg.id}: multi-token-prediction layers (mtp_layers={spec.mtp_layers}) are modelled "
                               "in training of attention decoders built by the generic decoder builder only")
    if spec.mode in (Mode.PREFILL, Mode.DECODE) and cfg.kind != "decoder":
        raise UnsupportedError(
            f"{cfg.id} is {'an' if cfg.kind[0] in 'aeiou' else 'a'} {cfg.kind} model; prefill/decode modes need a "
            "decoder-only model "
            "(use --mode inference or training)"
        )


_CACHE: dict[tuple[str, WorkloadSpec], Workload] = {}  # (the model's content digest, spec) -> its workload


def build_workload(model: str | ModelConfig, spec: WorkloadSpec) -> Workload:
    """Build the op list of one step of ``model`` as described by ``spec`` (memoized per model content and spec:
    equal configs share one workload object)."""
    cfg = load_model(model)
    spec = WorkloadSpec(**{**{f: getattr(spec, f) for f in spec.__slots__}, "dtype": parse_dtype(spec.dtype)})
    key = (content_digest(cfg), spec)
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    workload = _build(cfg, spec)
    if len(_CACHE) > 4096:
        _CACHE.clear()
    _CACHE[key] = workload
    return workload


def _build(cfg: ModelConfig, spec: WorkloadSpec) -> Workload:
    _check(cfg, spec)
    training = spec.mode is Mode.TRAINING
    g = Graph(spec.dtype, training=training)
    b, s = spec.batch_size, spec.seq_len
    style, attention = spec.resolved_style, spec.resolved_attention
    logits_tokens = b * s
    if spec.mode in (Mode.INFERENCE, Mode.TRAINING) and style == "hf" and cfg.model_type in _HF_BUILDERS:
        _HF_BUILDERS[cfg.model_type](g, cfg, b, s, attention=attention)
    elif cfg.model_type == "bert" or cfg.kind == "encoder":
        if cfg.model_type != "bert":
            raise UnsupportedError(f"{cfg.id}: encoder family {cfg.model_type!r} has no builder; supported: bert")
        build_bert(g, cfg, b, s, attention=attention, pretraining_heads=training)
    elif cfg.kind == "encoder-decoder":
        if cfg.model_type not in ("switch_transformers", "t5"):
            raise UnsupportedError(
                f"{cfg.id}: encoder-decoder family {cfg.model_type!r} has no builder; supported: switch_transformers, "
                "t5"
            )
        build_switch(g, cfg, b, s, attention=attention)
    elif cfg.kind == "cnn":
        s, logits_tokens = build_resnet(g, cfg, b), b  # seq_len reports the image side; one logit row per image
    elif cfg.kind == "diffusion":
        s, logits_tokens = build_diffusion(g, cfg, b), b  # seq_len reports the image side
    else:
        if spec.mode is Mode.DECODE:
            shape = DecoderShape(batch=b, q_len=1, kv_len=s, logits_tokens=b)
        elif spec.mode is Mode.PREFILL:
            shape = DecoderShape(batch=b, q_len=s, kv_len=s, logits_tokens=b)
        else:
            shape = DecoderShape(batch=b, q_len=s, kv_len=s, logits_tokens=b * s)
        logits_tokens = shape.logits_tokens
        build = build_ssm_decoder if cfg.ssm is not None else build_decoder
        if cfg.linear_attention is not None:
            build = build_delta_net_decoder
        if spec.mtp_layers:  # _check admits it for attention decoders in training only
            build_decoder(g, cfg, shape, style=style, attention=attention, mtp_layers=spec.mtp_layers)
        else:
            build(g, cfg, shape, style=style, attention=attention,
                  kv_cache=spec.mode in (Mode.PREFILL, Mode.DECODE))
    forward = list(g.ops)
    if training:
        label = "none"
        if cfg.quantization is not None:  # a quantized checkpoint trains in the training precision
            label = f"none (training runs in {spec.dtype.value}, not the checkpoint's {cfg.quantization.label})"
    else:
        quant = resolve_quantization(cfg, spec.quantization)
        forward = quantize_weights(forward, quant)
        label = quant.label
    ops = list(forward)
    if training:
        if spec.loss:
            loss = Graph(spec.dtype, training=True)
            lm_loss(loss, logits_tokens, cfg.vocab_size)
            forward += loss.ops
            ops += loss.ops
        ops += backward_ops(forward, accumulate_grads=spec.accumulate_grads)
        ops += optimizer_ops(forward, optimizer=spec.optimizer)
    return Workload(
        model_id=cfg.id, mode=spec.mode, batch_size=b, seq_len=s, dtype=spec.dtype, ops=tuple(ops),
        kv_len=s if spec.mode is Mode.DECODE else 0, quantization=label,
    )


def forward_phase_ops(workload: Workload) -> tuple:
    """Forward ops of a workload (helper for reports)."""
    return workload.phase(Phase.FORWARD)
