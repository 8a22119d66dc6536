"""How ``perfcast serve`` prints its answer: the deployment and its memory, the workload, the latency table,
the QPS search's loads and an MLPerf scenario's figures (from the command's JSON-ready dict)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from perfcast.cli.app import _console, _table

__all__ = ["print_memory", "print_serving"]


def _ms(x: float | None) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x * 1e3:.1f} ms"


def _gib(x: float) -> str:
    return f"{x / 2**30:,.1f} GiB"


def print_memory(d: dict[str, Any], *, title: bool = False) -> None:
    """One GPU's memory and the fit verdict (a table of its own, titled with the deployment when ``title``)."""
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
    if "memory_state_bytes_per_seq" in d:  # state-space layers: a constant state per running sequence
        t.add_row("Mamba state", f"{d['memory_state_bytes_per_seq'] / 2**20:,.2f} MiB per sequence (in the KV cache)")
    _console().print(t)


def print_serving(d: dict[str, Any], trace_out: Path | None, requests_out: Path | None) -> None:
    """The serve result ``d`` as tables (and where its output files went)."""
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
    weights = d.get("weights_format", d["quantization"])
    head.add_row("dtype", d["dtype"] + ("" if weights == "none" else f"; weights {weights}"))
    if "memory_usable_bytes" in d:
        head.add_row("memory per GPU", f"weights {_gib(d['memory_weights_bytes'])} + activations peak "
                     f"{_gib(d['memory_activations_peak_bytes'])} + KV cache {_gib(d['memory_kv_cache_bytes'])} of "
                     f"{_gib(d['memory_usable_bytes'])} usable" + (
                         f" (Mamba state {d['memory_state_bytes_per_seq'] / 2**20:,.2f} MiB per sequence)"
                         if "memory_state_bytes_per_seq" in d else ""))
    if "load_verdict" in d:
        head.add_row("steady state", _load_line(d))
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
    kv_dtype = f" of {d['kv_cache_dtype']}" if "kv_cache_dtype" in d else ""
    head.add_row("KV cache", f"{d['kv_blocks_per_engine']:,} blocks{kv_dtype}; utilization mean "
                 f"{100 * d['kv_utilization_frac']['mean']:.1f}%, max {100 * d['kv_utilization_frac']['max']:.1f}%")
    head.add_row("preemptions", str(d["preemptions"]))
    if d.get("energy_J"):
        head.add_row("energy", f"{d['energy_J'] / 1e3:,.3g} kJ; {d['energy_per_output_token_J']:.3g} J "
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
    if "iteration_breakdown_s" in d:
        _print_breakdown(d["iteration_breakdown_s"])
    for p, what in ((trace_out, "timeline"), (requests_out, "per-request CSV")):
        if p is not None:
            con.print(f"{what} written to {p}")


_PARTS = {"linear_s": "linear layers", "attention_prefill_s": "attention (prefill)",
          "attention_decode_s": "attention (decode)", "lm_head_s": "LM head", "communication_s": "communication",
          "cpu_overhead_s": "CPU overhead", "vision_encoder_s": "vision encoder", "draft_model_s": "draft model",
          "kv_swap_s": "KV swap (PCIe)"}


def _print_breakdown(parts: dict[str, float]) -> None:
    """``--explain``: the iterations' time by part, summed over every engine of the run, largest first."""
    total = parts["total_s"]
    t = _table(title="iteration time by part (GPU seconds, every engine, summed over the run)")
    for c in ("part", "time", "share"):
        t.add_column(c, justify="left" if c == "part" else "right")
    for key, label in sorted(_PARTS.items(), key=lambda kv: -parts[kv[0]]):
        if parts[key] > 0:
            t.add_row(label, f"{parts[key]:,.3f} s", f"{100 * parts[key] / total:.1f}%" if total > 0 else "-")
    t.add_row("total", f"{total:,.3f} s", "100.0%" if total > 0 else "-")
    _console().print(t)


def _load_line(d: dict[str, Any]) -> str:
    """Whether a plain run's load holds in steady state (``load_verdict``;
    perfcast.serving.experiments.search.steady_state)."""
    c, verdict = d["steady_state"], d["load_verdict"]
    if "saturated_requests_per_s" not in d:
        return f"{verdict}: {c['reason']}"
    mu = d["saturated_requests_per_s"]
    load = f"{c['qps']:.4g} requests/s asked, {c['qps'] / mu:.0%} of the {mu:.4g} this deployment completes saturated"
    p99 = ", ".join(f"{k.upper()} {_ms(v)}" for k, v in c["p99_s"].items())
    run = (f"a steady-state run of {c['num_requests']:,} requests" if c["num_requests"] != d["requests_total"]
           else "this run")
    if verdict == "overload":
        why = "" if not c["num_requests"] else f"; in {run} {c['reason']}"
        return (f"OVERLOAD ({load}){why}: the latencies below hold for these {d['requests_total']:,} requests only "
                "and grow with a longer run")
    if verdict == "sustained":
        return f"sustained ({load}): in {run} the queue does not grow" + (f"; p99 after its warm-up: {p99}"
                                                                          if p99 else "")
    if verdict == "misses_slo":
        return f"misses the SLO in steady state ({load}): in {run} {c['reason']}; p99 after its warm-up: {p99}"
    return f"unsettled ({load}): {c['reason']}"


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
        offered = w["offered_requests_per_s"]  # None: one request, no gap to realize a rate
        rate = (f"{offered:.4g} requests/s offered" if offered is not None
                else f"{w['qps']:.4g} requests/s asked (a single arrival realizes no rate)")
        load = f"{w['arrival']} arrivals, {rate}" + (
            f" (gap CV {w['burstiness_cv']:g})" if w["burstiness_cv"] is not None else "")
    return f"{lengths}; {load}; {w['num_requests']:,} requests over {w['arrival_span_s']:,.0f} s"


def _print_search(d: dict[str, Any]) -> None:
    rule = d["steady_state_rule"]
    t = _table(title=f"QPS search: each load simulated for {rule['warmup_lifetimes']:g} + "
                     f"{rule['steady_lifetimes']:g} request lifetimes ({d['request_lifetime_s']:.3g} s each), the "
                     f"first {rule['warmup_lifetimes']:g} discarded (near saturation at least "
                     f"{rule['relaxation_warmup']:g} + {rule['relaxation_window']:g} relaxation times of the queue); "
                     "saturated throughput "
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
    if d.get("mlperf_official_queries"):
        t.add_row("official run", f"{d['mlperf_official_queries']:,} queries in {d['mlperf_official_run_s']:,.0f} s")
    for es in d.get("mlperf_early_stopping") or []:
        t.add_row(f"early stopping ({es['metric']})",
                  f"{100 * es['over_frac']:.2f}% of {es['queries']:,} over {es['limit_s'] * 1e3:,.0f} ms, at most "
                  f"{es['allowed']:,} allowed: {'passed' if es['passed'] else 'failed'}")
    t.add_row("limits met", "yes" if d["mlperf_limits_met"] else "no")
    _console().print(t)
