"""The measured columns of the ML.ENERGY v1 batch-size-1 generation table (``legacy_v1_bs1_llm_energy.csv``)
perfcast predicts.

Kept apart from :mod:`perfcast.groundtruth.legacy_energy_tables` so that recognizing a table does not import the
step predictor.
"""

from __future__ import annotations

__all__ = ["LEGACY_ENERGY_REQUIRED", "LEGACY_ENERGY_TARGETS"]

# per response, means over the benchmark's responses: seconds, output tokens per second, joules, joules per output
# token, watts (the source's ratios of per-response means)
LEGACY_ENERGY_TARGETS: tuple[str, ...] = ("latency_per_response_s", "throughput_tok_per_s", "energy_per_request_J",
                                          "energy_per_output_token_J", "avg_power_W")
# the columns that name the table: three of its targets and the mean response length every prediction needs
LEGACY_ENERGY_REQUIRED: frozenset[str] = frozenset({"latency_per_response_s", "energy_per_request_J", "avg_power_W",
                                                    "mean_output_tokens"})
