"""What one serving GPU caches per layer type, and how vLLM (v1, its hybrid KV cache manager) pools it.

Bytes per layer type (vLLM's ``KVCacheSpec`` subclasses, ``page_size_bytes`` / ``block_size``), on one GPU:

* full attention (``FullAttentionSpec``): ``2 x kv_heads_per_gpu x head_size x kv dtype bytes`` per token and
  layer, the KV heads split over tensor parallelism and replicated once ``tp`` exceeds them (each GPU then
  holds one); under attention data parallelism each GPU holds whole tokens of its own sequences;
* MLA (``MLAAttentionSpec``): one latent of ``kv_lora_rank + qk_rope_head_dim`` elements per token and layer,
  no separate V, whole on every tensor-parallel GPU;
* sliding window (``SlidingWindowSpec``) and Llama-4's chunked local attention (``ChunkedLocalAttentionSpec``):
  the full-attention page, but a sequence keeps only the blocks its window can still see;
* Mamba (``MambaSpec``): a constant conv + SSM state per sequence and layer
  (:meth:`perfcast.catalog.architecture.SSMConfig.cache_state_elements`), in the model dtype unless an SSM cache
  dtype is given; a layer whose mixer has no state formula here is refused.

The pool (``vllm/v1/core/kv_cache_utils.py``, as recalled, not re-checked against a stored copy):

* every layer's page has one size. With Mamba layers beside attention, vLLM raises the attention block size to
  ``16 x cdiv(mamba_page, 16 x attention_page_per_token)`` tokens (``HybridAttentionMambaModelConfig``; 16 is
  the attention kernels' block alignment) and pads the Mamba page up to the attention page;
* layers of one type form KV cache groups of ``group_size`` layers: the fewest layers of any type, or the most
  when that is under 1.25 x the fewest (less padding); a type's last group is padded to ``group_size`` layers;
* one block of the shared pool is a page of every layer of one group, ``group_size x page`` bytes; a sequence
  takes, per full-attention group, ``cdiv(tokens, block_size)`` blocks, per sliding/chunked group the blocks of
  its window (:mod:`perfcast.serving.kv.hybrid`), per Mamba group one block (its state).

A model of one attention type only (every layer full, or MLA) is one group of every layer: a block is
``block_size`` tokens of all layers, as perfcast's block managers have always counted it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from perfcast.catalog.models import ModelConfig
from perfcast.dtypes import DType
from perfcast.errors import UnsupportedError

__all__ = ["KVLayout", "MAMBA_BLOCK_ALIGNMENT", "kv_layout", "state_bytes_per_layer"]

MAMBA_BLOCK_ALIGNMENT = 16  # tokens: vLLM rounds the raised attention block size of Mamba hybrids to this


def _mamba_state(cfg: ModelConfig, tp: int) -> tuple[int, int]:
    assert cfg.ssm is not None  # only called for a model whose layer_mixers name "ssm"
    return cfg.ssm.cache_state_elements(tp)


# mixer -> (conv-like elements in the model dtype, recurrent-state elements in the SSM cache dtype) per sequence
# and layer on one GPU of tp: one entry per mixer with a constant per-sequence state
_STATE_ELEMENTS: dict[str, Callable[[ModelConfig, int], tuple[int, int]]] = {"ssm": _mamba_state}
_STATELESS = ("mlp", "moe")  # mixers that cache nothing (Nemotron-H's MLP-only and MoE-only layers)


def state_bytes_per_layer(cfg: ModelConfig, mixer: str, *, tp: int, dtype: DType,
                          state_dtype: DType | None = None) -> float:
    """Bytes of one sequence's cached state for one layer whose mixer is ``mixer`` on one GPU of ``tp``: its
    conv part in ``dtype``, its recurrent part in ``state_dtype`` (default ``dtype``). One-line
    UnsupportedError for a mixer with no state formula."""
    formula = _STATE_ELEMENTS.get(mixer)
    if formula is None:
        raise UnsupportedError(f"{cfg.id}: the serving KV cache has no per-sequence state formula for {mixer!r} "
                               "layers; refused rather than cached as attention")
    conv, state = formula(cfg, tp)
    return float(conv * dtype.bytes + state * (state_dtype or dtype).bytes)


@dataclass(frozen=True)
class KVLayout:
    """One GPU's cache by layer type and vLLM's pool of it (module docstring). Bytes are per GPU, every layer of
    the model (a pipeline stage holds its share)."""

    block_size: int  # tokens per attention block (raised for Mamba hybrids)
    attention_bytes_per_token_layer: float  # one attention layer's page / block_size
    full_layers: int
    local_layers: int  # sliding-window or chunked layers
    local_kind: str | None  # "sliding", "chunked" or None
    local_window: int | None  # tokens: sliding_window or attention_chunk_size
    state_layers: int
    state_bytes_per_layer: float  # one layer's state of one sequence (conv + ssm)
    group_layers: int  # layers per KV cache group
    full_groups: int
    local_groups: int
    state_groups: int

    @property
    def plain(self) -> bool:
        """Every layer full attention (or MLA): the one-group cache perfcast has always counted."""
        return not self.local_layers and not self.state_layers

    @property
    def page_bytes(self) -> float:
        """One layer's page: ``block_size`` tokens of attention, or one (padded) Mamba state."""
        attention = self.attention_bytes_per_token_layer * self.block_size
        return max(attention, self.state_bytes_per_layer)

    @property
    def block_bytes(self) -> float:
        """One block of the shared pool: a page of each of a group's layers."""
        return self.page_bytes * self.group_layers

    @property
    def kv_bytes_per_token(self) -> float:
        """Attention K/V (or latent) of one token over every attention layer, as cached while in the window."""
        return self.attention_bytes_per_token_layer * (self.full_layers + self.local_layers)

    @property
    def state_bytes_per_seq(self) -> float:
        """The state of one sequence over every Mamba layer (unpadded)."""
        return self.state_bytes_per_layer * self.state_layers


def _attention_bytes_per_token_layer(cfg: ModelConfig, *, tp: int, attention_dp: bool, kv_dtype: DType) -> float:
    mla = cfg.mla
    if mla is not None:
        return float((mla.kv_lora_rank + mla.qk_rope_head_dim) * kv_dtype.bytes / (tp if attention_dp else 1))
    split = tp if attention_dp else min(tp, max(1, cfg.num_kv_heads))
    return 2.0 * cfg.num_kv_heads * cfg.head_dim * kv_dtype.bytes / split


def kv_layout(cfg: ModelConfig, *, tp: int = 1, attention_dp: bool = False, kv_dtype: DType = DType.BF16,
              dtype: DType = DType.BF16, state_dtype: DType | None = None, block_size: int = 16) -> KVLayout:
    """``cfg``'s cache on one GPU of a ``tp``-way replica (module docstring): attention in ``kv_dtype``, Mamba
    conv state in ``dtype`` and SSM state in ``state_dtype`` (default ``dtype``), ``block_size`` the asked
    attention block size. One-line UnsupportedError for a layer mixer with no state formula, and for a model
    with both sliding and chunked layers (two local windows)."""
    full = local = 0
    kinds: set[str] = set()
    state_layers = 0
    state_bytes = 0.0
    if cfg.linear_attention is not None:
        raise UnsupportedError(f"{cfg.id}: serving a model with Gated DeltaNet (linear attention) layers is not "
                               "modelled (their per-sequence state and recurrent decode step); refused rather "
                               "than cached and priced as attention")
    mixers = cfg.ssm.layer_mixers if cfg.ssm is not None else ("attention",) * cfg.num_layers
    for i, mixer in enumerate(mixers):
        if mixer == "attention":
            span = cfg.attention_type(i)
            if span == "full":
                full += 1
            else:
                local += 1
                kinds.add(span)
        elif mixer in _STATELESS:
            continue
        else:
            layer = state_bytes_per_layer(cfg, mixer, tp=tp, dtype=dtype, state_dtype=state_dtype)
            if state_layers and layer != state_bytes:
                raise UnsupportedError(f"{cfg.id}: state layers of different sizes in one model are not modelled")
            state_layers += 1
            state_bytes = layer
    if len(kinds) > 1:
        raise UnsupportedError(f"{cfg.id}: both sliding-window and chunked layers in one model are not modelled")
    kind: str | None = next(iter(kinds)) if kinds else None
    window = cfg.sliding_window if kind == "sliding" else cfg.attention_chunk_size if kind == "chunked" else None
    per_token = _attention_bytes_per_token_layer(cfg, tp=tp, attention_dp=attention_dp, kv_dtype=kv_dtype)
    if state_layers and full + local:  # vLLM raises the attention block so its page holds a Mamba state
        align = MAMBA_BLOCK_ALIGNMENT
        block_size = max(block_size, align * math.ceil(state_bytes / (align * per_token)))
    counts = [n for n in (full, local, state_layers) if n]
    if len(counts) == 1:
        group = counts[0]
    else:
        fewest, most = min(counts), max(counts)
        group = most if most < 1.25 * fewest else fewest
    return KVLayout(block_size=block_size, attention_bytes_per_token_layer=per_token if full + local else 0.0,
                    full_layers=full, local_layers=local, local_kind=kind, local_window=window,
                    state_layers=state_layers, state_bytes_per_layer=state_bytes, group_layers=group,
                    full_groups=-(-full // group), local_groups=-(-local // group),
                    state_groups=-(-state_layers // group))
