"""The measured columns of a diffusion energy table (``energy/diffusion_energy.csv``) perfcast predicts.

Kept apart from :mod:`perfcast.groundtruth.diffusion_tables` so that recognizing a table does not import the
predictor.
"""

from __future__ import annotations

__all__ = ["DIFFUSION_REQUIRED", "DIFFUSION_TARGETS", "DIFFUSION_RATES"]

DIFFUSION_REQUIRED = frozenset({"energy_per_output_J", "batch_latency_s", "inference_steps"})
DIFFUSION_TARGETS: tuple[str, ...] = (
    "batch_latency_s",  # one pipeline call over the batch, seconds
    "energy_per_output_J",  # GPU energy over the call / images (or videos) in the batch, joules
    "avg_power_total_W",  # GPU energy / latency, summed over the GPUs used, watts
    "throughput_outputs_per_s",  # batch size / latency
)
DIFFUSION_RATES = frozenset({"throughput_outputs_per_s"})  # inverse to a time (their interval is reversed)
