"""The training step's formulas, written once over numpy arrays.

The exact step (:func:`perfcast.system.training.simulate_training`, one plan, scalars) and the
vectorized search (:func:`perfcast.sweep.evaluate.evaluate_plans`, arrays of plans) assemble a step
from the same parts with these functions; ``predict --parallelism dpN`` prices its gradient
all-reduce with them too. Each takes floats or arrays (broadcast together) and returns an array (0-d
for scalars: ``float(...)`` it). Times in seconds, sizes in bytes.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["data_parallel_exposed_s", "exposed_reduction_s", "in_flight_microbatches", "memory_parts_bytes",
           "overlapped_s", "step_time_s", "zero3_layer_s"]

Values = npt.ArrayLike


def overlapped_s(comm_s: Values, window_s: Values, interference: float) -> np.ndarray:
    """Exposed time of collectives overlapped with ``window_s`` of compute: what does not fit behind the
    compute, plus ``interference`` (the fitted share a hidden collective still slows the compute it overlaps,
    :class:`perfcast.coefficients.training.TrainingCoefficients`) of what does."""
    c, w = np.asarray(comm_s, dtype=float), np.asarray(window_s, dtype=float)
    return np.maximum(0.0, c - w) + interference * np.minimum(c, w)


def exposed_reduction_s(comm_s: Values, window_s: Values, layers: Values, interference: float) -> np.ndarray:
    """Exposed time of a gradient reduction (or parameter gather) bucketed per layer and overlapped with
    ``window_s`` of the pass it follows: at least the last of ``layers`` buckets, which has nothing left to
    hide behind (0 when nothing is reduced)."""
    c = np.asarray(comm_s, dtype=float)
    return np.where(c > 0, np.maximum(overlapped_s(c, window_s, interference), c / np.asarray(layers)), 0.0)


def data_parallel_exposed_s(zero: Values, all_reduce_s: Values, reduce_scatter_s: Values, gather_s: Values,
                            bwd_window_s: Values, fwd_window_s: Values, layers: Values,
                            interference: float) -> np.ndarray:
    """Exposed time of a pipeline rank's data-parallel collectives after its last micro-batch: ZeRO-0
    all-reduces the gradients behind the backward; ZeRO-1/2 reduce-scatter them behind the backward and
    all-gather the updated parameters behind the next forward; ZeRO-3 does its collectives per layer
    (:func:`zero3_layer_s`), so nothing is left here."""
    z = np.asarray(zero)
    ar = exposed_reduction_s(all_reduce_s, bwd_window_s, layers, interference)
    sharded = (exposed_reduction_s(reduce_scatter_s, bwd_window_s, layers, interference)
               + exposed_reduction_s(gather_s, fwd_window_s, layers, interference))
    return np.where(z == 0, ar, np.where((z == 1) | (z == 2), sharded, 0.0))


def step_time_s(pipeline_s: Values, dp_exposed_s: Values, optimizer_s: Values, overhead_s: float) -> np.ndarray:
    """One optimizer step: the pipeline's makespan, then the slowest pipeline rank's exposed data-parallel
    collectives and optimizer step (ranks along the last axis), then the step's fixed host overhead."""
    tail = np.max(np.asarray(dp_exposed_s, dtype=float) + np.asarray(optimizer_s, dtype=float), axis=-1)
    return np.asarray(pipeline_s, dtype=float) + tail + overhead_s


def zero3_layer_s(fwd_s: Values, bwd_s: Values, gather_s: Values, reduce_scatter_s: Values,
                  interference: float) -> tuple[np.ndarray, np.ndarray]:
    """A layer's forward and backward under ZeRO-3 / FSDP with prefetch: the forward gathers the layer's
    parameters, the backward gathers them again and reduce-scatters the gradients, each overlapped with the
    pass's compute."""
    f, b, ag = np.asarray(fwd_s, dtype=float), np.asarray(bwd_s, dtype=float), np.asarray(gather_s, dtype=float)
    return f + overlapped_s(ag, f, interference), b + overlapped_s(ag + np.asarray(reduce_scatter_s), b, interference)


def in_flight_microbatches(pp: Values, vp: Values, microbatches: Values, rank: Values, *,
                           gpipe: Values = False) -> np.ndarray:
    """Micro-batches (in units of a rank's whole layer set) whose activations pipeline rank ``rank`` holds at
    its peak: 1 without a pipeline, all of them under GPipe, ``pp - rank`` under 1F1B (at most the
    micro-batches), and Megatron's warm-up depth over ``vp`` chunks under interleaved 1F1B (``vp > 1``)."""
    p, v, m, r = (np.asarray(x) for x in (pp, vp, microbatches, rank))
    interleaved = np.minimum(m * v, (p - r - 1) * 2 + (v - 1) * p + 1) / v
    staged = np.where(np.asarray(gpipe), m, np.where(v > 1, interleaved, np.minimum(m, p - r)))
    return np.where(p == 1, 1.0, staged).astype(float)


def memory_parts_bytes(*, params: Values, trainable: Values, quantized_elements: Values, quantized_bytes: Values,
                       max_layer_params: Values, saved_activation_bytes: Values, checkpoint_bytes: Values,
                       max_layer_activation_bytes: Values, in_flight: Values, full_recompute: Values, zero: Values,
                       shards: Values, weight_bytes_per_param: float, grad_bytes: float,
                       optimizer_bytes_per_param: float, weight_copy_bytes_per_param: Values,
                       expert_trainable: Values = 0.0,
                       expert_shards: Values = 1) -> tuple[np.ndarray, ...]:
    """Weights, gradients, optimizer states and activations one pipeline rank's GPU holds, bytes.

    ``params``/``trainable``: the rank's parameters (trainable ones get gradients and optimizer states);
    ``quantized_elements`` of them are stored as ``quantized_bytes`` (QLoRA's frozen base). ZeRO-1 shards the
    optimizer states over ``shards`` data-parallel ranks, ZeRO-2 the gradients too, ZeRO-3 the weights as
    well, holding two gathered layers (``max_layer_params`` each) in flight. Low-precision training keeps
    ``weight_copy_bytes_per_param`` of quantized copies of every weight (the precision recipe's
    :attr:`~perfcast.workload.precision.PrecisionRecipe.weight_copy_bytes_per_param`: 1 for FP8, 0 for BF16).
    ``expert_trainable`` of the trainable parameters are routed experts, which ZeRO shards over
    their own data-parallel group of ``expert_shards`` ranks (the expert-DP group: dp*cp/ep, or tp*dp*cp/ep
    with whole experts), not over ``shards``. Activations: what autograd saves for ``in_flight`` micro-batches
    (:func:`in_flight_microbatches`), or under full recompute each layer's input (``checkpoint_bytes``) plus
    one layer's saved activations, rebuilt during its backward.
    """
    par, trn, qe, qb = (np.asarray(x, dtype=float) for x in (params, trainable, quantized_elements, quantized_bytes))
    z, s = np.asarray(zero), np.asarray(shards)
    z3 = z == 3
    we = weight_bytes_per_param
    ex, es = np.asarray(expert_trainable, dtype=float), np.asarray(expert_shards, dtype=float)
    dense = par - qe - ex  # what ZeRO shards over `shards`; the experts over `expert_shards`
    weights = np.where(z3, dense * we / s + ex * we / es + qb / s + 2.0 * np.asarray(max_layer_params) * we,
                       (par - qe) * we + qb)
    copy = np.asarray(weight_copy_bytes_per_param, dtype=float)  # one value, or one per plan (a search)
    if copy.any():  # the quantized weight copies cached across micro-batches
        weights = weights + np.where(z3, dense / s + ex / es, par - qe) * copy
    dense_trn = trn - ex
    grads = np.where(z >= 2, dense_trn / s + ex / es, trn) * grad_bytes
    optimizer = np.where(z >= 1, dense_trn / s + ex / es, trn) * optimizer_bytes_per_param
    flight = np.asarray(in_flight, dtype=float)
    acts = np.where(full_recompute, np.asarray(checkpoint_bytes) * flight + np.asarray(max_layer_activation_bytes),
                    np.asarray(saved_activation_bytes) * flight)
    return weights, grads, optimizer, acts
