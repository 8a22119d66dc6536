"""Published training throughput (``published/training.csv``): each row's run, rebuilt and predicted.

A row names a GPU, a model, a GPU count and as much of the parallel plan as
its source published. What a source left out is filled the way that
framework runs by default, and said here:

- cluster: the catalog cluster built from the row's GPU (or, for a GPU no
  cluster carries, a cluster of the same GPU generation with that GPU);
- tp/pp: Megatron-LM's 2021 table gives only the model-parallel size; Megatron
  keeps TP inside a node, so ``tp = min(size, GPUs per node)`` and ``pp`` the rest;
- micro-batch 1 and no interleaving where unpublished; torchtitan's pipelined
  runs split the local batch into one micro-batch per stage (two stages per rank
  for its interleaved schedule);
- what the prediction cannot do without is never defaulted: a row with no
  sequence length, no global batch (torchtitan's local batch counts: the
  global batch is it times dp) or no precision is reported
  ``unsupported: <field> not published``, and so is a LoRA run whose
  adapters' rank and targets the source does not give;
- ZeRO: FSDP rows are ZeRO-3 (Megatron-Bridge's ``FSDP N`` is Megatron-FSDP,
  ``DDP`` its distributed data parallel); Megatron-Core, NeMo and
  Megatron-Bridge use the distributed optimizer (ZeRO-1) with sequence
  parallelism (torchtitan's tensor parallelism is sequence-parallel too: its
  ``apply_tp`` shards the norms' tokens, ``SequenceParallel``, and passes the
  residual stream between blocks sharded over the sequence, ``Shard(1)``), and
  overlap TP communication where the source says so (Megatron-Core r0.8, NeMo's large configs, torchtitan's AsyncTP);
- experts: the row's ``ep``; Megatron-Bridge's MoE recipes keep experts whole
  (``expert_tensor_parallel_size`` 1) with EP folded over the TP x DP ranks,
  which its rows with ep > dp (Qwen3-235B-A22B: ep 32 on tp 2 x dp 16) need;
  Megatron-Bridge's MoE performance recipes dispatch tokens with DeepEP (the
  flex dispatcher: one copy per destination node over InfiniBand), which its
  summary does not restate: assumed. Its rows bear it out: with Megatron's
  all-to-all dispatcher (a copy per chosen expert) Qwen3-235B-A22B on 256 GPUs
  is predicted 22-26 % slow, with DeepEP's traffic within 6 %;
- precision: the row's label names the training precision recipe
  (:mod:`perfcast.workload.precision`): ``fp8`` delayed per-tensor scaling,
  ``fp8-cs`` current scaling, ``fp8-block``/``fp8-blockwise`` 1x128/128x128
  blocks, ``mxfp8``, ``nvfp4``; Megatron-LM 2021's note states 16-bit mixed precision;
- gradients (their buffer and their reduction) in FP32 except Composer's ``PURE``
  mixed precision and NVIDIA's performance tables (NeMo, Megatron-Bridge), in BF16:
  their performance scripts turn ``grad_reduce_in_fp32`` off (NeMo 1.0's launcher
  configs: ``optim.grad_sync_dtype: bf16``), so Megatron's gradient buffer holds
  2 bytes per parameter; Megatron-LM's own runs keep FP32 gradients
  (``--bf16`` turns ``accumulate_allreduce_grads_in_fp32`` on);
- attention: torchtitan's runs call PyTorch SDPA, whose flash backend is
  FlashAttention-2, and llm-foundry's MPTs the flash-attn 2 package; Megatron,
  NeMo and Megatron-Bridge run Transformer Engine's cuDNN fused attention, native
  to Hopper (``ParallelPlan.attention_kernels``);
- torch.compile rows launch compiled kernels; torchtitan's model code is plain
  PyTorch, so its eager rows run one kernel per norm/RoPE/SwiGLU operation
  (Megatron, NeMo and llm-foundry use fused kernels);
- context: a published run longer than its Hugging Face config's context ran
  with an extended one, and the run proves it. llm-foundry sets an MPT's
  ``max_seq_len`` (its learned position table, or ALiBi's length) to the run's
  sequence length, so long-sequence MPT rows use that table size; rotary
  models trained past their ``max_position_embeddings`` (NeMo's long-sequence
  Llama-2-7B rows up to 1M tokens with context parallelism, torchtitan's
  Llama-3.1 rows at 262144) ran with a RoPE base or scaling extended for it, so
  their context is the run's sequence length. Nothing else about the model
  changes (a rotary model has no position table); a learned table outside
  llm-foundry is never resized;
- pipeline stages may be uneven when the layers do not divide by ``pp``
  (torchtitan's Llama-3.1-405B, 126 layers over 8 stages); Megatron's runs
  count the embedding and the loss as a pipeline layer each where the layers
  alone do not split but the layers + 2 do (Megatron-Bridge's Llama-3.1-405B on
  pp 8 x vp 8: 128 = 64 chunks of 2).

Which FLOPs a ``tflops_per_gpu`` value counts depends on its source (see the
ground-truth README): Megatron-LM's 2021 table counts the recomputed forward
(hardware FLOPs); Megatron-Bridge counts model FLOPs as Megatron-LM has since
2025, with causal attention's half of the score matrix (and a GLU counted
gated only when it is a SwiGLU); every other source counts model FLOPs with
the whole score matrix. The prediction for that column follows the row's
convention.

Every published run fitted in its GPUs' memory. A row whose recompute the source
did not publish (an empty cell: NVIDIA's NeMo and Megatron-Bridge performance
tables) is predicted without recompute when that fits, and otherwise with the
least that fits of Megatron's selective modules (core attention; then the norms
and the experts' activation; then the whole MLP or MoE block), then full; its
status names the recompute assumed.
A published recompute is never changed.

Rows whose plan the source did not publish (NeMo's "without CP" best configs,
Megatron-LM 2022's table without GPU counts) are reported as unsupported with
that reason rather than guessed.
"""

from __future__ import annotations

import math
import re

import numpy as np

from perfcast.catalog.models import ModelConfig, load_model
from perfcast.coefficients.bundle import Calibration
from perfcast.errors import ConfigError
from perfcast.groundtruth.files import ROW_ERRORS, row_status
from perfcast.groundtruth.gpus import row_gpu_id
from perfcast.system.cluster import cluster_for_gpu
from perfcast.system.plan import ParallelPlan
from perfcast.system.training import TrainingResult, simulate_training

__all__ = ["TRAINING_TARGETS", "cluster_for_gpu", "counts_causal", "counts_recompute", "model_for_row", "plan_for_row",
           "predict_row", "predict_training_rows", "recompute_label", "recompute_published", "row_tflops",
           "source_label"]

TRAINING_TARGETS = ("tokens_per_s_per_gpu", "tflops_per_gpu", "mfu", "hfu", "step_time_s")


def _f(row: dict[str, str], key: str) -> float | None:
    v = (row.get(key) or "").strip()
    if not v:
        return None
    try:
        x = float(v)
    except ValueError:
        return None
    return None if math.isnan(x) else x


def _i(row: dict[str, str], key: str) -> int | None:
    x = _f(row, key)
    return None if x is None else int(round(x))


def plan_for_row(row: dict[str, str], gpus_per_node: int) -> ParallelPlan:
    """The parallel plan of a published row, with the framework defaults described in this module."""
    framework = row.get("framework", "")
    note = row.get("note", "")
    num_gpus = _i(row, "num_gpus")
    if num_gpus is None:
        raise ConfigError("the source gives no GPU count or parallel plan for this row")
    if "WITHOUT CP" in note and _i(row, "tp") is None:
        raise ConfigError("the source did not publish this run's parallel plan ('most performant config')")
    tp, pp, cp = _i(row, "tp"), _i(row, "pp"), _i(row, "cp") or 1
    if tp is None and pp is None:
        mp = re.search(r"model-parallel size \(tp\*pp\) = (\d+)", note)
        size = int(mp.group(1)) if mp else 1
        tp = min(size, gpus_per_node)
        pp = size // tp
    tp, pp = tp or 1, pp or 1
    dp = _i(row, "dp")
    if dp is None or tp * pp * dp * cp != num_gpus:
        dp = num_gpus // (tp * pp * cp)
    megatron = framework.startswith(("Megatron-Core", "NeMo", "Megatron-Bridge"))
    fsdp = "FSDP" in (row.get("zero_fsdp") or "")
    precision = _precision(row)
    if "LoRA" in note:
        raise ConfigError("LoRA rank and target modules not published (the source gives only the plan of its LoRA "
                          "fine-tuning run)")
    recompute = (row.get("recompute") or "").strip().lower() or "none"
    micro = _i(row, "micro_batch") or 1
    seq = _i(row, "seq_len")
    if seq is None:
        raise ConfigError("seq_len not published (the source does not give the run's sequence length)")
    gb = _i(row, "global_batch") or _local_batch(row, framework, micro) * dp
    vp = _i(row, "vp") or 1
    if "torchtitan" in framework and pp > 1:
        # torchtitan splits the local batch into one micro-batch per pipeline stage by default, and its
        # interleaved schedule runs two stages per rank
        vp = 2 if "interleaved" in note.lower() else 1
        local = micro
        micro = max(1, local // (pp * vp))
        gb = _i(row, "global_batch") or local * dp
    if pp == 1:
        vp = 1
    # Megatron-Bridge counts the embedding and the loss as pipeline layers where the layers alone do not split
    # (Llama-3.1-405B: 126 + 2 layers over pp 8 x vp 8)
    layers = load_model(_model_name(row)).num_layers if megatron and pp > 1 else 0
    embedding_split = bool(layers) and layers % (pp * vp) != 0 and (layers + 2) % (pp * vp) == 0
    text = f"{framework} {note}"
    compiled = "compile" in text
    overlap_tp = ("AsyncTP" in text or "async TP" in text or megatron) and tp > 1
    return ParallelPlan(
        tp=tp, pp=pp, dp=dp, cp=cp, ep=_i(row, "ep") or 1, vp=vp, uneven_stages=True,
        sp=(megatron or "torchtitan" in framework) and tp > 1,
        tp_comm_overlap=overlap_tp, embedding_in_pipeline_split=embedding_split,
        etp=1 if megatron and tp > 1 and (_i(row, "ep") or 1) > 1 else "tp",
        moe_dispatcher="deepep" if "Megatron-Bridge" in framework and (_i(row, "ep") or 1) > 1 else "alltoall",
        zero=3 if fsdp else (1 if megatron else 0),
        recompute=recompute if recompute in ("none", "selective", "full") else "none",  # type: ignore[arg-type]
        micro_batch=micro, global_batch=gb, seq_len=seq, precision=precision,  # type: ignore[arg-type]
        schedule="interleaved" if vp > 1 else "1f1b",
        framework="compiled" if compiled else "eager",
        fused_kernels="torchtitan" not in framework,
        attention_kernels="fa2" if "torchtitan" in framework or "llm-foundry" in framework else "native",
        grad_reduce_dtype="bf16" if "MP mode PURE" in note or framework.startswith(("NeMo", "Megatron-Bridge"))
        else "fp32",
    )


# the labels published tables give a precision recipe -> perfcast's recipe (perfcast.workload.precision)
_PRECISIONS = {"bf16": "bf16", "fp16": "fp16", "fp32": "fp32", "fp8": "fp8", "fp8-cs": "fp8-cs", "amp_bf16": "bf16",
               "amp_fp8": "fp8", "fp8-block": "fp8-block", "fp8-blockwise": "fp8-block", "mxfp8": "mxfp8",
               "nvfp4": "nvfp4"}


def _precision(row: dict[str, str]) -> str:
    """The row's training precision as perfcast prices it, or ConfigError when the source does not say (an empty
    cell is not a default: Megatron-LM's 2021 table states 16-bit mixed precision in its note, A100 FP16 and
    BF16 running at the same tensor-core rate) or names a recipe perfcast does not model."""
    label = (row.get("precision") or "").strip().lower()
    if not label:
        if "16-bit mixed precision" in row.get("note", ""):
            return "fp16"
        raise ConfigError("precision not published (the source does not say which precision the run used)")
    if label not in _PRECISIONS:
        raise ConfigError(f"precision {label!r} is not modelled; modelled: {', '.join(sorted(_PRECISIONS))}")
    return _PRECISIONS[label]


def _local_batch(row: dict[str, str], framework: str, micro: int) -> int:
    """Sequences per data-parallel rank per step when the source gives no global batch: torchtitan publishes its
    local batch (the ``micro_batch`` column); elsewhere a missing global batch is refused, not defaulted."""
    if "torchtitan" in framework and _i(row, "micro_batch") is not None:
        return micro
    raise ConfigError("global_batch not published (the source does not give the run's batch)")


def _model_name(row: dict[str, str]) -> str:
    return (row.get("model_id") or "").strip() or (row.get("model") or "").strip()


def model_for_row(row: dict[str, str], seq_len: int) -> ModelConfig:
    """The row's model, its context extended to a longer run (module docstring): llm-foundry sizes an MPT's
    position table (learned or ALiBi) to the run's sequence length; a rotary model's run proves its context."""
    cfg = load_model(_model_name(row))
    if seq_len <= cfg.max_positions:
        return cfg
    foundry = "llm-foundry" in row.get("framework", "")
    if cfg.position == "rotary" or (foundry and cfg.position in ("learned", "alibi")):
        cfg = cfg.model_copy(update={"max_positions": seq_len})
    return cfg


def counts_recompute(row: dict[str, str]) -> bool:
    """Whether the row's ``tflops_per_gpu`` counts recomputed FLOPs (Megatron-LM SC'21's table does)."""
    return "2021" in row.get("framework", "")


def counts_causal(row: dict[str, str]) -> bool:
    """Whether the row's ``tflops_per_gpu`` follow Megatron-LM's current count, causal attention halved
    (Megatron-Bridge's performance summaries; every other source counts the score matrix whole)."""
    return "Megatron-Bridge" in (row.get("framework") or "")


def row_tflops(row: dict[str, str], res: TrainingResult) -> float:
    """The prediction's TFLOP/s per GPU counted as the row's source counts them."""
    if counts_recompute(row):
        return res.hfu_tflops_per_gpu
    return res.causal_tflops_per_gpu if counts_causal(row) else res.tflops_per_gpu


def source_label(row: dict[str, str]) -> str:
    """The document a row was published in, short: ``owner/repo file`` for a repository
    (``NVIDIA-NeMo/Megatron-Bridge performance-summary-archive.md``), else its first word (``arXiv:2104.04473``)."""
    words = (row.get("source") or "").split()
    if not words:
        return "unknown"
    parts = words[0].split("/")
    if parts[0] == "github.com" and len(parts) >= 3:
        doc = words[1].rsplit("/", 1)[-1] if len(words) > 1 else ""
        return f"{parts[1]}/{parts[2]} {doc}".strip()
    return words[0].rstrip(";,")


def recompute_published(row: dict[str, str]) -> bool:
    """Whether the row's source says which activation recompute the run used (an empty cell: it did not)."""
    return bool((row.get("recompute") or "").strip())


def predict_row(row: dict[str, str], calibration: Calibration | None = None) -> TrainingResult:
    """Predict one published training row (``calibration``: the shipped one when None).

    A published run fitted in its GPUs' memory. When the source did not publish its recompute (Megatron-Bridge's
    and NeMo's performance tables) and the plan does not fit without recompute, the row is predicted with the least
    recompute that fits (:func:`_recompute_ladder`: none, then Megatron's selective modules from core attention up to
    the whole MLP or MoE block, then full; its time includes that recompute); if
    none fits, the plan without recompute is returned (and reported out of memory). A published recompute is never
    changed.
    """
    cluster = cluster_for_gpu(row_gpu_id(row))  # with the row's GPU memory where it states one
    plan = plan_for_row(row, cluster.gpus_per_node)
    cfg = model_for_row(row, plan.seq_len)
    res = simulate_training(cfg, cluster, plan, calibration=calibration)
    if res.fits or recompute_published(row) or plan.recompute != "none":
        return res
    for update in _recompute_ladder(cfg):
        alt = simulate_training(cfg, cluster, plan.model_copy(update=update), calibration=calibration)
        if alt.fits:
            return alt
    return res


def _recompute_ladder(cfg: ModelConfig) -> list[dict[str, object]]:
    """Megatron's recompute settings from the least re-run work to the most: selective core attention; then the
    norms and the experts' activation (an MoE model) or the norms (a dense one); then the whole MoE block or
    dense MLP as well; then full recompute."""
    block = "moe" if cfg.moe is not None else "mlp"
    middle = ("core_attn", "layernorm", "moe_act") if cfg.moe is not None else ("core_attn", "layernorm")
    return [{"recompute": "selective"}, {"recompute": "selective", "recompute_modules": middle},
            {"recompute": "selective", "recompute_modules": ("core_attn", "layernorm", block)},
            {"recompute": "full"}]


def recompute_label(plan: ParallelPlan) -> str:
    """The recompute a plan runs, as a status names it: ``none``, ``full``, ``selective`` (core attention) or
    ``selective (core_attn, layernorm, moe)``."""
    if plan.recompute == "selective" and plan.recompute_modules != ("core_attn",):
        return f"selective ({', '.join(plan.recompute_modules)})"
    return plan.recompute


def predict_training_rows(rows: list[dict[str, str]], calibration: Calibration,
                          ) -> tuple[dict[str, np.ndarray], list[str], list[str]]:
    """Predictions per target column, a status per row and the GPU of each row."""
    n = len(rows)
    pred = {t: np.full(n, np.nan) for t in TRAINING_TARGETS}
    status = ["ok"] * n
    groups = [r.get("gpu_id", "") for r in rows]
    for i, row in enumerate(rows):
        try:
            res = predict_row(row, calibration)
        except ROW_ERRORS as exc:
            status[i] = row_status(exc)
            continue
        if not res.fits:
            status[i] = (f"ok (predicted out of memory: {res.memory.total_bytes / 2**30:.1f} of "
                         f"{res.memory.capacity_bytes / 2**30:.0f} GiB)")
        elif res.plan.recompute != "none" and not recompute_published(row):
            status[i] = f"ok (recompute not published: {recompute_label(res.plan)} assumed, the least that fits)"
        pred["tokens_per_s_per_gpu"][i] = res.tokens_per_s_per_gpu
        pred["tflops_per_gpu"][i] = row_tflops(row, res)
        pred["mfu"][i] = res.mfu
        pred["hfu"][i] = res.hfu
        pred["step_time_s"][i] = res.step_time_s
    return pred, status, groups
