"""Nemotron-H / Nemotron 3 and Qwen3-Next in the workload IR: which ops each layer type emits, the Gated DeltaNet's
delta-rule op (FLOPs, bytes, state), its kernel price and TP split, and training (Nemotron's scans have a backward;
Qwen3-Next's delta rule has none yet)."""

from __future__ import annotations

import pytest

from perfcast.catalog.models import load_model
from perfcast.dtypes import DType
from perfcast.errors import UnsupportedError
from perfcast.kernel.predict import predict_kernel
from perfcast.kernel.types import Bound
from perfcast.workload.build import WorkloadSpec, build_workload
from perfcast.workload.sharding import shard_tp
from perfcast.workload.types import Mode, OpKind, Phase


def _ops(model: str, mode: Mode = Mode.PREFILL, seq_len: int = 512, batch: int = 1, style: str = "engine"):
    spec = WorkloadSpec(mode=mode, batch_size=batch, seq_len=seq_len, dtype=DType.BF16, style=style)
    return build_workload(model, spec).ops


def _one(ops, name: str):
    found = [o for o in ops if o.name.endswith(name)]
    assert len(found) == 1, [o.name for o in found]
    return found[0]


def test_nemotron_3_nano_layers_mamba_attention_and_moe() -> None:
    ops = _ops("Nemotron_3_Nano")
    assert sum(o.count for o in ops if o.kind is OpKind.SSM_SCAN) == 23
    assert sum(o.count for o in ops if o.kind is OpKind.ATTENTION) == 6
    router = _one(ops, "router.gate")
    assert router.count == 23 and router.dims[-1] == 128
    # non-gated squared-ReLU experts and shared expert: fc1 / act / fc2, no gate projection
    assert _one(ops, "shared_expert.fc1").dims[-1] == 3712
    assert _one(ops, "experts.fc1").dims[-1] == 1856
    assert not [o for o in ops if "gate_up" in o.name]
    assert _one(ops, "experts.act").op == "relu2"


@pytest.mark.parametrize("model", ["nemotron-h-8b", "nemotron-nano-9b-v2"])
@pytest.mark.parametrize("style", ["hf", "engine"])
def test_nemotron_h_graph_holds_every_parameter_the_catalog_counts(model: str, style: str) -> None:
    ops = _ops(model, Mode.INFERENCE, seq_len=128, style=style)
    assert sum(o.params * o.count for o in ops) == load_model(model).num_params()


def test_nemotron_h_mlp_layers_are_their_own_mixer() -> None:
    ops = _ops("nemotron-h-8b")
    fc1 = _one(ops, "mlp.fc1")
    assert fc1.count == 24 and fc1.dims[-2:] == (4096, 21504)
    assert _one(ops, "ssm.in_proj").dims[-1] == 2 * 8192 + 2 * 8 * 128 + 128  # z, x, B, C, dt
    assert not [o for o in ops if "rotary" in o.name]  # no position encoding in Nemotron-H attention


def test_delta_rule_prefill_flops_bytes_and_state() -> None:
    """Qwen3-Next: 32 value heads of 128, 16 key heads of 128, chunk 64 (module docstring of
    perfcast.workload.models.deltanet for the terms)."""
    op = _one(_ops("qwen3-next-80b-a3b", Mode.PREFILL, 512), "gated_delta_rule")
    t, h, hk, k, v, c = 512, 32, 16, 128, 128, 64
    assert op.count == 36 and op.dims == (1, t, h, v, k, hk, c)
    assert op.get("matmul_flops") == t * h * (2 * c * (3 * k + 2 * v) + 6 * k * v)
    state = h * k * v * 2  # bf16
    assert op.get("state_bytes") == state
    assert op.bytes_read == t * (2 * hk * k + h * v) * 2 + t * 2 * h * 4  # q, k, v (bf16); g, beta (fp32)
    assert op.bytes_written == t * h * v * 2 + state  # o, and the final state into the cache


def test_delta_rule_decode_reads_and_writes_the_state_and_is_memory_bound() -> None:
    op = _one(_ops("qwen3-next-80b-a3b", Mode.DECODE, 4096, batch=8), "gated_delta_rule")
    state = 32 * 128 * 128 * 2
    assert op.get("matmul_flops") == 0.0
    assert op.bytes_read > 8 * state and op.bytes_written > 8 * state
    assert predict_kernel(op, "h100-sxm").bound is Bound.MEMORY


def test_delta_rule_long_prefill_is_priced_compute_bound() -> None:
    op = _one(_ops("qwen3-next-80b-a3b", Mode.PREFILL, 8192, batch=4), "gated_delta_rule")
    kt = predict_kernel(op, "h100-sxm")
    assert kt.time_s > 0 and kt.bound is Bound.COMPUTE


def test_qwen3_next_gated_attention_and_delta_net_ops() -> None:
    ops = _ops("qwen3-next-80b-a3b", Mode.INFERENCE, 128, style="hf")
    q = _one(ops, "attn.q_proj")
    assert q.count == 12 and q.dims[-1] == 2 * 16 * 256  # the query and its output gate
    assert _one(ops, "output_gate.sigmoid").count == 12
    assert _one(ops, "in_proj_qkvz").dims[-1] == 2 * 16 * 128 + 2 * 32 * 128
    assert _one(ops, "attn.repeat_k").count == 36  # HF repeats q and k from 16 key heads to 32 value heads
    assert _one(ops, "attn.conv1d").dims == (128, 2 * 16 * 128 + 32 * 128)


def test_training_qwen3_next_is_refused() -> None:
    with pytest.raises(UnsupportedError, match="linear-attention"):
        build_workload("qwen3-next-80b-a3b", WorkloadSpec(mode=Mode.TRAINING, batch_size=1, seq_len=128))


def test_nemotron_3_nano_trains_with_a_scan_backward_per_mamba_layer() -> None:
    ops = build_workload("Nemotron_3_Nano", WorkloadSpec(mode=Mode.TRAINING, batch_size=1, seq_len=128)).ops
    assert sum(o.count for o in ops if o.kind is OpKind.SSM_SCAN and o.phase is Phase.BACKWARD) == 23


def test_tensor_parallel_splits_a_scan_by_heads_with_its_matrix_part() -> None:
    op = _one(_ops("qwen3-next-80b-a3b", Mode.PREFILL, 512), "gated_delta_rule")
    (half,) = shard_tp([op], 2)
    assert half.dims == (1, 512, 16, 128, 128, 8, 64)
    assert half.flops == op.flops / 2 and half.get("matmul_flops") == op.get("matmul_flops") / 2  # type: ignore[operator]
    assert half.get("state_bytes") == op.get("state_bytes") / 2  # type: ignore[operator]
    assert predict_kernel(half, "h100-sxm").time_s < predict_kernel(op, "h100-sxm").time_s
