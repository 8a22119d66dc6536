"""Microbenchmarks of this machine's CPU with PyTorch (imported here, only when they run).

Each benchmark is one PyTorch call as eager models make it (``F.linear``,
``torch.bmm``, ``torch.add``, ``F.gelu``, ``torch.softmax``, ``F.layer_norm``,
``F.conv2d``, ``F.scaled_dot_product_attention``...), in fp32, under
``torch.no_grad``, at shapes that span thin to square products and cache-sized
to DRAM-sized tensors; linear layers cycle through weight copies larger than the caches, as a model's
layers do, and every timed call starts with the cores' private caches flushed, as an op in a model finds them.
A call is warmed up, then repeated for about 60 ms in each of four passes over the whole suite; its time
is the mean of its repeats in its fastest pass (see :func:`interleaved_fastest_s`).

Why this statistic: on this project's shared 2-vCPU VM the machine's speed moves in phases of seconds (a
1024^3 GEMM ran at 65-110 GFLOP/s from one second to the next) and, within a phase, from call to call
(150-220 GFLOP/s within one second at 2 threads). A model's forward lasts 0.1-1 s, so its time is a mean
over many calls within whatever phase it ran in, and ``validate --local``'s fastest forward is such a mean in
a fast phase. The fastest single repeat of a short call is not: it is the call that dodged every slow moment,
which left predictions 13-19% too fast in three runs where calibration and forwards shared one process
(Nov 2026). The mean over a ~60 ms pass in the fastest pass is the same statistic as the forward's, and
brought those runs to 7-14%. The median over all repeats (every phase) was tried too: predictions 10-35% too
slow in three of four fresh-process runs.
"""

from __future__ import annotations

import itertools
import os
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from perfcast.calibrate.fit import Measurement, measurement_op
from perfcast.calibrate.machine import probe_machine
from perfcast.errors import ConfigError

__all__ = ["clock_for", "fastest_time_s", "import_torch", "interleaved_fastest_s", "run_microbenchmarks", "suite_of"]

# (family, op, dims): dims follow the IR conventions of perfcast.workload.types
_GEMMS = [(1, 1, 768, 768), (1, 1, 768, 3072), (1, 8, 768, 768), (1, 32, 768, 768), (1, 64, 256, 256),
          (1, 64, 768, 768), (1, 64, 768, 3072), (1, 64, 3072, 768), (1, 128, 768, 768), (1, 128, 768, 3072),
          (1, 128, 3072, 768), (1, 256, 1024, 1024), (1, 512, 768, 768),
          (1, 512, 768, 3072), (1, 512, 3072, 768), (1, 1024, 1024, 1024), (1, 2048, 512, 2048),
          (1, 128, 768, 50257 // 8), (1, 49, 512, 2048), (1, 3136, 64, 256), (1, 4, 2048, 1000),
          (12, 128, 64, 128), (12, 128, 128, 64), (12, 512, 64, 512), (12, 512, 512, 64), (48, 64, 64, 64)]
# products whose weight is stored (in, out), as GPT-2's Conv1D calls addmm(bias, x, W): BLAS runs them at
# another speed than nn.Linear's (out, in) weight (dims as _GEMMS)
_GEMMS_IN_OUT = [(1, 64, 768, 768), (1, 64, 768, 3072), (1, 64, 3072, 768), (1, 128, 768, 2304),
                 (1, 256, 1024, 1024), (1, 512, 768, 3072), (1, 512, 3072, 768)]
_VECTORS = [("add", 1, 2**10), ("add", 1, 2**14), ("add", 1, 2**17), ("add", 1, 2**19), ("add", 1, 2**21),
            ("add", 1, 2**23), ("add", 1, 2**24), ("copy", 1, 2**16), ("copy", 1, 2**20), ("copy", 1, 2**23),
            ("mul", 1, 2**18), ("relu", 1, 2**20), ("gelu", 1, 2**16), ("gelu", 1, 2**20), ("gelu", 1, 2**22),
            ("tanh", 1, 2**18), ("softmax", 1536, 128), ("softmax", 6144, 512), ("softmax", 384, 64),
            ("layernorm", 128, 768), ("layernorm", 2048, 768), ("sum", 4096, 1024),
            ("maxpool", 64, 112 * 112), ("maxpool", 256, 112 * 112), ("embedding", 128, 768),
            ("embedding", 2048, 768)]
_CONVS = [(1, 3, 64, 7, 224, 2, 3, 1), (1, 64, 64, 3, 56, 1, 1, 1), (1, 256, 64, 1, 56, 1, 0, 1),
          (1, 64, 256, 1, 56, 1, 0, 1), (1, 128, 128, 3, 28, 1, 1, 1), (1, 512, 128, 1, 28, 1, 0, 1),
          (1, 256, 256, 3, 14, 1, 1, 1), (1, 512, 512, 3, 7, 1, 1, 1), (2, 128, 128, 3, 56, 2, 1, 1),
          (1, 1024, 2048, 1, 14, 2, 0, 1), (1, 256, 1024, 1, 14, 1, 0, 1), (1, 1024, 256, 1, 14, 1, 0, 1),
          (1, 512, 2048, 1, 7, 1, 0, 1), (1, 128, 512, 1, 28, 1, 0, 1), (4, 256, 256, 3, 14, 1, 1, 1),
          (4, 64, 256, 1, 56, 1, 0, 1)]
# (batch, heads, queries, keys, head_dim, causal); causal calls pass the mask as a boolean tensor, as
# transformers' SDPA attention does (the kernel then computes the masked-out pairs too)
_ATTENTIONS = [(1, 12, 128, 128, 64, 0), (1, 12, 512, 512, 64, 0), (4, 12, 128, 128, 64, 0),
               (1, 12, 32, 32, 64, 0), (2, 16, 256, 256, 64, 0), (1, 12, 64, 64, 64, 1), (1, 12, 256, 256, 64, 1),
               (1, 12, 512, 512, 64, 1)]
_ROUNDS = 4  # passes over the suite (see interleaved_fastest_s)
_COLD_BYTES = 256 * 2**20  # weights cycled through by the linear benchmarks (beyond any L3)
# a write of fresh memory from the allocator beside the same write in place: their difference is the cost of
# mapping the pages (64 MiB, above glibc's 32 MiB largest heap-served block, so every call maps anew)
_ALLOCS = [("fill_", 1, 2**24), ("fill", 1, 2**24)]
_QUICK = {"alloc": [0, 1], "gemm": [0, 8, 9, 12, 15, 21, 23, len(_GEMMS) + 1, len(_GEMMS) + 5],
          "vector": [0, 2, 4, 5, 6, 13, 16, 19, 22, 24],
          "conv": [0, 1, 2, 7], "attention": [0, 1, 6]}


def import_torch() -> Any:
    """torch, or a one-line error saying how to install it."""
    try:
        import torch
    except ImportError:
        raise ConfigError("this command needs PyTorch; install it with pip install 'perfcast[torch]'") from None
    return torch


def suite_of(quick: bool) -> list[tuple[str, str, tuple[int, ...]]]:
    """The benchmarks to run: (family, op, dims); ``quick`` keeps a few of each family."""
    full: dict[str, list[tuple[str, str, tuple[int, ...]]]] = {
        "gemm": [("gemm", "bmm" if d[0] > 1 else "linear", tuple(d)) for d in _GEMMS]
        + [("gemm", "linear_in_out", tuple(d)) for d in _GEMMS_IN_OUT],
        "vector": [("vector", op, (r, c)) for op, r, c in _VECTORS],
        "conv": [("conv", "conv2d", d) for d in _CONVS],
        "attention": [("attention", "sdpa", d) for d in _ATTENTIONS],
        "alloc": [("alloc", op, (r, c)) for op, r, c in _ALLOCS],
    }
    if not quick:
        return [x for fam in full.values() for x in fam]
    return [full[f][i] for f, idx in _QUICK.items() for i in idx]


def clock_for(threads: int) -> Callable[[], float]:
    """The clock that times a call on ``threads`` threads.

    With one thread the work runs on the calling thread, so its CPU time (``time.thread_time``) is the
    call's duration without the time other processes held the core; with several threads only wall time
    (``time.perf_counter``) covers them all.
    """
    return time.thread_time if threads == 1 else time.perf_counter


def fastest_time_s(fn: Callable[[], object], *, min_time_s: float = 0.05, min_repeats: int = 3,
                   max_repeats: int = 50, warmup: int = 2, clock: Callable[[], float] = time.perf_counter,
                   before: Callable[[], object] | None = None) -> float:
    """Fewest seconds of one ``fn()`` by ``clock`` after ``warmup`` calls, over repeats lasting ``min_time_s``.

    Other processes only ever add time to a call (they take its core, or make one of its threads wait for
    the other at a barrier), so the fastest repeat is the estimate of the call on a quiet machine; a median
    is not, once the machine is busy more than half of the time. ``before`` (untimed) runs before every call.
    """
    return min(_repeat(fn, min_time_s=min_time_s, min_repeats=min_repeats, max_repeats=max_repeats,
                       warmup=warmup, clock=clock, before=before))


def _repeat(fn: Callable[[], object], *, min_time_s: float, min_repeats: int, max_repeats: int, warmup: int,
            clock: Callable[[], float], before: Callable[[], object] | None = None) -> list[float]:
    for _ in range(warmup):
        fn()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < max_repeats and (len(times) < min_repeats or time.perf_counter() - start < min_time_s):
        if before is not None:
            before()
        t0 = clock()
        fn()
        times.append(clock() - t0)
    return times


def interleaved_fastest_s(fns: Sequence[Callable[[], object]], *, rounds: int = 3, min_time_s: float = 0.05,
                          min_repeats: int = 2, max_repeats: int = 50,
                          clock: Callable[[], float] = time.perf_counter,
                          before: Callable[[], object] | None = None,
                          progress: Callable[[int, int], None] | None = None,
                          per_pass: Callable[[list[float]], float] = min) -> list[float]:
    """Seconds of each of ``fns`` in its fastest pass, measured in ``rounds`` passes over all of them.

    Each pass gives every call one warm-up (its operands back in cache after the others ran) and then repeats it
    for ``min_time_s / rounds`` (at least ``min_repeats`` times); ``per_pass`` reduces one pass's repeats to
    one figure (``min``: the fastest repeat; ``statistics.fmean``: the pass's mean call) and a call's time is
    the smallest such figure over all passes. Interleaving spreads each call's repeats over the whole run, so
    a burst of load from other processes slows a few passes of every call rather than all passes of one.
    ``before`` (untimed) runs before every timed call.
    """
    if rounds < 1:
        raise ConfigError(f"rounds must be a positive integer (got {rounds})")
    best = [float("inf")] * len(fns)
    for r in range(rounds):
        for i, fn in enumerate(fns):
            if progress:
                progress(r, i)
            times = _repeat(fn, min_time_s=min_time_s / rounds, min_repeats=min_repeats,
                            max_repeats=max(min_repeats, max_repeats // rounds), warmup=1, clock=clock,
                            before=before)
            best[i] = min(best[i], per_pass(times))
    return best


def _call(torch: Any, family: str, op: str, dims: tuple[int, ...], pool: Any) -> Callable[[], object]:
    F = torch.nn.functional
    g = torch.Generator().manual_seed(0)

    def randn(*shape: int) -> Any:
        return torch.randn(*shape, generator=g)

    if family == "gemm":
        b, m, k, n = dims
        if op == "bmm":
            x, y = randn(b, m, k), randn(b, k, n)
            return lambda: torch.bmm(x, y)
        # a model's layers each bring their own weights: cycle through copies larger than the caches together
        # (views into one shared ``pool`` of _COLD_BYTES, so the whole suite holds it once)
        copies = max(1, min(64, _COLD_BYTES // (4 * n * k)))
        x, bias = randn(m, k), randn(n)
        if op == "linear_in_out":
            stored = itertools.cycle([pool[i * n * k:(i + 1) * n * k].view(k, n) for i in range(copies)])
            return lambda: torch.addmm(bias, x, next(stored))
        ws = [pool[i * n * k:(i + 1) * n * k].view(n, k) for i in range(copies)]
        turn = itertools.cycle(ws)
        return lambda: F.linear(x, next(turn), bias)
    if family == "conv":
        batch, cin, cout, kern, side, stride, pad, groups = dims
        x, w = randn(batch, cin, side, side), randn(cout, cin // groups, kern, kern)
        return lambda: F.conv2d(x, w, None, stride, pad, 1, groups)
    if family == "attention":
        b, h, q, kv, d, causal = dims
        qq, kk, vv = randn(b, h, q, d), randn(b, h, kv, d), randn(b, h, kv, d)
        if causal:  # query i (the last q of kv positions) sees keys up to kv - q + i
            mask = torch.ones(q, kv, dtype=torch.bool).tril(kv - q).view(1, 1, q, kv)
            return lambda: F.scaled_dot_product_attention(qq, kk, vv, attn_mask=mask)
        return lambda: F.scaled_dot_product_attention(qq, kk, vv)
    rows, cols = dims
    if family == "alloc":
        buf = torch.empty(rows * cols)
        if op == "fill_":
            return lambda: buf.fill_(1.0)
        return lambda: torch.full((rows * cols,), 1.0)
    if op == "maxpool":
        side = int(round(cols**0.5))
        x = randn(1, rows, side, side)
        return lambda: F.max_pool2d(x, 3, 2, 1)
    if op == "embedding":
        table = randn(30522, cols)
        ids = torch.randint(0, 30522, (rows,), generator=g)
        return lambda: F.embedding(ids, table)
    x, y = randn(rows, cols), randn(rows, cols)
    fns: dict[str, Callable[[], object]] = {
        "add": lambda: torch.add(x, y), "mul": lambda: torch.mul(x, y), "copy": lambda: x.clone(),
        "relu": lambda: torch.relu(x), "gelu": lambda: F.gelu(x), "tanh": lambda: torch.tanh(x),
        "softmax": lambda: torch.softmax(x, -1), "sum": lambda: x.sum(-1),
    }
    if op == "layernorm":
        w, bias = randn(cols), randn(cols)
        return lambda: F.layer_norm(x, (cols,), w, bias)
    return fns[op]


def run_microbenchmarks(*, quick: bool = False, threads: int | None = None,
                        progress: Callable[[str], None] | None = None) -> tuple[list[Measurement], int]:
    """Run the benchmarks on this CPU; returns the measurements and the thread count used."""
    torch = import_torch()
    if threads is not None:
        cpus = os.cpu_count() or 1
        if not 1 <= threads <= cpus:  # more threads than CPUs would measure their contention, not this CPU
            raise ConfigError(f"--threads {threads}: give 1 to {cpus}, the logical CPUs of this machine")
        torch.set_num_threads(threads)
    used = int(torch.get_num_threads())
    suite = suite_of(quick)
    # each benchmark gets ~0.25 s (quick: 0.03 s) of repeats in total, spread over the passes over the suite
    min_time = 0.03 if quick else 0.25
    with torch.no_grad():
        pool = torch.empty(_COLD_BYTES // 4).uniform_(-1.0, 1.0, generator=torch.Generator().manual_seed(1))
        fns = [_call(torch, family, op, dims, pool) for family, op, dims in suite]
        # in a model every op finds its operands evicted from the cores' private caches (the GEMM before it
        # streamed megabytes of weights through them): stream a buffer several times their size through
        # them, untimed, before every timed call, so the benchmarks measure ops in that state too
        evict = torch.ones(int(max(8 * 2**20, 4 * probe_machine().l2_bytes_total)) // 4)

        def flush() -> None:
            evict.mul_(1.0)


        def report(r: int, i: int) -> None:
            if progress:
                family, op, dims = suite[i]
                progress(f"pass {r + 1}/{_ROUNDS} {family} {op} {'x'.join(str(d) for d in dims)}")

        times = interleaved_fastest_s(fns, rounds=_ROUNDS, min_time_s=min_time, min_repeats=2,
                                      max_repeats=60 if quick else 300, clock=clock_for(used), before=flush,
                                      progress=report, per_pass=statistics.fmean)
    return [Measurement(family=family, op=measurement_op(family, op, dims), time_s=t)
            for (family, op, dims), t in zip(suite, times, strict=True)], used
