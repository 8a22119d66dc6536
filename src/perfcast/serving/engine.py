"""The serving simulator: a discrete-event loop over arrivals and iteration ends.

Requests arrive (a pre-generated, sorted stream, read with a cursor rather
than pushed on the heap), a global router hands each to a replica, and each
replica's scheduler forms iterations whose durations come from
:class:`~perfcast.serving.iteration.IterationModel` (kernel, composition and
collective layers, tabulated once per deployment). The heap holds one entry per
busy engine, so the loop's work per event is O(log replicas) plus the batch it
forms. A replica with ``pipeline_parallel_size`` stages runs that many virtual
engines (as vLLM does): each has its own scheduler and share of the KV cache,
and an iteration's latency is every stage's time, while the stages overlap
across the virtual engines. The stages are shared, each working through the
virtual engines' micro-batches in turn, so a micro-batch cannot leave the last
stage before the micro-batches ahead of it have: an iteration that starts at
``now`` with one stage's time ``t`` ends at ``max(now + pp * t, end + t)``, where
``end`` is the latest end of the other virtual engines' iterations in flight (a
prefill holds back the decode micro-batches behind it). On such a replica, decode
stretches end at the next event of any engine, so every iteration in flight is
the one that spans the present.

The decoding requests of each engine form a
:class:`~perfcast.serving.decoding.DecodeSet`: every one of them decodes in every
decode iteration, so the set counts decode steps and keeps each member relative
to that count, and the paged KV cache grows them as one group. Forming a batch
is therefore O(1) for its decode part (plus its prefill chunks): its size and
its cached tokens are running totals, the first member to finish is the top of
a heap, and taking each member's KV slot is a count of blocks
(O(block_size)). Decode-only stretches run in one step: when a policy forms a
decode-only batch, the same batch repeats until a member finishes, a request
arrives or the KV cache fills; the engine steps the iteration-time closed form
(a function of the batch's cached tokens, which grow by the batch size per
iteration) in a scalar loop up to the next arrival and then advances the set
and its KV group by that many tokens at once. The result equals iterating one
by one; the work per event is O(1) plus one scalar step per iteration.

Running through: when only the decode set can be in an engine's next batch
(nothing waiting, swapped out or prefilling, no closed loop, no hand-overs)
and the iterations in flight end before the next arrival, the engine settles
them and forms that batch at once instead of going back to the event loop: a
stretch goes on past a member's finish, and a prefill iteration that completes
every prompt in flight goes on to the decode stretch after it. Each engine's
requests, times and counts are those of the event loop; only run-wide sums
(KV utilization, GPU time) may add their terms in another order across engines.
At low load an arriving request then costs one engine event, not two or three.

Speculative decoding (:mod:`perfcast.serving.speculative`), disaggregated serving and the retrieval stage
of RAG (:mod:`perfcast.serving.handover`), routing (:mod:`perfcast.serving.routers`), the closed loop of a
benchmark client (:mod:`perfcast.serving.client`) and the pricing of iterations and decode stretches
(:mod:`perfcast.serving.clock`) are parts of their own; the engine holds the replicas' state and the loop.

Beam search (``num_beams`` = ``b`` > 1, as TensorRT-LLM's beam_width): a request prefills its prompt once
(one sequence, sampling once), then decodes ``b`` rows per iteration: ``b`` query tokens in the linear
layers and the LM head, ``b`` sequences in decode attention, each reading the shared prompt and its own
generated tokens. The decode set and the KV group count rows, so a stretch's batch size and cached tokens
carry the beam weight (no per-iteration loop over beams). Its KV cache holds the prompt's full blocks once
and every beam's tail (see :mod:`perfcast.serving.kv`); ``max_num_seqs`` counts beams. It finishes after
its output tokens, which count once (the returned sequence). Not modelled with prefix caching or
speculative decoding (a one-line error).

Multimodal prompts: each image adds the vision tower's image tokens to the prompt
and its encoder time to the iteration that starts the request's prefill, with the engine's CPU time per image
(its fitted ``image_overhead_s``: fetching, decoding and the image processor, where the engine's own process
does them, as vLLM 0.5 did; the GPUs idle meanwhile).
Retrieval (RAG): a request reaches the engine after its retrieval stage with the
retrieved tokens in its prompt; its TTFT counts from its arrival, retrieval included. Every request also
crosses the engine's front end first (its fitted ``request_overhead_s``: the API server's hand-off to the
scheduler and the first token's way back, plus ``prompt_token_overhead_s`` per prompt token: tokenizing its
text), which its TTFT counts too.

Requests the deployment can never serve are refused at arrival, counted with their reason
(``rejection_counts``, ``requests_rejected`` and ``rejection_reasons`` in its JSON) and left out of
every latency and throughput figure: a prompt plus output longer than ``max_model_len`` (by default the
model's context, ``ModelConfig.max_positions``; vLLM answers such a request 400 with "This model's maximum
context length is X tokens. However, you requested Y tokens (P in the messages, O in the completion)"),
more beams than ``max_num_seqs``, more KV blocks than the replica has, or an unchunked prompt above the
token budget. Lengths are never truncated to fit. When every request is refused, the run is a one-line
ConfigError.

Determinism: one seed drives the request stream; ties in time are broken by
(time, event kind, engine index), so the same inputs give bit-identical output.
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from perfcast.coefficients.bundle import Calibration, resolve_calibration
from perfcast.errors import ConfigError
from perfcast.serving.client import Client
from perfcast.serving.clock import ExplainingClock, IterationClock
from perfcast.serving.config import ServingConfig
from perfcast.serving.deployment import Deployment, build_deployment
from perfcast.serving.handover import Handovers, kv_transfer_bandwidth
from perfcast.serving.kv import prefix_block_hashes
from perfcast.serving.metrics import summarize_requests
from perfcast.serving.outcomes import RequestOutcomes, count_reasons
from perfcast.serving.replica import VirtualEngine
from perfcast.serving.request import Request
from perfcast.serving.result import IterationEvent, ServingResult
from perfcast.serving.routers import ROUTERS, Router
from perfcast.serving.schedulers import SCHEDULERS, Batch, ReplicaScheduler
from perfcast.serving.sources.requests import RunRequests, run_requests
from perfcast.serving.speculative import Speculator
from perfcast.serving.tally import RunTally
from perfcast.workload.graph import causal_pairs

__all__ = ["Engine", "simulate_serving"]


def simulate_serving(cfg: ServingConfig, *, keep_events: bool = False, audit: bool = False,
                     calibration: Calibration | None = None, memory_frac: float = 1.0,
                     iteration_scale: float = 1.0, iteration_extra_s: float = 0.0,
                     explain: bool = False) -> ServingResult:
    """Simulate ``cfg`` to completion of every request (or its rejection with a reason).

    ``keep_events`` keeps every iteration for the timeline; ``audit`` checks every KV cache's
    invariants (blocks in use within capacity, no block owned twice) after each iteration (tests);
    ``calibration`` prices it (the shipped one when None). ``memory_frac`` (the share of the usable
    GPU memory this model gets), ``iteration_scale`` and ``iteration_extra_s`` (every iteration's time is
    ``time * scale + extra``) describe another model sharing the GPUs
    (:mod:`perfcast.serving.experiments.colocation`). ``explain`` sums the iterations' time by part into the
    result's ``breakdown`` (:class:`~perfcast.serving.explain.TimeBreakdown`).
    """
    dep = build_deployment(cfg, resolve_calibration(calibration), memory_frac=memory_frac)
    if not dep.memory.fits:  # an answer (serving_memory gives it with the breakdown), but nothing to simulate
        raise ConfigError(f"the deployment does not fit: {dep.memory.verdict}")
    requests = run_requests(cfg, dep.extra_prompt_tokens())
    clock_type = ExplainingClock if explain else IterationClock
    clock = clock_type(dep.model, pp=cfg.pipeline_parallel_size, scale=iteration_scale, extra_s=iteration_extra_s,
                       block_bytes=dep.kv_block_bytes)
    engine = Engine(dep, requests, clock, keep_events=keep_events, audit=audit)
    engine.run()
    return engine.result()


def _shape(batch: Batch) -> tuple[int, float, int, int, int]:
    """A batch's prefill as the iteration model prices it: (new prompt tokens, causal (query, key) pairs,
    context tokens its chunks read, sequences that sample, rows the completing prompts decode next)."""
    q = ctx = 0
    pairs = 0.0
    logits = batch.num_decode  # every decoding sequence samples, and every prompt that completes
    rows = 0  # sequences the completing prompts decode next (their beams)
    for req, k in batch.prefill:
        end = req.computed_tokens + k
        q += k
        pairs += causal_pairs(k, end) if k > 1 else end
        ctx += end
        if end >= req.prefill_target:
            logits += 1
            rows += req.num_beams
    return q, pairs, ctx, logits, rows


class Engine:
    """One run: the replicas' virtual engines and their state, the event loop and what it records.

    The loop pops the earliest of three events (an engine's iterations end, a request reaches a pool, a request
    arrives; ties in that order), and each event runs an engine's next batch. The policies live elsewhere:
    scheduling in the schedulers, routing in the routers, the iterations' times in the clock.
    """

    def __init__(self, dep: Deployment, requests: RunRequests, clock: IterationClock, *, keep_events: bool,
                 audit: bool) -> None:
        cfg = dep.config
        self.dep = dep
        self.cfg = cfg
        self.pp = cfg.pipeline_parallel_size
        self.clock = clock
        self.stage_factor = clock.stage_factor
        self.keep_events = keep_events
        self.audit = audit
        policy = SCHEDULERS.get(dep.policy)
        limits = dep.limits
        self.engines = [VirtualEngine(policy(dep.new_cache(), limits)) for _ in range(dep.num_engines)]
        self.outstanding = [0] * cfg.num_replicas  # per replica: requests routed, not finished or handed over
        self.router: Router = ROUTERS.get(cfg.router)()
        self.heap: list[tuple[float, int]] = []  # (when an engine's iterations in flight end, engine index)
        self.kv_transfer_Bps = kv_transfer_bandwidth(cfg, dep.model.cl) if cfg.num_prefill_replicas else 0.0
        self.handovers = Handovers(cfg, dep.model.kv_bytes_per_token / self.pp, self.kv_transfer_Bps)
        self.disaggregated = cfg.num_prefill_replicas > 0
        self.client = Client(requests.arrival_s.tolist(), cfg.workload.concurrency)
        self.requests = requests
        self.outcomes = RequestOutcomes(requests.num_requests)
        self.tally = RunTally()
        w = cfg.workload
        self.spec: Speculator | None = None
        if dep.draft is not None:
            self.spec = Speculator(dep.draft, clock, num_tokens=cfg.num_speculative_tokens,
                                   acceptance_rate=cfg.spec_acceptance_rate, seed=w.seed,
                                   num_engines=len(self.engines))
        # plain numbers for the loop
        self.prompt_l, self.output_l = requests.prompt_tokens.tolist(), requests.output_tokens.tolist()
        self.beams = w.num_beams
        self.images = w.images_per_request
        self.has_retrieval = w.retrieval_latency_s > 0
        # the engine's front end: a request reaches the scheduler this long after it is sent (tokenizing, the API
        # server's hand-off to the engine core, the first token's way back), counted in its TTFT
        self.front_end_s = dep.model.request_overhead_s
        self.front_end_per_token_s = dep.model.prompt_token_overhead_s  # tokenizing the prompt's text
        # a decode-only batch may run as a stretch of iterations (not when each iteration is recorded or draws)
        self.stretches = not keep_events and self.spec is None
        # an engine may run ahead of the loop: nothing from outside it (a closed loop's next request, a
        # hand-over) can join its batch before the next arrival
        self.runs_ahead = not (self.client.closed_loop or self.disaggregated or self.spec is not None
                               or keep_events)

    # -- the event loop ------------------------------------------------------------------------------------
    def run(self) -> None:
        """Simulate until every request has finished or been refused."""
        heap, client, handovers = self.heap, self.client, self.handovers
        next_arrival_s, next_transfer_s, pop = client.next_s, handovers.next_s, heapq.heappop
        complete, start = self._complete, self._start
        while client.next_id < client.n or heap or handovers.queue:
            next_arrival = next_arrival_s()
            next_transfer = next_transfer_s()
            if heap and heap[0][0] <= next_arrival and heap[0][0] <= next_transfer:
                now, e = pop(heap)
                complete(e, now)
                start(e, now)
            elif next_transfer <= next_arrival:
                now, req, pool = handovers.pop()
                self._route(req, pool, now)
            else:
                self._arrive(client.send(), float(next_arrival))

    def _arrive(self, i: int, now: float) -> None:
        """Request ``i`` arrives at ``now`` (s): to its retrieval stage, or to a replica of the arrival pool."""
        req = Request(i, now, self.prompt_l[i], self.output_l[i], self.beams)
        prefix_ids = self.requests.prefix_ids
        if prefix_ids is not None:
            req.prefix_hashes = prefix_block_hashes(int(prefix_ids[i]), self.cfg.workload.shared_prefix_tokens,
                                                    self.prompt_l[i], self.cfg.block_size, i)
        retrieval_s = self.requests.retrieval_s
        delay_s = (self.front_end_s + self.front_end_per_token_s * self.prompt_l[i]
                   + (float(retrieval_s[i]) if self.has_retrieval else 0.0))
        if delay_s > 0:  # the retrieval stage and the engine's front end run first
            self.handovers.after_retrieval(req, now + delay_s)
            return
        self._route(req, self.handovers.arrival_pool, now)

    def _route(self, req: Request, pool: range, now: float) -> None:
        """``req`` joins the engine of ``pool`` the router picks, which starts at ``now`` (s) if idle."""
        e = self._pick(req, pool)
        self.outcomes.replica[req.id] = req.replica
        vm = self.engines[e]
        vm.sched.add(req)
        if not vm.busy:
            self._start(e, now)

    def _pick(self, req: Request, pool: range) -> int:
        """The engine that takes ``req``: the router's replica, and of its virtual engines the least loaded."""
        rep = pool[0] if len(pool) == 1 else self.router.pick(pool, self)
        self.outstanding[rep] += 1
        req.replica = rep
        pp = self.pp
        if pp == 1:
            return rep
        engines = self.engines
        return min(range(rep * pp, rep * pp + pp), key=lambda v: (engines[v].sched.num_outstanding, v))

    def num_waiting(self, replica: int) -> int:
        """Requests waiting for admission on ``replica`` (:class:`~perfcast.serving.routers.ReplicaLoads`)."""
        pp = self.pp
        return sum(len(self.engines[replica * pp + v].sched.waiting) for v in range(pp))

    # -- an engine's iterations ----------------------------------------------------------------------------
    def _start(self, e: int, now: float) -> None:
        """Engine ``e`` forms its next batch at ``now`` (s) and runs it, or goes idle."""
        vm = self.engines[e]
        sched = vm.sched
        batch = sched.schedule()
        if sched.rejected:
            self._refuse(sched, now)
        if batch is None:
            vm.busy = False
        elif (not batch.prefill and not batch.swapped_blocks and sched.steady_decode and self.stretches
              and batch.num_decode > 0):
            self._run_decodes(e, now, batch)
        else:
            self._run_batch(e, now, batch)

    def _refuse(self, sched: ReplicaScheduler, now: float) -> None:
        """Record the requests ``sched`` refused (they leave the system at ``now``, s)."""
        for req, reason, detail in sched.rejected:
            self.outcomes.refused(req, reason, detail)
            self.outstanding[req.replica] -= 1
            if self.client.closed_loop:
                self.client.release(now)
        sched.rejected.clear()

    def _run_batch(self, e: int, now: float, batch: Batch) -> None:
        """Run one iteration of ``batch`` on engine ``e`` from ``now`` (s). When it completes every prompt in
        flight and only the decode set can follow, go on to that decode batch ahead of the loop."""
        vm = self.engines[e]
        sched = vm.sched
        q, pairs, ctx, logits, rows = _shape(batch)
        gpu_s = self._gpu_s(e, sched, batch, q, pairs, ctx, logits)
        dt = gpu_s * self.clock.scale + self.clock.extra_s
        if self.pp > 1:  # it leaves the last stage after the micro-batches ahead of it, and its own last stage
            dt = max(dt, self._ahead_end_s(e) + gpu_s / self.stage_factor - now)
        if batch.swapped_blocks:
            dt += self.clock.swap_s(batch.swapped_blocks)
        if self.keep_events:
            self.tally.events.append(IterationEvent(e, now, dt, q, batch.num_decode))
        end_s = now + dt
        if (not batch.num_decode and logits == len(sched.prefilling) and self._runs_through(sched, end_s)
                and (sched.reserve_full_length or sched.kv.decode_fits(len(sched.decoding) + rows))):
            # every prompt in flight completes and the decode batch that follows is known: go on to it
            self.tally.account(sched.kv, dt, gpu_s, 1)
            self._settle(e, batch, end_s, 1)
            after = sched.decode_batch()
            if after is None:
                vm.busy = False
            else:
                self._run_decodes(e, end_s, after)
            return
        self._occupy(e, batch, end_s, dt, gpu_s, 1)

    def _gpu_s(self, e: int, sched: ReplicaScheduler, batch: Batch, q: int, pairs: float, ctx: int,
               logits: int) -> float:
        """GPU seconds of one iteration of ``batch`` on its own (every stage, the vision tower of the prompts
        it starts, speculative decoding's draft and verification)."""
        n_decode = batch.num_decode
        if self.audit and n_decode:
            self._audit_decode(sched, batch)
        if self.images:
            starting = sum(1 for r, _ in batch.prefill if r.computed_tokens == 0 and r.preemptions == 0)
            dt_vision = self.clock.vision_s(starting * self.images) + self.clock.image_cpu_s(starting * self.images)
        else:
            dt_vision = 0.0
        spec = self.spec
        if spec is not None and n_decode and not batch.prefill:
            dt = spec.step_s(e, sched) * self.stage_factor
        else:
            if spec is not None:
                spec.skip(e)
            dt = self.clock.stage_s(q, pairs, ctx, len(batch.prefill), n_decode, batch.decode_context_tokens,
                                    logits) * self.stage_factor
        return dt + dt_vision

    def _run_decodes(self, e: int, now: float, batch: Batch) -> None:
        """Run the decode-only ``batch`` (its first iteration's KV slots taken) as a stretch of identical
        iterations: until a member finishes, the next arrival or hand-over, or the KV cache is full.

        When nothing could join the batch (:meth:`_runs_through`), a stretch that ends at a member's finish
        before the next arrival goes on here: the finished members leave at that iteration's end and the
        others, with their next KV slot, form the next stretch, as scheduling at that boundary would. O(1) per
        stretch besides one scalar step per iteration (O(block_size) to count the cache's blocks).
        """
        vm = self.engines[e]
        sched = vm.sched
        dec, kv = sched.decoding, sched.kv
        clock = self.clock
        grows = not sched.reserve_full_length  # a full-length reservation already holds every token
        nxt = self._horizon_s()
        # pipeline stages: the first iteration leaves the last stage after the micro-batches ahead of it (the
        # others in flight, which no event changes before nxt); -inf without stages
        ahead = self._ahead_end_s(e) if self.pp > 1 else -math.inf
        through = not sched.prefilling and self._runs_through(sched, now, nxt)
        while True:
            fin = dec.steps_to_finish()  # the fin-th iteration finishes someone
            k = 1 + kv.max_group_growth(fin - 1) if grows and fin > 1 else fin
            j, end, gpu_s = clock.stretch(now, batch.num_decode, batch.decode_context_tokens, k, nxt, ahead) if (
                k > 1) else (0, now, 0.0)
            if j > 1:
                if grows:
                    kv.grow_group(j - 1)
                span = end - now
            else:  # one iteration, priced like any other
                j, end, span, gpu_s = self._one_decode(sched, batch, now, ahead)
            ahead = -math.inf  # the iterations that follow are the next micro-batch behind them
            if not (through and j == fin and end < nxt and (not grows or kv.decode_fits(len(dec)))):
                self._occupy(e, batch, end, span, gpu_s, j)
                return
            self.tally.account(kv, span, gpu_s, j)
            self._settle(e, batch, end, j)
            if not sched.continue_decoding(batch):  # the checks above: every next KV slot fits
                vm.busy = False
                return
            now = end

    def _one_decode(self, sched: ReplicaScheduler, batch: Batch, now: float,
                    ahead: float) -> tuple[int, float, float, float]:
        """One decode-only iteration from ``now`` (s), leaving the last stage no sooner than one stage after
        ``ahead`` (s): (1, its end in s, its span in s, its GPU seconds)."""
        if self.audit:
            self._audit_decode(sched, batch)
        num = batch.num_decode
        gpu_s = self.clock.stage_s(0, 0.0, 0, 0, num, batch.decode_context_tokens, num) * self.stage_factor
        span = gpu_s * self.clock.scale + self.clock.extra_s
        end = now + span
        if end < ahead + gpu_s / self.stage_factor:
            end = ahead + gpu_s / self.stage_factor
            span = end - now
        return 1, end, span, gpu_s

    def _occupy(self, e: int, batch: Batch, end_s: float, span_s: float, gpu_s: float, k: int) -> None:
        """Engine ``e`` runs ``batch`` for ``k`` iterations until ``end_s`` (s), lasting ``span_s`` (``gpu_s``
        GPU seconds on their own): counted now, settled when the loop reaches ``end_s``."""
        vm = self.engines[e]
        self.tally.account(vm.sched.kv, span_s, gpu_s, k)
        vm.busy = True
        vm.batch = batch
        vm.steps = k
        vm.end_s = end_s
        heapq.heappush(self.heap, (end_s, e))

    def _complete(self, e: int, now: float) -> None:
        """Engine ``e``'s iterations in flight end at ``now`` (s)."""
        vm = self.engines[e]
        batch = vm.batch
        vm.batch = None
        assert batch is not None
        self._settle(e, batch, now, vm.steps)

    def _settle(self, e: int, batch: Batch, now: float, k: int) -> None:
        """Engine ``e``'s ``batch`` ran ``k`` iterations up to ``now`` (s): its prompts that completed emit their
        first token and decode, hand over or finish; the decode set emits its tokens and its finished members
        leave."""
        sched = self.engines[e].sched
        if self.audit:
            sched.kv.check_invariants()
            assert sched.kv.num_used_blocks <= sched.kv.num_blocks
        if not batch.prefill:  # a decode-only batch (the common case): its finished members leave
            if batch.num_decode:
                for req in self._advance_decodes(e, sched, k):
                    self._done(req, sched, now)
            return
        emitted: list[Request] = []
        for req, chunk in batch.prefill:
            req.computed_tokens += chunk
            if not req.in_prefill:  # the prompt is in: it samples its next token
                req.generated += 1
                emitted.append(req)
        finished = self._advance_decodes(e, sched, k) if batch.num_decode else []
        for req in emitted:
            self._prompt_done(req, sched, now)
        for req in finished:
            self._done(req, sched, now)

    def _prompt_done(self, req: Request, sched: ReplicaScheduler, now: float) -> None:
        """``req``'s prompt is in at ``now`` (s), its token out: it finishes, hands over to the decode pool or
        decodes here."""
        if math.isnan(req.first_token_s):
            self.outcomes.first_token(req, now)
        if req.generated >= req.output_tokens:
            sched.prefilled(req, decodes=False)
            self._done(req, sched, now)
        elif self.disaggregated and self.handovers.hands_over(req):
            sched.prefilled(req, decodes=False)
            sched.finish(req)
            self.outstanding[req.replica] -= 1
            self.handovers.to_decode_pool(req, now)
        else:
            sched.prefilled(req, decodes=True)

    def _advance_decodes(self, e: int, sched: ReplicaScheduler, k: int) -> list[Request]:
        """The decode set emitted ``k`` iterations' tokens (and speculative decoding its accepted draft tokens);
        returns the members that are done, in running order."""
        dec = sched.decoding
        dec.advance(k)  # one token per iteration each
        if self.spec is not None:
            self.spec.accept(e, sched, dec)
        return dec.pop_finished()

    def _done(self, req: Request, sched: ReplicaScheduler, now: float) -> None:
        """``req`` emitted its last token at ``now`` (s): record it and free its KV cache."""
        self.outcomes.finished(req, now)
        self.outstanding[req.replica] -= 1
        if self.client.closed_loop:
            self.client.release(now)
        sched.finish(req)

    # -- what an engine may know of the future ---------------------------------------------------------------
    def _ahead_end_s(self, e: int) -> float:
        """When the last of the other virtual engines' iterations in flight on ``e``'s replica leaves the last
        pipeline stage (s; -inf when none is in flight)."""
        pp = self.pp
        first = e - e % pp
        engines = self.engines
        return max([engines[u].end_s for u in range(first, first + pp) if u != e and engines[u].busy],
                   default=-math.inf)

    def _horizon_s(self) -> float:
        """When the next request arrives or reaches a pool (s), and with pipeline stages also the next end of
        any engine's iterations, where the micro-batches ahead of an engine's next iteration change."""
        nxt = min(self.client.next_s(), self.handovers.next_s())
        heap = self.heap
        if self.pp > 1 and heap and heap[0][0] < nxt:
            return heap[0][0]
        return nxt

    def _runs_through(self, sched: ReplicaScheduler, end: float, nxt: float | None = None) -> bool:
        """Whether the engine may settle its iterations ending at ``end`` (s) and form its next batch ahead of
        the event loop: only its decode set can be in that batch (no request waiting or swapped out, no
        closed loop, no hand-overs), the policy repeats it unchanged, and ``end`` comes before the horizon
        ``nxt`` (s; by default :meth:`_horizon_s`). (The caller also checks that the decode set's KV slots fit
        without preempting.)"""
        if not self.runs_ahead or sched.waiting or sched.swapped or not sched.steady_decode:
            return False
        return end < (self._horizon_s() if nxt is None else nxt)

    def _audit_decode(self, sched: ReplicaScheduler, batch: Batch) -> None:
        """Audit: the batch's decode totals match its rows, and a paged cache holds each row's context (the
        prompt and every token generated, this iteration's slot included)."""
        rows = sched.decode_rows()
        assert sum(r.num_beams for r in rows) == batch.num_decode, (len(rows), batch.num_decode)
        total = sum((r.prompt_tokens + sched.generated(r)) * r.num_beams for r in rows)
        assert total == batch.decode_context_tokens, (total, batch.decode_context_tokens)
        if not sched.reserve_full_length:
            for r in rows:
                assert sched.kv.seq_num_tokens(r.id) == r.prompt_tokens + sched.generated(r), r

    # -- the result ----------------------------------------------------------------------------------------
    def result(self) -> ServingResult:
        """The finished run (a ConfigError when every request was refused)."""
        cfg, dep, reqs, out, tally = self.cfg, self.dep, self.requests, self.outcomes, self.tally
        out.close()
        arrival = np.asarray(self.client.times_s, dtype=float) if self.client.closed_loop else reqs.arrival_s
        metrics = summarize_requests(arrival_s=arrival, first_token_s=out.first_token_s, finish_s=out.finish_s,
                                     prompt_tokens=reqs.prompt_tokens, output_tokens=reqs.output_tokens,
                                     completed=out.completed(), slo_ttft_s=cfg.slo_ttft_s, slo_tpot_s=cfg.slo_tpot_s)
        scheds = [vm.sched for vm in self.engines]
        hit = sum(s.kv.prefix_hit_tokens for s in scheds)
        query = sum(s.kv.prefix_query_tokens for s in scheds)
        model = dep.model
        return ServingResult(
            config=cfg, metrics=metrics, arrival_s=arrival, first_token_s=out.first_token_s, finish_s=out.finish_s,
            prompt_tokens=reqs.prompt_tokens, output_tokens=reqs.output_tokens, generated_tokens=out.generated,
            replica=out.replica, preemptions_per_request=out.preemptions, status=out.status,
            preemptions=sum(s.preemptions for s in scheds), iterations=tally.iterations,
            kv_blocks_per_engine=dep.kv_blocks_per_engine,
            kv_utilization_mean_frac=tally.kv_utilization_mean_frac, kv_utilization_max_frac=tally.kv_max_frac,
            kv_fragmentation_mean_frac=tally.kv_fragmentation_mean_frac,
            prefix_hit_frac=hit / query if query else 0.0, weight_bytes_per_gpu=model.weight_bytes / self.pp,
            spec_tokens_per_step=self.spec.tokens_per_step if self.spec is not None else 0.0,
            gpu_time_s=tally.gpu_time_s, events=tally.events, kv_bytes_per_token=dep.memory.kv_bytes_per_token,
            retrieval_mean_s=float(reqs.retrieval_s.mean()) if reqs.num_requests else 0.0,
            gpu_memory_bytes=float(model.hw.memory_bytes), dtype=dep.dtype.value,
            kv_transfer_bandwidth_Bps=self.kv_transfer_Bps,
            rejection_counts=count_reasons(out.rejection), memory=dep.memory, breakdown=self.clock.breakdown(),
            energy_counts=self.clock.energy_counts())
