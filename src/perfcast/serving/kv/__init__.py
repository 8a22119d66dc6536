"""Paged KV-cache block manager for one serving replica, with vLLM's semantics.

The model follows vLLM's PagedAttention design (Kwon et al., "Efficient Memory Management for Large
Language Model Serving with PagedAttention", SOSP 2023) as implemented by its block managers (the v0
``BlockSpaceManager`` for the watermark and swapping, and the v1 ``KVCacheManager`` / "Automatic Prefix
Caching" design document for prefix caching). It is a description of behaviour, not a port of the code.

Blocks
    GPU memory for the KV cache is ``num_blocks`` blocks of ``block_size`` token slots. A sequence
    holding ``n`` tokens owns exactly ``ceil(n / block_size)`` blocks; only its last block may be
    partly filled (that unfilled tail is the internal fragmentation PagedAttention leaves).
    Every GPU block is in exactly one of three states, so ``used + free + cached == num_blocks``:

    * used: referenced by at least one live (GPU-resident) sequence, with a reference count;
    * free: empty, on the free list;
    * cached: refcount 0 but holding a full block whose prefix hash is known; kept resident so a
      later request with the same prefix can reuse it, and evicted least-recently-freed first only
      when a new block is needed and the free list is empty.

    Cached blocks are as good as free for admission: "available" below means free + cached.

Admission and the watermark
    ``can_allocate`` admits a new prompt only if, after taking the blocks it needs, at least
    ``watermark_blocks = int(watermark_frac * num_blocks)`` blocks remain available (vLLM keeps this
    headroom so running sequences can still grow without immediate preemption). ``allocate`` itself
    does not apply the watermark; it only refuses (``KVCacheError``) when the blocks physically do not
    exist, so a scheduler must call ``can_allocate`` first. ``can_ever_allocate`` tells a prompt that
    could never be admitted even on an empty cache (vLLM's ``AllocStatus.NEVER``) apart from one that
    must wait. Growing a running sequence (``can_append``/``append``) and ``can_swap_out`` ignore the
    watermark; ``can_swap_in`` applies it, as vLLM does.

Prefix caching (``enable_prefix_caching=True``)
    The caller gives each prompt the hashes of its full blocks (``prefix_block_hashes`` builds them
    for a shared-system-prompt workload). A block hash covers the whole prefix up to and including
    that block (hashes are chained), so equal hashes mean equal prefixes and equal KV content.

    * Lookup walks the prompt's hashes from the first block and stops at the first miss. Each hit
      block is shared (its reference count goes up) instead of allocated; a hit on a cached
      (refcount-0) block moves it back to used, so it still consumes an available block.
    * Hits are whole blocks, and at most ``num_tokens - 1`` tokens are served from the cache: when
      every block of a block-aligned prompt hits, the last one is recomputed into a new block, so
      at least one token is always computed (it produces the first output token's logits).
    * Newly allocated prompt blocks that carry a hash are registered in the cache at allocation
      time (vLLM v1 likewise caches a full block as soon as it is scheduled for computation), so a
      request admitted in the same iteration can already share them. A hash already cached by
      another block is not registered twice; such a block is private and freed normally.
    * Blocks grown by ``append`` (decode tokens, or prompt blocks without a hash) are never cached.
    * ``free`` releases a sequence's blocks last block first; a block whose refcount drops to 0 goes
      to the cached LRU list if it carries a hash, else straight to the free list. Releasing tail
      blocks first makes them the first evicted, which keeps shared prefixes longest.
    * Counters ``prefix_query_tokens`` (prompt tokens passed to ``allocate``) and
      ``prefix_hit_tokens`` (tokens served from the cache) give the hit rate, as vLLM reports it.

Preemption
    Swapping moves a whole sequence: ``swap_out`` copies each of its blocks into a CPU block (shared
    prefix blocks are copied too, one CPU block per sequence, as vLLM does) and drops its GPU
    references; ``swap_in`` brings it back, re-sharing blocks whose hash is still cached on the GPU.
    Both return the number of blocks transferred (the sequence's block count), for a PCIe-time model.
    Recompute preemption is ``free`` followed later by a fresh ``allocate`` by the caller.

The decode group
    The sequences that decode grow by one token per decode iteration together. A caller adds each to
    the group (``add_to_group``; it leaves when freed or swapped out), asks how far the whole group can
    grow (``max_group_growth``) and grows it (``grow_group``). ``BlockManager`` names blocks and grows
    members one by one; ``CountingBlockManager`` grows the group in O(block_size) without touching the
    members: it keeps each member's tokens relative to a group clock and counts members by their
    position within a block, since a member takes a new block exactly when its last one is full.

Beam search (``CountingBlockManager`` only)
    A request decoding ``b`` beams is one sequence id holding ``b`` beams of ``num_tokens`` tokens each
    (prompt plus that beam's generated tokens): the prompt's full blocks are shared, and every beam owns
    the rest, ``b * ceil(num_tokens / block_size) - (b - 1) * (prompt_tokens // block_size)`` blocks in all.
    vLLM's beams share the prompt's partial last block until each beam's first write copies it
    (copy-on-write); here every beam holds its copy from admission on (counted simply: at most ``b - 1``
    blocks early, during the prompt's own iterations). With ``b = 1`` this is ``ceil(num_tokens / block_size)``.
    Growing the request by a token grows every beam, so it takes ``b`` blocks whenever its last one is full,
    and the decode group counts rows (beams), not sequences. The manager that names blocks (prefix caching)
    does not model beams.

Layer types (vLLM v1's hybrid KV cache manager)
    A model whose layers are all full attention (or MLA) is one cache group and uses the managers above,
    unchanged. Sliding-window, chunked-local and state-space (Mamba) layers pool their cache by group
    (:mod:`perfcast.serving.kv.layout` gives the bytes of each layer type and the pool's block);
    :class:`~perfcast.serving.kv.hybrid.HybridBlockManager` counts the blocks of each group (a window's blocks
    freed as they leave it, a Mamba state taken at admission and freed at finish or preemption) and
    :class:`~perfcast.serving.kv.hybrid_prefix.HybridPrefixBlockManager` names them for prefix caching with
    sliding windows.

Sequence ids are the caller's ints. Every call costs O(blocks touched) with plain ints, lists and dicts;
``check_invariants`` is the O(total blocks) audit the tests use.
"""

from __future__ import annotations

from perfcast.serving.kv.base import KVCacheError
from perfcast.serving.kv.cache import KVCache
from perfcast.serving.kv.capacity import kv_cache_capacity
from perfcast.serving.kv.counting import CountingBlockManager
from perfcast.serving.kv.paged import BlockManager
from perfcast.serving.kv.prefix import prefix_block_hashes

__all__ = ["BlockManager", "CountingBlockManager", "KVCache", "KVCacheError", "kv_cache_capacity",
           "prefix_block_hashes"]
