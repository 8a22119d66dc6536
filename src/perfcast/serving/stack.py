"""What an engine's software stack changes beneath the iteration model: its all-reduce kernels and, off CUDA,
the efficiency of its kernels.

**Custom all-reduce.** vLLM, SGLang and TensorRT-LLM reduce a small tensor-parallel message with their own
kernels over the GPUs' direct links (NVSwitch, or xGMI's full mesh) rather than NCCL: in the one-shot form
each GPU reads every peer's buffer and sums (``bytes x (tp - 1)`` read over its links), in the two-shot form
the GPUs reduce-scatter then all-gather through the same buffers (``2 x bytes x (tp - 1) / tp``, two
handshakes). The engine picks the faster for the size; messages above the engine's limit go to NCCL, and a
node whose GPUs are not all directly linked (PCIe, NVLink pairs) never takes this path. On a mesh each peer
has its own link, so a group of ``tp`` GPUs out of a node's ``n`` reads over ``tp - 1`` of the ``n - 1``
links. The per-call latency and the share of the links' bandwidth reached are fitted coefficients
(:class:`perfcast.coefficients.serving.CustomAllReduce`).

**Stack efficiency.** The kernel model is fitted on CUDA kernels; a GPU served through another stack (ROCm)
reaches a different share of its datasheet peaks. :func:`stack_hardware` scales the GPU's matrix peaks and
memory bandwidth by the stack's fitted fractions (:class:`perfcast.coefficients.serving.StackEfficiency`),
so every kernel priced for it (GEMMs, attention, element-wise) sees the rates that stack reaches.
"""

from __future__ import annotations

import numpy as np

from perfcast.catalog.hardware import Hardware
from perfcast.coefficients.serving import CustomAllReduce, StackEfficiency
from perfcast.system.cluster import Cluster

__all__ = ["CUSTOM_ALLREDUCE_SIZES", "custom_allreduce_times", "stack_hardware"]

CUSTOM_ALLREDUCE_SIZES = (2, 4, 6, 8)  # the world sizes vLLM's (and SGLang's) custom all-reduce takes


def custom_allreduce_times(nbytes: np.ndarray, tp: int, cluster: Cluster, co: CustomAllReduce,
                           max_bytes: float) -> np.ndarray:
    """Seconds of an engine's all-reduce of ``nbytes`` (per GPU) over ``tp`` GPUs of one ``cluster`` node
    (module docstring); ``inf`` where the engine would not take this path."""
    nbytes = np.asarray(nbytes, dtype=float)
    link = cluster.intra_node
    if tp not in CUSTOM_ALLREDUCE_SIZES or tp > cluster.gpus_per_node or link.topology not in ("switch", "mesh"):
        return np.full(nbytes.shape, np.inf)
    ingress_Bps = co.bandwidth_frac * link.bandwidth_Bps
    if link.topology == "mesh" and cluster.gpus_per_node > 1:
        ingress_Bps *= (tp - 1) / (cluster.gpus_per_node - 1)
    one_shot = co.latency_s + nbytes * (tp - 1) / ingress_Bps
    two_shot = 2.0 * co.latency_s + 2.0 * nbytes * (tp - 1) / tp / ingress_Bps
    return np.where(nbytes <= max_bytes, np.minimum(one_shot, two_shot), np.inf)


def stack_hardware(hw: Hardware, eff: StackEfficiency) -> Hardware:
    """``hw`` with its peaks and memory bandwidth as a stack of efficiency ``eff`` reaches them (``hw`` itself
    for the identity)."""
    if eff.matrix_flops_frac == 1.0 and eff.memory_bandwidth_frac == 1.0:
        return hw
    peaks = hw.peak_flops_per_s.model_dump()
    scaled = {k: (v * eff.matrix_flops_frac if v is not None else None) for k, v in peaks.items()}
    return hw.model_copy(update={"peak_flops_per_s": type(hw.peak_flops_per_s).model_validate(scaled),
                                 "memory_bandwidth_Bps": hw.memory_bandwidth_Bps * eff.memory_bandwidth_frac})
