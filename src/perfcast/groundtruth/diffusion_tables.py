"""Measured diffusion energy (ML.ENERGY v2, ``energy/diffusion_energy.csv``): each text-to-image row predicted.

A row is one Hugging Face Diffusers pipeline generating ``batch_size`` images in one call on one GPU, in the
row's ``weight_precision``, ``inference_steps`` denoising steps at the row's image size (``height``/``width``,
else ``resolution_as_source`` ``WxH``). Its ``model_id`` names the pipeline, which
:func:`perfcast.catalog.pipelines.load_pipeline` maps to its UNet, VAE and defaults (classifier-free guidance on
or off, the VAE upcast of SDXL pipelines); the batch is priced by
:func:`perfcast.compose.diffusion.predict_generation` (the UNet passes, 2x the batch with guidance, then the VAE
decoder; with their energy from the one per-op energy model; the text encoders and host-side image conversion
are left out, see there). Then, per the table's definitions (its README):

- ``batch_latency_s`` = the predicted time of the call;
- ``energy_per_output_J`` = the GPUs' energy over the call / ``batch_size``;
- ``avg_power_total_W`` = that energy / the latency (all GPUs used: one);
- ``throughput_outputs_per_s`` = ``batch_size`` / the latency.

Refused, each with a one-line status (the row is kept): video rows (text-to-video, image-to-video: frames,
not modelled), pipelines perfcast does not model (their catalog reason), rows on more than one GPU,
precisions other than FP16/BF16/FP32, non-square images.
"""

from __future__ import annotations

import math

import numpy as np

from perfcast.catalog.hardware import load_hardware, with_power_limit
from perfcast.catalog.pipelines import load_pipeline
from perfcast.coefficients.bundle import Calibration
from perfcast.compose.diffusion import GenerationTime, predict_generation
from perfcast.errors import UnsupportedError
from perfcast.groundtruth.diffusion_columns import DIFFUSION_TARGETS
from perfcast.groundtruth.files import ROW_ERRORS, row_status
from perfcast.groundtruth.gpus import row_gpu_id

__all__ = ["PRECISIONS", "diffusion_figures", "predict_diffusion_rows", "row_resolution_px"]

PRECISIONS = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}  # torch_dtype -> perfcast dtype


def _count(row: dict[str, str], key: str) -> int:
    value = float(row[key])
    if not (math.isfinite(value) and value >= 1 and value == int(value)):
        raise ValueError(f"{key} {row[key]!r} is not a positive whole number")
    return int(value)


def row_resolution_px(row: dict[str, str]) -> int:
    """The side of the square images a row generates (``height``/``width``, else ``resolution_as_source``
    ``WxH``); raises UnsupportedError on a non-square image, ValueError on an unreadable one."""
    h, w = (row.get("height") or "").strip(), (row.get("width") or "").strip()
    if h and w:
        height, width = int(float(h)), int(float(w))
    else:
        text = (row.get("resolution_as_source") or "").strip().lower()
        parts = text.split("x")
        if len(parts) != 2:
            raise ValueError(f"resolution_as_source {text!r} is not WxH")
        width, height = int(parts[0]), int(parts[1])
    if height != width:
        raise UnsupportedError(f"{width}x{height} px images are not modelled (square images only)")
    if height <= 0:
        raise ValueError(f"image side {height} is not positive")
    return height


def _check_row(row: dict[str, str]) -> None:
    task = (row.get("task") or "").strip()
    frames = (row.get("num_frames") or "").strip()
    if task != "text-to-image" or frames:
        raise UnsupportedError(f"{task or 'video'} ({row.get('model_id', '')}): video generation is not modelled; "
                               "perfcast prices text-to-image pipelines")
    gpus = _count(row, "num_gpus")
    if gpus != 1:
        raise UnsupportedError(f"num_gpus {gpus}: a pipeline split over GPUs (ulysses/ring attention) is not "
                               "modelled")


def diffusion_figures(gen: GenerationTime, gpus: int = 1) -> dict[str, float]:
    """The table's four targets from one predicted batch (see the module docstring)."""
    latency = gen.time_s
    energy = gen.energy_J * gpus
    return {"batch_latency_s": latency, "energy_per_output_J": energy / gen.batch_size,
            "avg_power_total_W": energy / latency, "throughput_outputs_per_s": gen.batch_size / latency}


def _predict_row(row: dict[str, str], cal: Calibration) -> tuple[GenerationTime, str]:
    _check_row(row)
    pipe = load_pipeline(row["model_id"])
    precision = (row.get("weight_precision") or "").strip()
    if precision not in PRECISIONS:
        raise UnsupportedError(f"weight_precision {precision!r} is not modelled; supported: {', '.join(PRECISIONS)}")
    gpu = row_gpu_id(row)
    limit = (row.get("gpu_power_limit_W") or "").strip()
    hw = with_power_limit(gpu, float(limit)) if limit else load_hardware(gpu)
    gen = predict_generation(pipe.unet, pipe.vae, hw, batch_size=_count(row, "batch_size"),
                             steps=_count(row, "inference_steps"), guidance=pipe.guidance,
                             dtype=PRECISIONS[precision], resolution_px=row_resolution_px(row),
                             vae_upcast=pipe.vae_upcast, calibration=cal)
    status = "ok"
    for part, st in (("UNet", gen.unet_step), ("VAE decoder", gen.vae)):
        if st is not None and st.memory is not None and not st.memory.fits:
            gib = 2.0**30
            status = (f"out of memory: the {part} pass needs {st.memory.total_bytes / gib:.1f} GiB of "
                      f"{st.memory.capacity_bytes / gib:.1f} GiB (times for a batch that does not fit)")
            break
    return gen, status


def predict_diffusion_rows(rows: list[dict[str, str]],
                           cal: Calibration) -> tuple[dict[str, np.ndarray], list[str], list[str]]:
    """Per target column the predictions (NaN where refused), per row a status and its group (the GPU)."""
    n = len(rows)
    pred = {t: np.full(n, np.nan) for t in DIFFUSION_TARGETS}
    status = ["ok"] * n
    groups = [r.get("gpu_id", "") for r in rows]
    cache: dict[tuple[str, ...], tuple[GenerationTime, str] | Exception] = {}
    for i, r in enumerate(rows):
        key = tuple(r.get(c, "") for c in ("task", "model_id", "gpu_id", "gpu_memory_GB", "gpu_power_limit_W",
                                           "num_gpus", "batch_size", "inference_steps", "height", "width",
                                           "resolution_as_source", "num_frames", "weight_precision"))
        if key not in cache:
            try:
                cache[key] = _predict_row(r, cal)
            except ROW_ERRORS as exc:
                cache[key] = exc
        hit = cache[key]
        if isinstance(hit, Exception):
            status[i] = row_status(hit)
            continue
        gen, status[i] = hit
        for t, v in diffusion_figures(gen, _count(r, "num_gpus")).items():
            pred[t][i] = v
    return pred, status, groups
