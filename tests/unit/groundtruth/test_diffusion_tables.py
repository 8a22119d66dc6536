"""The measured diffusion energy table (energy/diffusion_energy.csv): recognized by its columns, each text-to-image
row priced as its pipeline runs (UNet steps, 2x the batch with guidance, then the VAE decoder), every other row
kept with a one-line reason."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import pytest

from perfcast.catalog.pipelines import load_pipeline
from perfcast.coefficients.bundle import Calibration
from perfcast.compose.diffusion import predict_generation
from perfcast.compose.predict import StepRequest, predict
from perfcast.errors import UnsupportedError
from perfcast.groundtruth.diffusion_columns import DIFFUSION_TARGETS
from perfcast.groundtruth.diffusion_tables import row_resolution_px
from perfcast.groundtruth.files import find_groundtruth
from perfcast.groundtruth.predict_batch import predict_batch
from perfcast.groundtruth.tables import TABLE_KINDS, recognize
from perfcast.workload.types import Mode

# a row as the table writes it; the measured values are placeholders (they are not read)
ROW = {"task": "text-to-image", "model_id": "prompthero/openjourney-v4", "weight_precision": "float16",
       "gpu_id": "a100-sxm-40gb", "gpu_memory_GB": "40", "gpu_power_limit_W": "400", "num_gpus": "1",
       "batch_size": "4", "inference_steps": "25", "height": "", "width": "", "resolution_as_source": "512x512",
       "num_frames": "", "energy_per_output_J": "1", "batch_latency_s": "1", "avg_power_total_W": "1",
       "throughput_outputs_per_s": "1"}
VIDEO = ROW | {"task": "text-to-video", "model_id": "ali-vilab/text-to-video-ms-1.7b", "num_frames": "16",
               "resolution_as_source": "256x256"}


def _predict(tmp_path: Path, rows: list[dict[str, str]]):  # type: ignore[no-untyped-def]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(ROW))
    writer.writeheader()
    writer.writerows(rows)
    path = tmp_path / "diffusion.csv"
    path.write_text(buf.getvalue(), encoding="utf-8")
    return predict_batch(path)


def test_the_table_is_recognized_as_the_last_kind() -> None:
    kind = recognize(list(ROW))
    assert kind.name == "energy_diffusion" and kind is TABLE_KINDS[-1]
    assert kind.targets == DIFFUSION_TARGETS and kind.interval == "step"


def test_a_rows_targets_agree_with_each_other(tmp_path: Path) -> None:
    res = _predict(tmp_path, [ROW])
    p = res.prediction
    assert p.status == ["ok"] and p.groups == ["a100-sxm-40gb"] and res.targets == list(DIFFUSION_TARGETS)
    latency, per_image = p.pred["batch_latency_s"][0], p.pred["energy_per_output_J"][0]
    power, rate = p.pred["avg_power_total_W"][0], p.pred["throughput_outputs_per_s"][0]
    assert all(math.isfinite(v) and v > 0 for v in (latency, per_image, power, rate))
    assert per_image * 4 == pytest.approx(power * latency)  # energy of the batch = power x latency
    assert rate == pytest.approx(4 / latency)
    assert power <= 400.0  # one GPU, capped at its TDP
    for t in DIFFUSION_TARGETS:  # the step interval brackets every target
        assert p.low[t][0] < p.pred[t][0] < p.high[t][0]


def test_a_row_is_its_pipelines_passes_with_guidance_doubling_the_unet_batch(tmp_path: Path) -> None:
    latency = _predict(tmp_path, [ROW]).prediction.pred["batch_latency_s"][0]
    pipe = load_pipeline("prompthero/openjourney-v4")
    assert pipe.guidance and (pipe.unet, pipe.vae, pipe.resolution_px) == ("sd-1.5-unet", "sd-1.5-vae", 512)

    # a diffusers pipeline's kernels take its own host time per eager kernel (compose.json's diffusers_op_s)
    cal = Calibration.shipped()
    assert cal.compose.host.diffusers_op_s is not None
    cal = cal.with_compose(cal.compose.model_copy(update={"host": cal.compose.host.model_copy(
        update={"eager_op_s": cal.compose.host.diffusers_op_s})}))

    def step(model: str, batch: int) -> float:
        return predict(StepRequest(model=model, hardware="a100-sxm-40gb", mode=Mode.INFERENCE, batch_size=batch,
                                   dtype="fp16", attention="flash"), cal).time_s

    assert latency == pytest.approx(25 * step("sd-1.5-unet", 8) + step("sd-1.5-vae", 4))
    guided = predict_generation("sd-1.5-unet", "sd-1.5-vae", "a100-sxm-40gb", batch_size=4, steps=25)
    plain = predict_generation("sd-1.5-unet", "sd-1.5-vae", "a100-sxm-40gb", batch_size=4, steps=25, guidance=False)
    assert (guided.unet_batch, plain.unet_batch) == (8, 4)
    assert guided.unet_step.flops == pytest.approx(2 * plain.unet_step.flops)
    assert guided.vae is not None and plain.vae is not None and guided.vae.flops == plain.vae.flops


def test_the_image_side_sets_the_latent_side(tmp_path: Path) -> None:
    small = predict_generation("sd-2.1-unet", "sd-1.5-vae", "h100-sxm-80gb", batch_size=1, steps=1, resolution_px=512)
    large = predict_generation("sd-2.1-unet", "sd-1.5-vae", "h100-sxm-80gb", batch_size=1, steps=1, resolution_px=768)
    assert large.unet_step.flops > 2 * small.unet_step.flops  # 2.25x the latent pixels, attention quadratic
    assert (small.resolution_px, large.resolution_px) == (512, 768)
    assert row_resolution_px(ROW | {"height": "768", "width": "768"}) == 768
    with pytest.raises(UnsupportedError, match="square images only"):
        row_resolution_px(ROW | {"resolution_as_source": "1024x576"})


def test_sdxl_decodes_with_an_upcast_vae() -> None:
    pipe = load_pipeline("stabilityai/stable-diffusion-xl-base-1.0")
    assert pipe.vae_upcast and pipe.resolution_px == 1024
    fp16 = predict_generation(pipe.unet, pipe.vae, "a100-sxm-40gb", batch_size=1, steps=1, resolution_px=512)
    up = predict_generation(pipe.unet, pipe.vae, "a100-sxm-40gb", batch_size=1, steps=1, resolution_px=512,
                            vae_upcast=True)
    assert fp16.vae is not None and up.vae is not None
    assert up.vae.bytes > fp16.vae.bytes and up.vae.time_s > fp16.vae.time_s
    assert up.unet_step.time_s == fp16.unet_step.time_s


def test_rows_perfcast_does_not_model_keep_their_place_with_a_reason(tmp_path: Path) -> None:
    rows = [VIDEO, ROW | {"model_id": "kandinsky-community/kandinsky-3"}, ROW | {"num_gpus": "2"},
            ROW | {"gpu_power_limit_W": "5"}, ROW | {"weight_precision": "int8"}, ROW | {"model_id": "no/such-pipe"},
            ROW]
    p = _predict(tmp_path, rows).prediction
    assert len(p.status) == len(rows) and p.status[-1] == "ok"
    for status, words in zip(p.status, ("video generation is not modelled", "model_type 'diffusers kandinsky "
                                        "pipeline' is not modelled", "num_gpus 2", "power limit 5 W",
                                        "weight_precision 'int8'", "unknown diffusion pipeline"), strict=False):
        assert status.startswith("unsupported: ") and words in status and "\n" not in status
    for t in DIFFUSION_TARGETS:
        assert all(math.isnan(v) for v in p.pred[t][:-1])


def test_a_lower_power_limit_slows_the_batch_and_caps_its_power(tmp_path: Path) -> None:
    rows = [ROW | {"batch_size": "16"}, ROW | {"batch_size": "16", "gpu_power_limit_W": "200"}]
    p = _predict(tmp_path, rows).prediction
    assert p.status == ["ok", "ok"]
    assert p.pred["batch_latency_s"][1] >= p.pred["batch_latency_s"][0]
    assert p.pred["avg_power_total_W"][1] <= 200.0 + 1e-6


GROUNDTRUTH = find_groundtruth(required=False)


@pytest.mark.skipif(GROUNDTRUTH is None, reason="ground truth not found")
def test_the_measured_table_predicts_every_modelled_text_to_image_row() -> None:
    assert GROUNDTRUTH is not None
    res = predict_batch(GROUNDTRUTH / "energy" / "diffusion_energy.csv")
    assert res.kind.name == "energy_diffusion"
    for row, status in zip(res.rows, res.prediction.status, strict=True):
        try:
            load_pipeline(row["model_id"])
            modelled = row["task"] == "text-to-image"
        except UnsupportedError:
            modelled = False
        assert (status == "ok") == modelled, (row["model_id"], status)
