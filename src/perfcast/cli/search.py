"""``perfcast search``: the best training plans (or serving deployments, ``--serve``) in a design space."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import typer

from perfcast.cli.app import _console, _progress, _table, app, emit_json, flag_error, handled
from perfcast.cli.output_paths import refuse_overwrite
from perfcast.errors import ConfigError
from perfcast.results.serialize import json_field, to_json

if TYPE_CHECKING:
    from perfcast.sweep.search import SearchResult
    from perfcast.sweep.space import SearchSpace

__all__ = ["search"]


def _ints(flag: str, text: str | None) -> tuple[int, ...] | None:
    if text is None or not text.strip():
        return None
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ConfigError(f"{flag}: {text!r} is not a comma-separated list of integers (e.g. 1,2,4,8)") from None
    if not values or min(values) < 1:
        raise ConfigError(f"{flag}: {text!r} must list positive integers (e.g. 1,2,4,8)")
    return values


def _words(text: str | None) -> tuple[str, ...] | None:
    if text is None or not text.strip():
        return None
    return tuple(x.strip() for x in text.split(",") if x.strip())


@app.command()
@handled
def search(
    model: str = typer.Option(..., "--model", "-m", help="Model id, alias, HF repo id or config.json path."),
    gpus: str = typer.Option(..., "--gpus", help="GPU count (training: a comma list tries several)."),
    cluster: str | None = typer.Option(None, "--cluster", "-c", help="Cluster id or YAML path (training)."),
    seq_len: int = typer.Option(2048, "--seq-len", "-s", help="Tokens per sequence (training)."),
    global_batch: int | None = typer.Option(None, "--global-batch", help="Sequences per step (training)."),
    objective: str = typer.Option("tflops", "--objective", help="tflops | step-time | cost (GPU-hours per token)."),
    max_memory_fraction: float = typer.Option(1.0, "--max-memory-fraction",
                                              help="Share of GPU memory a plan may use."),
    top: int = typer.Option(10, "--top", help="Best plans to print."),
    backend: str = typer.Option("local", "--backend", help="local | ray (a Ray cluster; RAY_ADDRESS or a "
                                                           "local 2-CPU Ray)."),
    tp: str | None = typer.Option(None, "--tp", help="Tensor-parallel degrees, e.g. 1,2,4,8 (default: the node's; "
                                                     "--serve: those dividing --gpus and the heads)."),
    pp: str | None = typer.Option(None, "--pp", help="Pipeline degrees (default: divisors of the GPUs <= layers)."),
    cp: str | None = typer.Option(None, "--cp", help="Context-parallel degrees (default 1,2,4,...,32)."),
    ep: str | None = typer.Option(None, "--ep", help="Expert-parallel degrees (default: divisors of the experts)."),
    etp: str | None = typer.Option(None, "--etp", help="Expert tensor parallelism: tp (experts split like the MLP) "
                                                       "and/or 1 (whole experts, EP over TP x CP x DP); default "
                                                       "tp,1 for MoE models."),
    vp: str | None = typer.Option(None, "--vp", help="Virtual stages per pipeline rank (default 1-8)."),
    micro_batch: str | None = typer.Option(None, "--micro-batch", help="Micro-batch sizes (default 1,2,4,8)."),
    recompute: str | None = typer.Option(None, "--recompute", help="Recompute modes (default none,selective,full)."),
    zero: str | None = typer.Option(None, "--zero", help="ZeRO stages (default 0,1,2,3)."),
    precision: str = typer.Option("bf16", "--precision", help="Recipes to try, e.g. bf16,fp8: bf16 | fp16 | fp8 | "
                                                              "fp8-cs | fp8-block | mxfp8 | nvfp4 (training "
                                                              "searches price mixed-precision plans; bf16 whatever "
                                                              "the checkpoint; those the GPU cannot run are "
                                                              "pruned)."),
    sp: bool = typer.Option(True, "--sp/--no-sp", help="Sequence parallelism wherever tp > 1."),
    tp_overlap: bool = typer.Option(True, "--tp-overlap/--no-tp-overlap", help="Overlap TP collectives with GEMMs."),
    even_stages: bool = typer.Option(False, "--even-stages", help="Require pp*vp to divide the layers."),
    price: float | None = typer.Option(None, "--price-per-gpu-hour",
                                       help="US dollars per GPU-hour (your provider's rate; perfcast ships none) "
                                            "for cost_usd_per_step."),
    serve: bool = typer.Option(False, "--serve", help="Search serving deployments instead of training plans."),
    hardware: str | None = typer.Option(None, "--hardware", "-H", help="GPU id (--serve)."),
    slo_ttft: float | None = typer.Option(None, "--slo-ttft-p99", help="TTFT p99 SLO in seconds (--serve)."),
    slo_tpot: float | None = typer.Option(None, "--slo-tpot-p99", help="TPOT p99 SLO in seconds (--serve)."),
    trace: str | None = typer.Option(None, "--trace", help="Request trace (--serve): a shipped name or a CSV."),
    prompt_tokens: int | None = typer.Option(None, "--prompt-tokens", help="Fixed prompt length (--serve)."),
    output_tokens: int | None = typer.Option(None, "--output-tokens", help="Fixed output length (--serve)."),
    schedulers: str = typer.Option("vllm,sarathi", "--schedulers", help="Schedulers to try (--serve)."),
    chunk_sizes: str = typer.Option("512,2048", "--chunk-sizes", help="Sarathi chunk sizes to try (--serve)."),
    max_num_seqs: str = typer.Option("64,256", "--max-num-seqs", help="Max batch sizes to try (--serve)."),
    requests_per_replica: int = typer.Option(100, "--requests-per-replica",
                                             help="Requests simulated per replica at each load (--serve)."),
    workers: int | None = typer.Option(None, "--workers", help="Processes searching deployments (--serve; default: "
                                                               "one per CPU; the result is the same for any count)."),
    out: Path | None = typer.Option(None, "--out", help="Also write the JSON result to this file."),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing --out file."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Search parallel plans for the best training throughput (or deployments for the best serving goodput)."""
    refuse_overwrite(out, force=force)
    counts = _ints("--gpus", gpus) or ()
    serving_defaults = {"--schedulers": (schedulers, "vllm,sarathi"), "--chunk-sizes": (chunk_sizes, "512,2048"),
                        "--max-num-seqs": (max_num_seqs, "64,256"), "--requests-per-replica": (requests_per_replica,
                                                                                               100)}
    _one_kind_of_flags(serve, {"--pp": pp, "--cp": cp, "--ep": ep, "--etp": etp, "--vp": vp,
                               "--micro-batch": micro_batch,
                               "--recompute": recompute, "--zero": zero, "--global-batch": global_batch,
                               "--price-per-gpu-hour": price},
                       {"--hardware": hardware, "--slo-ttft-p99": slo_ttft, "--slo-tpot-p99": slo_tpot,
                        "--trace": trace, "--prompt-tokens": prompt_tokens, "--output-tokens": output_tokens,
                        "--workers": workers,
                        **{flag: value for flag, (value, default) in serving_defaults.items() if value != default}})
    if serve:
        hardware = _serving_budget(gpus, counts, hardware)
        data = _serve(model, hardware, counts[0], cluster, slo_ttft, slo_tpot, trace, prompt_tokens, output_tokens,
                      schedulers, chunk_sizes, max_num_seqs, requests_per_replica, top, quiet=as_json,
                      tps=_ints("--tp", tp), workers=workers)
    else:
        space = _space(model=model, cluster=cluster, counts=counts, seq_len=seq_len, global_batch=global_batch, tp=tp,
                       pp=pp, cp=cp, ep=ep, etp=etp, vp=vp, micro_batch=micro_batch, recompute=recompute, zero=zero,
                       precision=precision, sp=sp, tp_overlap=tp_overlap, even_stages=even_stages,
                       max_memory_fraction=max_memory_fraction)
        data = _training_search(space, objective, top, backend, price)
    if out is not None:
        out.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    if as_json:
        emit_json(data)
    elif serve:
        _print_serve(data)
    else:
        _print_training(data)
    if out is not None and not as_json:
        _console().print(f"result written to {out}")


@dataclass(frozen=True)
class TrainingSearchReport:
    """What ``perfcast search --json`` reports for training plans: the search's keys and the precision recipes
    searched (as the flag takes them: ``bf16``, ``bf16,fp8``)."""

    result: SearchResult = field(metadata=json_field(flatten=True))
    precision: str


def _serving_budget(gpus: str, counts: tuple[int, ...], hardware: str | None) -> str:
    """A serving search's one GPU budget and its GPU, refused in one line when the flags do not give them."""
    from perfcast.sweep.space import MAX_GPUS

    if len(counts) != 1:
        raise ConfigError(f"--serve searches one GPU budget; --gpus {gpus!r} lists {len(counts)}")
    if counts[0] > MAX_GPUS:
        raise ConfigError(f"--gpus {counts[0]}: at most {MAX_GPUS:,} GPUs (160x the largest cluster built)")
    if hardware is None:
        raise ConfigError("--serve needs --hardware (a GPU id; `perfcast hardware list`)")
    return hardware


def _space(*, model: str, cluster: str | None, counts: tuple[int, ...], seq_len: int, global_batch: int | None,
           tp: str | None, pp: str | None, cp: str | None, ep: str | None, etp: str | None, vp: str | None,
           micro_batch: str | None,
           recompute: str | None, zero: str | None, precision: str, sp: bool, tp_overlap: bool, even_stages: bool,
           max_memory_fraction: float) -> SearchSpace:
    """The training search space of the flags (lists of degrees as comma lists), refused in one line."""
    from pydantic import ValidationError

    from perfcast.sweep.space import SearchSpace

    if cluster is None:
        raise ConfigError("--cluster is required for a training search (`perfcast clusters list`)")
    if global_batch is None:
        raise ConfigError("--global-batch is required for a training search (sequences per step)")
    try:
        return SearchSpace(model=model, cluster=cluster, gpus=counts, seq_len=seq_len, global_batch=global_batch,
                           tp=_ints("--tp", tp), pp=_ints("--pp", pp), cp=_ints("--cp", cp), ep=_ints("--ep", ep),
                           etp=_etps(etp), vp=_ints("--vp", vp), micro_batch=_ints("--micro-batch", micro_batch),
                           recompute=_words(recompute) or ("none", "selective", "full"),  # type: ignore[arg-type]
                           zero=_ints_zero(zero), precision=_words(precision) or "bf16",  # type: ignore[arg-type]
                           sp=sp, tp_comm_overlap=tp_overlap, uneven_stages=not even_stages,
                           max_memory_frac=max_memory_fraction)
    except ValidationError as exc:
        raise flag_error(exc, default="space", renames={"max_memory_frac": "max-memory-fraction",
                                                        "uneven_stages": "even-stages",
                                                        "tp_comm_overlap": "tp-overlap"}) from None


def _training_search(space: SearchSpace, objective: str, top: int, backend: str,
                     price: float | None) -> dict[str, Any]:
    """The search over ``space`` as its JSON object."""
    from perfcast.sweep.search import search_training

    if price is not None and price <= 0:
        raise ConfigError(f"--price-per-gpu-hour must be positive (got {price})")
    result = search_training(space, objective=objective, top=top, backend=backend, price_per_gpu_hour_usd=price)
    return dict(to_json(TrainingSearchReport(result, space.precision_text)))


def _one_kind_of_flags(serve: bool, training: dict[str, object], serving: dict[str, object]) -> None:
    """A flag of the other kind of search is refused, not ignored."""
    wrong = [flag for flag, value in (training if serve else serving).items() if value is not None]
    if wrong:
        kind = "a training search (without --serve)" if serve else "a serving search (--serve)"
        raise ConfigError(f"{', '.join(wrong)} {'applies' if len(wrong) == 1 else 'apply'} to {kind} only; drop "
                          f"{'it' if len(wrong) == 1 else 'them'} or {'drop' if serve else 'add'} --serve")


def _etps(text: str | None) -> tuple[Literal["tp", 1], ...] | None:
    """``--etp``: ``tp`` and/or ``1``."""
    words = _words(text)
    if words is None:
        return None
    if any(w not in ("tp", "1") for w in words):
        raise ConfigError(f"--etp: {text!r} must list tp (experts split like the MLP) and/or 1 (whole experts)")
    return tuple(1 if w == "1" else "tp" for w in words)


def _ints_zero(text: str | None) -> tuple[int, ...]:
    if text is None or not text.strip():
        return (0, 1, 2, 3)
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        values = (-1,)
    if not values or any(v not in (0, 1, 2, 3) for v in values):
        raise ConfigError(f"--zero: {text!r} must list ZeRO stages among 0,1,2,3")
    return values


def _serve(model: str, hardware: str, gpus: int, cluster: str | None, slo_ttft: float | None, slo_tpot: float | None,
           trace: str | None, prompt_tokens: int | None, output_tokens: int | None, schedulers: str, chunk_sizes: str,
           max_num_seqs: str, requests_per_replica: int, top: int, quiet: bool = False,
           tps: tuple[int, ...] | None = None, workers: int | None = None) -> dict[str, Any]:
    import os

    from pydantic import ValidationError

    from perfcast.serving.config import MAX_NUM_SEQS, MAX_REQUESTS, MAX_TOKENS, ServingConfig, WorkloadConfig
    from perfcast.serving.schedulers import SCHEDULERS
    from perfcast.sweep.serving import search_serving

    names = _words(schedulers) or ("vllm", "sarathi")
    for name in names:
        SCHEDULERS.get(name)
    if not 1 <= requests_per_replica <= MAX_REQUESTS:
        raise ConfigError(f"--requests-per-replica must be 1 to {MAX_REQUESTS:,}, the requests a simulation holds "
                          f"(got {requests_per_replica})")
    for flag, text, bound in (("--max-num-seqs", max_num_seqs, MAX_NUM_SEQS), ("--chunk-sizes", chunk_sizes,
                                                                               MAX_TOKENS)):
        if max(_ints(flag, text) or (1,)) > bound:  # the candidates are copies of one config, not validated again
            raise ConfigError(f"{flag} {text}: each value is at most {bound:,}")
    if workers is not None and not 1 <= workers <= 256:
        raise ConfigError(f"--workers must be 1 to 256 processes (got {workers})")
    if workers is None:
        workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if trace is None and (prompt_tokens is None or output_tokens is None):
        trace = "arxiv_summarization"
    try:
        base = ServingConfig(model=model, hardware=hardware, cluster=cluster, slo_ttft_s=slo_ttft, slo_tpot_s=slo_tpot,
                             workload=WorkloadConfig(trace=trace, prompt_tokens=prompt_tokens,
                                                     output_tokens=output_tokens))
    except ValidationError as exc:
        raise flag_error(exc, default="config", skip=("workload",), renames={
            "slo_ttft_s": "slo-ttft-p99", "slo_tpot_s": "slo-tpot-p99"}) from None
    if cluster is not None:  # one line now rather than the same refusal for every deployment tried
        from perfcast.catalog.hardware import load_hardware
        from perfcast.system.cluster import load_cluster

        node, gpu = load_cluster(cluster), load_hardware(hardware).id
        if node.gpu != gpu:
            raise ConfigError(f"--cluster {node.id} is a node of {node.gpu}, not {gpu}; give a cluster of {gpu} "
                              "(or drop --cluster for its own node)")

    with _progress(quiet=quiet) as prog:
        task = prog.add_task("deployments", total=None)
        res = search_serving(base, gpus, tps=tps, schedulers=names,
                             chunk_sizes=_ints("--chunk-sizes", chunk_sizes) or (512,),
                             max_num_seqs=_ints("--max-num-seqs", max_num_seqs) or (256,),
                             requests_per_replica=requests_per_replica, workers=workers,
                             progress=lambda done, total: prog.update(task, completed=done, total=total))
    if not res.feasible:
        reasons = sorted({c.reason for c in res.candidates if c.reason})
        raise ConfigError(f"no deployment of {gpus} {hardware} meets the SLO "
                          f"({len(res.candidates)} tried): {reasons[0] if reasons else 'every load missed it'}")
    return to_json(res.summary(top))


def _print_training(d: dict[str, Any]) -> None:
    con = _console()
    rejected = ", ".join(f"{k} {v:,}" for k, v in d["rejected"].items() if v)
    con.print(f"{d['model']} on {'/'.join(map(str, d['gpus']))} GPUs of {d['cluster']}, seq {d['seq_len']}, global "
              f"batch {d['global_batch']}, {d['precision']} (--precision): {d['plans_evaluated']:,} plans evaluated of "
              f"{d['plans_enumerated']:,} "
              f"({d['plans_feasible']:,} fit; removed: {rejected or 'none'}) in {d['search_time_s']:.2f} s",
              markup=False)
    cost = any("cost_usd_per_step" in r for r in d["best"])

    many = len(d["gpus"]) > 1

    def plan(r: dict[str, Any]) -> str:
        words = ([f"{r['gpus']} GPUs"] if many else []) + [f"tp{r['tp']} pp{r['pp']} dp{r['dp']} cp{r['cp']}"]
        words += [f"ep{r['ep']}"] if r["ep"] > 1 else []
        words += [f"etp{r['etp']}"] if r.get("etp") == 1 else []
        words += [r["precision"]] if "precision" in r else []
        words += [f"vp{r['vp']} mb{r['micro_batch']} {r['recompute']} z{r['zero']}"]
        return " ".join(words)

    def table(title: str, rows: list[dict[str, Any]]) -> Any:
        t = _table(title=title)
        for c in ("plan", "TFLOP/s", "exact", "step", "GiB") + (("$/step",) if cost else ()):
            t.add_column(c, justify="left" if c == "plan" else "right", no_wrap=c == "plan")
        for r in rows:
            t.add_row(plan(r), f"{r['tflops_per_gpu']:.1f}", f"{r.get('exact_tflops_per_gpu', float('nan')):.1f}",
                      f"{r.get('exact_step_time_s', r['step_time_s']):.3f} s", f"{r['memory_per_gpu_gib']:.1f}",
                      *((f"{r.get('exact_cost_usd_per_step', r.get('cost_usd_per_step', 0)):.2f}",) if cost else ()))
        return t

    con.print(table(f"best plans by {d['objective']} (re-ranked by the exact predictor)", d["best"]))
    con.print(table("Pareto front: TFLOP/s per GPU vs memory per GPU", d["pareto"]))
    a = d["agreement"]
    con.print(f"vectorized vs exact step time on {int(a['plans_compared'])} plans: median "
              f"{100 * a['step_time_median_abs_err_frac']:.2f}%, max {100 * a['step_time_max_abs_err_frac']:.1f}%; "
              f"memory max {100 * a['memory_max_abs_err_frac']:.2f}%", markup=False)
    ref = d.get("reference")
    if ref:
        verdict = "beats" if ref["best_vs_reference_frac"] > 0 else "matches" if ref[
            "best_vs_reference_frac"] == 0 else "trails"
        need = ref["exact_memory_per_gpu_gib"]
        fits = "fits" if ref["fits_in_memory"] else f"predicted out of memory ({need:.1f} GiB)"
        con.print(f"published plan ({ref['label']}; {ref['source']}): tp {ref['tp']} pp {ref['pp']} dp {ref['dp']} "
                  f"cp {ref['cp']}, predicted {ref['exact_tflops_per_gpu']:.0f} TFLOP/s per GPU (published "
                  f"{ref['published_tflops_per_gpu']:.0f}), {fits}; {ref['vp_note']}. The best plan {verdict} it by "
                  f"{100 * ref['best_vs_reference_frac']:+.1f}%", markup=False)


def _print_serve(d: dict[str, Any]) -> None:
    con = _console()
    con.print(f"{d['model']} on {d['gpus']} x {d['hardware']}: {d['configs_evaluated']} deployments, "
              f"{d['simulations']} simulations in {d['search_time_s']:.1f} s", markup=False)
    w, rule = d["workload"], d["steady_state_rule"]
    if w:
        lengths = "fixed lengths" if w["lengths"] == "fixed" else w["lengths"]
        con.print(f"workload: {lengths}, prompt tokens mean {w['prompt_tokens']['mean']:,.0f} (max "
                  f"{w['prompt_tokens']['max']:,.0f}), output tokens mean {w['output_tokens']['mean']:,.0f} (max "
                  f"{w['output_tokens']['max']:,.0f}); {w['arrival']} arrivals; each load simulated for "
                  f"{rule['warmup_lifetimes']:g} request lifetimes of warm-up (discarded) and "
                  f"{rule['steady_lifetimes_over_replicas']:g} over the replicas (at least "
                  f"{rule['min_window_lifetimes']:g} each, {rule['min_requests']:,} requests; near saturation at "
                  f"least {rule['relaxation_warmup']:g} + {rule['relaxation_window']:g} relaxation times of the "
                  "queue)",
                  markup=False)
    t = _table(title="best deployments by goodput per GPU (highest QPS sustained within the SLO, steady state)")
    for c in ("tp", "replicas", "scheduler", "chunk", "max seqs", "max QPS", "QPS/GPU", "TTFT p99", "TPOT p99",
              "requests/arrivals"):
        t.add_column(c, justify="left" if c == "scheduler" else "right")
    for r in d["best"]:
        t.add_row(str(r["tp"]), str(r["replicas"]), r["scheduler"], str(r["chunk_size"] or "-"),
                  str(r["max_num_seqs"]), f"{r['max_qps']:.3g}", f"{r['goodput_requests_per_s_per_gpu']:.3g}",
                  f"{1e3 * r['ttft_p99_s']:.0f} ms", f"{1e3 * r['tpot_p99_s']:.0f} ms",
                  f"{r['qps_search_requests']:,}/{r['qps_search_simulated_s']:,.0f}s")
    con.print(t)
    seen: dict[tuple[int, int, str], int] = {}  # one line per (layout, reason), with how many configs it removed
    for r in d["infeasible"]:
        key = (r["tp"], r["replicas"], r["infeasible"])
        seen[key] = seen.get(key, 0) + 1
    for (tp, replicas, reason), count in seen.items():
        con.print(f"tp {tp} x {replicas} ({count} configuration{'s' if count > 1 else ''}): {reason}", markup=False)
