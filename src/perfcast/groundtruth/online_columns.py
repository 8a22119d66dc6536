"""The measured columns of an online serving benchmark table (``serving_online.csv``) perfcast predicts.

Kept apart from :mod:`perfcast.groundtruth.online_tables` so that recognizing a table does not import the
serving simulator.
"""

from __future__ import annotations

__all__ = ["LATENCIES", "ONLINE_TARGETS", "STATS"]

LATENCIES = ("ttft", "tpot", "e2el")  # time to first token, time per output token, end-to-end latency
STATS = ("mean", "median", "p99", "std")  # over the completed requests
ONLINE_TARGETS: tuple[str, ...] = (
    "total_tput_tok_s_per_gpu", "output_tput_tok_s_per_gpu", "input_tput_tok_s_per_gpu",
    "total_tput_tok_s", "output_tput_tok_s", "input_tput_tok_s", "request_tput_req_s",
    *(f"{lat}_ms_{stat}" for lat in LATENCIES for stat in STATS), "itl_ms_mean",
)
