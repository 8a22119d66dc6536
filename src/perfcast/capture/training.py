"""A captured forward as the input of a training step (``perfcast train --workload``).

The training layer (:func:`perfcast.system.training.simulate_training`) prices a
micro-batch from its forward ops: it derives the backward
(:func:`perfcast.workload.backward.backward_ops`), groups ops into parts by the
first component of their names (``embed``, each layer kind, ``head``) and
stacks the parts into pipeline stages by their ``count``. Here a captured
workload becomes such a forward:

- repeated layers are merged (:func:`perfcast.capture.merge.merge_repeated`);
- ops are retyped to the training precision (:func:`cast_workload`);
- ops before the first layer of a list holding repeated layers are the
  ``embed`` part, ops after the last one the ``head`` part, each run of
  repeated layers (and each distinct layer, such as ResNet's first block of a
  stage) a layer part ``layers``, ``layers_1``...; a model without repeated
  layers is one layer;
- the dropout kernels the model runs in training are added where the capture
  saw them (an eval-mode capture runs none; it keeps their rate and size), and
  BatchNorm reads its input twice (batch statistics, then normalization), as
  :mod:`perfcast.workload.models.hf_resnet` prices it in training;
- a cross-entropy loss is added over the widest linear layer of the head (the
  LM head of GPT-2, BERT's MLM decoder, a classifier), as the catalog's
  builders add :func:`perfcast.workload.models.common.lm_loss`.

:func:`captured_model_config` describes the captured model in the catalog's
terms (layers, hidden width, heads) for the plan checks and the activation
sizes of pipeline sends and recompute checkpoints. A model without token ids
(a CNN) trains per sample: a "token" is an image, as for catalog CNNs.
"""

from __future__ import annotations

from dataclasses import dataclass

from perfcast.capture.merge import merge_repeated, module_path
from perfcast.catalog.models import ModelConfig
from perfcast.dtypes import DType
from perfcast.errors import ConfigError
from perfcast.workload.backward import backward_ops, optimizer_ops
from perfcast.workload.graph import Graph
from perfcast.workload.models.common import lm_loss
from perfcast.workload.types import Mode, Op, OpKind, Phase, Workload

__all__ = ["CapturedTraining", "captured_model_config", "cast_workload", "megatron_splits", "training_forward",
           "training_workload"]

_ID_BYTES = 8  # an int64 token id read by an embedding gather


def cast_workload(w: Workload, dtype: DType) -> Workload:
    """``w`` with its activations and weights in ``dtype`` (bytes rescaled; FLOPs and shapes unchanged)."""
    if dtype is w.dtype:
        return w
    ops: list[Op] = []
    for o in w.ops:
        if o.dtype is not w.dtype:
            ops.append(o)
            continue
        r = dtype.bytes / o.dtype.bytes
        meta = tuple((k, dtype.value if k == "weight_dtype" else v) for k, v in o.meta)
        if o.kind is OpKind.EMBEDDING:
            tokens, dim, vocab = o.dims
            e = dtype.bytes
            ops.append(o.with_(dtype=dtype, bytes_read=tokens * dim * e + tokens * _ID_BYTES,
                               bytes_written=float(tokens * dim * e), weight_bytes=float(vocab * dim * e), meta=meta))
            continue
        ops.append(o.with_(dtype=dtype, bytes_read=o.bytes_read * r, bytes_written=o.bytes_written * r,
                           weight_bytes=o.weight_bytes * r,
                           fused_bytes=None if o.fused_bytes is None else o.fused_bytes * r, meta=meta))
    return Workload(model_id=w.model_id, mode=w.mode, batch_size=w.batch_size, seq_len=w.seq_len, dtype=dtype,
                    ops=tuple(ops), kv_len=w.kv_len, tp=w.tp)


def _run_of(op: Op) -> str | None:
    """The merged run an op belongs to (``transformer.h.0-11``), if any."""
    comps = module_path(op).split(".")
    for i, c in enumerate(comps):
        a, dash, b = c.partition("-")
        if dash and a.isdigit() and b.isdigit():
            return ".".join(comps[:i + 1])
    return None


def _is_entry(comp: str) -> bool:
    """A list entry in a module path: ``7``, or a merged run ``0-11``."""
    a, dash, b = comp.partition("-")
    return a.isdigit() and (not dash or b.isdigit())


def _layer_key(op: Op, patterns: set[tuple[str, ...]]) -> str | None:
    """The layer entry ``op`` belongs to (``resnet.encoder.stages.1.layers.0``), for lists matching
    ``patterns`` (paths with ``*`` for list indices), or None."""
    comps = module_path(op).split(".")
    for pat in patterns:
        n = len(pat)
        if len(comps) > n and _is_entry(comps[n]) and all(
                p == c or (p == "*" and _is_entry(c)) for p, c in zip(pat, comps[:n], strict=True)):
            return ".".join(comps[:n + 1])
    return None


@dataclass(frozen=True, slots=True)
class CapturedTraining:
    """A captured model ready for the training layer: the labelled forward ops of one micro-batch (loss
    included), the model described for the plan checks, and tokens per sample (1 for a model without
    token ids). ``tp_error`` says why tensor parallelism cannot shard it (None: :func:`megatron_splits`
    found the column/row pairs of every layer)."""

    forward: tuple[Op, ...]
    config: ModelConfig
    micro_batch: int
    tokens_per_sample: int
    layers: int
    layer_runs: tuple[tuple[str, int], ...]
    tp_error: str | None = None


def training_forward(w: Workload, dtype: DType, *, loss: bool = True) -> CapturedTraining:
    """The forward ops of one micro-batch of the captured ``w`` trained in ``dtype`` (see the module doc)."""
    m = cast_workload(merge_repeated(w), dtype)
    runs = [_run_of(o) for o in m.ops]
    # layer lists: those holding a merged run, and their siblings in an outer list (ResNet's stages.*.layers,
    # whose first block differs from the rest; a stage of distinct blocks still holds layers)
    patterns = {tuple("*" if _is_entry(c) else c for c in r.split(".")[:-1]) for r in runs if r}
    keys = [_layer_key(o, patterns) for o in m.ops]
    stack = [i for i, k in enumerate(keys) if k is not None]
    if not stack:  # no repeated layers: the whole model is one layer (pipeline stages need more)
        keys = [w.model_id] * len(m.ops)
        stack = [0, len(m.ops) - 1]
    first, last = stack[0], stack[-1]
    labels: list[str] = []  # part of each op (dropout kernels, added below, take their producer's)
    seen: list[str] = []
    layer_runs: list[tuple[str, int]] = []
    prev: str | None = None
    for i, o in enumerate(m.ops):
        if i < first:
            labels.append("embed")
            continue
        if i > last:
            labels.append("head")
            continue
        key = keys[i] or prev or ""  # an op of the stack's parent between two layers goes with the one before
        if key != prev:
            seen.append(key)
            prev = key
            layer_runs.append((key, o.count if runs[i] else 1))
        n = len(seen) - 1
        labels.append("layers" if n == 0 else f"layers_{n}")
    ops: list[Op] = []
    for o, lbl in zip(m.ops, labels, strict=True):
        if o.op == "batchnorm" and o.get("inputs") == 1:  # batch statistics, then normalize: two reads
            rows, cols = o.dims
            meta = tuple((k, 2 if k == "inputs" else v) for k, v in o.meta)
            o = o.with_(bytes_read=o.bytes_read + rows * cols * o.dtype.bytes, meta=meta)
        ops.append(o.with_(name=f"{lbl}.{o.name}"))
        size = o.get("dropout_numel")
        if isinstance(size, int) and size > 0:  # the dropout after this op runs in training
            g = Graph(dtype, training=True)
            drop = g.dropout(f"{lbl}.{o.name}.dropout", size)
            if drop is not None:
                ops.append(drop.with_(count=o.count, tp_split=o.tp_split))
    # layers per part: the smallest count among its ops (ops inside a nested run repeat more often)
    per_part: dict[str, int] = {}
    for o in ops:
        lbl = o.name.split(".", 1)[0]
        if lbl not in ("embed", "head"):
            per_part[lbl] = min(per_part.get(lbl, o.count), o.count)
    layers = sum(per_part.values())
    has_tokens = any(o.kind is OpKind.EMBEDDING for o in ops)
    tokens_per_sample = m.seq_len if has_tokens else 1
    if loss:
        head = [o for o in ops if o.name.startswith("head.") and o.kind is OpKind.GEMM and o.op == "linear"]
        if head:
            logits = max(head, key=lambda o: o.dims[1] * o.dims[3])
            g = Graph(dtype, training=True)
            lm_loss(g, logits.dims[1], logits.dims[3])
            ops += g.ops
    config = captured_model_config(m, layers=layers)
    ops, tp_error = megatron_splits(ops, config.hidden_size)
    return CapturedTraining(forward=tuple(o.with_(phase=Phase.FORWARD) for o in ops), config=config,
                            micro_batch=m.batch_size, tokens_per_sample=tokens_per_sample, layers=layers,
                            layer_runs=tuple(layer_runs), tp_error=tp_error)


def megatron_splits(ops: list[Op], hidden: int) -> tuple[list[Op], str | None]:
    """``ops`` with Megatron tensor-parallel splits inferred, and None; or ``ops`` unchanged and why not.

    In each layer, a linear layer reading the residual width ``hidden`` opens a column-parallel group (the
    q/k/v or up/gate projections: more linear layers reading it before attention join it); the group's
    attention shards by heads and its elementwise ops by columns; a linear layer writing ``hidden`` after
    the group's attention, or reading a width other than ``hidden``, closes it as row-parallel (its
    all-reduce follows). Anything else in a layer (a convolution, an unpaired projection, a linear layer
    neither rule places) leaves the model unsharded. Outside the layers everything is replicated except
    the largest embedding table and an LM head as wide as it (vocabulary-parallel, with its loss).
    """
    out = list(ops)
    tables = [o for o in ops if o.kind is OpKind.EMBEDDING]
    vocab = max((o.dims[2] for o in tables), default=0)
    head_linears = [i for i, o in enumerate(ops) if o.name.startswith("head.") and o.kind is OpKind.GEMM
                    and o.op == "linear"]
    lm_head = max(head_linears, key=lambda i: ops[i].dims[3], default=None)
    vocab_head = lm_head is not None and ops[lm_head].dims[3] == vocab and vocab > 0
    inside = attn_seen = False
    pairs = 0
    part = ""
    for i, o in enumerate(ops):
        label = o.name.split(".", 1)[0]
        if label in ("embed", "head", "loss"):
            if inside:
                return list(ops), f"{part}: a column-parallel projection without a row-parallel one closing it"
            split = "none"
            if o.kind is OpKind.EMBEDDING and o.dims[2] == vocab:
                split = "vocab"
            elif vocab_head and (i == lm_head or label == "loss"):
                split = "vocab" if i == lm_head else "column"
            out[i] = o.with_(tp_split=split)
            continue
        if label != part:
            if inside:
                return list(ops), f"{part}: a column-parallel projection without a row-parallel one closing it"
            part = label
        if o.kind is OpKind.GEMM and o.op == "linear":
            _, _, k, n = o.dims
            if inside and n == hidden and (k != hidden or attn_seen):
                split, inside = "row", False
                pairs += 1
            elif k == hidden and not (inside and attn_seen):
                split, attn_seen = "column", attn_seen if inside else False
                inside = True
            else:
                return list(ops), (f"cannot tell whether {o.name} (in {k}, out {n}) is column- or row-parallel "
                                   f"with a residual width of {hidden}")
        elif o.kind is OpKind.ATTENTION or (o.kind is OpKind.GEMM and o.op == "bmm"):
            if not inside:
                return list(ops), f"{o.name}: attention outside a column/row-parallel pair"
            split, attn_seen = "heads", True
        elif o.kind is OpKind.VECTOR:
            split = "column" if inside else "none"
        else:
            return list(ops), f"{o.name}: {o.kind.value} ops have no Megatron tensor-parallel split"
        out[i] = o.with_(tp_split=split)
    if inside:
        return list(ops), f"{part}: a column-parallel projection without a row-parallel one closing it"
    if pairs == 0:
        return list(ops), "no column/row-parallel linear pairs in the layers"
    return out, None


def training_workload(w: Workload, dtype: DType, *, optimizer: str = "adam") -> Workload:
    """One single-GPU training step of the captured ``w`` in ``dtype`` as a workload: the training forward
    (:func:`training_forward`), the backward derived from it and the optimizer step (``adam``, ``sgd`` or
    ``none``), as :func:`perfcast.workload.build.build_workload` composes a catalog model's."""
    if optimizer not in ("adam", "sgd", "none"):
        raise ConfigError(f"unknown optimizer {optimizer!r}; use one of adam, sgd, none")
    forward = list(training_forward(w, dtype).forward)
    ops = forward + backward_ops(forward) + optimizer_ops(forward, optimizer=optimizer)
    return Workload(model_id=w.model_id, mode=Mode.TRAINING, batch_size=w.batch_size, seq_len=w.seq_len, dtype=dtype,
                    ops=tuple(ops))


def captured_model_config(w: Workload, *, layers: int) -> ModelConfig:
    """The captured model in the catalog's terms: ``layers`` layers, the token-embedding width as the hidden
    size (a model without one: the input width of its last linear layer), heads from its first attention
    kernel (without one, as many one-wide heads as the hidden width), no position limit."""
    embeds = [o for o in w.ops if o.kind is OpKind.EMBEDDING]
    linears = [o for o in w.ops if o.kind is OpKind.GEMM and o.op == "linear"]
    attn = next((o for o in w.ops if o.kind is OpKind.ATTENTION), None)
    if embeds:
        table = max(embeds, key=lambda o: o.dims[2])
        hidden, vocab = table.dims[1], table.dims[2]
    else:
        hidden = linears[-1].dims[2] if linears else 1
        vocab = linears[-1].dims[3] if linears else 1
    # without attention, tensor parallelism splits the hidden width: "heads" of one column each
    heads, kv_heads, head_dim = (attn.dims[1], attn.dims[2], attn.dims[5]) if attn else (hidden, hidden, 1)
    inter = max((o.dims[3] for o in linears), default=hidden)
    causal = bool(attn.dims[6]) if attn else False
    return ModelConfig(id=w.model_id, model_type="captured", kind="decoder" if causal else "encoder",
                       num_layers=max(1, layers), hidden_size=max(1, hidden), num_heads=max(1, heads),
                       num_kv_heads=max(1, kv_heads), head_dim=max(1, head_dim), intermediate_size=max(1, inter),
                       vocab_size=max(1, vocab), max_positions=2**20, position="none",
                       source=("perfcast capture",), notes="described from a captured graph")
