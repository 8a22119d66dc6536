"""Recognize a ground-truth table by its columns and predict every row of it.

Each supported table kind knows its target columns (the measured quantities
``perfcast predict-batch`` adds ``pred_`` columns for) and how to predict a
row. Rows that perfcast cannot predict keep their place with a one-line
``status`` saying why; no row is dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from perfcast.coefficients.bundle import Calibration
from perfcast.compose.types import MemoryBreakdown
from perfcast.errors import ConfigError, PerfcastError
from perfcast.groundtruth.diffusion_columns import DIFFUSION_RATES, DIFFUSION_REQUIRED, DIFFUSION_TARGETS
from perfcast.groundtruth.energy_columns import ENERGY_REQUIRED, ENERGY_TARGETS
from perfcast.groundtruth.files import ROW_ERRORS, memory_status, row_status
from perfcast.groundtruth.legacy_energy_columns import LEGACY_ENERGY_REQUIRED, LEGACY_ENERGY_TARGETS
from perfcast.groundtruth.online_columns import ONLINE_TARGETS as ONLINE_TARGET_COLUMNS

__all__ = ["TABLE_KINDS", "TableKind", "TablePrediction", "predict_e2e", "predict_energy_diffusion",
           "predict_energy_legacy",
           "predict_published_collectives", "predict_published_inference", "predict_published_training",
           "predict_serving_energy", "predict_serving_online", "predict_table",
           "predict_vidur_network",
           "recognize", "target_columns"]


@dataclass
class TablePrediction:
    """Per target column: predictions and interval bounds (NaN where not predicted); per row: a status."""

    pred: dict[str, np.ndarray]
    low: dict[str, np.ndarray]
    high: dict[str, np.ndarray]
    status: list[str]
    groups: list[str] = field(default_factory=list)  # per row: the device/GPU it belongs to


@dataclass(frozen=True)
class TableKind:
    """A table schema perfcast recognizes."""

    name: str
    required: frozenset[str]
    targets: tuple[str, ...]
    interval: str
    predict: Callable[[list[dict[str, str]], Calibration], TablePrediction] | None
    unsupported: str = ""


def _f(row: dict[str, str], key: str, default: float = float("nan")) -> float:
    v = row.get(key, "")
    try:
        return float(v) if v not in ("", None) else default
    except ValueError:
        return default


@contextmanager
def _row_status(out: TablePrediction, i: int) -> Iterator[None]:
    """Run one row's prediction; an error becomes that row's one-line status (the row is kept)."""
    try:
        yield
    except ROW_ERRORS as exc:
        out.status[i] = row_status(exc)


def _empty(n: int, targets: tuple[str, ...]) -> TablePrediction:
    return TablePrediction(
        pred={t: np.full(n, np.nan) for t in targets},
        low={t: np.full(n, np.nan) for t in targets},
        high={t: np.full(n, np.nan) for t in targets},
        status=["ok"] * n,
    )


def _apply_interval(p: TablePrediction, kind: str, cal: Calibration,
                    inverse: frozenset[str] | set[str] = frozenset()) -> None:
    """The ``kind`` interval of ``cal`` around every target; ``inverse`` targets (rates: inverse to a time) get it
    reversed."""
    lo, hi = cal.intervals.bounds(kind)
    for t, v in p.pred.items():
        a, b = (-hi, -lo) if t in inverse else (lo, hi)
        p.low[t] = v * np.exp(a)
        p.high[t] = v * np.exp(b)


def _from_rows(targets: tuple[str, ...], result: tuple[dict[str, np.ndarray], list[str], list[str]],
               cal: Calibration, interval: str, inverse: set[str] | frozenset[str] = frozenset()) -> TablePrediction:
    """A table's prediction from a row predictor's ``(predictions by target, statuses, groups)``, with the
    ``interval`` kind of ``cal`` around each target (``inverse``: rates, the interval reversed)."""
    pred, status, groups = result
    out = _empty(len(status), targets)
    out.status, out.groups = status, groups
    out.pred.update(pred)
    _apply_interval(out, interval, cal, inverse=inverse)
    return out


# -- NeuSight end-to-end ----------------------------------------------------------
def predict_e2e(rows: list[dict[str, str]], cal: Calibration) -> TablePrediction:
    """NeuSight end-to-end rows, one model step each, priced with ``cal`` (``perfcast fit`` passes its
    candidates)."""
    from perfcast.compose.predict import StepRequest
    from perfcast.system.predict import predict
    from perfcast.workload.types import Mode

    targets = ("measured_ms", "measured_fw_ms", "measured_bw_ms")
    out = _empty(len(rows), targets)
    cache: dict[tuple[object, ...], tuple[float, float, float, str]] = {}
    for i, r in enumerate(rows):
        out.groups.append(r.get("device", ""))
        with _row_status(out, i):
            mode = Mode(r["mode"])
            key = (r["device"], r["model"], r["mode"], r["batch_size"], r["seq_len"], r.get("fused", "false"),
                   r.get("parallelism", "none"), r.get("pp_microbatches", ""))
            if key not in cache:
                mb = r.get("pp_microbatches", "")
                req = StepRequest(
                    model=r["model"], hardware=r["device"], mode=mode, batch_size=int(float(r["batch_size"])),
                    seq_len=int(float(r["seq_len"])), fused=str(r.get("fused", "false")).lower() == "true",
                    parallelism=r.get("parallelism", "none") or "none",
                    microbatches=int(float(mb)) if mb not in ("", None) else None,
                    optimizer="none", loss=False, accumulate_grads=True,
                    dtype="fp32",  # FP32 everywhere (groundtruth/neusight/README.md); the tables name no dtype
                )
                st = predict(req, cal)
                busy = st.device_busy_s or 1.0
                fw = st.time_s * st.by_phase_s.get("fwd", 0.0) / busy
                bw = st.time_s - fw if mode is Mode.TRAINING else 0.0
                cache[key] = (st.time_s * 1e3, (fw if mode is Mode.TRAINING else st.time_s) * 1e3, bw * 1e3,
                              _memory_status(st.memory))
            total, fw, bw, out.status[i] = cache[key]
            out.pred["measured_ms"][i] = total
            out.pred["measured_fw_ms"][i] = fw
            out.pred["measured_bw_ms"][i] = bw
    _apply_interval(out, "step", cal)
    return out


def _memory_status(memory: MemoryBreakdown | None) -> str:
    """A row's status from its step's memory: ``ok``, or the out-of-memory verdict (the times are kept: they are
    for a configuration that does not fit, as ``perfcast predict`` prints them)."""
    return memory_status(memory, "times for a configuration that does not fit")


# -- NeuSight kernels --------------------------------------------------------------
def _kernel_predictor(kind: str) -> Callable[[list[dict[str, str]], Calibration], TablePrediction]:
    from perfcast.catalog.hardware import load_hardware
    from perfcast.groundtruth.kernel_tables import KernelRows, predict_kernel_rows

    cols = {"gemm": ("batch", "m_rows", "k_reduction", "n_cols"), "vector": ("rows", "cols"),
            "conv": ("batch", "in_channels", "out_channels", "kernel_size", "input_hw", "stride", "padding")}[kind]

    def run(rows: list[dict[str, str]], cal: Calibration) -> TablePrediction:
        out = _empty(len(rows), ("latency_ms",))
        good: list[int] = []
        dims, devs, ops = [], [], []
        known: dict[str, str | None] = {}
        for i, r in enumerate(rows):
            out.groups.append(r.get("device", ""))
            with _row_status(out, i):
                dev = r["device"]
                if dev not in known:
                    try:
                        load_hardware(dev)
                        known[dev] = None
                    except PerfcastError as exc:
                        known[dev] = str(exc)
                if known[dev] is not None:
                    raise ConfigError(str(known[dev]))
                d = [float(r[c]) for c in cols]
                if any(not np.isfinite(x) or x <= 0 for x in d[:4 if kind != "conv" else 5]):
                    raise ValueError("non-positive shape")
                if kind == "conv":
                    d.append(1.0)
                op = r.get("op", "conv")
                if kind == "vector":
                    from perfcast.groundtruth.kernel_tables import VECTOR_IO

                    if op not in VECTOR_IO:
                        raise ConfigError(f"vector op {op!r} not modelled; known: {', '.join(VECTOR_IO)}")
                elif kind == "gemm" and op not in ("bmm", "linear"):
                    raise ConfigError(f"gemm op {op!r} not modelled; known: bmm, linear")
            if out.status[i] != "ok":
                continue
            good.append(i)
            dims.append(d)
            devs.append(r["device"])
            ops.append(op)
        if good:
            kr = KernelRows(kind, np.array(devs), np.array(ops), np.array([""] * len(good)), np.array(dims),
                            np.full(len(good), np.nan))
            pred = predict_kernel_rows(kr, cal.kernel) * 1e3
            out.pred["latency_ms"][np.array(good)] = pred
        _apply_interval(out, "kernel", cal)
        return out

    return run


# -- VIDUR per-op tables -------------------------------------------------------------
def _predict_vidur(rows: list[dict[str, str]], cal: Calibration) -> TablePrediction:
    from perfcast.groundtruth.vidur_tables import VIDUR_OPS, block_ops
    from perfcast.kernel.predict import predict_ops

    targets = tuple(f"time_stats.{op}.median" for op in VIDUR_OPS)
    present = [t for t in targets if t in rows[0]] if rows else []
    out = _empty(len(rows), tuple(present))
    per_gpu: dict[str, list[tuple[int, list]]] = {}
    for i, r in enumerate(rows):
        out.groups.append(r.get("gpu_id", ""))
        with _row_status(out, i):
            shape = np.array([_f(r, c) for c in ("n_head", "n_kv_head", "n_embd", "n_expanded_embd", "vocab_size")]
                             + [1.0 if str(r.get("use_gated_mlp", "")).lower() == "true" else 0.0])
            if not np.all(np.isfinite(shape[:5])) or np.any(shape[:5] <= 0):
                raise ValueError("missing model shape columns")
            ops = block_ops(r["model_id"], int(_f(r, "num_tokens")), int(_f(r, "num_tensor_parallel_workers")),
                            shape)
            per_gpu.setdefault(r["gpu_id"], []).append((i, ops))
    for gpu, items in per_gpu.items():
        try:
            flat = [o for _, ops in items for o in ops]
            times = np.array([k.time_s for k in predict_ops(flat, gpu, cal)]).reshape(len(items), len(VIDUR_OPS))
        except PerfcastError as exc:
            for i, _ in items:
                out.status[i] = f"unsupported: {exc}"
            continue
        for (i, _), t in zip(items, times, strict=True):
            for j, op in enumerate(VIDUR_OPS):
                key = f"time_stats.{op}.median"
                if key in out.pred:
                    out.pred[key][i] = t[j] * 1e3
    _apply_interval(out, "vidur_op", cal)
    return out


# -- VIDUR attention kernels -------------------------------------------------------------
def _predict_vidur_attention(rows: list[dict[str, str]], cal: Calibration) -> TablePrediction:
    from perfcast.groundtruth.attention_tables import attention_op, row_geometry
    from perfcast.kernel.predict import predict_ops

    targets = ("time_stats.attn_prefill.median", "time_stats.attn_decode.median")
    out = _empty(len(rows), targets)
    ops, where = [], []
    for i, r in enumerate(rows):
        out.groups.append(r.get("gpu_id", "a100-pcie-80gb"))
        with _row_status(out, i):
            pre, b, c, kv, heads = row_geometry(r)
            ops.append(attention_op(pre, b, c, kv, heads))
            where.append((i, targets[0] if pre else targets[1]))
    if ops:
        # the table comes from VIDUR's A100 80GB profiling (see its README)
        times = predict_ops(ops, "a100-pcie-80gb", cal)
        for (i, t), kt in zip(where, times, strict=True):
            out.pred[t][i] = kt.time_s * 1e3
    _apply_interval(out, "attention", cal)
    return out


# -- published GEMM TFLOP/s ------------------------------------------------------------
def _predict_published_gemm(rows: list[dict[str, str]], cal: Calibration) -> TablePrediction:
    from perfcast.catalog.hardware import load_hardware
    from perfcast.dtypes import parse_dtype
    from perfcast.kernel.gemm import gemm_times

    out = _empty(len(rows), ("tflops",))
    for i, r in enumerate(rows):
        out.groups.append(r.get("gpu_id", ""))
        with _row_status(out, i):
            hw = load_hardware(r["gpu_id"])
            dtype = parse_dtype(r["dtype"])
            m, n, k = (_f(r, c) for c in ("m", "n", "k"))
            t = gemm_times(np.array([1.0]), np.array([m]), np.array([k]), np.array([n]), hw, dtype, cal.kernel,
                           batched=False).time_s[0]
            out.pred["tflops"][i] = 2.0 * m * n * k / t / 1e12
    _apply_interval(out, "gemm_published", cal)
    return out


# -- collectives (VIDUR network tables, published collectives) ---------------------------------
def predict_vidur_network(rows: list[dict[str, str]], cal: Calibration) -> TablePrediction:
    """VIDUR ``network/<cluster>/{all_reduce,send_recv}.csv``: ``time_stats.<op>.median`` (ms) per row."""
    from perfcast.groundtruth.collective_tables import predict_collective_rows, vidur_network_rows

    targets = ("time_stats.all_reduce.median", "time_stats.send_recv.median")
    out = _empty(len(rows), targets)
    crows = vidur_network_rows(rows)
    pred = predict_collective_rows(crows, cal.collectives)
    out.status = list(crows.status)
    out.groups = [str(g) for g in crows.group]
    for i, op in enumerate(crows.op):
        key = f"time_stats.{op}.median"
        if out.status[i] == "ok" and key in out.pred:
            out.pred[key][i] = pred[i] * 1e3
        elif out.status[i] == "ok":
            out.status[i] = f"unsupported: VIDUR network tables hold all_reduce and send_recv, not {op}"
    _apply_interval(out, "collective", cal)
    return out


def predict_published_collectives(rows: list[dict[str, str]], cal: Calibration) -> TablePrediction:
    """Published collectives: busbw and algbw (GB/s, 10^9 B/s) and time_us per row."""
    from perfcast.groundtruth.collective_tables import predict_collective_rows, published_collective_rows
    from perfcast.system.collectives import bus_factor, parse_op

    out = _empty(len(rows), ("busbw_GBps", "algbw_GBps", "time_us"))
    crows = published_collective_rows(rows)
    t = predict_collective_rows(crows, cal.collectives)
    out.status = list(crows.status)
    out.groups = [str(g) for g in crows.group]
    ok = np.isfinite(t) & (t > 0)
    algbw = np.where(ok, crows.size / np.where(ok, t, 1.0) / 1e9, np.nan)
    factor = np.array([bus_factor(parse_op(o), int(n)) if s == "ok" else np.nan
                       for o, n, s in zip(crows.op, crows.n, crows.status, strict=True)])
    out.pred["time_us"] = np.where(ok, t * 1e6, np.nan)
    out.pred["algbw_GBps"] = algbw
    out.pred["busbw_GBps"] = algbw * factor
    _apply_interval(out, "collective", cal, inverse={"busbw_GBps", "algbw_GBps"})
    return out


# -- published training runs -------------------------------------------------------------------
def predict_published_training(rows: list[dict[str, str]], cal: Calibration) -> TablePrediction:
    """Published training throughput: tokens/s and TFLOP/s per GPU, MFU, HFU and step time per row."""
    from perfcast.groundtruth.training_tables import TRAINING_TARGETS, predict_training_rows

    # rates: inverse step times
    return _from_rows(TRAINING_TARGETS, predict_training_rows(rows, cal), cal, "training",
                      inverse=set(TRAINING_TARGETS) - {"step_time_s"})


# -- published serving throughput ----------------------------------------------------------------
def predict_published_inference(rows: list[dict[str, str]], cal: Calibration) -> TablePrediction:
    """Published serving throughput (output tokens/s of the instance), each row's load simulated."""
    from perfcast.groundtruth.serving_tables import predict_inference_rows

    out = _empty(len(rows), ("value",))
    pred, status, groups = predict_inference_rows(rows, cal)
    out.status, out.groups = status, groups
    out.pred["value"] = pred
    _apply_interval(out, "serving", cal, inverse={"value"})  # a throughput: the interval of a time, inverted
    return out


# -- online serving benchmarks ---------------------------------------------------------------------
def predict_serving_online(rows: list[dict[str, str]], cal: Calibration) -> TablePrediction:
    """Online serving benchmarks: every measured throughput and latency column, each row's closed loop
    simulated (grouped by GPU and engine)."""
    from perfcast.groundtruth.online_tables import predict_online_rows

    return _from_rows(ONLINE_TARGET_COLUMNS, predict_online_rows(rows, cal), cal, "serving",
                      inverse={t for t in ONLINE_TARGET_COLUMNS if "tput" in t})


# -- measured serving energy (ML.ENERGY) ---------------------------------------------------------------------
def predict_serving_energy(rows: list[dict[str, str]], cal: Calibration) -> TablePrediction:
    """ML.ENERGY serving runs: energy per token and request, power, throughput, mean batch and TPOT of each row's
    steady state, simulated (grouped by GPU)."""
    from perfcast.groundtruth.energy_tables import predict_energy_rows

    return _from_rows(ENERGY_TARGETS, predict_energy_rows(rows, cal), cal, "serving",
                      inverse={"output_throughput_tok_per_s", "request_throughput_req_per_s"})


# -- ML.ENERGY v1 batch-size-1 generation -----------------------------------------------------------
def predict_energy_legacy(rows: list[dict[str, str]], cal: Calibration) -> TablePrediction:
    """ML.ENERGY v1 batch-size-1 generation: each row's mean response priced as eager transformers + FastChat ran
    it (latency, throughput, energy per request and per output token, average power; grouped by GPU)."""
    from perfcast.groundtruth.legacy_energy_tables import predict_legacy_rows

    # a sum of compose steps: the step interval (energy and power carry the time's until an energy interval is fitted)
    return _from_rows(LEGACY_ENERGY_TARGETS, predict_legacy_rows(rows, cal), cal, "step",
                      inverse={"throughput_tok_per_s"})


# -- measured diffusion energy (ML.ENERGY) ---------------------------------------------------------------------
def predict_energy_diffusion(rows: list[dict[str, str]], cal: Calibration) -> TablePrediction:
    """Diffusers text-to-image runs: batch latency, energy per image, average power and images/s per row."""
    from perfcast.groundtruth.diffusion_tables import predict_diffusion_rows

    return _from_rows(DIFFUSION_TARGETS, predict_diffusion_rows(rows, cal), cal, "step", inverse=set(DIFFUSION_RATES))


TABLE_KINDS: tuple[TableKind, ...] = (
    TableKind("neusight_e2e", frozenset({"device", "model", "mode", "batch_size", "seq_len", "measured_ms"}),
              ("measured_ms", "measured_fw_ms", "measured_bw_ms"), "step", predict_e2e),
    TableKind("neusight_model_ops", frozenset({"node_name", "fx_op", "latency_ms"}),
              ("latency_ms", "fw_latency_ms", "bw_latency_ms", "acc_latency_ms"), "kernel", None,
              "per-fx-node latencies of isolated nodes are not predicted yet; predict the kernels or the model"),
    TableKind("neusight_gemm", frozenset({"device", "op", "m_rows", "k_reduction", "n_cols", "latency_ms"}),
              ("latency_ms",), "kernel", _kernel_predictor("gemm")),
    TableKind("neusight_vector", frozenset({"device", "op", "rows", "cols", "latency_ms"}),
              ("latency_ms",), "kernel", _kernel_predictor("vector")),
    TableKind("neusight_conv", frozenset({"device", "in_channels", "out_channels", "kernel_size", "input_hw",
                                          "latency_ms"}), ("latency_ms",), "kernel", _kernel_predictor("conv")),
    TableKind("vidur_compute", frozenset({"gpu_id", "model_id", "num_tokens", "num_tensor_parallel_workers",
                                          "n_embd"}), (), "vidur_op", _predict_vidur),
    TableKind("vidur_network", frozenset({"collective", "size", "num_workers", "devices_per_node"}),
              ("time_stats.all_reduce.median", "time_stats.send_recv.median"), "collective", predict_vidur_network),
    TableKind("vidur_attention", frozenset({"prefill_chunk_size", "kv_cache_size", "batch_size", "is_prefill"}),
              ("time_stats.attn_prefill.median", "time_stats.attn_decode.median"), "attention",
              _predict_vidur_attention),
    TableKind("published_training", frozenset({"tflops_per_gpu", "tokens_per_s_per_gpu", "num_gpus"}),
              ("tokens_per_s_per_gpu", "tflops_per_gpu", "mfu", "hfu", "step_time_s"), "training",
              predict_published_training),
    TableKind("serving_online", frozenset({"framework", "gpu_id", "tp", "max_concurrency", "input_len",
                                           "output_len", "total_tput_tok_s_per_gpu"}),
              ONLINE_TARGET_COLUMNS, "serving", predict_serving_online),
    TableKind("published_inference", frozenset({"metric", "value", "input_len", "output_len"}),
              ("value",), "serving", predict_published_inference),
    # the same schema naming MLPerf workloads (mlperf:<benchmark>:<scenario>) instead of lengths
    TableKind("published_inference", frozenset({"metric", "value", "workload"}),
              ("value",), "serving", predict_published_inference),
    TableKind("published_collectives", frozenset({"collective", "busbw_GBps", "size_bytes"}),
              ("busbw_GBps", "algbw_GBps", "time_us"), "collective", predict_published_collectives),
    TableKind("published_gemm", frozenset({"gpu_id", "dtype", "m", "n", "k", "tflops"}),
              ("tflops",), "gemm_published", _predict_published_gemm),
    TableKind("serving_energy", ENERGY_REQUIRED, ENERGY_TARGETS, "serving", predict_serving_energy),
    TableKind("energy_legacy_bs1", LEGACY_ENERGY_REQUIRED, LEGACY_ENERGY_TARGETS, "step", predict_energy_legacy),
    TableKind("energy_diffusion", DIFFUSION_REQUIRED, DIFFUSION_TARGETS, "step", predict_energy_diffusion),
)


def recognize(header: list[str]) -> TableKind:
    """The table kind whose required columns are all in ``header`` (raises ConfigError)."""
    cols = set(header)
    for kind in TABLE_KINDS:
        if kind.required <= cols:
            return kind
    raise ConfigError(
        "unrecognized table: its columns match no ground-truth schema perfcast knows "
        f"({', '.join(dict.fromkeys(k.name for k in TABLE_KINDS))}); see shared/groundtruth/README.md"
    )


def target_columns(kind: TableKind, header: list[str]) -> list[str]:
    """The target columns present in this table (VIDUR tables: every time_stats.*.median)."""
    if kind.name == "vidur_compute":
        return [c for c in header if c.startswith("time_stats.") and c.endswith(".median")]
    return [t for t in kind.targets if t in header]


def predict_table(kind: TableKind, rows: list[dict[str, str]], cal: Calibration) -> TablePrediction:
    """Predictions for every row of a recognized table, priced with ``cal``."""
    if kind.predict is None:
        out = _empty(len(rows), kind.targets)
        out.status = [f"unsupported: {kind.unsupported}"] * len(rows)
        out.groups = [r.get("gpu_id", r.get("device", "")) for r in rows]
        return out
    return kind.predict(rows, cal)
