"""Unit tests of the Stable Diffusion catalog entries and ``perfcast.workload.models.unet``.

Expected numbers are published figures, none produced by perfcast:
- diffusers' ``UNet2DConditionModel`` of SD 1.5 has 859,520,964 parameters and its ``AutoencoderKL`` decoder
  (with ``post_quant_conv``) 49,490,199 (``sum(p.numel() for p in m.parameters())``); SD 2.1's UNet 865,910,724
  and SDXL base 1.0's 2,567,463,684 (the "2.6B" of Podell et al. 2023, arXiv:2307.01952, Table 1);
- BK-SDM (Kim et al. 2023, arXiv:2305.15798) reports 339G MACs for one SD U-Net pass over a 64x64 latent and
  1240G MACs for the image decoder at 512x512, counted per module (convolutions and linear layers; the matmuls
  inside attention are not modules and are left out of those counts).
"""

from __future__ import annotations

import pytest

from perfcast.catalog.models import load_model
from perfcast.compose.predict import StepRequest, predict
from perfcast.errors import ConfigError
from perfcast.scenarios.schema import DiffusionRun
from perfcast.workload.build import WorkloadSpec, build_workload
from perfcast.workload.types import Mode, OpKind

UNET_PARAMS = 859_520_964
SD21_UNET_PARAMS = 865_910_724
SDXL_UNET_PARAMS = 2_567_463_684
VAE_DECODER_PARAMS = 49_490_199
UNET_MODULE_MACS = 339e9
VAE_DECODER_MODULE_MACS = 1240e9
MACS_TOLERANCE = 0.02  # the published counts are rounded to three digits


def _forward(model: str, batch: int = 1):  # type: ignore[no-untyped-def]
    return build_workload(model, WorkloadSpec(Mode.INFERENCE, batch, 77, dtype="fp16"))


def _module_macs(model: str) -> float:
    ops = _forward(model).ops
    return sum(o.flops * o.count for o in ops if o.kind in (OpKind.GEMM, OpKind.CONV)) / 2


@pytest.mark.parametrize(("model", "params"), [("sd-1.5-unet", UNET_PARAMS), ("sd-1.5-vae", VAE_DECODER_PARAMS),
                                               ("sd-2.1-unet", SD21_UNET_PARAMS), ("sdxl-unet", SDXL_UNET_PARAMS),
                                               ("sdxl-vae", VAE_DECODER_PARAMS)])
def test_parameter_counts_match_diffusers(model: str, params: int) -> None:
    cfg = load_model(model)
    assert cfg.kind == "diffusion" and cfg.num_params() == params
    assert sum(o.params * o.count for o in _forward(model).ops) == params  # the builder emits every weight


@pytest.mark.parametrize(("model", "macs"), [("sd-1.5-unet", UNET_MODULE_MACS),
                                             ("sd-1.5-vae", VAE_DECODER_MODULE_MACS)])
def test_module_macs_match_the_published_count(model: str, macs: float) -> None:
    assert _module_macs(model) == pytest.approx(macs, rel=MACS_TOLERANCE)


def test_unet_attention_shapes() -> None:
    att = [o for o in _forward("sd-1.5-unet", batch=2).ops if o.kind is OpKind.ATTENTION]
    # 16 transformer blocks (2+2+2 down, 1 mid, 3+3+3 up), each a self- and a cross-attention
    assert len(att) == 32
    self_64 = [o for o in att if o.dims[3] == 4096 and o.dims[4] == 4096]
    cross = [o for o in att if o.dims[4] == 77]
    assert len(self_64) == 5 and len(cross) == 16
    assert all(o.dims[:3] == (2, 8, 8) and o.dims[5] == 40 and o.dims[6] == 0 for o in self_64)


def test_sd2_heads_are_64_wide_as_diffusers_reads_attention_head_dim() -> None:
    # SD 2.x's attention_head_dim [5, 10, 20, 20] is the number of heads per level (diffusers' naming quirk)
    att = [o for o in _forward("sd-2.1-unet").ops if o.kind is OpKind.ATTENTION]
    assert {o.dims[5] for o in att} == {64}
    assert {o.dims[1] for o in att} == {5, 10, 20}
    assert load_model("sd-2.1-unet").unet.linear_projection  # type: ignore[union-attr]


def test_sdxl_runs_its_transformer_blocks_per_level() -> None:
    att = [o for o in _forward("sdxl-unet").ops if o.kind is OpKind.ATTENTION]
    # blocks [-, 2, 10] per attention: down 2x2 + 2x10, mid 10, up 3x10 + 3x2 = 70 blocks, self- and cross-attention
    assert sum(o.count for o in att) == 2 * 70
    assert {o.dims[4] for o in att if o.dims[3] != o.dims[4]} == {77}  # cross-attention to the text tokens
    assert max(o.dims[3] for o in att) == (128 // 2) ** 2  # no attention on the first (128x128) level


def test_unet_variants_perfcast_does_not_build_are_refused_by_field() -> None:
    from perfcast.catalog.model_config import from_hf_config
    from perfcast.errors import UnsupportedError

    raw = dict(load_model("sdxl-unet").hf_config)
    with pytest.raises(UnsupportedError, match="addition_embed_type='image'"):
        from_hf_config(raw | {"addition_embed_type": "image"}, model_id="kandinsky-like")
    with pytest.raises(UnsupportedError, match="per-block transformer_layers_per_block"):
        from_hf_config(raw | {"transformer_layers_per_block": [1, 2, [4, 4, 10]]}, model_id="ssd-like")
    with pytest.raises(UnsupportedError, match="SimpleCrossAttnDownBlock2D"):
        from_hf_config(raw | {"down_block_types": ["DownBlock2D", "SimpleCrossAttnDownBlock2D",
                                                   "CrossAttnDownBlock2D"]}, model_id="odd")


def test_flops_scale_with_the_batch() -> None:
    one = sum(o.flops * o.count for o in _forward("sd-1.5-unet", 1).ops)
    eight = sum(o.flops * o.count for o in _forward("sd-1.5-unet", 8).ops)
    assert eight == pytest.approx(8 * one, rel=1e-6)


def test_a_step_is_faster_on_h100_and_grows_with_the_batch() -> None:
    def t(hw: str, batch: int) -> float:
        return predict(StepRequest(model="sd-1.5-unet", hardware=hw, mode=Mode.INFERENCE, batch_size=batch,
                                   dtype="fp16", attention="flash")).time_s

    assert t("h100-sxm-80gb", 2) < t("a100-sxm-80gb", 2) < t("a100-sxm-80gb", 16)


def test_diffusion_run_refuses_a_language_model_as_unet() -> None:
    from perfcast.scenarios.diffusion import diffusion_row

    with pytest.raises(ConfigError, match="not a diffusion UNET"):
        diffusion_row(DiffusionRun(unet="llama-2-7b", hardware="a100-sxm-80gb", batch_size=1))


def test_guidance_doubles_the_unet_batch() -> None:
    from perfcast.scenarios.diffusion import diffusion_row

    cfg = diffusion_row(DiffusionRun(unet="sd-1.5-unet", vae="sd-1.5-vae", hardware="a100-sxm-80gb", batch_size=1))
    plain = diffusion_row(DiffusionRun(unet="sd-1.5-unet", vae="sd-1.5-vae", hardware="a100-sxm-80gb",
                                       batch_size=1, guidance=False))
    assert cfg["unet_batch"] == 2 and plain["unet_batch"] == 1
    assert float(str(cfg["unet_flops_per_step"])) == pytest.approx(2 * float(str(plain["unet_flops_per_step"])))
    assert float(str(cfg["seconds_per_image"])) > float(str(plain["seconds_per_image"]))
    assert cfg["vae_decode_s"] == plain["vae_decode_s"]
