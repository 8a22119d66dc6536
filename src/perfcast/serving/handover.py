"""Requests on their way to a pool of replicas, and the pools of disaggregated serving.

Two things delay a request between replicas (or before the first): a retrieval stage (RAG) that runs
before the request reaches the arrival pool, and under disaggregated serving (``num_prefill_replicas`` > 0,
as in DistServe/Splitwise) the hand-over of its KV cache from the prefill pool to the decode pool once its
prompt is done (its first token is out). Each tensor-parallel rank sends its shard: the per-GPU KV bytes of
the request's context over the link's bandwidth, plus the link's latency. Unless the config names a bandwidth,
the link is the cluster's (:func:`kv_transfer_bandwidth`): when every GPU of the deployment sits in one
scale-up domain (a DGX node's NVSwitch, an NVL72 rack's NVLink) the KV moves over that fabric at its per-GPU
bandwidth, otherwise over the NICs at their share per GPU. Hand-overs are ordered by (time, request id), so
runs repeat.
"""

from __future__ import annotations

import heapq
import math

from perfcast.errors import ConfigError
from perfcast.serving.config import ServingConfig
from perfcast.serving.request import Request
from perfcast.system.cluster import Cluster

__all__ = ["Handovers", "kv_transfer_bandwidth"]


def kv_transfer_bandwidth(cfg: ServingConfig, cluster: Cluster) -> float:
    """Per GPU, the bytes/s a prompt's KV cache moves at from the prefill to the decode pool (module docstring)."""
    if cfg.kv_transfer_bandwidth_Bps is not None:
        return cfg.kv_transfer_bandwidth_Bps
    gpus = cfg.num_replicas * cfg.tensor_parallel_size * cfg.pipeline_parallel_size
    if gpus <= cluster.domain:
        return cluster.intra_node.bandwidth_Bps
    nic = cluster.inter_bandwidth_per_gpu_Bps
    if nic <= 0:
        raise ConfigError(f"the deployment's {gpus} GPUs span more than one {cluster.id} scale-up domain of "
                          f"{cluster.domain} GPUs and the cluster has no network between them: give "
                          "--kv-transfer-bandwidth or a cluster with NICs")
    return nic


class Handovers:
    """The queue of requests travelling to a pool, and which pool a request arrives at or decodes in."""

    def __init__(self, cfg: ServingConfig, kv_gpu_bytes_per_token: float, bandwidth_Bps: float) -> None:
        disagg = cfg.num_prefill_replicas
        self.num_prefill_replicas = disagg
        self.arrival_pool = range(disagg) if disagg else range(cfg.num_replicas)  # where requests arrive
        self.decode_pool = range(disagg, cfg.num_replicas)  # disaggregated serving: where they decode
        self.queue: list[tuple[float, int, int]] = []  # (time it reaches a pool, request id, 0 arrival / 1 decode)
        self._held: dict[int, Request] = {}
        self._latency_s = cfg.kv_transfer_latency_s
        self._bandwidth_Bps = bandwidth_Bps
        self._kv_gpu_bytes_per_token = kv_gpu_bytes_per_token  # one GPU's KV bytes of a token (its stage's layers)

    def next_s(self) -> float:
        """When the next request reaches its pool (s; inf when none travels)."""
        return self.queue[0][0] if self.queue else math.inf

    def after_retrieval(self, req: Request, ready_s: float) -> None:
        """``req`` reaches the arrival pool at ``ready_s`` (s), its retrieval stage done."""
        self._held[req.id] = req
        heapq.heappush(self.queue, (ready_s, req.id, 0))

    def hands_over(self, req: Request) -> bool:
        """Whether ``req``, its prompt done, leaves its replica for the decode pool."""
        return req.replica < self.num_prefill_replicas

    def to_decode_pool(self, req: Request, now: float) -> None:
        """Send ``req``'s KV cache to the decode pool from ``now`` (s)."""
        ready = now + self._latency_s + (req.context_tokens * self._kv_gpu_bytes_per_token / self._bandwidth_Bps)
        self._held[req.id] = req
        heapq.heappush(self.queue, (ready, req.id, 1))

    def pop(self) -> tuple[float, Request, range]:
        """The next request to reach its pool: (time in s, the request, the pool)."""
        now, rid, to_decode = heapq.heappop(self.queue)
        return now, self._held.pop(rid), self.decode_pool if to_decode else self.arrival_pool
