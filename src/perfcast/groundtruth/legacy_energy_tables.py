"""ML.ENERGY leaderboard v1 (``energy/legacy_v1_bs1_llm_energy.csv``): one chat response at batch size 1, priced as
Hugging Face ``generate`` ran it eagerly in 2023.

The rows are 2023 runs of PyTorch 2.0.1 + FastChat (``fastchat/serve/inference.py``'s ``generate_stream``): the
Hugging Face checkpoint in FP16 on one GPU, one conversation at a time, no continuous batching, no CUDA graphs.
One mean response is reproduced as:

- **the prompt**: ``SHAREGPT_MEAN_INPUT_TOKENS`` tokens of ShareGPT user turn (ASSUMPTION: the table gives no
  prompt length; 161 is the mean ShareGPT input of the vLLM paper, Kwon et al., SOSP 2023, Sec. 6.1), plus the
  row's system prompt (``system_prompt_variant``: the four texts of :data:`SYSTEM_PROMPTS`, recalled from the
  ML.ENERGY v1 leaderboard's description, at ``TOKENS_PER_WORD`` tokens per word, OpenAI's rule of thumb for
  English) and ``TEMPLATE_TOKENS`` of the conversation template's role tags and separators (ASSUMPTION);
- **the response**: ``mean_output_tokens`` tokens, the model's own mean answer length (a property of the
  model's answers, measured by the benchmark, used as the workload's output length): one prefill of the prompt
  that yields the first token, then ``mean_output_tokens - 1`` decode steps of one token each, the KV cache
  growing by one token a step;
- **each forward** is perfcast's compose step (:func:`perfcast.compose.predict.predict`) of the model as
  ``transformers`` writes it (``style="hf"``: separate Q/K/V projections, rotary and RMSNorm as Python
  expressions; ``attention="eager"``: explicit scores and an FP32 softmax) under eager PyTorch
  (``framework="eager"``): every kernel is launched from Python at the compose coefficients' ``eager_op_s``, so a
  small model at batch 1 runs at the pace of the host, a large one at the pace of its weight reads. The prefill
  is an ``inference`` step (transformers computes the LM head over every prompt position and keeps the new K/V as
  the cache, no copy); a decode step is a ``decode`` step with the context so far. Not modelled: transformers'
  ``torch.cat`` of the past K/V (it re-copies the cache every step; the builder writes only the new token's K/V:
  2-4 % of a 7B-13B step's bytes at these 200-650-token contexts);
- **FastChat's token loop**, per generated token: ``TOKEN_LOOP_LAUNCHES`` small launches outside the model's
  layers and one host synchronization (``.tolist()`` of the sampled token drains the queue, so the steps do not
  overlap). Its detokenization every ``stream_interval`` tokens (a CPU cost perfcast has no coefficient for) is
  not modelled;
- **energy** by the one energy model (:mod:`perfcast.kernel.energy`): each step's ops at their dynamic energy and
  the GPU's static power over the step's wall time (host gaps included, :func:`perfcast.compose.energy.with_energy`),
  the token loop at the idle power (:attr:`~perfcast.kernel.energy.PowerModel.idle_W`); per request, per output
  token, and the average power = energy / latency.

Why compose's step and not the serving simulator with one sequence: the serving iteration model prices an
engine's kernels (fused QKV and gate-up GEMMs, FlashAttention over a paged cache, CUDA graphs) and the CPU time of
an iteration as one coefficient fitted per engine on serving benchmarks; none of that is what eager transformers
runs, and an "HF eager" engine profile would have no fitted CPU time. Compose's step builds the model as
transformers writes it and launches every kernel from the host, the mechanism that sets the pace at batch 1.

The decode steps' time and energy are priced at every multiple of ``GRID_TOKENS`` of context inside the response
and at its first and last context, and interpolated linearly in between (a step's attention work is linear in
its context). The GPU is the row's ``gpu_id`` as the catalog names it (``a100`` is the catalog's A100: the table
does not state its memory). Models perfcast has no decoder step for are refused with the reason (RWKV, BiLLa by
the catalog; the encoder-decoder FastChat-T5 here).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from perfcast.catalog.hardware import load_hardware
from perfcast.catalog.models import check_context, load_model
from perfcast.coefficients.bundle import Calibration, resolve_calibration
from perfcast.compose.predict import StepRequest, predict
from perfcast.compose.types import MemoryBreakdown, StepTime
from perfcast.dtypes import parse_dtype
from perfcast.errors import ConfigError, UnsupportedError
from perfcast.groundtruth.files import ROW_ERRORS, memory_status, row_status
from perfcast.groundtruth.gpus import row_gpu_id
from perfcast.groundtruth.legacy_energy_columns import LEGACY_ENERGY_TARGETS
from perfcast.kernel.energy import power_model
from perfcast.workload.types import Mode

__all__ = ["GRID_TOKENS", "SHAREGPT_MEAN_INPUT_TOKENS", "SYSTEM_PROMPTS", "TEMPLATE_TOKENS", "TOKENS_PER_WORD",
           "TOKEN_LOOP_LAUNCHES", "ResponseEstimate", "predict_legacy_rows", "predict_response", "prompt_tokens"]

SHAREGPT_MEAN_INPUT_TOKENS = 161  # vLLM paper (SOSP 2023) Sec. 6.1: ShareGPT mean input length (ASSUMPTION)
TOKENS_PER_WORD = 4.0 / 3.0  # ~750 English words per 1000 tokens (OpenAI's rule of thumb)
TEMPLATE_TOKENS = 10  # role tags and separators of a FastChat template ("USER: ... ASSISTANT:") (ASSUMPTION)
# the ML.ENERGY v1 system prompts, by the table's system_prompt_variant (recalled from the leaderboard's text)
SYSTEM_PROMPTS: dict[str, str] = {
    "chat": ("A chat between a human user (prompter) and an artificial intelligence (AI) assistant. The assistant "
             "gives helpful, detailed, and polite answers to the user's questions."),
    "chat-concise": ("A chat between a human user (prompter) and an artificial intelligence (AI) assistant. The "
                     "assistant gives helpful, detailed, and polite answers to the user's questions. The assistant's "
                     "answers are very concise."),
    "instruct": "Below is an instruction that describes a task. Write a response that appropriately completes the "
                "request.",
    "instruct-concise": ("Below is an instruction that describes a task. Write a response that appropriately "
                         "completes the request. The response should be very concise."),
}
# launches per generated token outside the model's layers (FastChat generate_stream + transformers' model
# prologue, mid-2023): the next input's host-to-device copy, position ids (arange), the all-ones attention mask
# and its expansion to the additive mask (cast, 1 - mask, masked_fill), the temperature division, the softmax,
# torch.multinomial's draw (exponential noise, divide, top-k) and the device-to-host copy of the sampled ids
TOKEN_LOOP_LAUNCHES = 12
GRID_TOKENS = 32  # decode steps are priced at every multiple of this context length and interpolated between


def prompt_tokens(variant: str) -> int:
    """Prompt tokens of one request under ``variant``'s system prompt (the module docstring's assumptions)."""
    text = SYSTEM_PROMPTS.get(variant.strip())
    if text is None:
        raise ConfigError(f"system_prompt_variant {variant!r} is not one of ML.ENERGY v1's; known: "
                          f"{', '.join(SYSTEM_PROMPTS)}")
    return SHAREGPT_MEAN_INPUT_TOKENS + TEMPLATE_TOKENS + round(len(text.split()) * TOKENS_PER_WORD)


@dataclass(frozen=True, slots=True)
class ResponseEstimate:
    """One mean response at batch size 1: its parts' wall times (seconds), its energy on the GPU (joules) and the
    GPU's memory at its longest step."""

    prompt_tokens: int
    output_tokens: float
    prefill_s: float  # the prompt's forward
    decode_s: float  # output_tokens - 1 one-token forwards
    token_loop_s: float  # FastChat's sampling launches and synchronization, every token
    energy_J: float
    memory: MemoryBreakdown | None

    @property
    def latency_s(self) -> float:
        """Wall time of the response, seconds."""
        return self.prefill_s + self.decode_s + self.token_loop_s

    @property
    def throughput_tok_per_s(self) -> float:
        """Output tokens per second of the response."""
        return self.output_tokens / self.latency_s

    @property
    def energy_per_output_token_J(self) -> float:
        """Joules per output token."""
        return self.energy_J / self.output_tokens

    @property
    def avg_power_W(self) -> float:
        """Mean GPU power over the response (energy / latency), watts."""
        return self.energy_J / self.latency_s

    def figures(self) -> dict[str, float]:
        """The table's targets (:data:`LEGACY_ENERGY_TARGETS`)."""
        return {"latency_per_response_s": self.latency_s, "throughput_tok_per_s": self.throughput_tok_per_s,
                "energy_per_request_J": self.energy_J, "energy_per_output_token_J": self.energy_per_output_token_J,
                "avg_power_W": self.avg_power_W}


StepCache = dict[tuple[str, str, str, str, int], StepTime]


def _step(model: str, hardware: str, dtype: str, mode: Mode, seq_len: int, cal: Calibration,
          cache: StepCache) -> StepTime:
    """One eager Hugging Face forward of batch 1 (``seq_len``: the prompt, or a decode step's context)."""
    key = (model, hardware, dtype, mode.value, seq_len)
    hit = cache.get(key)
    if hit is None:
        hit = predict(StepRequest(model=model, hardware=hardware, mode=mode, batch_size=1, seq_len=seq_len,
                                  dtype=dtype, style="hf", attention="eager", framework="eager"), cal)
        cache[key] = hit
    return hit


def predict_response(model: str, hardware: str, *, prompt_tokens: int, output_tokens: float, dtype: str = "fp16",
                     calibration: Calibration | None = None, cache: StepCache | None = None) -> ResponseEstimate:
    """One response of ``output_tokens`` (a mean: fractional is fine, at least 1) to a ``prompt_tokens`` prompt,
    generated at batch size 1 by eager transformers + FastChat on one ``hardware`` GPU (see the module
    docstring). ``cache`` shares priced steps between calls."""
    cfg = load_model(model)
    if cfg.kind != "decoder":
        name = cfg.id if model == cfg.id else f"{model} ({cfg.id})"
        raise UnsupportedError(f"{name} is {'an' if cfg.kind[0] in 'aeiou' else 'a'} {cfg.kind} model: perfcast "
                               "prices KV-cached generation for decoder-only models only")
    if not (math.isfinite(output_tokens) and output_tokens >= 1):
        raise ConfigError(f"mean_output_tokens {output_tokens} must be at least 1 (the prefill's token)")
    if prompt_tokens < 1:
        raise ConfigError(f"prompt_tokens {prompt_tokens} must be at least 1")
    cal = resolve_calibration(calibration)
    steps: StepCache = {} if cache is None else cache
    hw = load_hardware(hardware)
    dt = parse_dtype(dtype).value
    decodes = output_tokens - 1.0
    last = prompt_tokens + math.ceil(decodes)  # the context of the last decode step
    check_context(cfg, last, what="prompt plus response length")
    prefill = _step(cfg.id, hw.id, dt, Mode.INFERENCE, prompt_tokens, cal, steps)
    decode_s = decode_J = 0.0
    memory = prefill.memory
    if decodes > 0:
        first = prompt_tokens + 1
        grid = np.unique(np.concatenate(([first, last], np.arange(-(-first // GRID_TOKENS) * GRID_TOKENS, last,
                                                                  GRID_TOKENS))))
        priced = [_step(cfg.id, hw.id, dt, Mode.DECODE, int(c), cal, steps) for c in grid]
        contexts = np.arange(first, last + 1, dtype=float)
        weights = np.ones(contexts.size)
        weights[-1] = decodes - (contexts.size - 1)  # a fractional mean length: part of the last step
        decode_s = float(weights @ np.interp(contexts, grid, [s.time_s for s in priced]))
        decode_J = float(weights @ np.interp(contexts, grid, [s.energy_J for s in priced]))
        memory = priced[-1].memory
    host = cal.compose.host
    loop_s = output_tokens * (TOKEN_LOOP_LAUNCHES * host.eager_op_s + host.sync_s)
    energy = prefill.energy_J + decode_J + power_model(hw, cal.kernel).idle_W * loop_s
    return ResponseEstimate(prompt_tokens=prompt_tokens, output_tokens=output_tokens, prefill_s=prefill.time_s,
                            decode_s=decode_s, token_loop_s=loop_s, energy_J=energy, memory=memory)


def _row_response(row: dict[str, str], cal: Calibration, cache: StepCache) -> ResponseEstimate:
    batch = (row.get("batch_size") or "1").strip()
    if float(batch) != 1:
        raise UnsupportedError(f"batch_size {batch}: this table kind prices batch-size-1 generation only")
    gpus = (row.get("num_gpus") or "1").strip()
    if float(gpus) != 1:
        raise UnsupportedError(f"num_gpus {gpus}: this table kind prices generation on one GPU only")
    variant = (row.get("system_prompt_variant") or "").strip()
    if not variant:
        raise ConfigError("the row gives no system_prompt_variant (chat, chat-concise, instruct, instruct-concise)")
    model = (row.get("model_id") or "").strip()
    if not model:
        raise ConfigError("the row gives no model_id")
    return predict_response(model, row_gpu_id(row), prompt_tokens=prompt_tokens(variant),
                            output_tokens=float(row["mean_output_tokens"]),
                            dtype=(row.get("dtype") or "fp16").strip(), calibration=cal, cache=cache)


def predict_legacy_rows(rows: list[dict[str, str]], calibration: Calibration | None = None,
                        ) -> tuple[dict[str, np.ndarray], list[str], list[str]]:
    """Per target (:data:`LEGACY_ENERGY_TARGETS`), the predicted value of every row (NaN where not predicted); a
    status and a group (``gpu_id``) per row."""
    cal = resolve_calibration(calibration)
    n = len(rows)
    out = {t: np.full(n, np.nan) for t in LEGACY_ENERGY_TARGETS}
    status = ["ok"] * n
    groups = [(r.get("gpu_id") or "").strip() for r in rows]
    cache: StepCache = {}
    for i, row in enumerate(rows):
        try:
            res = _row_response(row, cal, cache)
        except ROW_ERRORS as exc:
            status[i] = row_status(exc)
            continue
        for t, v in res.figures().items():
            out[t][i] = v
        status[i] = memory_status(res.memory, "figures for a run that does not fit")
    return out, status, groups
