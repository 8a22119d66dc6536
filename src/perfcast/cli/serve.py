"""``perfcast serve``: an LLM serving deployment under load (flag names follow vLLM's)."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from perfcast.cli.app import POWER_LIMIT_HELP, app, does_not_fit, emit_json, flag_error, handled, power_limited
from perfcast.cli.output_paths import refuse_overwrite
from perfcast.cli.serve_output import print_memory, print_serving
from perfcast.cli.serve_run import ServeReport, ServeRequest, run_serve
from perfcast.errors import ConfigError
from perfcast.results.serialize import to_json

if TYPE_CHECKING:
    from perfcast.serving.config import ServingConfig

__all__ = ["serve"]


@app.command()
@handled
def serve(
    model: str | None = typer.Option(None, "--model", "-m", help="Model id, alias, HF repo id or config.json path "
                                                                "(with --workload: the benchmark's by default)."),
    hardware: str = typer.Option(..., "--hardware", "-H", help="GPU id or alias."),
    power_limit_W: float | None = typer.Option(None, "--power-limit-W", "--power-limit-w", help=POWER_LIMIT_HELP),
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
    kv_transfer_bandwidth: float | None = typer.Option(None, "--kv-transfer-bandwidth",
                                                       help="Prefill-to-decode KV link per GPU (GB/s; default: "
                                                            "the cluster's NVLink when every replica is in one "
                                                            "scale-up domain, else its NICs)."),
    cluster: str | None = typer.Option(None, "--cluster", help="Cluster for TP collectives (default: the GPU's)."),
    scheduler: str | None = typer.Option(None, "--scheduler", help="vllm | sarathi | sglang | orca | lightllm | "
                                         "static (default: the --engine profile's, else vllm)."),
    router: str = typer.Option("round_robin", "--router", help="round_robin | least_outstanding | shortest_queue."),
    engine: str | None = typer.Option(None, "--engine", help="Engine profile: vllm | sglang | trtllm (data/engines): "
                                      "its scheduler, budgets, memory share, all-reduce and fitted CPU overheads; "
                                      "flags given explicitly win. Default: vllm's CPU overheads with the flags' "
                                      "own defaults."),
    dtype: str = typer.Option("auto", "--dtype", help="auto | fp16 | bf16 (auto: the checkpoint's torch_dtype, "
                                                      "fp32 checkpoints in fp16, as vLLM)."),
    quantization: str = typer.Option("auto", "--quantization", "-q",
                                     help="auto | none | w4a16 | w8a16 | w8a8 | fp8 | fp4 | mxfp4: the checkpoint's "
                                          "own (auto; with --workload the preset's precision where the GPU has "
                                          "it), a checkpoint quantized that way, or none for a 16-bit copy."),
    kv_cache_dtype: str = typer.Option("auto", "--kv-cache-dtype",
                                       help="auto | fp16 | bf16 | fp8 (auto: the activation dtype, as vLLM; fp8 with "
                                            "--quantization fp8 or fp4, as TensorRT-LLM's FP8 checkpoints ship)."),
    max_num_seqs: int | None = typer.Option(None, "--max-num-seqs", help="Sequences per iteration at most "
                                            "(default: the engine's, else 256)."),
    max_num_batched_tokens: int | None = typer.Option(None, "--max-num-batched-tokens",
                                                      help="Tokens per iteration at most (default per scheduler)."),
    max_model_len: int | None = typer.Option(None, "--max-model-len", help="Context limit (default: the model's)."),
    enable_chunked_prefill: bool = typer.Option(False, "--enable-chunked-prefill",
                                                help="vllm with chunked prefill (the sarathi policy)."),
    chunk_size: int | None = typer.Option(None, "--chunk-size", help="Token budget per iteration for chunked "
                                          "prefill (default: the engine's, else 512)."),
    block_size: int = typer.Option(16, "--block-size", help="Tokens per KV block."),
    gpu_memory_utilization: float | None = typer.Option(None, "--gpu-memory-utilization",
                                                        help="Fraction of GPU memory (default: the engine's, "
                                                             "else 0.9)."),
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
    burstiness: float = typer.Option(1.0, "--burstiness",
                                     help="Gamma arrivals (--arrival gamma): CV of the gaps (vLLM's --burstiness b "
                                          "is a gamma shape: CV 1/sqrt(b))."),
    max_concurrency: int | None = typer.Option(None, "--max-concurrency",
                                               help="Closed loop: at most this many requests outstanding; the "
                                                    "next is sent when one finishes."),
    trace: str | None = typer.Option(None, "--trace", help="arxiv_summarization | splitwise_code | "
                                                          "splitwise_conv, or a CSV path."),
    prompt_tokens: int | None = typer.Option(None, "--prompt-tokens", help="Fixed prompt length."),
    output_tokens: int | None = typer.Option(None, "--output-tokens", help="Fixed output length."),
    random_range_ratio: float = typer.Option(1.0, "--random-range-ratio",
                                             help="Lengths uniform in [floor(r x L), L] for the --prompt-tokens and "
                                                  "--output-tokens L (a benchmark client's random dataset)."),
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
    explain: bool = typer.Option(False, "--explain", help="Show where the iterations' time went, by part."),
) -> None:
    """Simulate LLM serving under load: TTFT, TPOT, E2E, throughput, goodput, KV use, preemptions."""
    refuse_overwrite(trace_out, requests_out, force=force)
    hardware = power_limited(hardware, power_limit_W)
    if workload is not None:
        model, quantization = _preset_defaults(workload, model, hardware, quantization, qps, {
            "--trace": trace, "--prompt-tokens": prompt_tokens, "--output-tokens": output_tokens,
            "--find-max-qps": find_max_qps or None, "--slo-ttft-p99": slo_ttft, "--slo-tpot-p99": slo_tpot,
            "--colocate-model": colocate_model, "--max-concurrency": max_concurrency})
    elif model is None:
        raise ConfigError("--model is required (or --workload mlperf:<benchmark>:<scenario>, whose model is the "
                          "default)")
    work: dict[str, Any] = dict(
        num_requests=200 if num_requests is None else num_requests, seed=seed, arrival=arrival, qps=qps,
        burstiness_cv=burstiness, concurrency=max_concurrency, trace=trace, prompt_tokens=prompt_tokens,
        output_tokens=output_tokens, length_range_ratio=random_range_ratio,
        shared_prefix_tokens=shared_prefix_tokens, num_prefixes=num_prefixes,
        images_per_request=images_per_request, retrieval_latency_s=retrieval_latency,
        retrieval_latency_cv=retrieval_latency_cv, retrieved_tokens=retrieved_tokens,
        **({} if beam_width is None else {"num_beams": beam_width}))
    cfg = _config(work, dict(
        model=model, hardware=hardware, tensor_parallel_size=tensor_parallel_size,
        pipeline_parallel_size=pipeline_parallel_size, num_replicas=num_replicas, cluster=cluster,
        expert_parallel_size=expert_parallel_size, attention_data_parallel=enable_attention_dp,
        num_prefill_replicas=num_prefill_replicas,
        kv_transfer_bandwidth_Bps=None if kv_transfer_bandwidth is None else kv_transfer_bandwidth * 1e9,
        router=router, dtype=dtype, quantization=quantization, kv_cache_dtype=kv_cache_dtype,
        max_model_len=max_model_len, block_size=block_size, swap_space=swap_space * 2**30,
        **_engine_fields(engine, model, hardware, tensor_parallel_size, quantization, {
            "scheduler": scheduler, "max_num_seqs": max_num_seqs, "max_num_batched_tokens": max_num_batched_tokens,
            "enable_chunked_prefill": enable_chunked_prefill or None, "chunk_size": chunk_size,
            "gpu_memory_utilization": gpu_memory_utilization}),
        preemption_mode=preemption_mode, enable_prefix_caching=enable_prefix_caching,
        speculative_model=speculative_model, num_speculative_tokens=num_speculative_tokens,
        spec_acceptance_rate=spec_acceptance_rate, slo_ttft_s=slo_ttft, slo_tpot_s=slo_tpot))
    req = ServeRequest(workload=workload, num_requests=num_requests, qps=qps, find_max_qps=find_max_qps,
                       colocate_model=colocate_model, colocation=colocation,
                       colocate_memory_frac=colocate_memory_frac, keep_events=trace_out is not None, explain=explain)
    _check_request(req, slo_ttft, slo_tpot)
    _verdict_first(cfg, workload, num_requests, colocate_model, colocate_memory_frac, as_json)
    report = run_serve(cfg, req)
    _write_files(report, trace_out, requests_out)
    data = to_json(report)
    if as_json:
        emit_json(data)
    else:
        print_serving(data, trace_out, requests_out)
    if report.missed:  # no load meets the SLO: an answer, "no"
        does_not_fit(report.missed)


def _preset_defaults(workload: str, model: str | None, hardware: str, quantization: str, qps: float | None,
                     fixed_by_preset: dict[str, object]) -> tuple[str, str]:
    """An MLPerf preset's model and precision where the flags leave them out; the flags the preset sets are
    refused."""
    from perfcast.serving.sources.mlperf import default_quantization, parse_workload

    bench, scenario = parse_workload(workload)
    if scenario == "offline" and qps is not None:
        raise ConfigError("--qps does not apply to an offline workload (every request arrives at once)")
    given = [flag for flag, value in fixed_by_preset.items() if value is not None]
    if given:
        raise ConfigError(f"--workload sets the request lengths, arrivals and latency limits; drop {', '.join(given)}")
    if quantization == "auto":
        quantization = default_quantization(bench, hardware)
    return model or bench.model, quantization


# the scheduling flags' defaults without --engine
_FLAG_DEFAULTS: dict[str, Any] = {"engine": "vllm", "scheduler": "vllm", "max_num_seqs": 256, "chunk_size": 512,
                                  "gpu_memory_utilization": 0.9, "enable_chunked_prefill": False,
                                  "max_num_batched_tokens": None}


def _engine_fields(engine: str | None, model: str, hardware: str, tp: int, quantization: str,
                   given: dict[str, Any]) -> dict[str, Any]:
    """The scheduling fields: the flags' defaults, the engine profile's settings over them, the flags given over
    both. A scheduler given explicitly takes the profile's token budget as its own kind of budget."""
    from perfcast.catalog.hardware import load_hardware
    from perfcast.dtypes import DType
    from perfcast.errors import PerfcastError
    from perfcast.serving.engines import engine_settings, load_engine
    from perfcast.serving.iteration import weight_bytes_per_gpu

    fields = dict(_FLAG_DEFAULTS)
    if engine is not None:
        profile = load_engine(engine)
        memory = float(load_hardware(hardware).memory_bytes)
        weights = None
        if profile.kv_fraction_of_free_memory:
            try:
                weights = weight_bytes_per_gpu(model, tp=tp, dtype=DType.FP16, quantization=quantization)
            except PerfcastError:
                weights = None  # the simulation reports what is wrong with the model
        fields.update(engine_settings(profile, memory, weights))
    explicit = {k: v for k, v in given.items() if v is not None}
    if engine is not None and ("scheduler" in explicit or "enable_chunked_prefill" in explicit):
        chunked_profile = fields["scheduler"] in ("sarathi", "sglang")
        budget = fields["chunk_size"] if chunked_profile else fields["max_num_batched_tokens"]
        fields["chunk_size"], fields["max_num_batched_tokens"] = _FLAG_DEFAULTS["chunk_size"], None
        chunked = explicit.get("scheduler") in ("sarathi", "sglang") or explicit.get("enable_chunked_prefill")
        if budget is not None:
            fields["chunk_size" if chunked else "max_num_batched_tokens"] = budget
    fields.update(explicit)
    return fields


def _config(work: dict[str, Any], fields: dict[str, Any]) -> ServingConfig:
    """The typed config of the flags (``work``: the workload's fields), a pydantic refusal as a flag error."""
    from pydantic import ValidationError

    from perfcast.serving.config import ServingConfig, WorkloadConfig

    try:
        return ServingConfig(**fields, workload=WorkloadConfig(**work))
    except ValidationError as exc:
        raise flag_error(exc, default="config", skip=("workload",), renames={
            "burstiness_cv": "burstiness", "kv_transfer_bandwidth_Bps": "kv-transfer-bandwidth",
            "concurrency": "max-concurrency", "num_beams": "beam-width",
            "retrieval_latency_s": "retrieval-latency"}) from None


def _check_request(req: ServeRequest, slo_ttft: float | None, slo_tpot: float | None) -> None:
    """Flags that do not combine, refused in one line each."""
    if req.find_max_qps and req.qps is not None:
        raise ConfigError(f"--qps {req.qps:g} sets one load; --find-max-qps searches the load (drop --qps)")
    if req.find_max_qps and req.workload is None and slo_ttft is None and slo_tpot is None:
        raise ConfigError("--find-max-qps needs --slo-ttft-p99 and/or --slo-tpot-p99")
    if req.colocate_model is None and (req.colocation != "time_sliced" or req.colocate_memory_frac != 0.5):
        raise ConfigError("--colocation and --colocate-memory-frac describe a second model on the same GPUs; add "
                          "--colocate-model MODEL (without it they have no effect)")
    if req.colocate_model is not None and (req.find_max_qps or req.keep_events or req.explain):
        raise ConfigError("--colocate-model does not combine with --find-max-qps, --trace-out or --explain yet")


def _write_files(report: ServeReport, trace_out: Path | None, requests_out: Path | None) -> None:
    """The Perfetto timeline and the per-request CSV, where asked."""
    if trace_out is not None:
        from perfcast.serving.timeline import write_serving_trace

        write_serving_trace(report.result, trace_out)
    if requests_out is not None:
        rows = report.result.request_rows()
        with requests_out.open("w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)


def _verdict_first(cfg: Any, workload: str | None, num_requests: int | None, colocate_model: str | None,
                   colocate_memory_frac: float, as_json: bool) -> None:
    """A deployment that does not fit is an answer: print it with its memory breakdown and end with exit 1
    (before any simulation, which needs the deployment to fit)."""
    from perfcast.serving.deployment import serving_dtype, serving_memory

    checks = [(cfg, 1.0)]
    if workload is not None:
        from perfcast.serving.sources.mlperf import apply_mlperf

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
            **to_json(memory)}
        if as_json:
            emit_json(data)
        else:
            print_memory(data, title=True)
        does_not_fit(memory.verdict)
