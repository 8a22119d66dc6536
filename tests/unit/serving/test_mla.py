"""Multi-head latent attention (DeepSeek-V3/R1) in the serving iteration model: the cache holds one latent."""

from __future__ import annotations

import pytest

from perfcast.dtypes import DType
from perfcast.serving.iteration import IterationModel

DS = "deepseek-v3"
H200 = "h200-sxm-141gb"


def _model(tp: int, *, dp: bool = False) -> IterationModel:
    return IterationModel(DS, H200, tp=tp, dtype=DType.BF16, quantization="fp8", max_tokens=1024, max_seqs=256,
                          engine="vllm", attention_dp=dp, ep=tp if dp else 1)


def test_kv_cache_holds_the_latent_replicated_over_tensor_parallel_gpus() -> None:
    m = _model(8)
    mla = m.cfg.mla
    assert mla is not None
    latent = (mla.kv_lora_rank + mla.qk_rope_head_dim) * DType.FP8.bytes * m.cfg.num_layers
    assert m.kv_bytes_per_token == pytest.approx(latent)
    # full per-head K and V would be (128 heads x (192 + 128)) / 576 = 71x larger before the TP split
    assert m.kv_bytes_per_token < 2 * m.cfg.num_kv_heads * m.cfg.head_dim * m.cfg.num_layers / 8 / 5
    # attention DP: each GPU caches its own sequences' latents, so a token costs 1/tp of a GPU's cache
    assert _model(8, dp=True).kv_bytes_per_token == pytest.approx(latent / 8)


def test_absorbed_decode_reads_the_latent_once_for_every_head() -> None:
    m = _model(8)
    n, ctx = 64, 64 * 4096
    t_short = m.breakdown((), n, n * 16).attention_decode_s
    t_long = m.breakdown((), n, ctx).attention_decode_s
    assert t_long > t_short
    # at long context decode attention is bound by reading the cache or by the 16 heads' latent FLOPs per token;
    # either way per cached token it is the latent's cost, independent of the 128-head K/V width
    lat = m.cfg.mla.kv_lora_rank + m.cfg.mla.qk_rope_head_dim  # type: ignore[union-attr]
    per_token_bytes = lat * DType.FP8.bytes * m.layers_per_stage
    per_token_flops = 2.0 * (m.cfg.num_heads // 8) * (lat + m.cfg.mla.kv_lora_rank) * m.layers_per_stage  # type: ignore[union-attr]
    bound = max(per_token_bytes / m.hw.memory_bandwidth_Bps, per_token_flops / m.hw.peak_flops_per_s.bf16)
    assert (t_long - t_short) / (ctx - n * 16) >= 0.9 * bound
    assert (t_long - t_short) / (ctx - n * 16) <= 20 * bound
