"""Whether a serving deployment fits its GPUs: one GPU's memory, part by part, and the verdict.

vLLM's accounting (``gpu_memory_utilization`` of the GPU is usable; weights and the profiling run's peak
activations come first; what is left becomes KV blocks), per GPU of one pipeline stage:

* ``usable_bytes`` = GPU memory x ``gpu_memory_utilization`` (x the share of it this model gets when another
  model shares the GPUs);
* ``weights_bytes``: the stage's weight shard;
* ``activations_peak_bytes``: the peak activation memory of the largest batch (hidden states, the MLP's
  widest intermediate and fp32 logits of the sampled sequences);
* ``kv_cache_bytes``: whole KV blocks in what is left (``kv_blocks`` of ``block_size`` tokens).

A model with sliding-window, chunked or state-space (Mamba) layers pools its cache as vLLM's hybrid KV cache
manager does (:mod:`perfcast.serving.kv.layout`): a block is a page of every layer of one KV cache group, the
attention block size is raised to hold a Mamba state in one page, and ``state_bytes_per_seq`` is the Mamba state
one running sequence holds on the GPU (its conv and SSM states over the stage's layers; None without state
layers, and then not in the JSON).

A deployment does not fit when the weights alone exceed the usable memory, or when weights and activations
leave no room for one KV block. Whether the KV cache holds one request of the workload is a question about
the workload too; :func:`perfcast.serving.deployment.serving_memory` asks it. Not fitting is an answer (the
verdict and this breakdown), not an error; the simulator refuses to run such a deployment.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

from perfcast.errors import UnsupportedError
from perfcast.results.serialize import json_field
from perfcast.serving.iteration import IterationModel
from perfcast.serving.kv import kv_cache_capacity
from perfcast.serving.kv.layout import KVLayout
from perfcast.units import GiB

__all__ = ["ServingMemory", "activation_peak_bytes", "memory_breakdown"]


@dataclass(frozen=True)
class ServingMemory:
    """One GPU's memory in a deployment (bytes) and whether the deployment fits (``verdict`` says why not)."""

    gpu_bytes: float = field(metadata=json_field(key="memory_gpu_bytes"))
    usable_bytes: float = field(metadata=json_field(key="memory_usable_bytes"))
    weights_bytes: float = field(metadata=json_field(key="memory_weights_bytes"))
    activations_peak_bytes: float = field(metadata=json_field(key="memory_activations_peak_bytes"))
    kv_cache_bytes: float = field(metadata=json_field(key="memory_kv_cache_bytes"))
    # KV blocks of one GPU (every virtual engine of the replica together)
    kv_blocks: int = field(metadata=json_field(key="kv_cache_blocks_per_gpu"))
    kv_bytes_per_token: float  # one token over the layers of the GPU's stage
    block_size: int
    fits: bool
    verdict: str  # "fits", or why not (one line)
    # Mamba state of one running sequence on one GPU (every state layer of the stage); None without state layers
    state_bytes_per_seq: float | None = field(default=None, metadata=json_field(key="memory_state_bytes_per_seq",
                                                                                  omit_none=True))
    # the cache by layer type when it is not one group of full-attention layers (None: the plain cache)
    layout: KVLayout | None = field(default=None, metadata=json_field(skip=True))

    # to_json: ``fits``, ``verdict`` and ``memory_*_bytes`` (per GPU), keys prefixed to sit in a run's object
    JSON_ORDER: ClassVar[tuple[str, ...]] = ("fits", "verdict", "gpu_bytes", "usable_bytes", "weights_bytes",
                                             "activations_peak_bytes", "kv_cache_bytes", "kv_blocks",
                                             "state_bytes_per_seq")

    @property
    def kv_block_bytes(self) -> float:
        """Bytes of one block of the pool on one GPU (a page of each layer of one group for a hybrid cache)."""
        if self.layout is not None:
            return self.kv_cache_bytes / self.kv_blocks if self.kv_blocks else 0.0
        return self.kv_bytes_per_token * self.block_size


def activation_peak_bytes(model: IterationModel, tokens: int, seqs: int) -> float:
    """vLLM's profiling run: the peak activation memory of the largest batch (``tokens`` tokens of ``seqs``
    sequences): hidden states, the MLP's widest intermediate, and fp32 logits of the sampled sequences."""
    cfg = model.cfg
    e = model.dtype.bytes
    width = max(cfg.hidden_size * 4, 2 * (cfg.intermediate_size or 4 * cfg.hidden_size) // model.tp)
    return tokens * width * e + seqs * cfg.vocab_size / model.tp * 4.0


def memory_breakdown(model: IterationModel, *, usable_frac: float, max_batched_tokens: int, max_num_seqs: int,
                     block_size: int, draft: IterationModel | None = None) -> ServingMemory:
    """One GPU of ``model``'s deployment with ``usable_frac`` of its memory usable, a batch of at most
    ``max_batched_tokens`` tokens and ``max_num_seqs`` sequences, and KV blocks of ``block_size`` tokens.

    A speculative-decoding ``draft`` model runs on the same GPUs (sharded over the same tensor-parallel group):
    its weights count with the target's, the larger activation peak of the two, and each KV block holds the
    draft's cache of its tokens beside the target's (vLLM splits the blocks between the two models' caches).
    ``kv_bytes_per_token`` stays the target's."""
    hw, pp = model.hw, model.pp
    layout = model.kv_layout(block_size)
    if not layout.plain:
        return _hybrid_breakdown(model, layout, usable_frac=usable_frac, max_batched_tokens=max_batched_tokens,
                                 max_num_seqs=max_num_seqs, draft=draft)
    gpu = float(hw.memory_bytes)
    usable = gpu * usable_frac
    weights = model.weight_bytes / pp
    activations = activation_peak_bytes(model, max_batched_tokens, max_num_seqs)
    per_token = model.kv_bytes_per_token / pp  # one stage holds its layers' share of every token
    cached_per_token = per_token
    if draft is not None:
        weights += draft.weight_bytes
        activations = max(activations, activation_peak_bytes(draft, max_batched_tokens, max_num_seqs))
        cached_per_token += draft.kv_bytes_per_token
    block_bytes = cached_per_token * block_size
    where = f"tp={model.tp}, pp={pp}"
    with_draft = "" if draft is None else f" (with the draft {draft.cfg.id})"
    if weights >= usable:
        need = math.ceil(weights / usable * model.tp)
        verdict = (f"{model.cfg.id}{with_draft} needs {weights / GiB:.1f} GiB of weights per GPU at {where}, more "
                   f"than the {usable / GiB:.1f} GiB usable on {hw.id}; use at least tp*pp={need}")
    elif usable - weights - activations < block_bytes:
        verdict = (f"{model.cfg.id}{with_draft} leaves no room for a KV cache at {where}: {weights / GiB:.1f} GiB "
                   f"of weights and a {activations / GiB:.1f} GiB activation peak (a batch of "
                   f"{max_batched_tokens:,} tokens) per GPU of the {usable / GiB:.1f} GiB usable on {hw.id}; use "
                   "more tensor or pipeline parallelism, a smaller --max-num-batched-tokens (without chunked "
                   "prefill it is at least the context: lower --max-model-len or --enable-chunked-prefill), or a "
                   "higher --gpu-memory-utilization")
    else:
        blocks = kv_cache_capacity(gpu_memory_bytes=gpu, gpu_memory_utilization_frac=usable_frac,
                                   weight_bytes=weights, activation_peak_bytes=activations,
                                   kv_bytes_per_token=cached_per_token, block_size=block_size)
        return ServingMemory(gpu, usable, weights, activations, blocks * block_bytes, blocks, per_token, block_size,
                             True, "fits")
    return ServingMemory(gpu, usable, weights, activations, 0.0, 0, per_token, block_size, False, verdict)


def _hybrid_breakdown(model: IterationModel, layout: KVLayout, *, usable_frac: float, max_batched_tokens: int,
                      max_num_seqs: int, draft: IterationModel | None) -> ServingMemory:
    """:func:`memory_breakdown` for a cache of several layer types: whole pool blocks (``layout.block_bytes``,
    a stage's share under pipeline parallelism) in what the weights and activations leave."""
    if draft is not None:
        raise UnsupportedError(f"{model.cfg.id}: speculative decoding beside a cache with sliding-window or "
                               "state-space layers is not modelled")
    hw, pp = model.hw, model.pp
    gpu = float(hw.memory_bytes)
    usable = gpu * usable_frac
    weights = model.weight_bytes / pp
    activations = activation_peak_bytes(model, max_batched_tokens, max_num_seqs)
    per_token = model.kv_bytes_per_token / pp
    block_bytes = layout.block_bytes / pp
    state = layout.state_bytes_per_seq / pp if layout.state_layers else None
    where = f"tp={model.tp}, pp={pp}"
    left = usable - weights - activations
    if weights >= usable:
        need = math.ceil(weights / usable * model.tp)
        verdict = (f"{model.cfg.id} needs {weights / GiB:.1f} GiB of weights per GPU at {where}, more than the "
                   f"{usable / GiB:.1f} GiB usable on {hw.id}; use at least tp*pp={need}")
    elif left < block_bytes * (layout.full_groups + layout.local_groups + layout.state_groups):
        verdict = (f"{model.cfg.id} leaves no room for one sequence's KV cache and state at {where}: "
                   f"{weights / GiB:.1f} GiB of weights and a {activations / GiB:.1f} GiB activation peak (a batch "
                   f"of {max_batched_tokens:,} tokens) per GPU of the {usable / GiB:.1f} GiB usable on {hw.id}; use "
                   "more tensor or pipeline parallelism, a smaller --max-num-batched-tokens (without chunked "
                   "prefill it is at least the context: lower --max-model-len or --enable-chunked-prefill), or a "
                   "higher --gpu-memory-utilization")
    else:
        blocks = int(left // block_bytes)
        return ServingMemory(gpu, usable, weights, activations, blocks * block_bytes, blocks, per_token,
                             layout.block_size, True, "fits", state, layout)
    return ServingMemory(gpu, usable, weights, activations, 0.0, 0, per_token, layout.block_size, False, verdict,
                         state, layout)
