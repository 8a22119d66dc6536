"""The measured columns of the ML.ENERGY serving tables (``energy/llm_serving_energy.csv``,
``energy/mllm_serving_energy.csv``) perfcast predicts.

Kept apart from :mod:`perfcast.groundtruth.energy_tables` so that recognizing a table does not import the
serving simulator.
"""

from __future__ import annotations

__all__ = ["ENERGY_REQUIRED", "ENERGY_TARGETS"]

ENERGY_TARGETS: tuple[str, ...] = (
    "energy_per_output_token_J", "energy_per_request_J", "avg_power_total_W", "avg_power_per_gpu_W",
    "output_throughput_tok_per_s", "request_throughput_req_per_s", "avg_batch_size", "tpot_mean_s",
)
ENERGY_REQUIRED = frozenset({"energy_per_output_token_J", "avg_power_per_gpu_W", "max_num_seqs",
                             "vllm_tensor_parallel_size", "mean_output_tokens"})
