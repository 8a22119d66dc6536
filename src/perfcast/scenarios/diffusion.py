"""Run a diffusion scenario: seconds per image of text-to-image generation with a latent-diffusion model.

Each run generates ``batch_size`` images together: ``steps`` denoising steps, each one
UNet forward pass over the batch (twice the batch with classifier-free guidance: the
conditional and the unconditional latents go through the UNet as one batch, as
diffusers does), then the VAE decoder once over the batch, priced by
:func:`perfcast.compose.diffusion.predict_generation` (what it leaves out is listed there).

A row has ``seconds_per_image``, ``images_per_s``, ``unet_step_s`` (one step of the
batch), ``unet_s`` (all steps), ``vae_decode_s`` and ``total_s`` (the batch), the
share of the VAE decoder, ``energy_per_image_J`` (the GPU's energy over the batch, per image) and
``avg_power_W``.
"""

from __future__ import annotations

from perfcast.compose.diffusion import predict_generation
from perfcast.errors import PerfcastError
from perfcast.results.scenario import ScenarioResult
from perfcast.scenarios.schema import DiffusionRun, DiffusionScenario

__all__ = ["diffusion_row", "run_diffusion_scenario"]


def diffusion_row(run: DiffusionRun) -> dict[str, object]:
    """The row of one run (see the module docstring)."""
    gen = predict_generation(run.unet, run.vae, run.hardware, batch_size=run.batch_size, steps=run.steps,
                             guidance=run.guidance, dtype=run.dtype)
    step_s, step_flops = gen.unet_step.time_s, gen.unet_step.flops
    vae_s, vae_flops = gen.vae_s, (gen.vae.flops if gen.vae is not None else 0.0)
    unet_s, total = gen.unet_s, gen.time_s
    return {
        "label": run.label, "model": run.unet, "vae": run.vae or "", "hardware": run.hardware,
        "batch_size": run.batch_size, "steps": run.steps, "guidance": run.guidance, "unet_batch": gen.unet_batch,
        "dtype": run.dtype, "status": "ok",
        "seconds_per_image": total / run.batch_size, "images_per_s": run.batch_size / total,
        "unet_step_s": step_s, "unet_s": unet_s, "vae_decode_s": vae_s, "total_s": total,
        "vae_frac": vae_s / total if total > 0 else 0.0,
        "unet_flops_per_step": step_flops, "vae_flops": vae_flops,
        "unet_achieved_tflops": step_flops / step_s / 1e12 if step_s > 0 else 0.0,
        "energy_per_image_J": gen.energy_J / run.batch_size, "avg_power_W": gen.avg_power_W,
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
