"""Run a diffusion scenario: seconds per image of text-to-image generation with a latent-diffusion model.

Each run generates ``batch_size`` images together: ``steps`` denoising steps, each one
UNet forward pass over the batch (twice the batch with classifier-free guidance: the
conditional and the unconditional latents go through the UNet as one batch, as
diffusers does), then the VAE decoder once over the batch. Each network's pass is one
predicted step of the compose layer (:func:`perfcast.compose.predict.predict`, eager
PyTorch with fused SDPA attention). The sampler's own update per step (a few pointwise
ops on the 4x64x64 latents) and the text encoder (once per prompt) are left out; see
:mod:`perfcast.workload.models.unet`.

A row has ``seconds_per_image``, ``images_per_s``, ``unet_step_s`` (one step of the
batch), ``unet_s`` (all steps), ``vae_decode_s`` and ``total_s`` (the batch), and the
share of the VAE decoder.
"""

from __future__ import annotations

from perfcast.catalog.models import load_model
from perfcast.compose.predict import StepRequest, predict
from perfcast.errors import ConfigError, PerfcastError
from perfcast.results.scenario import ScenarioResult
from perfcast.scenarios.schema import DiffusionRun, DiffusionScenario
from perfcast.workload.types import Mode

__all__ = ["diffusion_row", "run_diffusion_scenario"]


def _pass(model: str, hardware: str, batch: int, dtype: str) -> tuple[float, float]:
    """Seconds and FLOPs of one forward pass of a diffusion network over ``batch`` inputs."""
    st = predict(StepRequest(model=model, hardware=hardware, mode=Mode.INFERENCE, batch_size=batch, dtype=dtype,
                             attention="flash"))
    return st.time_s, st.flops


def diffusion_row(run: DiffusionRun) -> dict[str, object]:
    """The row of one run (see the module docstring)."""
    for name, want in ((run.unet, "unet"), (run.vae, "vae")):
        if name is not None and getattr(load_model(name), want) is None:
            raise ConfigError(f"{want}: {name!r} is not a diffusion {want.upper()} (try sd-1.5-{want})")
    unet_batch = run.batch_size * (2 if run.guidance else 1)
    step_s, step_flops = _pass(run.unet, run.hardware, unet_batch, run.dtype)
    vae_s, vae_flops = _pass(run.vae, run.hardware, run.batch_size, run.dtype) if run.vae else (0.0, 0.0)
    unet_s = run.steps * step_s
    total = unet_s + vae_s
    return {
        "label": run.label, "model": run.unet, "vae": run.vae or "", "hardware": run.hardware,
        "batch_size": run.batch_size, "steps": run.steps, "guidance": run.guidance, "unet_batch": unet_batch,
        "dtype": run.dtype, "status": "ok",
        "seconds_per_image": total / run.batch_size, "images_per_s": run.batch_size / total,
        "unet_step_s": step_s, "unet_s": unet_s, "vae_decode_s": vae_s, "total_s": total,
        "vae_frac": vae_s / total if total > 0 else 0.0,
        "unet_flops_per_step": step_flops, "vae_flops": vae_flops,
        "unet_achieved_tflops": step_flops / step_s / 1e12 if step_s > 0 else 0.0,
    }


def run_diffusion_scenario(sc: DiffusionScenario) -> ScenarioResult:
    """Predict every run; one failure does not stop the others."""
    res = ScenarioResult(sc.id, sc.title, "ok", kind="diffusion", notes=list(sc.notes))
    for run in sc.runs:
        try:
            res.rows.append(diffusion_row(run))
        except PerfcastError as exc:
            res.rows.append({"label": run.label, "model": run.unet, "hardware": run.hardware,
                             "batch_size": run.batch_size, "status": "error", "error": str(exc)})
    return res.settle()
