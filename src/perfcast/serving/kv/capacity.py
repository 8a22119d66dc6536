"""How many KV blocks a GPU's memory holds after the weights and activations (vLLM's profiling rule)."""

from __future__ import annotations

import math

from perfcast.errors import ConfigError
from perfcast.units import GiB

__all__ = ["kv_cache_capacity"]


def kv_cache_capacity(
    *,
    gpu_memory_bytes: float,
    gpu_memory_utilization_frac: float,
    weight_bytes: float,
    activation_peak_bytes: float,
    kv_bytes_per_token: float,
    block_size: int,
) -> int:
    """GPU KV blocks vLLM would allocate: floor((memory * utilization - weights - activations) / block bytes).

    ``kv_bytes_per_token`` is the per-GPU KV footprint of one token over all layers (K and V). Raises a
    one-line ``ConfigError`` ("model does not fit ...", needed vs available in GiB) when not even one block fits.
    """
    if not gpu_memory_bytes > 0:
        raise ConfigError(f"gpu_memory_bytes={gpu_memory_bytes} must be > 0")
    if not 0.0 < gpu_memory_utilization_frac <= 1.0:
        raise ConfigError(f"gpu_memory_utilization_frac={gpu_memory_utilization_frac} must be in (0, 1]")
    if not weight_bytes >= 0 or not activation_peak_bytes >= 0:
        raise ConfigError(
            f"weight_bytes={weight_bytes} and activation_peak_bytes={activation_peak_bytes} must be >= 0"
        )
    if not kv_bytes_per_token > 0 or not math.isfinite(kv_bytes_per_token):
        raise ConfigError(f"kv_bytes_per_token={kv_bytes_per_token} must be a finite number > 0")
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ConfigError(f"block_size={block_size!r} must be an int >= 1")
    available_bytes = gpu_memory_bytes * gpu_memory_utilization_frac
    block_bytes = kv_bytes_per_token * block_size
    kv_budget_bytes = available_bytes - weight_bytes - activation_peak_bytes
    num_blocks = int(kv_budget_bytes // block_bytes) if kv_budget_bytes > 0 else 0
    if num_blocks <= 0:
        needed_bytes = weight_bytes + activation_peak_bytes + block_bytes
        raise ConfigError(
            f"model does not fit: needs {needed_bytes / GiB:.2f} GiB (weights {weight_bytes / GiB:.2f} + "
            f"activations {activation_peak_bytes / GiB:.2f} + one KV block {block_bytes / GiB:.4f}) but only "
            f"{available_bytes / GiB:.2f} GiB is available ({gpu_memory_utilization_frac:g} of "
            f"{gpu_memory_bytes / GiB:.2f} GiB); use more tensor parallelism, a smaller dtype, a bigger GPU or a "
            "higher gpu_memory_utilization")
    return num_blocks
