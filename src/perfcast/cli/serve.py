"""``perfcast serve``: an LLM serving deployment under load (flag names follow vLLM's)."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

import typer

from perfcast.cli.app import _console, _table, app, does_not_fit, emit_json, flag_error, handled, refuse_overwrite

__all__ = ["serve"]


def _ms(x: float | None) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x * 1e3:.1f} ms"


@app.command()
@handled
def serve(
    model: str | None = typer.Option(None, "--model", "-m", help="Model id, alias, HF repo id or config.json path "
                                                                "(with --workload: the benchmark's by default)."),
    hardware: str = typer.Option(..., "--hardware", "-H", help="GPU id or alias."),
    tensor_parallel_size: int = typer.Option(1, "--tensor-parallel-size", "--tp", "-tp",
                                             help="GPUs per pipeline stage."),
    pipeline_parallel_size: int = typer.Option(1, "--pipeline-parallel-size", "-pp", help="Pipeline stages."),
    expert_parallel_size: int = typer.Option(1, "--expert-parallel-size", "-ep",
                                             help="MoE: GPUs of the tensor-parallel group the experts are split over."),
    enable_attention_dp: bool = typer.Option(False, "--enable-attention-dp",
                                             help="MoE: each tensor-parallel GPU attends over its own sequences."),
    num_replicas: int = typer.Option(1, "--num-replicas", help="Replicas behind the router."),
    num_prefill_replicas: int = typer.Option(0, "--num-prefill-replicas",
                                             help="Disaggregated serving: replicas that only prefill."),
    kv_transfer_bandwidth: float = typer.Option(50.0, "--kv-transfer-bandwidth",
                                                help="Prefill-to-decode KV link per GPU (GB/s)."),
    cluster: str | None = typer.Option(None, "--cluster", help="Cluster for TP collectives (default: the GPU's)."),
    scheduler: str = typer.Option("vllm", "--scheduler", help="vllm | sarathi | orca | lightllm | static."),
    router: str = typer.Option("round_robin", "--router", help="round_robin | least_outstanding | shortest_queue."),
    engine: str = typer.Option("vllm", "--engine", help="CPU-overhead preset: vllm | trtllm."),
    dtype: str = typer.Option("auto", "--dtype", help="auto | fp16 | bf16 (auto: the checkpoint's torch_dtype, "
                                                      "fp32 checkpoints in fp16, as vLLM)."),
    quantization: str | None = typer.Option(None, "--quantization", "-q",
                                            help="none | w4a16 | w8a16 | w8a8 | fp8 | fp4 (default none; with "
                                                 "--workload the preset's precision where the GPU has it)."),
    kv_cache_dtype: str = typer.Option("auto", "--kv-cache-dtype", help="auto | fp16 | bf16 | fp8."),
    max_num_seqs: int = typer.Option(256, "--max-num-seqs", help="Sequences per iteration at most."),
    max_num_batched_tokens: int | None = typer.Option(None, "--max-num-batched-tokens",
                                                      help="Tokens per iteration at most (default per scheduler)."),
    max_model_len: int | None = typer.Option(None, "--max-model-len", help="Context limit (default: the model's)."),
    enable_chunked_prefill: bool = typer.Option(False, "--enable-chunked-prefill",
                                                help="vllm with chunked prefill (the sarathi policy)."),
    chunk_size: int = typer.Option(512, "--chunk-size", help="Token budget per iteration for chunked prefill."),
    block_size: int = typer.Option(16, "--block-size", help="Tokens per KV block."),
    gpu_memory_utilization: float = typer.Option(0.9, "--gpu-memory-utilization", help="Fraction of GPU memory."),
    swap_space: float = typer.Option(4.0, "--swap-space", help="CPU swap space per GPU (GiB)."),
    preemption_mode: str = typer.Option("recompute", "--preemption-mode", help="recompute | swap."),
    enable_prefix_caching: bool = typer.Option(False, "--enable-prefix-caching", help="Automatic prefix caching."),
    speculative_model: str | None = typer.Option(None, "--speculative-model", help="Draft model (speculative "
                                                                                   "decoding)."),
    num_speculative_tokens: int = typer.Option(0, "--num-speculative-tokens", help="Tokens the draft proposes."),
    spec_acceptance_rate: float = typer.Option(0.7, "--spec-acceptance-rate",
                                               help="Probability each proposed token is accepted."),
    num_requests: int | None = typer.Option(None, "--num-requests", "-n",
                                            help="Requests to simulate (default 200; with --workload the "
                                                 "preset's count per replica)."),
    workload: str | None = typer.Option(None, "--workload", help="MLPerf preset mlperf:<benchmark>:<scenario>: "
                                        "its lengths and p99 limits on the deployment the flags describe; "
                                        "offline sends every request at once, server/interactive search the "
                                        "highest Poisson QPS meeting the limits (or run --qps)."),
    qps: float | None = typer.Option(None, "--qps", help="Arrival rate (requests/s); none = all at once."),
    arrival: str = typer.Option("poisson", "--arrival", help="poisson | gamma | fixed | trace."),
    burstiness: float = typer.Option(1.0, "--burstiness", help="Gamma arrivals: CV of the gaps."),
    max_concurrency: int | None = typer.Option(None, "--max-concurrency",
                                               help="Closed loop: at most this many requests outstanding; the "
                                                    "next is sent when one finishes."),
    trace: str | None = typer.Option(None, "--trace", help="arxiv_summarization | splitwise_code | "
                                                          "splitwise_conv, or a CSV path."),
    prompt_tokens: int | None = typer.Option(None, "--prompt-tokens", help="Fixed prompt length."),
    output_tokens: int | None = typer.Option(None, "--output-tokens", help="Fixed output length."),
    shared_prefix_tokens: int = typer.Option(0, "--shared-prefix-tokens", help="Tokens of a shared system prompt."),
    num_prefixes: int = typer.Option(1, "--num-prefixes", help="Distinct shared prefixes."),
    images_per_request: int = typer.Option(0, "--images-per-request", help="Images per prompt (multimodal models)."),
    retrieval_latency: float = typer.Option(0.0, "--retrieval-latency", help="RAG: mean retrieval time (s)."),
    retrieval_latency_cv: float = typer.Option(0.0, "--retrieval-latency-cv", help="RAG: CV of that time."),
    retrieved_tokens: int = typer.Option(0, "--retrieved-tokens", help="RAG: retrieved tokens added per prompt."),
    beam_width: int | None = typer.Option(None, "--beam-width", help="Beam search: beams per request (default 1; "
                                          "with --workload the preset's, 4 for gptj)."),
    seed: int = typer.Option(42, "--seed", help="Random seed."),
    slo_ttft: float | None = typer.Option(None, "--slo-ttft-p99", help="TTFT SLO (s): goodput, and the p99 "
                                                                        "bound of --find-max-qps."),
    slo_tpot: float | None = typer.Option(None, "--slo-tpot-p99", help="TPOT SLO (s), likewise."),
    find_max_qps: bool = typer.Option(False, "--find-max-qps", help="Search the highest QPS meeting the SLOs."),
    colocate_model: str | None = typer.Option(None, "--colocate-model",
                                              help="A second model on the same GPUs (same load, next seed)."),
    colocation: str = typer.Option("time_sliced", "--colocation", help="time_sliced | shared (co-located compute)."),
    colocate_memory_frac: float = typer.Option(0.5, "--colocate-memory-frac",
                                               help="The first model's share of the usable GPU memory."),
    trace_out: Path | None = typer.Option(None, "--trace-out", help="Write a Perfetto timeline (JSON)."),
    requests_out: Path | None = typer.Option(None, "--requests-out", help="Write per-request CSV."),
    force: bool = typer.Option(False, "--force", help="Overwrite existing output files."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Simulate LLM serving under load: TTFT, TPOT, E2E, throughput, goodput, KV use, preemptions."""
    from pydantic import ValidationError

    from perfcast.errors import ConfigError
    from perfcast.serving.config import ServingConfig, WorkloadConfig
    from perfcast.serving.engine import simulate_serving
    from perfcast.serving.schedulers import SCHEDULERS

    refuse_overwrite(trace_out, requests_out, force=force)
    SCHEDULERS.get(scheduler)
    if workload is not None:
        from perfcast.serving.mlperf import default_quantization, parse_workload

        bench, scenario = parse_workload(workload)
        if scenario == "offline" and qps is not None:
            raise ConfigError("--qps does not apply to an offline workload (every request arrives at once)")
        given = [flag for flag, v in (("--trace", trace), ("--prompt-tokens", prompt_tokens),
                                      ("--output-tokens", output_tokens), ("--find-max-qps", find_max_qps or None),
                                      ("--slo-ttft-p99", slo_ttft), ("--slo-tpot-p99", slo_tpot),
                                      ("--colocate-model", colocate_model), ("--max-concurrency", max_concurrency))
                 if v is not None]
        if given:
            raise ConfigError(f"--workload sets the request lengths, arrivals and latency limits; drop "
                              f"{', '.join(given)}")
        model = model or bench.model
        quantization = quantization or default_quantization(bench, hardware)
    elif model is None:
        raise ConfigError("--model is required (or --workload mlperf:<benchmark>:<scenario>, whose model is the "
                          "default)")
    quantization = quantization or "none"
    try:
        work = WorkloadConfig(num_requests=200 if num_requests is None else num_requests, seed=seed,
                              arrival=arrival, qps=qps,  # type: ignore[arg-type]
                              burstiness_cv=burstiness, concurrency=max_concurrency, trace=trace,
                              prompt_tokens=prompt_tokens,
                              output_tokens=output_tokens, shared_prefix_tokens=shared_prefix_tokens,
                              num_prefixes=num_prefixes, images_per_request=images_per_request,
                              retrieval_latency_s=retrieval_latency, retrieval_latency_cv=retrieval_latency_cv,
                              retrieved_tokens=retrieved_tokens,
                              **({} if beam_width is None else {"num_beams": beam_width}))
        fields: dict[str, Any] = dict(
            model=model, hardware=hardware, tensor_parallel_size=tensor_parallel_size,
            pipeline_parallel_size=pipeline_parallel_size, num_replicas=num_replicas, cluster=cluster,
            expert_parallel_size=expert_parallel_size, attention_data_parallel=enable_attention_dp,
            num_prefill_replicas=num_prefill_replicas, kv_transfer_bandwidth_Bps=kv_transfer_bandwidth * 1e9,
            scheduler=scheduler, router=router, engine=engine, dtype=dtype, quantization=quantization,
            kv_cache_dtype=kv_cache_dtype, max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
            max_model_len=max_model_len, enable_chunked_prefill=enable_chunked_prefill, chunk_size=chunk_size,
            block_size=block_size, gpu_memory_utilization=gpu_memory_utilization, swap_space=swap_space * 2**30,
            preemption_mode=preemption_mode, enable_prefix_caching=enable_prefix_caching,
            speculative_model=speculative_model, num_speculative_tokens=num_speculative_tokens,
            spec_acceptance_rate=spec_acceptance_rate, slo_ttft_s=slo_ttft,
            slo_tpot_s=slo_tpot, workload=work)
        cfg = ServingConfig(**fields)
    except ValidationError as exc:
        raise flag_error(exc, default="config", skip=("workload",), renames={
            "burstiness_cv": "burstiness", "kv_transfer_bandwidth_Bps": "kv-transfer-bandwidth",
            "concurrency": "max-concurrency", "num_beams": "beam-width",
            "retrieval_latency_s": "retrieval-latency"}) from None
    if find_max_qps and workload is None and slo_ttft is None and slo_tpot is None:
        raise ConfigError("--find-max-qps needs --slo-ttft-p99 and/or --slo-tpot-p99")
    if colocate_model is not None and (find_max_qps or trace_out is not None):
        raise ConfigError("--colocate-model does not combine with --find-max-qps or --trace-out yet")
    _verdict_first(cfg, workload, num_requests, colocate_model, colocate_memory_frac, as_json)
    search = None
    mlperf = None
    result = None
    if workload is not None:
        from perfcast.serving.mlperf import run_mlperf

        mlperf = run_mlperf(cfg, workload, num_requests=num_requests, qps=qps)
        cfg, result = mlperf.result.config, mlperf.result
    elif find_max_qps:
        from perfcast.serving.search import find_max_qps as search_qps

        search = search_qps(cfg)
        cfg, result = search.config, search.result
    data_extra: dict[str, Any] = {}
    if colocate_model is not None:
        from perfcast.serving.colocation import simulate_colocated

        other = cfg.model_copy(update={"model": colocate_model, "speculative_model": None,
                                       "workload": cfg.workload.model_copy(update={"seed": cfg.workload.seed + 1})})
        pair = simulate_colocated(cfg, other, mode=colocation, memory_frac=colocate_memory_frac)  # type: ignore[arg-type]
        result = pair.first
        data_extra = pair.as_dict()
    elif result is None or trace_out is not None:  # (the timeline needs the iterations kept)
        result = simulate_serving(cfg, keep_events=trace_out is not None)
    if trace_out is not None:
        from perfcast.serving.timeline import write_serving_trace

        write_serving_trace(result, trace_out)
    if requests_out is not None:
        rows = result.request_rows()
        with requests_out.open("w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    data = data_extra or result.as_dict()
    missed = ""
    if search is not None:
        data.update(search.as_dict())
        if search.check is not None and search.max_qps > 0:
            data["steady_state"] = search.check.as_dict()
        missed = search.verdict
    if mlperf is not None:
        data.update({k if k.startswith("mlperf_") else f"mlperf_{k}": v for k, v in mlperf.as_dict().items()})
        if mlperf.qps_evaluated:
            data["max_qps"] = mlperf.qps
            data["qps_evaluated"] = [c.as_dict() for c in mlperf.qps_evaluated]
        if mlperf.check is not None:
            data["steady_state"] = mlperf.check.as_dict()
    if as_json:
        emit_json(data)
    else:
        _print(data, trace_out, requests_out)
    if missed:  # no load meets the SLO: an answer, "no"
        does_not_fit(missed)


def _verdict_first(cfg: Any, workload: str | None, num_requests: int | None, colocate_model: str | None,
                   colocate_memory_frac: float, as_json: bool) -> None:
    """A deployment that does not fit is an answer: print it with its memory breakdown and end with exit 1
    (before any simulation, which needs the deployment to fit)."""
    from perfcast.serving.engine import serving_dtype, serving_memory

    checks = [(cfg, 1.0)]
    if workload is not None:
        from perfcast.serving.mlperf import apply_mlperf

        checks = [(apply_mlperf(cfg, workload, num_requests=num_requests), 1.0)]
    elif colocate_model is not None:
        if not 0 < colocate_memory_frac < 1:
            return  # the co-location's own one-line error
        checks = [(cfg, colocate_memory_frac), (cfg.model_copy(update={"model": colocate_model,
                                                                       "speculative_model": None}),
                                                1.0 - colocate_memory_frac)]
    for run, frac in checks:
        memory = serving_memory(run, memory_frac=frac)
        if memory.fits:
            continue
        data: dict[str, Any] = {
            "model": run.model, "hardware": run.hardware, "scheduler": run.scheduler,
            "tensor_parallel_size": run.tensor_parallel_size, "pipeline_parallel_size": run.pipeline_parallel_size,
            "num_replicas": run.num_replicas, "dtype": serving_dtype(run).value, "quantization": run.quantization,
            **memory.as_dict()}
        if as_json:
            emit_json(data)
        else:
            _print_memory(data, title=True)
        does_not_fit(memory.verdict)


def _gib(x: float) -> str:
    return f"{x / 2**30:,.1f} GiB"


def _print_memory(d: dict[str, Any], *, title: bool = False) -> None:
    t = _table(title=(f"{d['model']} on {d['num_replicas']} x {d['tensor_parallel_size'] * d['pipeline_parallel_size']}"
                      f" {d['hardware']} ({d['dtype']}" + ("" if d["quantization"] == "none" else
                                                          f", {d['quantization']} weights") + ")")
               if title else "memory per GPU", show_header=False)
    t.add_column("quantity", no_wrap=True)
    t.add_column("value")
    t.add_row("verdict", "fits" if d["fits"] else f"DOES NOT FIT: {d['verdict']}")
    t.add_row("GPU memory", f"{_gib(d['memory_gpu_bytes'])} ({_gib(d['memory_usable_bytes'])} usable)")
    t.add_row("weights", _gib(d["memory_weights_bytes"]))
    t.add_row("activations peak", _gib(d["memory_activations_peak_bytes"]))
    t.add_row("KV cache", f"{_gib(d['memory_kv_cache_bytes'])} ({d['kv_cache_blocks_per_gpu']:,} blocks)")
    _console().print(t)


def _print(d: dict[str, Any], trace_out: Path | None, requests_out: Path | None) -> None:
    con = _console()
    gpus = d["tensor_parallel_size"] * d["pipeline_parallel_size"]
    head = _table(title=f"{d['model']} on {d['num_replicas']} x {gpus} {d['hardware']} ({d['scheduler']})",
                  show_header=False)
    head.add_column("quantity", no_wrap=True)
    head.add_column("value")
    if "mlperf_workload" in d:
        _print_mlperf(d)
    if "max_qps" in d:
        head.add_row("max QPS sustained", f"{d['max_qps']:.4g} requests/s within the SLO in steady state"
                     if d["max_qps"] else "none: no load meets the SLO")
    head.add_row("workload", _workload_line(d["workload"]))
    head.add_row("dtype", d["dtype"] + ("" if d["quantization"] == "none" else f" ({d['quantization']} weights)"))
    if "memory_usable_bytes" in d:
        head.add_row("memory per GPU", f"weights {_gib(d['memory_weights_bytes'])} + activations peak "
                     f"{_gib(d['memory_activations_peak_bytes'])} + KV cache {_gib(d['memory_kv_cache_bytes'])} of "
                     f"{_gib(d['memory_usable_bytes'])} usable")
    head.add_row("requests completed", f"{d['requests_completed']} of {d['requests_total']}")
    if d["requests_rejected"]:
        head.add_row("requests rejected", f"{d['requests_rejected']}: " + "; ".join(
            f"{r['requests']} {r['reason']}" for r in d["rejection_reasons"]))
    head.add_row("throughput", f"{d['throughput_requests_per_s']:.3g} requests/s, "
                 f"{d['throughput_tokens_per_s']:,.0f} output tokens/s")
    if d["goodput_requests_per_s"] is None:  # no SLO: nothing to meet
        head.add_row("goodput", "n/a (no SLO given: --slo-ttft-p99, --slo-tpot-p99)")
    else:
        head.add_row("goodput", f"{d['goodput_requests_per_s']:.3g} requests/s "
                     f"({100 * d['slo_attainment_frac']:.1f}% meet the SLO)")
    head.add_row("KV cache", f"{d['kv_blocks_per_engine']:,} blocks; utilization mean "
                 f"{100 * d['kv_utilization_frac']['mean']:.1f}%, max {100 * d['kv_utilization_frac']['max']:.1f}%")
    head.add_row("preemptions", str(d["preemptions"]))
    if d.get("energy_J"):
        head.add_row("energy (prior model)", f"{d['energy_J'] / 1e3:,.3g} kJ; {d['energy_per_output_token_J']:.3g} J "
                     f"per output token; {d['avg_power_per_gpu_W']:,.0f} W per GPU")
    con.print(head)
    lat = _table(title="latency" + (" (every request of the run at that load)" if "max_qps" in d else ""))
    for c in ("metric", "mean", "p50", "p90", "p99", "max"):
        lat.add_column(c, justify="left" if c == "metric" else "right")
    for key, label in (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("e2e_s", "E2E")):
        v = d[key]
        lat.add_row(label, *(_ms(v[k]) for k in ("mean", "p50", "p90", "p99", "max")))
    con.print(lat)
    if "qps_evaluated" in d and "steady_state_rule" in d:
        _print_search(d)
    for p, what in ((trace_out, "timeline"), (requests_out, "per-request CSV")):
        if p is not None:
            con.print(f"{what} written to {p}")


def _workload_line(w: dict[str, Any]) -> str:
    def stats(x: dict[str, Any]) -> str:
        return f"mean {x['mean']:,.0f}, p50 {x['p50']:,.0f}, p99 {x['p99']:,.0f}, max {x['max']:,.0f}"

    if w["lengths"] == "fixed":
        lengths = f"fixed {w['prompt_tokens']['max']:,.0f} prompt + {w['output_tokens']['max']:,.0f} output tokens"
    else:
        lengths = (f"{w['lengths']}: prompt tokens {stats(w['prompt_tokens'])}; output tokens "
                   f"{stats(w['output_tokens'])}")
    if w["arrival"] == "all at once":
        load = "all at once" + (f", at most {w['concurrency']} outstanding" if w["concurrency"] else "")
    elif w["arrival"] == "trace":
        load = "the trace's arrival times"
    else:
        load = f"{w['arrival']} arrivals, {w['offered_requests_per_s']:.4g} requests/s offered" + (
            f" (gap CV {w['burstiness_cv']:g})" if w["burstiness_cv"] is not None else "")
    return f"{lengths}; {load}; {w['num_requests']:,} requests over {w['arrival_span_s']:,.0f} s"


def _print_search(d: dict[str, Any]) -> None:
    rule = d["steady_state_rule"]
    t = _table(title=f"QPS search: each load simulated for {rule['warmup_lifetimes']:g} + "
                     f"{rule['steady_lifetimes']:g} request lifetimes ({d['request_lifetime_s']:.3g} s each), the "
                     f"first {rule['warmup_lifetimes']:g} discarded; saturated throughput "
                     f"{d['saturated_requests_per_s']:.4g} requests/s")
    for c in ("QPS", "verdict", "requests", "arrivals", "served/offered", "p99 (+- its error)"):
        t.add_column(c, justify="left" if c in ("verdict", "p99 (+- its error)") else "right")
    for c in sorted(d["qps_evaluated"], key=lambda c: c["qps"]):
        rate = ("-" if c["served_requests_per_s"] is None else
                f"{c['served_requests_per_s']:.4g}/{c['offered_requests_per_s']:.4g}")
        tails = ", ".join(f"{x['metric'].upper()} {_ms(x['p99_s'])} +- {_ms(rule['z'] * x['stderr_s'])}"
                          for x in c["tails"]) or c["reason"]
        t.add_row(f"{c['qps']:.4g}", c["verdict"], f"{c['num_requests']:,}", f"{c['simulated_s']:,.0f} s", rate,
                  tails)
    _console().print(t)


def _print_mlperf(d: dict[str, Any]) -> None:
    s, lim = d["mlperf_scenario"], d["mlperf_limits"]
    t = _table(title=f"{d['mlperf_workload']} ({d['mlperf_dataset']})", show_header=False)
    t.add_column("quantity", no_wrap=True)
    t.add_column("value")
    t.add_row("tokens/s (output, total)", f"{d[f'mlperf_{s}_tokens_per_s_total']:,.0f}")
    t.add_row("samples/s (total)", f"{d[f'mlperf_{s}_samples_per_s_total']:,.3g}")
    for key, label in (("ttft", "TTFT p99"), ("tpot", "TPOT p99")):
        value, bound = d[f"mlperf_{s}_{key}_ms_p99"], lim[f"{key}_p99_s"]
        t.add_row(label, ("-" if value is None else f"{value:,.1f} ms")
                  + ("" if bound is None else f" (limit {bound * 1e3:,.0f} ms)"))
    if lim["e2e_p99_s"] is not None:
        t.add_row("E2E p99", f"{_ms(d['e2e_s']['p99'])} (limit {lim['e2e_p99_s'] * 1e3:,.0f} ms)")
    if d["mlperf_qps_requests_per_s"] is not None:
        t.add_row("load", f"{d['mlperf_qps_requests_per_s']:.3g} requests/s (Poisson)")
    t.add_row("limits met", "yes" if d["mlperf_limits_met"] else "no")
    _console().print(t)
