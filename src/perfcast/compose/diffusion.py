"""Text-to-image generation with a latent-diffusion model on one GPU: denoising steps, then the VAE decoder.

One call generates ``batch_size`` images together, as a diffusers pipeline does: ``steps``
denoising steps, each one UNet forward pass over the batch (twice the batch with
classifier-free guidance: the conditional and the unconditional latents go through the UNet
as one batch), then the VAE decoder once over the batch. Each network's pass is one
predicted step of :func:`perfcast.compose.predict.predict` (eager PyTorch, fused SDPA
attention), with its energy (:func:`perfcast.compose.energy.with_energy`: static power over
the pass's wall time, host gaps included, plus each op's dynamic energy). The passes run back
to back: no host time is modelled between them.

Left out, each small beside the UNet steps: the text encoder(s), once per prompt (CLIP ViT-L's
text tower is about 19 GFLOPs over 77 tokens; SDXL adds OpenCLIP bigG's, about 107 GFLOPs);
the scheduler's per-step update of the latents (a few pointwise ops on ``4 x H/8 x W/8``
values); turning the decoded batch into images on the host.

The image side sets the latent side (``resolution_px`` over the VAE's upsampling, 8 for the KL-f8
autoencoder of Stable Diffusion); :func:`at_resolution` rewrites a network's config to it.
"""

from __future__ import annotations

from dataclasses import dataclass

from perfcast.catalog.hardware import Hardware
from perfcast.catalog.models import ModelConfig, load_model
from perfcast.coefficients.bundle import Calibration, resolve_calibration
from perfcast.compose.predict import StepRequest, predict
from perfcast.compose.types import StepTime
from perfcast.errors import ConfigError
from perfcast.workload.types import Mode

__all__ = ["GenerationTime", "at_resolution", "predict_generation"]


@dataclass(frozen=True)
class GenerationTime:
    """One batch of text-to-image generation: the passes and what they add up to (seconds, joules, watts)."""

    batch_size: int
    steps: int
    unet_batch: int  # latents per UNet pass: 2 x batch_size with classifier-free guidance
    resolution_px: int | None  # image side (None: no VAE, the UNet at its config's latent side)
    unet_step: StepTime  # one denoising step over unet_batch latents
    vae: StepTime | None  # the decoder once over the batch (None: no VAE priced)

    @property
    def unet_s(self) -> float:
        """Seconds of all denoising steps."""
        return self.steps * self.unet_step.time_s

    @property
    def vae_s(self) -> float:
        """Seconds of the VAE decode."""
        return self.vae.time_s if self.vae is not None else 0.0

    @property
    def time_s(self) -> float:
        """Seconds for the batch (its latency)."""
        return self.unet_s + self.vae_s

    @property
    def energy_J(self) -> float:
        """Joules of one GPU over the batch."""
        return self.steps * self.unet_step.energy_J + (self.vae.energy_J if self.vae is not None else 0.0)

    @property
    def avg_power_W(self) -> float:
        """Mean power of the GPU over the batch, watts."""
        return self.energy_J / self.time_s if self.time_s > 0 else 0.0


def at_resolution(cfg: ModelConfig, image_px: int, vae_factor: int) -> ModelConfig:
    """``cfg`` (a diffusion UNet or VAE) generating ``image_px`` square images: the UNet's latent side is
    ``image_px / vae_factor``, the VAE's image side ``image_px``. Raises ConfigError on a side the networks cannot
    take (a latent side not divisible by the UNet's downsampling)."""
    if cfg.unet is not None:
        latent, rem = divmod(image_px, vae_factor)
        down = 2 ** (len(cfg.unet.block_out_channels) - 1)
        if rem or latent % down:
            raise ConfigError(f"{cfg.id}: {image_px} px images need a latent side divisible by {down} "
                              f"({image_px} / {vae_factor} = {image_px / vae_factor:g})")
        if latent == cfg.unet.sample_size_px:
            return cfg
        return cfg.model_copy(update={"unet": cfg.unet.model_copy(update={"sample_size_px": latent}),
                                      "max_positions": latent})
    if cfg.vae is not None:
        if image_px == cfg.vae.sample_size_px:
            return cfg
        return cfg.model_copy(update={"vae": cfg.vae.model_copy(update={"sample_size_px": image_px}),
                                      "max_positions": image_px})
    raise ConfigError(f"{cfg.id} is not a diffusion UNet or VAE (model_type {cfg.model_type!r})")


def _diffusers_host(cal: Calibration) -> Calibration:
    """``cal`` with a diffusers pipeline's host time per eager kernel (``host.diffusers_op_s``) in place of plain
    eager PyTorch's, where one is fitted."""
    host = cal.compose.host
    if host.diffusers_op_s is None:
        return cal
    return cal.with_compose(cal.compose.model_copy(
        update={"host": host.model_copy(update={"eager_op_s": host.diffusers_op_s})}))


def predict_generation(unet: str | ModelConfig, vae: str | ModelConfig | None, hardware: str | Hardware, *,
                       batch_size: int, steps: int, guidance: bool = True, dtype: str = "fp16",
                       resolution_px: int | None = None, vae_upcast: bool = False,
                       calibration: Calibration | None = None) -> GenerationTime:
    """Price one batch of ``batch_size`` images (see the module docstring). ``resolution_px`` None keeps the
    configs' sides; ``vae_upcast`` decodes with the VAE's up blocks in FP32 (diffusers' SDXL pipelines).
    Raises ConfigError when ``unet`` is not a diffusion UNet or ``vae`` not a VAE."""
    u = load_model(unet)
    v = load_model(vae) if vae is not None else None
    for cfg, want in ((u, "unet"), (v, "vae")):
        if cfg is not None and getattr(cfg, want) is None:
            raise ConfigError(f"{want}: {cfg.id!r} is not a diffusion {want.upper()} (try sd-1.5-{want})")
    if v is not None and v.vae is not None:
        factor = 2 ** (len(v.vae.block_out_channels) - 1)
        if resolution_px is not None:
            u, v = at_resolution(u, resolution_px, factor), at_resolution(v, resolution_px, factor)
        if vae_upcast and v.vae is not None:
            v = v.model_copy(update={"vae": v.vae.model_copy(update={"upcast_up_blocks": True})})
    elif resolution_px is not None:
        raise ConfigError("an image side needs the VAE (its upsampling sets the latent side)")
    unet_batch = batch_size * (2 if guidance else 1)
    calibration = _diffusers_host(resolve_calibration(calibration))
    step = predict(StepRequest(model=u, hardware=hardware, mode=Mode.INFERENCE, batch_size=unet_batch, dtype=dtype,
                               attention="flash"), calibration)
    dec = None
    if v is not None:
        dec = predict(StepRequest(model=v, hardware=hardware, mode=Mode.INFERENCE, batch_size=batch_size,
                                  dtype=dtype, attention="flash"), calibration)
    side = v.vae.sample_size_px if v is not None and v.vae is not None else None
    return GenerationTime(batch_size=batch_size, steps=steps, unet_batch=unet_batch, resolution_px=side,
                          unet_step=step, vae=dec)
