"""Diffusers pipeline ids resolve to their catalog UNet and VAE and the defaults that set their work; pipelines
perfcast does not model are refused in one line naming why."""

from __future__ import annotations

import pytest

from perfcast.catalog.models import load_model
from perfcast.catalog.pipelines import diffusion_pipelines, load_pipeline
from perfcast.errors import UnknownNameError, UnsupportedError


@pytest.mark.parametrize(("name", "unet", "vae", "side", "upcast"), [
    ("prompthero/openjourney-v4", "sd-1.5-unet", "sd-1.5-vae", 512, False),
    ("stabilityai/stable-diffusion-2-1", "sd-2.1-unet", "sd-1.5-vae", 768, False),
    ("stabilityai/stable-diffusion-xl-base-1.0", "sdxl-unet", "sdxl-vae", 1024, True),
    ("stabilityai/sdxl-turbo", "sdxl-unet", "sdxl-vae", 512, True),
])
def test_a_pipeline_id_names_its_networks_and_defaults(name: str, unet: str, vae: str, side: int,
                                                         upcast: bool) -> None:
    pipe = load_pipeline(name)
    assert (pipe.unet, pipe.vae, pipe.resolution_px, pipe.vae_upcast) == (unet, vae, side, upcast)
    assert pipe.guidance and pipe.source
    assert load_model(name).id == unet  # the repo id alone resolves to the denoiser, as the model catalog names it
    assert load_model(pipe.vae).vae is not None


def test_every_pipeline_is_found_by_its_id_and_slug() -> None:
    pipes = {p.id for p in diffusion_pipelines().values()}
    assert "stable-diffusion-v1-5/stable-diffusion-v1-5" in pipes
    assert load_pipeline("sdxl-turbo").id == "stabilityai/sdxl-turbo"


@pytest.mark.parametrize(("name", "words"), [
    ("ali-vilab/i2vgen-xl", "temporal attention"),
    ("kandinsky-community/kandinsky-2-2-decoder", "MoVQ"),
    ("stabilityai/stable-diffusion-3-medium-diffusers", "SD3Transformer2DModel"),
    ("segmind/SSD-1B", "no UNet config"),
])
def test_pipelines_perfcast_does_not_model_are_refused_in_one_line(name: str, words: str) -> None:
    with pytest.raises(UnsupportedError) as err:
        load_pipeline(name)
    assert str(err.value).startswith(f"{name}: ") and words in str(err.value) and "\n" not in str(err.value)


def test_an_unknown_pipeline_names_the_nearest() -> None:
    with pytest.raises(UnknownNameError, match="stabilityai/sdxl-turbo"):
        load_pipeline("stabilityai/sdxl-turb")
