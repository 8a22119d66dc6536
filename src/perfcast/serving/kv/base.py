"""What both KV block managers share: the cache's shape, its argument checks and the block arithmetic."""

from __future__ import annotations

from perfcast.errors import ConfigError, PerfcastError

__all__ = ["KVCacheError", "PagedCache", "max_uniform_growth"]


class KVCacheError(PerfcastError):
    """A KV block request the cache cannot honour (over-allocation, duplicate or unknown sequence id)."""


class PagedCache:
    """What both managers share: the cache's shape, its argument checks and the block arithmetic."""

    def __init__(self, num_blocks: int, block_size: int, watermark_frac: float, num_cpu_blocks: int) -> None:
        if isinstance(num_blocks, bool) or not isinstance(num_blocks, int) or num_blocks < 1:
            raise ConfigError(f"num_blocks={num_blocks!r} must be an int >= 1")
        if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
            raise ConfigError(f"block_size={block_size!r} must be an int >= 1")
        if not 0.0 <= watermark_frac < 1.0:
            raise ConfigError(f"watermark_frac={watermark_frac!r} must be in [0, 1)")
        if isinstance(num_cpu_blocks, bool) or not isinstance(num_cpu_blocks, int) or num_cpu_blocks < 0:
            raise ConfigError(f"num_cpu_blocks={num_cpu_blocks!r} must be an int >= 0")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.watermark_frac = float(watermark_frac)
        self.watermark_blocks = int(watermark_frac * num_blocks)
        self.num_cpu_blocks = num_cpu_blocks
        self.prefix_hit_tokens = 0
        self.prefix_query_tokens = 0

    def num_blocks_for(self, num_tokens: int) -> int:
        """ceil(num_tokens / block_size)."""
        return -(-num_tokens // self.block_size)

    def beam_blocks_for(self, num_tokens: int, beams: int = 1, prompt_tokens: int = 0) -> int:
        """Blocks of a request of ``beams`` beams holding ``num_tokens`` tokens each, whose first
        ``prompt_tokens`` are the shared prompt (its full blocks held once; see the module docstring)."""
        blocks = -(-num_tokens // self.block_size)
        if beams == 1:
            return blocks
        return blocks * beams - (beams - 1) * (prompt_tokens // self.block_size)

    def can_ever_allocate(self, num_tokens: int, beams: int = 1, prompt_tokens: int = 0) -> bool:
        """Whether a prompt of ``num_tokens`` (``beams`` beams over ``prompt_tokens`` shared tokens) fits under
        the watermark on an empty cache (else it never will)."""
        return self.num_blocks - self.beam_blocks_for(num_tokens, beams, prompt_tokens) >= self.watermark_blocks

    @property
    def num_available_blocks(self) -> int:  # pragma: no cover - each manager counts its own
        """Blocks a new allocation or a growing sequence can take (no watermark)."""
        raise NotImplementedError

    def append_need(self, seq_id: int, num_new_tokens: int) -> int:  # pragma: no cover - each manager's own
        """New blocks ``seq_id`` takes to grow by ``num_new_tokens`` (0 when its last block has room)."""
        raise NotImplementedError

    def can_append(self, seq_id: int, num_new_tokens: int = 1) -> bool:
        """Whether ``seq_id`` can grow by ``num_new_tokens`` (no watermark; cached prefix blocks may be evicted)."""
        return self.append_need(seq_id, num_new_tokens) <= self.num_available_blocks

    def decode_fits(self, num_seqs: int) -> bool:
        """Whether ``num_seqs`` sequences (beams count one each) can each take one more token even if each
        needs a new block."""
        return num_seqs <= self.num_available_blocks


def max_uniform_growth(state: list[tuple[int, int]], have: int, limit: int, block_size: int) -> int:
    """The most tokens ``j <= limit`` that sequences of (tokens, blocks) ``state`` can each grow by with ``have``
    blocks to spare (bisection: the blocks needed grow with ``j``)."""

    def need(j: int) -> int:
        return sum(max(0, -(-(t + j) // block_size) - b) for t, b in state)

    if need(limit) <= have:
        return limit
    lo, hi = 0, limit  # need(lo) <= have < need(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if need(mid) <= have:
            lo = mid
        else:
            hi = mid
    return lo
