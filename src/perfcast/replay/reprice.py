"""Reprice a trace's GPU ops for another device (``--hardware``) or data-parallel size (``--dp``).

Each GPU op keeps its recorded duration times a ratio, so the recorded device's calibration (what its
kernels really achieved) carries over; only the ratio comes from a model:

- **Known kernel class with a shape** (GEMM/cutlass/sgemm/Tensile, flash/fmha attention, convolution,
  elementwise/vectorized, reductions/softmax/norms): the launching CPU operator's recorded input shapes (the
  innermost ``aten::`` op enclosing the launch call on its thread) give a workload op, which perfcast's kernel
  model prices on both devices: ratio = target time / recorded-device time. Convolutions are assumed square with
  stride 1 and "same" padding (Kineto records no stride or padding without ``Concrete Inputs``).
- **No shape, or a class the kernel model does not know** (a rule, not a fit): the first
  :data:`FIXED_S` of the duration is the kernel's fixed cost (launch, ramp, tail) and scales with the boost-clock
  ratio; the rest scales by the character of the class: memory-bound classes (elementwise, reductions,
  norms, copies, memsets, layout transforms, gathers, optimizers) by the DRAM bandwidth ratio; compute classes
  (GEMM, convolution, attention) by the ratio of the peak of their format (TF32 where the kernel name says
  tensor-op FP32 and the target has it, else FP32; FP16/BF16 by name); an unknown kernel, for which the trace
  gives no evidence either way, by the geometric mean of the two ratios. Host-device copies scale by the PCIe
  bandwidth ratio. An attention kernel built for Ampere (FlashAttention-2's ``mma.sync``) stays so on a Hopper
  target: :mod:`perfcast.kernel.legacy_mma`'s slowdown multiplies either ratio.
- **NCCL kernels**: perfcast's collective model (:mod:`perfcast.system.collectives`) on a cluster of each
  device (:func:`perfcast.system.cluster.cluster_for_gpu`, with as many nodes as the group needs), at the
  target group size for ``--dp`` (``send_recv`` stays a two-GPU exchange). The message size is the tensor of the
  enclosing ``nccl:*`` annotation (its ``Input Dims`` and type; nccl-tests convention, this rank's buffer). The
  recorded time of an NCCL kernel includes waiting for the other ranks to arrive: the part of it up to the
  model's time on the recorded device and group is the transfer and is scaled by the model's ratio, the rest is
  that wait and stays as recorded. Without a recorded size, the size is the one the model needs to take the
  whole recorded duration (found by bisection), and the whole duration scales by the ratio at that size.
  ``SendRecv`` kernels inside an ``nccl:all_to_all`` annotation are priced as that all-to-all.

Host time (CPU operators, runtime calls, gaps) stays as recorded: the host is not repriced.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass

from perfcast.capture.aten import ELEMENT_BYTES, aten_op, numel
from perfcast.catalog.hardware import Hardware
from perfcast.dtypes import DType
from perfcast.errors import PerfcastError, UnsupportedError
from perfcast.kernel.legacy_mma import legacy_mma_slowdown
from perfcast.kernel.predict import predict_ops
from perfcast.replay.graph import NodeKind, ReplayGraph
from perfcast.replay.kineto import CpuOp, GpuOp, KinetoTrace
from perfcast.workload.types import Op

__all__ = ["FIXED_S", "Repricing", "classify", "reprice"]

FIXED_S = 2e-6  # the part of a kernel's recorded time taken as fixed cost (launch, ramp-up, tail), s

_NCCL_OPS = {"allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
             "broadcast": "broadcast", "alltoall": "all_to_all", "sendrecv": "send_recv", "reduce": "all_reduce"}
_CLASSES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("nccl", re.compile(r"nccl|rccl")),
    # memory-bound helpers of GEMM/conv libraries before the compute classes their names resemble
    ("reduction", re.compile(r"splitkreduce|gemv|reduce_wgrad|epilogue")),
    ("layout", re.compile(r"nchwtonhwc|nhwctonchw|transpose|permute|winograd\w*(data|filter|output|delta|tiles)|"
                          r"offsets|scalepackedtensor|fbgemm")),
    ("attention", re.compile(r"flash|fmha|attention|attn")),
    ("conv", re.compile(r"conv|implicit_gemm|fprop|dgrad|wgrad|winograd|scudnn|fft2d|cudnn_ampere|cudnn_volta|"
                        r"miopen")),
    ("gemm", re.compile(r"gemm|cutlass|cublas|cijk_|xmma|s1688|s16816|h16816|h1688|s884|h884|gcgemm")),
    ("reduction", re.compile(r"reduce|softmax|norm|bn_|welford|splitk|pool|argmax|topk|cumsum|scan")),
    ("elementwise", re.compile(r"elementwise|vectorized|unrolled|fill|copy|distribution|dropout|index|scatter|"
                               r"gather|embedding|cat|multi_tensor|adagrad|adam|sgd|where|clamp|memset|memcpy")),
)
_MEMORY_CLASSES = {"layout", "reduction", "elementwise", "memcpy", "memset"}
_COMPUTE_CLASSES = {"gemm", "conv", "attention"}
_NATIVE_HOPPER = re.compile(r"sm90|sm100|hopper|wgmma", re.IGNORECASE)  # kernel names of Hopper-native builds


def classify(op: GpuOp) -> str:
    """The kernel class of ``op``: ``nccl``, ``attention``, ``conv``, ``gemm``, ``reduction``, ``elementwise``,
    ``layout``, ``memcpy``, ``memset`` or ``unknown`` (by kernel name; copies and sets by their kind)."""
    if op.kind in ("memcpy", "memset"):
        return op.kind
    name = op.name.lower()
    for cls, pattern in _CLASSES:
        if pattern.search(name):
            return cls
    return "unknown"


def _name_dtype(name: str) -> DType | None:
    n = name.lower()
    if "bf16" in n or "_bb_" in n or "bfloat16" in n:
        return DType.BF16
    if re.search(r"h1688|h16816|h884|f16|fp16|half|_hb_|_hh_", n):
        return DType.FP16
    if re.search(r"tf32|s1688|s16816|tensorop_s", n):
        return DType.TF32
    return None


@dataclass(frozen=True, slots=True)
class Repricing:
    """What to reprice for: the recorded and target devices and data-parallel (world) sizes."""

    recorded: Hardware
    target: Hardware
    world_size: int
    target_world_size: int


def reprice(graph: ReplayGraph, trace: KinetoTrace, how: Repricing) -> tuple[list[float], Counter[str]]:
    """Each node's duration for ``how`` (host nodes unchanged) and how many GPU ops each method priced."""
    enclosing = _enclosing(graph, trace)
    shapes = _launch_ops(graph, enclosing)
    annotations = _launch_annotations(graph, enclosing)
    durations = [n.dur_s for n in graph.nodes]
    methods: Counter[str] = Counter()
    pricer = _Pricer(how)
    for n in graph.nodes:
        if n.kind is not NodeKind.GPU or n.gpu is None:
            continue
        cls = classify(n.gpu)
        if cls == "nccl":
            durations[n.index], method = pricer.collective(n.gpu, n.dur_s, annotations.get(n.index, []))
        else:
            ratio, method = pricer.kernel(n.gpu, cls, shapes.get(n.index))
            durations[n.index] = _scaled(n.dur_s, ratio, pricer, method)
        methods[method] += 1
    return durations, methods


def _scaled(dur_s: float, ratio: float, pricer: _Pricer, method: str) -> float:
    if method.startswith("character"):  # the fixed part scales with the clock (module docstring)
        fixed = min(dur_s, FIXED_S)
        return fixed * pricer.clock_ratio + (dur_s - fixed) * ratio
    return dur_s * ratio


class _Pricer:
    def __init__(self, how: Repricing) -> None:
        self.how = how
        rec, tgt = how.recorded, how.target
        self.clock_ratio = rec.boost_clock_hz / tgt.boost_clock_hz
        self.bw_ratio = rec.memory_bandwidth_Bps / tgt.memory_bandwidth_Bps
        rp, tp = rec.interconnect.pcie_bidir_bandwidth_Bps, tgt.interconnect.pcie_bidir_bandwidth_Bps
        self.pcie_ratio = rp / tp if rp and tp else 1.0
        self._model: dict[tuple[object, ...], float] = {}
        self._clusters: dict[tuple[str, int], object] = {}
        self.same = rec.id == tgt.id and how.world_size == how.target_world_size

    def peak_ratio(self, dtype: DType) -> float:
        rec, tgt = self.how.recorded, self.how.target
        d_rec = dtype if dtype is not DType.TF32 or rec.peak_flops_per_s.tf32 else DType.FP32
        d_tgt = dtype if dtype is not DType.TF32 or tgt.peak_flops_per_s.tf32 else DType.FP32
        return rec.peak(d_rec) / tgt.peak(d_tgt)

    def kernel(self, op: GpuOp, cls: str, cpu: CpuOp | None) -> tuple[float, str]:
        if self.how.recorded.id == self.how.target.id:
            return 1.0, "unchanged (same device)"
        if cls == "memcpy":
            if "DtoD" in op.name:
                return self.bw_ratio, "character: memory (device copy)"
            return self.pcie_ratio, "character: PCIe (host copy)"
        if cls == "memset":
            return self.bw_ratio, "character: memory"
        if cpu is not None:
            wl = aten_op(cls, cpu.name, cpu.input_dims, cpu.input_types, _name_dtype(op.name))
            if wl is not None:  # a format one of the devices lacks (bf16 on a V100) is refused, not re-priced
                return self._model_ratio(wl) * self._mma_ratio(op, cls, wl.dtype), f"kernel model: {cls}"
        if cls in _MEMORY_CLASSES:
            return self.bw_ratio, "character: memory"
        if cls in _COMPUTE_CLASSES:
            dtype = _name_dtype(op.name) or DType.FP32
            return self.peak_ratio(dtype) * self._mma_ratio(op, cls, dtype), "character: compute"
        return math.sqrt(self.bw_ratio * self.peak_ratio(DType.FP32)), "character: unknown (mix)"

    def _mma_ratio(self, op: GpuOp, cls: str, dtype: DType) -> float:
        """An attention kernel built for Ampere's ``mma.sync`` (FlashAttention-2, PyTorch's flash and
        memory-efficient kernels: no ``sm90``/``sm100``/``hopper`` in its name) stays that binary on the target: its
        :func:`~perfcast.kernel.legacy_mma.legacy_mma_slowdown` there over the one on the recorded device, which
        the kernel model (native kernels) leaves out."""
        if cls != "attention" or _NATIVE_HOPPER.search(op.name):
            return 1.0
        return legacy_mma_slowdown(self.how.target, dtype) / legacy_mma_slowdown(self.how.recorded, dtype)

    def _model_ratio(self, wl: Op) -> float:
        tgt_op = wl
        if wl.dtype is DType.TF32 and not self.how.target.peak_flops_per_s.tf32:
            tgt_op = wl.with_(dtype=DType.FP32)  # PyTorch runs TF32-allowed matmuls as FP32 without TF32 units
        rec_op = wl if wl.dtype is not DType.TF32 or self.how.recorded.peak_flops_per_s.tf32 else \
            wl.with_(dtype=DType.FP32)
        key = (rec_op, tgt_op)
        if key not in self._model:
            t_rec = predict_ops([rec_op], self.how.recorded)[0].time_s
            t_tgt = predict_ops([tgt_op], self.how.target)[0].time_s
            if not (t_rec > 0 and math.isfinite(t_rec) and math.isfinite(t_tgt)):
                raise UnsupportedError(f"the kernel model gives no time for {wl.op} {wl.dims} on "
                                       f"{self.how.recorded.id} or {self.how.target.id}")
            self._model[key] = t_tgt / t_rec
        return self._model[key]

    def cluster(self, hw: Hardware, group: int) -> object:
        from perfcast.system.cluster import cluster_for_gpu

        key = (hw.id, group)
        if key not in self._clusters:
            c = cluster_for_gpu(hw)
            nodes = max(1, math.ceil(group / c.gpus_per_node))
            self._clusters[key] = c.with_nodes(max(nodes, c.nodes)) if nodes > c.nodes else c
        return self._clusters[key]

    def collective(self, op: GpuOp, dur_s: float, around: list[CpuOp]) -> tuple[float, str]:
        """The NCCL kernel's new duration, s, and how it was priced (module docstring)."""
        if self.same:
            return dur_s, "unchanged (same device and group)"
        from perfcast.system.collectives import collective_time

        key = re.sub(r"[^a-z]", "", op.name.lower().split("kernel_", 1)[-1].split("_", 1)[0])
        name = next((v for k, v in _NCCL_OPS.items() if key.startswith(k)), None)
        if name is None:
            return dur_s, "unchanged (NCCL kernel of unknown kind)"
        if name == "send_recv" and any("all_to_all" in c.name for c in around):
            name = "all_to_all"
        recorded_size = _message_bytes(around)
        group, new_group = (2, 2) if name == "send_recv" else (self.how.world_size, self.how.target_world_size)
        if group < 2 or new_group < 2:
            return dur_s, "unchanged (NCCL over one GPU)"
        rec_c = self.cluster(self.how.recorded, group)
        tgt_c = self.cluster(self.how.target, new_group)

        def t(size: float, hw_cluster: object, g: int) -> float:
            return collective_time(name, size, g, hw_cluster).time_s  # type: ignore[arg-type]

        try:
            if recorded_size is not None:
                # the model's time on the recorded device bounds the transfer; the rest was waiting for other ranks
                t_rec = t(recorded_size, rec_c, group)
                transfer = min(dur_s, t_rec)
                return (dur_s - transfer) + transfer * t(recorded_size, tgt_c, new_group) / t_rec, \
                    f"collective model: {name}"
            lo, hi = 1.0, 1e11
            if t(lo, rec_c, group) >= dur_s:
                size = lo
            else:
                if t(hi, rec_c, group) <= dur_s:
                    size = hi
                else:
                    for _ in range(60):  # bisection in log space
                        mid = math.sqrt(lo * hi)
                        lo, hi = (mid, hi) if t(mid, rec_c, group) < dur_s else (lo, mid)
                    size = math.sqrt(lo * hi)
            return dur_s * t(size, tgt_c, new_group) / t(size, rec_c, group), \
                f"collective model: {name} (size from duration)"
        except PerfcastError:
            return dur_s, "unchanged (collective model refused)"


def _enclosing(graph: ReplayGraph, trace: KinetoTrace) -> dict[int, list[CpuOp]]:
    """Launch call index -> the CPU ops/annotations open on its thread when it started, outermost first."""
    launch_calls = {n.launch for n in graph.nodes if n.launch is not None}
    by_thread: dict[int, list[CpuOp]] = {}
    for c in trace.cpu_ops:
        by_thread.setdefault(c.thread, []).append(c)
    out: dict[int, list[CpuOp]] = {}
    calls = sorted((i for i in launch_calls if i is not None), key=lambda i: graph.nodes[i].start_s)
    cursor = dict.fromkeys(by_thread, 0)
    stacks: dict[int, list[CpuOp]] = {t: [] for t in by_thread}
    for i in calls:
        call = trace.calls[i]  # host nodes come first, in trace.calls order
        ops = by_thread.get(call.thread)
        if ops is None:
            continue
        stack = stacks[call.thread]
        k = cursor[call.thread]
        while k < len(ops) and ops[k].start_s <= call.start_s:
            while stack and stack[-1].end_s < ops[k].start_s:
                stack.pop()
            stack.append(ops[k])
            k += 1
        cursor[call.thread] = k
        while stack and stack[-1].end_s < call.start_s:
            stack.pop()
        out[i] = [c for c in stack if c.end_s >= call.start_s]
    return out


def _launch_ops(graph: ReplayGraph, enclosing: dict[int, list[CpuOp]]) -> dict[int, CpuOp]:
    """GPU node index -> the innermost ``aten::`` operator with recorded shapes around its launch."""
    out: dict[int, CpuOp] = {}
    for n in graph.nodes:
        if n.launch is None:
            continue
        for c in reversed(enclosing.get(n.launch, [])):
            if c.name.startswith("aten::") and any(c.input_dims):
                out[n.index] = c
                break
    return out


def _launch_annotations(graph: ReplayGraph, enclosing: dict[int, list[CpuOp]]) -> dict[int, list[CpuOp]]:
    """NCCL GPU node index -> the CPU ops/annotations around its launch, outermost first."""
    return {n.index: enclosing.get(n.launch, []) for n in graph.nodes
            if n.launch is not None and n.gpu is not None and classify(n.gpu) == "nccl"}


def _message_bytes(around: list[CpuOp]) -> float | None:
    """The message size (nccl-tests convention: this rank's buffer) from the innermost ``nccl:*`` annotation
    that recorded its tensor's shape and type; None when none did."""
    for c in reversed(around):
        if c.name.startswith("nccl:") and c.input_dims and c.input_dims[0] and c.input_types:
            size = ELEMENT_BYTES.get(c.input_types[0])
            if size is not None:
                return float(numel(c.input_dims[0]) * size)
    return None
