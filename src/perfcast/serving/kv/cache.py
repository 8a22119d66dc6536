"""The one protocol the simulator holds a KV cache by: both block managers answer it the same way.

:class:`~perfcast.serving.kv.paged.BlockManager` names blocks (prefix caching);
:class:`~perfcast.serving.kv.counting.CountingBlockManager` counts them (O(1) per call, beam search). The
schedulers, the engine and speculative decoding see only this protocol. Tokens and blocks are counts; see
:mod:`perfcast.serving.kv` for the semantics (watermark, sharing, swapping, the decode group).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

__all__ = ["KVCache"]


class KVCache(Protocol):
    """A paged KV cache of one engine (see the module docstring)."""

    num_blocks: int  # GPU blocks of the cache
    block_size: int  # token slots per block
    prefix_hit_tokens: int  # prompt tokens served from cached prefix blocks, over the run
    prefix_query_tokens: int  # prompt tokens looked up, over the run

    @property
    def num_used_blocks(self) -> int:
        """Blocks referenced by a live sequence."""
        ...

    @property
    def num_available_blocks(self) -> int:
        """Blocks a new allocation or a growing sequence can take (free and cached; no watermark)."""
        ...

    def fill_fracs(self) -> tuple[float, float]:
        """(blocks in use, unfilled slots of the used blocks) as fractions of the cache."""
        ...

    def seq_num_tokens(self, seq_id: int) -> int:
        """Tokens sequence ``seq_id`` holds (per beam)."""
        ...

    def beam_blocks_for(self, num_tokens: int, beams: int = 1, prompt_tokens: int = 0) -> int:
        """Blocks of a request of ``beams`` beams holding ``num_tokens`` tokens each over ``prompt_tokens``
        shared prompt tokens."""
        ...

    def can_ever_allocate(self, num_tokens: int, beams: int = 1, prompt_tokens: int = 0) -> bool:
        """Whether such a prompt fits under the watermark on an empty cache (else it never will)."""
        ...

    def can_allocate(self, seq_id: int, num_tokens: int, prefix_hashes: Sequence[int] | None = None,
                     beams: int = 1, prompt_tokens: int = 0) -> bool:
        """Whether ``seq_id`` can be admitted now, keeping the watermark."""
        ...

    def allocate(self, seq_id: int, num_tokens: int, prefix_hashes: Sequence[int] | None = None,
                 beams: int = 1, prompt_tokens: int = 0) -> int:
        """Admit ``seq_id``; returns its tokens served from cached prefix blocks."""
        ...

    def append_need(self, seq_id: int, num_new_tokens: int) -> int:
        """New blocks ``seq_id`` takes to grow by ``num_new_tokens``."""
        ...

    def can_append(self, seq_id: int, num_new_tokens: int = 1) -> bool:
        """Whether ``seq_id`` can grow by ``num_new_tokens`` (no watermark)."""
        ...

    def append(self, seq_id: int, num_new_tokens: int = 1) -> None:
        """Grow ``seq_id`` by ``num_new_tokens``."""
        ...

    def decode_fits(self, num_seqs: int) -> bool:
        """Whether ``num_seqs`` sequences can each take one more token even if each needs a new block."""
        ...

    def add_to_group(self, seq_id: int) -> None:
        """``seq_id`` joins the decode group (it grows with it)."""
        ...

    def grow_group(self, num_new_tokens: int) -> None:
        """Every member of the decode group grows by ``num_new_tokens``."""
        ...

    def max_group_growth(self, limit: int) -> int:
        """The most tokens (at most ``limit``) every member of the decode group can grow by."""
        ...

    def free(self, seq_id: int) -> None:
        """Release ``seq_id``'s blocks."""
        ...

    def can_swap_out(self, seq_id: int) -> bool:
        """Whether host memory holds ``seq_id``'s blocks."""
        ...

    def swap_out(self, seq_id: int) -> int:
        """Move ``seq_id`` to host memory; returns the blocks moved."""
        ...

    def can_swap_in(self, seq_id: int) -> bool:
        """Whether ``seq_id`` fits back on the GPU, keeping the watermark."""
        ...

    def swap_in(self, seq_id: int) -> int:
        """Bring ``seq_id`` back; returns the blocks moved."""
        ...

    def check_invariants(self) -> None:
        """Audit the cache (O(blocks)); AssertionError when broken."""
        ...
