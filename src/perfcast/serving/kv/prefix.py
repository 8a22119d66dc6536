"""Prefix hashes of prompts that share a system prompt (what prefix caching matches)."""

from __future__ import annotations

from perfcast.errors import ConfigError

__all__ = ["prefix_block_hashes"]


def prefix_block_hashes(
    prefix_id: int, shared_prefix_tokens: int, prompt_tokens: int, block_size: int, unique_id: int
) -> list[int]:
    """Chained hashes of a prompt's full blocks when requests share a system prompt.

    The first ``shared_prefix_tokens`` tokens of every request with the same ``prefix_id`` are identical;
    the rest of the prompt is unique to ``unique_id`` (use the request id). Block ``i`` covers tokens
    ``[i * block_size, (i + 1) * block_size)``; it hashes only shared content if it lies wholly inside the
    shared prefix, and every hash chains the previous one, so a block after the first unique token never
    matches another request's. Returns ``prompt_tokens // block_size`` ints (the partial last block has no hash).
    Hashes are Python's deterministic tuple-of-int hashes, stable within and across runs.
    """
    for name, value in (("shared_prefix_tokens", shared_prefix_tokens), ("prompt_tokens", prompt_tokens)):
        if value < 0:
            raise ConfigError(f"{name}={value} must be >= 0")
    if block_size < 1:
        raise ConfigError(f"block_size={block_size} must be >= 1")
    out: list[int] = []
    prev = 0
    for i in range(prompt_tokens // block_size):
        if (i + 1) * block_size <= shared_prefix_tokens:
            prev = hash((prev, 0, prefix_id, i))
        else:
            prev = hash((prev, 1, prefix_id, unique_id, i))
        out.append(prev)
    return out
