"""Golden: FLOP and parameter counts worked on paper from the models' config values.

Every expected number below is derived in the comments from the Hugging Face
config fields (hidden size, layers, heads, vocabulary...), written out as
constants in this file, never by calling perfcast twice. Conventions (those of
``perfcast.workload.types``): a multiply-add is 2 FLOPs; a linear layer over
``T`` tokens with ``W`` weight elements costs ``2*T*W`` plus ``T*out`` for its
bias; eager attention (``torch.matmul``) computes the full ``s x s`` score
matrix; fused causal attention (FlashAttention) skips the masked half.

References: nanoGPT ``model.py`` ``estimate_mfu`` (PaLM, Chowdhery et al. 2022,
Appendix B): training FLOPs per token = 6N + 12*L*H*Q*T with N the parameters
(minus position embeddings), L layers, H heads, Q head size, T sequence length.
"""

from __future__ import annotations

import pytest

from perfcast.workload.build import WorkloadSpec, build_workload
from perfcast.workload.types import Mode, OpKind, Phase, Workload

EXACT = 1e-12  # relative: integer-valued float sums below 2**53 are exact


def gemm_flops(w: Workload, phase: Phase = Phase.FORWARD) -> float:
    """FLOPs of the matrix products (linear layers and batched products) of one phase."""
    return sum(o.flops * o.count for o in w.ops if o.kind is OpKind.GEMM and o.phase is phase)


def attention_flops(w: Workload, phase: Phase = Phase.FORWARD) -> float:
    """FLOPs of the fused attention kernels of one phase."""
    return sum(o.flops * o.count for o in w.ops if o.kind is OpKind.ATTENTION and o.phase is phase)


# -- GPT-2 small (HF ``gpt2`` config.json: n_embd 768, n_layer 12, n_head 12, vocab 50257, n_positions 1024,
#    n_inner null -> 4 * 768) ------------------------------------------------------------------------------
GPT2_H, GPT2_L, GPT2_HEADS, GPT2_V, GPT2_POS = 768, 12, 12, 50257, 1024
GPT2_FF = 4 * GPT2_H
# matmul weights per layer: c_attn h x 3h, attn c_proj h x h, c_fc h x 4h, mlp c_proj 4h x h = 12 h^2
GPT2_LAYER_WEIGHTS = 3 * GPT2_H**2 + GPT2_H**2 + GPT2_H * GPT2_FF + GPT2_FF * GPT2_H
# biases per layer: 3h + h + 4h + h = 9h
GPT2_LAYER_BIASES = 3 * GPT2_H + GPT2_H + GPT2_FF + GPT2_H


def test_gpt2_layer_weights_are_twelve_h_squared() -> None:
    assert GPT2_LAYER_WEIGHTS == 12 * GPT2_H**2
    assert GPT2_LAYER_BIASES == 9 * GPT2_H


@pytest.mark.parametrize(("batch", "seq"), [(1, 64), (2, 128), (4, 1024)])
def test_gpt2_inference_matmul_flops(batch: int, seq: int) -> None:
    """Forward matmul FLOPs of GPT2LMHeadModel (eager HF, logits for every token).

    T = b*s tokens. Linear layers: 2*T*(L*12h^2 + h*V) (the LM head is h x V, no bias) plus the biases
    T*L*9h. Eager attention per layer: q@k^T is (b*heads) x (s x hd) @ (hd x s) = 2*b*s*s*h FLOPs, and
    p@v the same, so 4*b*s^2*h per layer.
    """
    h, layers, v = GPT2_H, GPT2_L, GPT2_V
    tokens = batch * seq
    linear = 2 * tokens * (layers * GPT2_LAYER_WEIGHTS + h * v) + tokens * layers * GPT2_LAYER_BIASES
    attention = layers * 4 * batch * seq * seq * h
    w = build_workload("gpt2", WorkloadSpec(Mode.INFERENCE, batch, seq))
    assert gemm_flops(w) == pytest.approx(linear + attention, rel=EXACT)
    # b=2, s=128 written out: 2*256*(12*7,077,888 + 38,597,376) + 256*12*6912 + 12*4*2*128^2*768
    if (batch, seq) == (2, 128):
        assert linear + attention == 64_477_593_600


def test_gpt2_training_backward_is_twice_the_forward_matmuls() -> None:
    """Backward of each linear: dX = dY @ W and dW = dY^T @ X, each 2*T*W FLOPs; bmm: two products of the
    forward's size. So backward matmul FLOPs = 2 x (forward matmul FLOPs without the bias adds), and
    forward + backward = 3 x forward - 2 x bias FLOPs."""
    batch, seq = 2, 128
    tokens = batch * seq
    bias = tokens * GPT2_L * GPT2_LAYER_BIASES
    w = build_workload("gpt2", WorkloadSpec(Mode.TRAINING, batch, seq))
    fwd, bwd = gemm_flops(w, Phase.FORWARD), gemm_flops(w, Phase.BACKWARD)
    assert bwd == pytest.approx(2 * (fwd - bias), rel=EXACT)
    assert fwd + bwd == pytest.approx(3 * fwd - 2 * bias, rel=EXACT)


def test_gpt2_training_flops_match_palm_6n_formula() -> None:
    """nanoGPT/PaLM: 6N + 12*L*H*Q*T FLOPs per token for forward + backward.

    N (nanoGPT ``get_num_params``, position embeddings excluded) for GPT-2 small:
      wte 50257*768 = 38,597,376; per layer 2 LayerNorms (4h = 3072) + 12h^2 + 9h = 7,087,872, times 12
      = 85,054,464; ln_f 1536 -> N = 123,653,376 (124,439,808 with wpe's 786,432, the known GPT-2 count).
    The formula counts N's norms and biases as matmuls (6 FLOPs per parameter per token), so perfcast's
    matmul count (biases counted once, in the forward) is a little lower: within 0.1 %.
    """
    h, layers, heads, v = GPT2_H, GPT2_L, GPT2_HEADS, GPT2_V
    n_params = v * h + layers * (4 * h + GPT2_LAYER_WEIGHTS + GPT2_LAYER_BIASES) + 2 * h
    assert n_params == 123_653_376
    assert n_params + GPT2_POS * h == 124_439_808
    batch, seq = 4, 1024
    tokens = batch * seq
    q = h // heads
    palm = tokens * (6 * n_params + 12 * layers * heads * q * seq)
    w = build_workload("gpt2", WorkloadSpec(Mode.TRAINING, batch, seq))
    total = gemm_flops(w, Phase.FORWARD) + gemm_flops(w, Phase.BACKWARD)
    assert total == pytest.approx(palm, rel=1e-3)
    assert total < palm  # norms are not matmuls


def test_gpt2_adam_updates_every_parameter_once() -> None:
    """The optimizer step covers GPT-2's 124,439,808 parameters once; the LM head is tied to wte, so its
    weight is not a second parameter tensor. Adam: 12 FLOPs per parameter (see graph.POINTWISE_FLOPS)."""
    w = build_workload("gpt2", WorkloadSpec(Mode.TRAINING, 1, 64))
    (opt,) = w.phase(Phase.OPTIMIZER)
    assert opt.op == "adam"
    assert opt.dims == (1, 124_439_808)
    assert opt.flops == 12.0 * 124_439_808


# -- BERT-large (HF ``bert-large-uncased``: hidden 1024, 24 layers, 16 heads, intermediate 4096,
#    vocab 30522, 512 positions, 2 token types) --------------------------------------------------------------
BERT_H, BERT_L, BERT_FF, BERT_V, BERT_POS, BERT_TYPES = 1024, 24, 4096, 30522, 512, 2


def _bert_encoder_matmuls(batch: int, seq: int) -> int:
    """Per layer: q, k, v, o (4 h x h, biased) and the FFN (h x ff, ff x h, biased); attention 4*b*s^2*h."""
    h, ff = BERT_H, BERT_FF
    tokens = batch * seq
    per_layer = 2 * tokens * (4 * h * h + 2 * h * ff) + tokens * (4 * h + ff + h) + 4 * batch * seq * seq * h
    return BERT_L * per_layer


def test_bert_large_inference_matmul_flops() -> None:
    """BertForSequenceClassification (NeuSight's inference model): encoder, pooler on the first token of
    each sequence (h x h + bias) and a 2-way classifier (h x 2 + bias)."""
    batch, seq = 8, 512
    h = BERT_H
    heads = 2 * batch * h * h + batch * h + 2 * batch * h * 2 + batch * 2
    w = build_workload("bert-large", WorkloadSpec(Mode.INFERENCE, batch, seq))
    assert gemm_flops(w) == pytest.approx(_bert_encoder_matmuls(batch, seq) + heads, rel=EXACT)


def test_bert_large_pretraining_heads_and_parameters() -> None:
    """BertForPreTraining (NeuSight's training model): pooler, MLM transform (h x h), MLM decoder over the
    vocabulary (h x V + bias V, the weight tied to the word embeddings) and NSP (h x 2).

    Parameters: embeddings 30522*1024 + 512*1024 + 2*1024 + LN 2048 = 31,782,912; per layer 4*(h^2+h)
    + 2048 + (h*ff+ff) + (ff*h+h) + 2048 = 12,596,224, times 24 = 302,309,376; pooler 1,049,600; MLM
    transform 1,049,600 + LN 2048 + decoder bias 30,522; NSP 2,050 -> 336,226,108.
    """
    batch, seq = 2, 128
    h, v = BERT_H, BERT_V
    tokens = batch * seq
    heads = (2 * batch * h * h + batch * h  # pooler
             + 2 * tokens * h * h + tokens * h  # MLM transform
             + 2 * tokens * h * v + tokens * v  # MLM decoder
             + 2 * batch * h * 2 + batch * 2)  # NSP
    w = build_workload("bert-large", WorkloadSpec(Mode.TRAINING, batch, seq))
    assert gemm_flops(w) == pytest.approx(_bert_encoder_matmuls(batch, seq) + heads, rel=EXACT)
    embeddings = BERT_V * h + BERT_POS * h + BERT_TYPES * h + 2 * h
    layer = 4 * (h * h + h) + 2 * h + (h * BERT_FF + BERT_FF) + (BERT_FF * h + h) + 2 * h
    params = embeddings + BERT_L * layer + (h * h + h) + (h * h + h) + 2 * h + v + (2 * h + 2)
    assert params == 336_226_108
    (opt,) = w.phase(Phase.OPTIMIZER)
    assert opt.dims == (1, params)


# -- Llama-2-7B (HF config: hidden 4096, 32 layers, 32 heads = 32 KV heads, intermediate 11008,
#    vocab 32000, no biases, untied LM head) -----------------------------------------------------------------
LLAMA_H, LLAMA_L, LLAMA_FF, LLAMA_V = 4096, 32, 11008, 32000
# matmul weights per layer: q, k, v, o = 4 h^2; gate, up (h x ff) and down (ff x h) = 3 h ff
LLAMA_LAYER_WEIGHTS = 4 * LLAMA_H**2 + 3 * LLAMA_H * LLAMA_FF
# 6,738,415,616 = 32 * 202,375,168 + 2 * 131,072,000 (embedding + LM head) + 65 norms of 4096
LLAMA_PARAMS = LLAMA_L * LLAMA_LAYER_WEIGHTS + 2 * LLAMA_V * LLAMA_H + (2 * LLAMA_L + 1) * LLAMA_H


def test_llama2_7b_parameter_count_written_out() -> None:
    assert LLAMA_PARAMS == 6_738_415_616


@pytest.mark.parametrize("kv_len", [128, 1024, 4096])
def test_llama2_7b_decode_step_flops(kv_len: int) -> None:
    """One decode step (engine style, FlashAttention with a KV cache) for b sequences, one new token each.

    Matmuls per token: 2 x (L * (4h^2 + 3h*ff) + h*V) -- 2 x the parameters minus the embedding table and
    the norms. Attention per token per layer: the new query against kv_len keys (q.k, h MACs per key) and
    values (p.v, h MACs per key): 2 * 2 * kv_len * h FLOPs.
    """
    batch = 4
    matmul = batch * 2 * (LLAMA_L * LLAMA_LAYER_WEIGHTS + LLAMA_H * LLAMA_V)
    attention = batch * LLAMA_L * 4 * kv_len * LLAMA_H
    w = build_workload("llama-2-7b", WorkloadSpec(Mode.DECODE, batch, kv_len, dtype="fp16"))
    assert gemm_flops(w) == pytest.approx(matmul, rel=EXACT)
    assert attention_flops(w) == pytest.approx(attention, rel=EXACT)
    # "2 x params per token": the matmuls leave out only the 131M embedding table and the norms (~2 %)
    assert gemm_flops(w) / batch == pytest.approx(2 * LLAMA_PARAMS, rel=0.025)
    # one query token per sequence, attending to the whole context
    assert w.kv_len == kv_len
    for op in w.ops:
        if op.kind is OpKind.ATTENTION:
            assert op.dims[3] == 1 and op.dims[4] == kv_len
        if op.kind is OpKind.GEMM:
            assert op.dims[1] == batch  # every projection sees b tokens


def test_llama2_7b_causal_prefill_attention_skips_masked_half() -> None:
    """Causal prefill of s tokens: query i sees i+1 keys, so s*(s+1)/2 (query, key) pairs, each costing
    2*hd (q.k) + 2*hd (p.v) FLOPs per head: 4 * h * s(s+1)/2 per layer per sequence."""
    batch, seq = 2, 512
    pairs = seq * (seq + 1) // 2
    expected = batch * LLAMA_L * 4 * LLAMA_H * pairs
    w = build_workload("llama-2-7b", WorkloadSpec(Mode.PREFILL, batch, seq, dtype="bf16"))
    assert attention_flops(w) == pytest.approx(expected, rel=EXACT)


def test_llama2_7b_hf_training_adam_covers_every_parameter() -> None:
    """HF eager Llama writes RMSNorm in Python; its weight is still a parameter the optimizer updates."""
    w = build_workload("llama-2-7b", WorkloadSpec(Mode.TRAINING, 1, 128, dtype="bf16"))
    (opt,) = w.phase(Phase.OPTIMIZER)
    assert opt.dims == (1, LLAMA_PARAMS)


# -- Mixtral-8x7B (HF config: hidden 4096, 32 layers, 32 heads, 8 KV heads of 128, expert intermediate
#    14336, 8 local experts, top-2, vocab 32000, no sliding window) ------------------------------------------
MIX_H, MIX_L, MIX_HEADS, MIX_KV, MIX_HD, MIX_FF, MIX_E, MIX_K, MIX_V = 4096, 32, 32, 8, 128, 14336, 8, 2, 32000


def test_mixtral_prefill_pays_for_top2_experts_only() -> None:
    """Prefill of 1 x 512 tokens (engine style, logits for the last token only).

    Per layer: fused QKV h x (32 + 2*8)*128 = h x 6144, o h x h, router h x 8, and each token through
    k = 2 experts of 3 matrices (gate, up: h x ff; down: ff x h): 2 * T * k * 3 * h * ff. With 512 tokens
    and uniform routing every expert gets 512 * 2 / 8 = 128 tokens. LM head: 2 * 1 * h * V.
    """
    batch, seq = 1, 512
    tokens = batch * seq
    h = MIX_H
    attn_proj = 2 * tokens * (h * (MIX_HEADS + 2 * MIX_KV) * MIX_HD + h * h)
    router = 2 * tokens * h * MIX_E
    experts = 2 * tokens * MIX_K * 3 * h * MIX_FF
    lm_head = 2 * batch * h * MIX_V
    expected = MIX_L * (attn_proj + router + experts) + lm_head
    w = build_workload("mixtral-8x7b", WorkloadSpec(Mode.PREFILL, batch, seq, dtype="bf16"))
    assert gemm_flops(w) == pytest.approx(expected, rel=EXACT)
    expert_ops = [o for o in w.ops if o.kind is OpKind.GEMM and ".experts." in o.name]
    got_experts = sum(o.flops * o.count for o in expert_ops)
    assert got_experts == pytest.approx(MIX_L * experts, rel=EXACT)
    # a dense model with all 8 experts would cost 4x as much in its expert matmuls
    all_experts = 2 * tokens * MIX_E * 3 * h * MIX_FF
    assert got_experts == pytest.approx(MIX_L * all_experts * MIX_K / MIX_E, rel=EXACT)
