"""The ML.ENERGY v1 batch-size-1 table (legacy_v1_bs1_llm_energy.csv): recognized by its columns, each row's mean
response priced as eager transformers + FastChat generated it, its energy and power consistent with its time."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import numpy as np
import pytest

from perfcast.catalog.hardware import load_hardware
from perfcast.coefficients.bundle import resolve_calibration
from perfcast.compose.predict import StepRequest, predict
from perfcast.errors import ConfigError, UnsupportedError
from perfcast.groundtruth.legacy_energy_columns import LEGACY_ENERGY_TARGETS
from perfcast.groundtruth.legacy_energy_tables import (
    SHAREGPT_MEAN_INPUT_TOKENS,
    predict_legacy_rows,
    predict_response,
    prompt_tokens,
)
from perfcast.groundtruth.predict_batch import predict_batch
from perfcast.groundtruth.tables import TABLE_KINDS, recognize, target_columns
from perfcast.kernel.energy import power_model
from perfcast.workload.types import Mode

# the table's columns (legacy_v1_bs1_llm_energy.csv) and its koala-7b A100 chat row's inputs; the measured cells
# only have to be present for recognition (they are not inputs)
ROW = {"row_id": "v1-A100-chat-001", "task": "v1-sharegpt-chat", "system_prompt_variant": "chat",
       "model_id": "BAIR/koala-7b", "nickname": "BAIR/koala-7b", "total_params_B": "7", "gpu": "NVIDIA A100",
       "gpu_id": "a100", "num_gpus": "1", "engine": "PyTorch 2.0.1 + FastChat", "batch_size": "1", "dtype": "fp16",
       "mean_output_tokens": "261.07", "latency_per_response_s": "9.6", "throughput_tok_per_s": "26.6",
       "energy_per_request_J": "1345", "energy_per_output_token_J": "5.15", "avg_power_W": "140"}


def test_the_table_is_recognized_by_its_columns() -> None:
    kind = recognize(list(ROW))
    assert kind.name == "energy_legacy_bs1" and kind in TABLE_KINDS
    assert target_columns(kind, list(ROW)) == list(LEGACY_ENERGY_TARGETS)
    # the serving energy table (v2) has none of the per-response columns: not this kind
    with pytest.raises(ConfigError, match="unrecognized table"):
        recognize(["model_id", "gpu_id", "energy_per_output_token_J", "avg_power_total_W", "mean_output_tokens"])


def test_the_prompt_is_sharegpts_mean_input_plus_the_variants_system_prompt() -> None:
    chat, concise, instruct = prompt_tokens("chat"), prompt_tokens("chat-concise"), prompt_tokens("instruct")
    assert SHAREGPT_MEAN_INPUT_TOKENS < instruct < chat < concise < SHAREGPT_MEAN_INPUT_TOKENS + 80
    with pytest.raises(ConfigError, match="known: chat, chat-concise"):
        prompt_tokens("poem")


def test_one_rows_energy_power_and_throughput_follow_from_its_time() -> None:
    pred, status, groups = predict_legacy_rows([ROW])
    assert status == ["ok"] and groups == ["a100"]
    tokens = float(ROW["mean_output_tokens"])
    latency, energy = pred["latency_per_response_s"][0], pred["energy_per_request_J"][0]
    assert latency > 0 and energy > 0
    assert pred["energy_per_output_token_J"][0] * tokens == pytest.approx(energy, rel=1e-12)
    assert pred["avg_power_W"][0] == pytest.approx(energy / latency, rel=1e-12)
    assert pred["throughput_tok_per_s"][0] == pytest.approx(tokens / latency, rel=1e-12)
    pm = power_model(load_hardware("a100"), resolve_calibration(None).kernel)
    assert pm.idle_W < pred["avg_power_W"][0] < pm.tdp_W


def test_a_response_is_one_prefill_then_a_decode_step_per_further_token_launched_eagerly() -> None:
    cal = resolve_calibration(None)
    p = prompt_tokens("chat")
    res = predict_response("llama-7b", "a100", prompt_tokens=p, output_tokens=101.0, calibration=cal)
    prefill = predict(StepRequest(model="llama-7b", hardware="a100", mode=Mode.INFERENCE, seq_len=p, dtype="fp16",
                                  style="hf", attention="eager", framework="eager"), cal)
    first = predict(StepRequest(model="llama-7b", hardware="a100", mode=Mode.DECODE, seq_len=p + 1, dtype="fp16",
                                style="hf", attention="eager", framework="eager"), cal)
    last = predict(StepRequest(model="llama-7b", hardware="a100", mode=Mode.DECODE, seq_len=p + 100, dtype="fp16",
                               style="hf", attention="eager", framework="eager"), cal)
    assert res.prefill_s == pytest.approx(prefill.time_s)
    # 100 decode steps, the context growing (equal steps when the host sets the pace)
    assert 100 * first.time_s * (1 - 1e-12) <= res.decode_s <= 100 * last.time_s * (1 + 1e-12)
    # eager launches: a batch-1 decode step on an A100 waits for the host to launch its kernels
    assert first.time_s >= first.num_kernels * cal.compose.host.eager_op_s
    assert res.token_loop_s > 101 * cal.compose.host.sync_s
    assert res.latency_s == pytest.approx(res.prefill_s + res.decode_s + res.token_loop_s)
    # a fractional mean length prices part of the last step; one token is the prefill alone
    half = predict_response("llama-7b", "a100", prompt_tokens=p, output_tokens=100.5, calibration=cal)
    assert res.decode_s - last.time_s < half.decode_s < res.decode_s
    one = predict_response("llama-7b", "a100", prompt_tokens=p, output_tokens=1.0, calibration=cal)
    assert one.decode_s == 0.0 and one.energy_J > 0


def test_a_slower_memory_makes_the_13b_model_slower_per_token() -> None:
    p = prompt_tokens("chat")
    a100 = predict_response("llama-13b", "a100", prompt_tokens=p, output_tokens=200.0)
    a40 = predict_response("llama-13b", "a40", prompt_tokens=p, output_tokens=200.0)
    assert a40.latency_s > a100.latency_s  # 696 GB/s vs 2 TB/s for 26 GB of weights a token


def test_models_without_a_decoder_step_keep_their_rows_with_the_reason() -> None:
    rows = [ROW | {"model_id": "RWKV/rwkv-raven-7b"}, ROW | {"model_id": "lmsys/fastchat-t5-3b-v1.0"},
            ROW | {"batch_size": "4"}, ROW | {"mean_output_tokens": "0.5"}, ROW]
    pred, status, _ = predict_legacy_rows(rows)
    assert status[0].startswith("unsupported: RWKV/rwkv-raven-7b") and "rwkv" in status[0]
    assert status[1] == ("unsupported: lmsys/fastchat-t5-3b-v1.0 (flan-t5-xl) is an encoder-decoder model: perfcast "
                         "prices KV-cached generation for decoder-only models only")
    assert status[2].startswith("unsupported: batch_size 4")
    assert status[3].startswith("unsupported: mean_output_tokens 0.5")
    assert status[4] == "ok"
    for t in LEGACY_ENERGY_TARGETS:
        assert np.isnan(pred[t][:4]).all() and math.isfinite(pred[t][4])
    with pytest.raises(UnsupportedError, match="encoder-decoder"):
        predict_response("flan-t5-xl", "a100", prompt_tokens=200, output_tokens=10.0)


def test_predict_batch_writes_every_target_with_an_interval(tmp_path: Path) -> None:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(ROW))
    writer.writeheader()
    writer.writerow(ROW)
    writer.writerow(ROW | {"model_id": "Neutralzz/BiLLa-7B-SFT"})
    table = tmp_path / "legacy.csv"
    table.write_text(buf.getvalue())
    res = predict_batch(table)
    assert res.kind.name == "energy_legacy_bs1" and res.targets == list(LEGACY_ENERGY_TARGETS)
    p = res.prediction
    assert p.status[0] == "ok" and p.status[1].startswith("unsupported: Neutralzz/BiLLa-7B-SFT")
    lat, tput = "latency_per_response_s", "throughput_tok_per_s"
    assert p.low[lat][0] < p.pred[lat][0] < p.high[lat][0]
    assert p.low[tput][0] < p.pred[tput][0] < p.high[tput][0]
    # a rate's interval is the time's inverted
    assert p.high[tput][0] * p.low[lat][0] == pytest.approx(p.pred[tput][0] * p.pred[lat][0])
