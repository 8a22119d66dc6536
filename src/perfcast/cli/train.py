"""``perfcast train``: one training step of a model on a cluster under a parallel plan."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import typer

from perfcast.cli.app import (
    POWER_LIMIT_HELP,
    _console,
    _table,
    app,
    does_not_fit,
    emit_json,
    flag_error,
    handled,
    power_limited,
)
from perfcast.cli.output_paths import refuse_overwrite
from perfcast.errors import ConfigError
from perfcast.results.serialize import json_field, to_json

if TYPE_CHECKING:
    from perfcast.system.training import TrainingResult

__all__ = ["train"]


def _gib(x: float) -> str:
    return f"{x / 2**30:.1f} GiB"


def _etp(value: str) -> Literal["tp", 1]:
    """``--etp``: ``tp`` or ``1``."""
    if value.strip() == "tp":
        return "tp"
    if value.strip() == "1":
        return 1
    raise ConfigError(f"--etp {value!r} is not an expert tensor parallelism; accepted: tp, 1")


def _time(x: float) -> str:
    return f"{x * 1e3:.1f} ms" if x < 1 else f"{x:.3f} s"


@app.command()
@handled
def train(
    model: str = typer.Option(None, "--model", "-m", help="Model id, alias, HF repo id or config.json path."),
    workload: Path = typer.Option(None, "--workload", "-w", help="A captured workload JSON (`perfcast capture`) "
                                                                 "instead of --model: dp, zero, recompute, pp over "
                                                                 "its repeated layers, tp when its layers have "
                                                                 "Megatron column/row pairs."),
    cluster: str = typer.Option(..., "--cluster", "-c", help="Cluster id or cluster YAML path."),
    power_limit_W: float | None = typer.Option(None, "--power-limit-W", "--power-limit-w", help=POWER_LIMIT_HELP),
    nodes: int | None = typer.Option(None, "--nodes", help="Nodes (default: what tp*pp*dp*cp needs; with --dp "
                                                           "left out, the fewest whole nodes that hold tp*pp*cp)."),
    tp: int = typer.Option(1, "--tp", help="Tensor-parallel degree."),
    pp: int = typer.Option(1, "--pp", help="Pipeline-parallel degree."),
    dp: int | None = typer.Option(None, "--dp", help="Data-parallel degree (default: the GPUs left on the "
                                                     "node(s): GPUs per node x nodes / (tp*pp*cp))."),
    cp: int = typer.Option(1, "--cp", help="Context-parallel degree."),
    cp_kind: str = typer.Option("ring", "--cp-kind", help="ring (ring attention) | ulysses (all-to-all)."),
    ep: int = typer.Option(1, "--ep", help="Expert-parallel degree (MoE models)."),
    etp: str = typer.Option("tp", "--etp", help="Expert tensor parallelism: tp (experts split like the MLP, EP over "
                                                "dp*cp) | 1 (whole experts, EP folded over tp*cp*dp: Megatron's "
                                                "MoE parallel folding)."),
    moe_dispatcher: str = typer.Option("alltoall", "--moe-dispatcher",
                                       help="alltoall (a copy per token and chosen expert) | deepep (a copy per "
                                            "destination node, forwarded over NVLink)."),
    moe_a2a_overlap: bool = typer.Option(False, "--moe-a2a-overlap",
                                         help="Overlap expert-parallel dispatch/combine with another micro-batch's "
                                              "compute (Megatron's overlap_moe_expert_parallel_comm)."),
    vp: int = typer.Option(1, "--vp", help="Virtual pipeline stages per rank (interleaved 1F1B)."),
    sp: bool = typer.Option(False, "--sp", help="Sequence parallelism with TP."),
    tp_overlap: bool = typer.Option(False, "--tp-overlap", help="Overlap TP collectives with GEMMs."),
    zero: int = typer.Option(0, "--zero", help="ZeRO stage 0-3 (3 = FSDP full shard)."),
    recompute: str = typer.Option("none", "--recompute", help="none | selective | full."),
    recompute_modules: str = typer.Option("core_attn", "--recompute-modules",
                                          help="What --recompute selective re-runs (Megatron's names, comma-"
                                               "separated): core_attn, layernorm, moe_act, shared_experts, mlp, "
                                               "moe."),
    micro_batch: int = typer.Option(None, "--micro-batch", help="Sequences per micro-batch per data-parallel rank "
                                                               "(default 1; a captured workload's batch)."),
    global_batch: int | None = typer.Option(None, "--global-batch", help="Sequences per step (default micro x dp)."),
    seq_len: int = typer.Option(None, "--seq-len", "-s", help="Tokens per sequence (default 2048; a captured "
                                                             "workload's sequence length)."),
    precision: str | None = typer.Option(
        None, "--precision", help="Precision recipe: bf16 | fp16 | fp32 | fp8 (FP8 GEMMs, delayed per-tensor "
                                  "scaling) | fp8-cs (current scaling) | fp8-block (1x128/128x128 blocks) | mxfp8 | "
                                  "nvfp4 (Blackwell); the blocks' linear layers only, bf16 elsewhere. Default: the "
                                  "checkpoint's torch_dtype (as predict and serve; fp16 where the GPU has no bf16)."),
    schedule: str = typer.Option("1f1b", "--schedule", help="Pipeline schedule: gpipe | 1f1b | interleaved."),
    uneven_stages: bool = typer.Option(False, "--uneven-stages", help="Allow pp not dividing the layers."),
    lora_rank: int = typer.Option(0, "--lora-rank", help="LoRA rank (0 = full training)."),
    lora_targets: str = typer.Option("q,k,v,o", "--lora-targets", help="Comma-separated LoRA targets."),
    qlora: bool = typer.Option(False, "--qlora", help="Frozen base weights in 4 bits (needs --lora-rank)."),
    moe_skew: float = typer.Option(0.0, "--moe-skew", help="Busiest expert's load is (1 + skew) x the mean."),
    capacity_factor: float | None = typer.Option(None, "--capacity-factor", help="MoE expert capacity factor."),
    framework: str = typer.Option("eager", "--framework", help="eager | compiled (torch.compile) | graph."),
    fused_kernels: bool = typer.Option(True, "--fused-kernels/--plain-pytorch",
                                       help="Eager runs use fused norm/RoPE/activation kernels (Megatron, TE) or "
                                            "plain PyTorch ops, one kernel each (torchtitan, HF)."),
    attention_kernels: str = typer.Option("native", "--attention-kernels",
                                          help="native (cuDNN / FlashAttention-3 on Hopper, Megatron and NeMo) | "
                                               "fa2 (FlashAttention-2: PyTorch SDPA, torchtitan)."),
    trace_out: Path | None = typer.Option(None, "--trace-out", help="Write a Chrome trace JSON of the step "
                                                                    "(Perfetto)."),
    trace_alias: Path | None = typer.Option(None, "--trace", hidden=True,
                                            help="Old spelling of --trace-out (the README's published example)."),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing --trace-out file."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Predict one training step: time, tokens/s and TFLOP/s per GPU, MFU/HFU, where time and memory go."""
    from perfcast.system.cluster import load_cluster

    if trace_out is not None and trace_alias is not None:
        raise ConfigError("--trace is the old spelling of --trace-out; give one of them")
    trace = trace_out if trace_out is not None else trace_alias
    refuse_overwrite(trace, force=force)
    if (model is None) == (workload is None):
        raise ConfigError("give either --model (a catalog model) or --workload (a captured workload JSON)")
    cl = load_cluster(cluster, nodes=nodes)
    if power_limit_W is not None:
        cl = cl.model_copy(update={"gpu": power_limited(cl.gpu, power_limit_W)})
    defaults = [name for name, value in (("dp", dp), ("precision", precision)) if value is None]
    captured = None
    precision_note = "the captured model's"
    if workload is not None:
        captured, micro_batch, seq_len, precision = _captured_forward(workload, tp, micro_batch, seq_len, precision,
                                                                     cp=cp, ep=ep, lora_rank=lora_rank)
    elif precision is None:
        precision, precision_note = _default_precision(model, cl)
    plan = _plan(dict(
        tp=tp, pp=pp, dp=_default_dp(cl.gpus_per_node, cl.id, nodes, tp * pp * cp) if dp is None else dp, cp=cp,
        cp_kind=cp_kind, ep=ep, vp=vp, sp=sp, tp_comm_overlap=tp_overlap, zero=zero, recompute=recompute,
        recompute_modules=tuple(m.strip() for m in recompute_modules.split(",") if m.strip()),
        micro_batch=1 if micro_batch is None else micro_batch, global_batch=global_batch,
        seq_len=2048 if seq_len is None else seq_len, precision=precision,
        schedule="interleaved" if vp > 1 and schedule == "1f1b" else schedule, uneven_stages=uneven_stages,
        lora_rank=lora_rank, lora_targets=tuple(t.strip() for t in lora_targets.split(",") if t.strip()),
        qlora=qlora, moe_skew=moe_skew, moe_capacity_factor=capacity_factor, moe_a2a_overlap=moe_a2a_overlap,
        moe_dispatcher=moe_dispatcher,
        etp=_etp(etp), framework=framework, attention_kernels=attention_kernels,
        fused_kernels=fused_kernels))
    result = _simulate(model, captured, cl, plan, nodes=nodes, trace=trace)
    if as_json:
        emit_json(to_json(TrainReport(result, defaults, None if trace is None else str(trace))))
    else:
        _print(result, trace, defaults, precision_note)
    if not result.fits:
        does_not_fit(f"out of memory: the plan needs {_gib(result.memory.total_bytes)} per GPU and {result.gpu_id} "
                     f"has {_gib(result.memory.capacity_bytes)}; shard more (zero, tp, pp), recompute, or shrink the "
                     "micro-batch")


@dataclass(frozen=True)
class TrainReport:
    """What ``perfcast train --json`` reports: the prediction's keys, the flags left to their defaults and where the
    trace went."""

    result: TrainingResult = field(metadata=json_field(flatten=True))
    chosen_by_default: list[str]
    trace_path: str | None = field(metadata=json_field(omit_none=True))


def _captured_forward(path: Path, tp: int, micro_batch: int | None, seq_len: int | None, precision: str | None, *,
                      cp: int, ep: int, lora_rank: int) -> tuple[Any, int, int, str]:
    """A captured workload's training forward, with the micro-batch, tokens per sample and precision it fixes."""
    from perfcast.capture.io import load_workload
    from perfcast.capture.training import training_forward
    from perfcast.dtypes import DType

    w = load_workload(path)
    _check_captured_plan(w, micro_batch, seq_len, cp=cp, ep=ep, lora_rank=lora_rank)
    if precision is None:
        precision = _captured_precision(w.dtype)
    base = {"fp32": DType.FP32, "fp16": DType.FP16}.get(precision, DType.BF16)  # fp8: BF16 + FP8 GEMMs
    captured = training_forward(w, base)
    if tp > 1 and captured.tp_error:
        raise ConfigError(f"--tp {tp}: tensor parallelism cannot shard this captured graph: "
                          f"{captured.tp_error}; use --tp 1 (data/pipeline parallelism)")
    return captured, captured.micro_batch, captured.tokens_per_sample, precision


def _default_precision(model: str, cl: Any) -> tuple[str, str]:
    """The checkpoint's precision where the cluster's GPU has it (as predict and serve), and why."""
    from perfcast.catalog.defaults import default_dtype, describe_default_dtype
    from perfcast.catalog.models import load_model

    chosen = default_dtype(load_model(model), cl.hardware())
    return chosen.value, describe_default_dtype(load_model(model), chosen, cl.hardware())


def _plan(fields: dict[str, Any]) -> Any:
    """The typed plan of the flags, a pydantic refusal as a flag error."""
    from pydantic import ValidationError

    from perfcast.system.plan import ParallelPlan

    try:
        return ParallelPlan(**fields)
    except ValidationError as exc:
        raise flag_error(exc, default="plan") from None


def _simulate(model: str | None, captured: Any, cl: Any, plan: Any, *, nodes: int | None,
              trace: Path | None) -> TrainingResult:
    """The step of the catalog ``model`` or of the ``captured`` forward, and its trace where asked."""
    from perfcast.system.training import simulate_training

    if captured is not None:
        if plan.recompute != "none" and not any(o.kind.value == "embedding" for o in captured.forward):
            raise ConfigError(f"--recompute {plan.recompute}: recompute of a captured model needs token inputs (its "
                              "checkpoints are hidden states); use --recompute none")
        result = simulate_training(captured.config, cl, plan, nodes=nodes, keep_events=trace is not None,
                                   forward=captured.forward)
    else:
        result = simulate_training(model, cl, plan, nodes=nodes, keep_events=trace is not None)  # type: ignore[arg-type]
    if trace is not None:
        from perfcast.system.trace import write_trace

        write_trace(result, trace)
    return result


def _default_dp(gpus_per_node: int, cluster_id: str, nodes: int | None, model_parallel: int) -> int:
    """The data-parallel degree that fills the node(s) when --dp is left out: ``gpus_per_node x nodes / (tp*pp*cp)``.

    Without --nodes, the fewest whole nodes that hold one tp*pp*cp model replica (one node for most plans).
    """
    from perfcast.errors import ConfigError

    if model_parallel < 1:  # a degree below 1 is refused by the plan's own check
        return 1
    nodes = nodes if nodes is not None else max(1, -(-model_parallel // gpus_per_node))
    gpus = gpus_per_node * nodes
    if gpus % model_parallel:
        fill = gpus // model_parallel
        raise ConfigError(f"--dp left out: tp*pp*cp = {model_parallel} does not divide the {gpus} GPUs of {nodes} "
                          f"{cluster_id} node(s), so the GPUs left for data parallelism are not a whole number; "
                          f"give --dp (e.g. --dp {max(1, fill)} for {max(1, fill) * model_parallel} GPUs)")
    return gpus // model_parallel


def _captured_precision(dtype: Any) -> str:
    """The training precision of a captured model left to the default: the dtype it was captured in."""
    from perfcast.errors import ConfigError

    if dtype.value not in ("fp32", "fp16", "bf16"):
        raise ConfigError(f"--precision left out: the workload was captured in {dtype.value}, which is not a "
                          "training precision; give --precision bf16, fp16, fp32 or fp8")
    return str(dtype.value)


def _check_captured_plan(w: Any, micro_batch: int | None, seq_len: int | None, *, cp: int, ep: int,
                         lora_rank: int) -> None:
    """One-line errors for what a captured graph cannot train with."""
    from perfcast.errors import ConfigError

    for flag, value in (("--cp", cp), ("--ep", ep)):
        if value != 1:
            raise ConfigError(f"{flag} {value}: a captured workload trains with data, pipeline and tensor "
                              "parallelism (--dp, --zero, --pp, --tp); context and expert parallelism need to know "
                              "which attention and which experts to split, which a captured graph does not say")
    if lora_rank:
        raise ConfigError("--lora-rank: LoRA targets named projections (q, k, v, o), which a captured graph does "
                          "not name; use full training")
    tokens = w.seq_len if any(o.kind.value == "embedding" for o in w.ops) else 1
    if micro_batch is not None and micro_batch != w.batch_size:
        raise ConfigError(f"--micro-batch {micro_batch}: {w.model_id} was captured with batch {w.batch_size}; "
                          "capture it again with that batch (--input-shape) or leave --micro-batch out")
    if seq_len is not None and seq_len != tokens:
        raise ConfigError(f"--seq-len {seq_len}: {w.model_id} was captured with {tokens} tokens per sample; "
                          "capture it again with that length (--input-shape) or leave --seq-len out")


def _print(result: Any, trace: Path | None, defaults: list[str], precision_note: str) -> None:
    con = _console()
    p = result.plan
    head = _table(title=f"{result.model_id} on {result.num_gpus} x {result.gpu_id} ({result.cluster_id})",
                  show_header=False)
    head.add_column("quantity", no_wrap=True)
    head.add_column("value")
    dp_note = f" (default: fills the {result.num_gpus} GPUs of the node(s))" if "dp" in defaults else ""
    precision_note = f" ({precision_note})" if "precision" in defaults else ""
    head.add_row("plan", f"tp {p.tp}, pp {p.pp}" + (f" (vp {p.vp})" if p.vp > 1 else "") +
                 f", dp {p.dp}{dp_note}, cp {p.cp}, ep {p.ep}; zero {p.zero}, recompute {p.recompute}, "
                 f"{p.precision}{precision_note}; "
                 f"micro-batch {p.micro_batch}, global batch {p.effective_global_batch}, seq {p.seq_len}")
    head.add_row("verdict", "fits in memory" if result.fits else
                 f"OUT OF MEMORY: needs {_gib(result.memory.total_bytes)} per GPU of "
                 f"{_gib(result.memory.capacity_bytes)}; the times below are for a plan that does not fit")
    head.add_row("step time", f"{_time(result.step_time_s)}  ({_time(result.low_s)} - {_time(result.high_s)})")
    head.add_row("tokens/s per GPU", f"{result.tokens_per_s_per_gpu:,.0f}")
    head.add_row("model TFLOP/s per GPU", f"{result.tflops_per_gpu:.1f}")
    formula = "litgpt's LoRA FLOP count: frozen weights 2x" if p.lora_rank else "Megatron-LM's FLOP formula"
    head.add_row("MFU / HFU", f"{100 * result.mfu:.1f}% / {100 * result.hfu:.1f}% of "
                 f"{result.peak_flops_per_s / 1e12:.0f} TFLOP/s ({p.precision} dense peak; {formula})")
    head.add_row("micro-batches per step", f"{result.microbatches} (pipeline bubble {100 * result.bubble_frac:.1f}%)")
    if result.energy_per_gpu_J > 0:
        head.add_row("energy", f"{result.energy_per_step_J / 1e3:,.3g} kJ per step, "
                     f"{result.energy_per_token_J:.3g} J per token, {result.avg_power_per_gpu_W:,.0f} W per GPU")
    con.print(head)
    bd = _table(title="where the step goes (critical pipeline rank)")
    bd.add_column("part")
    bd.add_column("time", justify="right")
    bd.add_column("share", justify="right")
    bd.add_column("total incl. hidden", justify="right")
    hidden_key = {"tp_comm_s": "tp_comm_s", "cp_comm_s": "cp_comm_s", "ep_comm_s": "ep_comm_s",
                  "fsdp_comm_s": "fsdp_comm_s", "dp_comm_s": "dp_comm_s", "pp_send_s": "pp_send_s"}
    for k, v in result.breakdown_s.items():
        if v <= 0 and k not in ("compute_s",):
            continue
        total = result.comm_total_s.get(hidden_key.get(k, ""), None)
        bd.add_row(k.removesuffix("_s").replace("_", " "), _time(v), f"{100 * v / result.step_time_s:.1f}%",
                   "" if total is None else _time(total))
    con.print(bd)
    mem = _table(title="memory per GPU" + ("" if result.fits else " - OUT OF MEMORY"))
    mem.add_column("part")
    mem.add_column("bytes", justify="right")
    for k, v in to_json(result.memory).items():
        mem.add_row(k.removesuffix("_bytes").replace("_", " "), _gib(v))
    con.print(mem)
    if trace is not None:
        con.print(f"trace written to {trace} (open in https://ui.perfetto.dev)")
