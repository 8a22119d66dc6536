"""Mamba / Mamba-2 / Jamba in the workload IR: the scan op's FLOPs, bytes and state, its kernel price, and the
scan's backward in training."""

from __future__ import annotations

from perfcast.catalog.models import load_model
from perfcast.dtypes import DType
from perfcast.kernel.predict import predict_kernel
from perfcast.kernel.types import Bound
from perfcast.workload.backward import SavedActivations
from perfcast.workload.build import WorkloadSpec, build_workload
from perfcast.workload.types import Mode, OpKind, Phase


def _scan(model: str, mode: Mode, seq_len: int, batch: int = 1):
    spec = WorkloadSpec(mode=mode, batch_size=batch, seq_len=seq_len, dtype=DType.BF16)
    ops = [o for o in build_workload(model, spec).ops if o.kind is OpKind.SSM_SCAN]
    assert len(ops) == 1
    return ops[0]


def test_mamba1_scan_flops_and_state() -> None:
    """Mamba-2.8B: d_inner 5120, d_state 16, 64 layers; 8 FLOPs per (token, channel, state) + 2 per channel."""
    op = _scan("mamba-2.8b", Mode.PREFILL, 512)
    assert op.count == 64
    assert op.flops == 512 * 5120 * (8 * 16 + 2)
    assert op.get("state_bytes") == 5120 * 16 * 2  # bf16
    assert op.bytes_written == 512 * 5120 * 2 + 5120 * 16 * 2  # y, and the final state into the cache


def test_mamba2_ssd_chunked_matmul_flops() -> None:
    """Mamba-Codestral: 128 heads x 64, d_state 128, 8 groups, chunk 256 (Dao & Gu 2024, SSD)."""
    op = _scan("mamba-codestral-7b", Mode.PREFILL, 512)
    t, q, n, p, h, g = 512, 256, 128, 64, 128, 8
    assert op.get("matmul_flops") == 2 * t * (q * n * g + q * p * h + 2 * n * p * h)
    assert op.dims == (1, 512, h, p, n, g, q)
    assert op.get("state_bytes") == h * p * n * 2


def test_decode_step_reads_and_writes_the_state_and_is_memory_bound() -> None:
    op = _scan("mamba-codestral-7b", Mode.DECODE, 4096, batch=8)
    state = 128 * 64 * 128 * 2
    assert op.bytes_read > 8 * state and op.bytes_written > 8 * state
    assert predict_kernel(op, "h100-sxm").bound is Bound.MEMORY


def test_long_prefill_scan_is_priced_compute_bound() -> None:
    kt = predict_kernel(_scan("mamba-2.8b", Mode.PREFILL, 4096, batch=4), "h100-sxm")
    assert kt.time_s > 0 and kt.bound is Bound.COMPUTE


def test_jamba_layers_mix_attention_mamba_and_moe() -> None:
    cfg = load_model("jamba-v0.1")
    assert cfg.ssm is not None and cfg.ssm.layer_mixers.count("attention") == 4
    ops = build_workload("jamba-v0.1", WorkloadSpec(mode=Mode.PREFILL, batch_size=1, seq_len=512)).ops
    assert sum(o.count for o in ops if o.kind is OpKind.ATTENTION) == 4
    assert sum(o.count for o in ops if o.kind is OpKind.SSM_SCAN) == 28


def test_training_a_scan_runs_its_backward_at_twice_the_forward() -> None:
    """The scan's backward: 2x the forward's FLOPs (matrix part too), re-reading the inputs and the output
    gradient and writing the input gradients (perfcast.workload.backward._scan_backward)."""
    ops = build_workload("mamba-codestral-7b", WorkloadSpec(mode=Mode.TRAINING, batch_size=1, seq_len=512)).ops
    fwd, bwd = (next(o for o in ops if o.kind is OpKind.SSM_SCAN and o.phase is phase)
                for phase in (Phase.FORWARD, Phase.BACKWARD))
    assert bwd.count == fwd.count == 64 and bwd.op == "ssm_scan_backward"
    assert bwd.flops == 2 * fwd.flops and bwd.get("matmul_flops") == 2 * fwd.get("matmul_flops")
    assert bwd.bytes_read == fwd.bytes_read + fwd.bytes_written and bwd.bytes_written == fwd.bytes_read


def test_a_scan_keeps_its_inputs_for_the_backward() -> None:
    op = _scan("mamba-codestral-7b", Mode.INFERENCE, 512)
    assert SavedActivations().add(op) == op.bytes_read

