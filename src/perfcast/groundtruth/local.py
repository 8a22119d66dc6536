"""This machine's CPU as ground truth: measure models with PyTorch here, predict them on ``local-cpu``.

``perfcast validate --local`` builds BERT-base, GPT-2 and ResNet-50 from
transformers configs with random weights (nothing is downloaded), measures
their inference latency here (eval, ``no_grad``, on the thread count ``local-cpu``
was calibrated with: four passes over all cases, each with one warm-up forward per case and repeats for a
quarter of ``min_time_s``; a case's latency is its fastest forward: a mean over its ops in the machine's fastest
phase, as the calibration's figure for each benchmark is the mean call of its fastest pass) and predicts the same
forwards from the catalog models on ``local-cpu``. The CPU model was fitted on
microbenchmarks only (``perfcast calibrate``); these measurements never feed
back into it.

The models run as transformers 4.5x builds them: BERT as
``BertForSequenceClassification`` and GPT-2 as ``GPT2LMHeadModel`` (logits over
every position), both with SDPA attention; ResNet-50 as
``ResNetForImageClassification`` on 224x224 images.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from perfcast.calibrate.bench import clock_for, import_torch, interleaved_fastest_s
from perfcast.calibrate.machine import LOCAL_CPU_ID, default_path
from perfcast.catalog.hardware import Hardware, load_hardware
from perfcast.catalog.models import ModelConfig, load_model
from perfcast.compose.predict import StepRequest, predict
from perfcast.errors import ConfigError, PerfcastError, UnsupportedError
from perfcast.results.serialize import json_field
from perfcast.workload.types import Mode

__all__ = ["FULL_CASES", "ROUNDS", "SUITE_CASES", "LocalCase", "LocalResult", "LocalSummary", "LocalValidation",
           "load_local_cpu", "validate_local"]


@dataclass(frozen=True, slots=True)
class LocalCase:
    """One inference forward to measure: a catalog model at a batch size and a sequence length (tokens;
    ignored by ResNet, whose images are 224x224)."""

    model: str
    batch_size: int
    seq_len: int = 0

    @property
    def label(self) -> str:
        """``model b=.. s=..`` for tables."""
        return f"{self.model} b={self.batch_size}" + (f" s={self.seq_len}" if self.seq_len else "")


FULL_CASES: tuple[LocalCase, ...] = (
    LocalCase("bert-base", 1, 64), LocalCase("bert-base", 1, 128), LocalCase("bert-base", 4, 128),
    LocalCase("bert-base", 1, 384),
    LocalCase("gpt2", 1, 64), LocalCase("gpt2", 1, 256), LocalCase("gpt2", 1, 512),
    LocalCase("resnet-50", 1), LocalCase("resnet-50", 2), LocalCase("resnet-50", 4),
)
# the suite's R6 subset: small enough to run in a few seconds
SUITE_CASES: tuple[LocalCase, ...] = (LocalCase("bert-base", 1, 64), LocalCase("resnet-50", 1))
ROUNDS = 4  # passes over all cases; a case's latency is its fastest forward over all of them


@dataclass(frozen=True, slots=True)
class LocalResult:
    """Measured and predicted seconds of one case."""

    case: LocalCase = field(metadata=json_field(flatten=True))  # its model, batch size and length inline
    measured_s: float
    predicted_s: float

    JSON_EXTRA: ClassVar[tuple[str, ...]] = ("error_frac",)

    @property
    def error_frac(self) -> float:
        """Signed relative error of the prediction."""
        return self.predicted_s / self.measured_s - 1.0


@dataclass(frozen=True, slots=True)
class LocalValidation:
    """All cases, with the mean absolute percentage error per model and overall (fractions)."""

    hardware_id: str
    threads: int
    results: tuple[LocalResult, ...]

    def mape_frac(self, model: str | None = None) -> float:
        """Mean |relative error| over one model's cases (all cases when None)."""
        errs = [abs(r.error_frac) for r in self.results if model is None or r.case.model == model]
        return statistics.fmean(errs) if errs else float("nan")

    @property
    def models(self) -> list[str]:
        """Models in the order measured."""
        return list(dict.fromkeys(r.case.model for r in self.results))

    def json_view(self) -> LocalSummary:
        """What the validation reports (seconds and fractions)."""
        return LocalSummary(self.hardware_id, self.threads, self.results, {m: self.mape_frac(m) for m in self.models},
                            self.mape_frac())


@dataclass(frozen=True, slots=True)
class LocalSummary:
    """The validation on this CPU as reported: every case, the error per model and overall (fractions)."""

    hardware: str
    threads: int
    cases: tuple[LocalResult, ...]
    mape_frac_by_model: dict[str, float]
    mape_frac: float


def load_local_cpu(path: str | Path | None = None) -> Hardware:
    """The calibrated ``local-cpu`` entry (from ``path``, the catalog, or calibrate's default file)."""
    if path is not None:
        return load_hardware(str(path))
    try:
        hw = load_hardware(LOCAL_CPU_ID)
    except PerfcastError:
        fallback = default_path()
        if not fallback.is_file():
            raise ConfigError(f"{LOCAL_CPU_ID} is not calibrated on this machine; run `perfcast calibrate` "
                              "first (about a minute)") from None
        hw = load_hardware(str(fallback))
    if hw.cpu is None:
        raise UnsupportedError(f"{hw.id} has no fitted CPU model; run `perfcast calibrate --force`")
    return hw


def _torch_model(cfg: ModelConfig) -> tuple[Any, Callable[[int, int], dict[str, Any]]]:
    """A randomly initialized transformers model with ``cfg``'s shape, and a maker of its inputs."""
    torch = import_torch()
    try:
        import transformers as tf
        from transformers.modeling_utils import no_init_weights
    except ImportError:
        raise ConfigError("validate --local needs transformers to build the models; pip install transformers") \
            from None
    g = torch.Generator().manual_seed(0)
    conf: Any
    if cfg.model_type == "bert":
        conf = tf.BertConfig(vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size,
                             num_hidden_layers=cfg.num_layers, num_attention_heads=cfg.num_heads,
                             intermediate_size=cfg.intermediate_size, max_position_embeddings=cfg.max_positions)
        cls: Any = tf.BertForSequenceClassification

        def inputs(b: int, s: int) -> dict[str, Any]:
            return {"input_ids": torch.randint(0, cfg.vocab_size, (b, s), generator=g)}
    elif cfg.model_type == "gpt2":
        conf = tf.GPT2Config(vocab_size=cfg.vocab_size, n_embd=cfg.hidden_size, n_layer=cfg.num_layers,
                             n_head=cfg.num_heads, n_positions=cfg.max_positions)
        cls = tf.GPT2LMHeadModel

        def inputs(b: int, s: int) -> dict[str, Any]:
            return {"input_ids": torch.randint(0, cfg.vocab_size, (b, s), generator=g), "use_cache": False}
    elif cfg.resnet is not None:
        net = cfg.resnet
        conf = tf.ResNetConfig(num_channels=net.num_channels, embedding_size=net.embedding_size,
                               hidden_sizes=list(net.hidden_sizes), depths=list(net.depths),
                               num_labels=net.num_labels, layer_type="bottleneck")
        cls = tf.ResNetForImageClassification
        side = net.image_size_px

        def inputs(b: int, s: int) -> dict[str, Any]:
            return {"pixel_values": torch.randn(b, net.num_channels, side, side, generator=g)}
    else:
        raise UnsupportedError(f"validate --local measures bert, gpt2 and resnet models, not {cfg.id}")
    with no_init_weights():  # random init of 100M parameters takes seconds; a uniform fill is enough for timing
        model = cls(conf)
    with torch.no_grad():
        for p in model.parameters():
            p.uniform_(-0.05, 0.05, generator=g)
        for name, buf in model.named_buffers():
            if name.endswith("running_var"):
                buf.fill_(1.0)
            elif name.endswith("running_mean"):
                buf.zero_()
    return model.eval(), inputs


def validate_local(cases: Sequence[LocalCase] = FULL_CASES, *, hardware: Hardware | None = None,
                   min_time_s: float = 1.0, progress: Callable[[str], None] | None = None) -> LocalValidation:
    """Measure ``cases`` here with PyTorch and predict them on ``local-cpu`` (or ``hardware``)."""
    hw = hardware or load_local_cpu()
    if hw.cpu is None:
        raise UnsupportedError(f"{hw.id} has no fitted CPU model; run `perfcast calibrate`")
    torch = import_torch()
    threads = hw.cpu.threads
    torch.set_num_threads(threads)
    forwards: list[Callable[[], object]] = []
    configs: list[ModelConfig] = []
    for model_id in dict.fromkeys(c.model for c in cases):
        cfg = load_model(model_id)
        model, inputs = _torch_model(cfg)
        for case in (c for c in cases if c.model == model_id):
            x = inputs(case.batch_size, case.seq_len)

            def forward(model: Any = model, x: dict[str, Any] = x) -> object:
                with torch.no_grad():
                    return model(**x)

            forwards.append(forward)
            configs.append(cfg)
    ordered = [c for m in dict.fromkeys(c.model for c in cases) for c in cases if c.model == m]

    def report(r: int, i: int) -> None:
        if progress:
            progress(f"pass {r + 1}/{ROUNDS} {ordered[i].label}")

    measured = interleaved_fastest_s(forwards, rounds=ROUNDS, min_time_s=min_time_s, min_repeats=2,
                                     max_repeats=60, clock=clock_for(threads), progress=report)
    results: list[LocalResult] = []
    for case, cfg, t in zip(ordered, configs, measured, strict=True):
        st = predict(StepRequest(model=cfg, hardware=hw, mode=Mode.INFERENCE, batch_size=case.batch_size,
                                 seq_len=case.seq_len or 1, dtype="fp32", attention="sdpa", style="hf"))
        results.append(LocalResult(case=case, measured_s=t, predicted_s=st.time_s))
    return LocalValidation(hardware_id=hw.id, threads=threads, results=tuple(results))
