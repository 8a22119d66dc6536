"""How long an engine's batches take in one run: the execution-time predictor as the event loop sees it.

:class:`~perfcast.serving.iteration.IterationModel` prices one iteration on one pipeline stage; the clock
multiplies by the stages an iteration passes through, applies another model's share of the GPUs
(``time * scale + extra``, :mod:`perfcast.serving.experiments.colocation`), remembers the times of
prefill-only batches (their shapes repeat: the same prompt lengths) and runs decode stretches in closed
form (:meth:`IterationClock.stretch`). :class:`ExplainingClock` gives the same times and also sums them by
part (:class:`~perfcast.serving.explain.TimeBreakdown`), so a plain run pays nothing for explanations.

Every clock also sums what its iterations priced for their energy, a few float additions per event (one stage,
one GPU; :meth:`IterationClock.energy_counts` multiplies by the stages): the linear layers' and LM head's dynamic
energy, the attention calls' seconds, FLOPs and bytes, and the communication seconds. A decode stretch adds its
iterations' terms in closed form (they are linear in the cached tokens), equal to iterating one by one up to
float rounding.
"""

from __future__ import annotations

import math

import numpy as np

from perfcast.serving.energy import EnergyCounts
from perfcast.serving.explain import TimeBreakdown
from perfcast.serving.iteration import DecodeTerms, IterationModel, Priced

__all__ = ["PCIE_BPS", "ExplainingClock", "IterationClock"]

PCIE_BPS = 25e9  # swap traffic between GPU and host memory (PCIe 4.0 x16, per direction, achieved), bytes/s


class IterationClock:
    """Iteration times of one run's engines (seconds; see the module docstring)."""

    def __init__(self, model: IterationModel, *, pp: int, scale: float, extra_s: float,
                 block_bytes: float) -> None:
        self.model = model
        self.stage_factor = float(pp)  # an iteration passes through every stage
        self.scale = scale  # another model on the GPUs: every iteration lasts time * scale + extra_s
        self.extra_s = extra_s
        self.block_bytes = block_bytes  # KV bytes of one block on one GPU
        # model.decode_step and model.decode_terms per batch size
        self._decode_steps: dict[int, tuple[tuple[float, float, float, float], DecodeTerms]] = {}
        # sliding / chunked layers' decode term (model.decode_local) per batch size; empty without such layers
        self._windowed = model.decode_local(1) is not None
        self._decode_locals: dict[int, tuple[float, float, float, float]] = {}
        self._prefill: dict[tuple[int, float, int, int, int], Priced] = {}  # prefill-only batches
        # energy terms, one stage on one GPU (module docstring)
        self.dynamic_J = 0.0
        self.prefill_s = self.prefill_flops = self.prefill_bytes = 0.0
        self.decode_s = self.decode_flops = self.decode_bytes = 0.0
        self.comm_s = 0.0
        self.cpu_s = 0.0  # the engine's CPU work between kernels: the GPUs idle
        self.vision_J = 0.0  # the vision tower's, which runs once, not per stage

    def stage_s(self, q: int, pairs: float, ctx: int, n_prefill: int, n_decode: int, dec_ctx: int,
                logits: int) -> float:
        """An iteration's time (s, one stage; ``model.priced``'s parts summed), its energy terms summed; remembered
        for prefill-only batches: their shapes repeat, while a batch with decodes rarely meets its cached tokens
        again."""
        return self._account(self._priced(q, pairs, ctx, n_prefill, n_decode, dec_ctx, logits))

    def _priced(self, q: int, pairs: float, ctx: int, n_prefill: int, n_decode: int, dec_ctx: int,
                logits: int) -> Priced:
        if n_decode:
            return self.model.priced(q, pairs, ctx, n_prefill, n_decode, dec_ctx, logits)
        key = (q, pairs, ctx, n_prefill, logits)
        hit = self._prefill.get(key)
        if hit is None:
            if len(self._prefill) > 1 << 16:
                self._prefill.clear()
            hit = self._prefill[key] = self.model.priced(q, pairs, ctx, n_prefill, 0, 0, logits)
        return hit

    def _account(self, priced: Priced) -> float:
        """Sum an iteration's energy terms; its time (s, one stage)."""
        linear, att_p, att_d, head, comm, cpu, dyn, p_flops, p_bytes, d_flops, d_bytes = priced
        self.dynamic_J += dyn
        self.prefill_s += att_p
        self.prefill_flops += p_flops
        self.prefill_bytes += p_bytes
        self.decode_s += att_d
        self.decode_flops += d_flops
        self.decode_bytes += d_bytes
        self.comm_s += comm
        self.cpu_s += cpu
        return linear + att_p + att_d + head + comm + cpu  # IterationBreakdown.time_s's order: bit-identical

    def _decode_step(self, num: int) -> tuple[tuple[float, float, float, float], DecodeTerms]:
        hit = self._decode_steps.get(num)
        if hit is None:
            hit = self._decode_steps[num] = (self.model.decode_step(num), self.model.decode_terms(num))
        return hit

    def _decode_local(self, num: int) -> tuple[float, float, float, float]:
        hit = self._decode_locals.get(num)
        if hit is None:
            local = self.model.decode_local(num)
            assert local is not None  # only asked of a model with windowed layers
            hit = self._decode_locals[num] = local
        return hit

    def _account_decodes(self, terms: DecodeTerms, k: int, ctx_sum: float, seconds: float) -> None:
        """Sum the energy terms of ``k`` decode-only iterations whose cached tokens total ``ctx_sum`` over the
        ``k`` and which last ``seconds`` on one stage (their decode attention is what the rest leaves)."""
        linear, comm, head, cpu, dyn, flops_per_ctx, bytes_fixed, bytes_per_ctx, lflops, lbytes, cap = terms
        self.dynamic_J += dyn * k
        self.decode_s += seconds - (linear + comm + head + cpu) * k
        self.decode_flops += flops_per_ctx * ctx_sum
        self.decode_bytes += bytes_fixed * k + bytes_per_ctx * ctx_sum
        if lflops:  # windowed layers read at most cap cached tokens per iteration
            local_ctx = min(ctx_sum, cap * k)
            self.decode_flops += lflops * local_ctx
            self.decode_bytes += lbytes * local_ctx
        self.comm_s += comm * k
        self.cpu_s += cpu * k

    def vision_s(self, images: int) -> float:
        """The vision tower over ``images`` images (s), its energy summed."""
        seconds, dynamic = self.model.vision(images)
        self.vision_J += dynamic
        return seconds

    def image_cpu_s(self, images: int) -> float:
        """The engine's CPU work on ``images`` images of the requests an iteration starts (s): the GPUs idle."""
        seconds = images * self.model.image_overhead_s
        self.cpu_s += seconds
        return seconds

    def draft_s(self, draft: IterationModel, num: int, ctx: int, k: int) -> float:
        """A speculative step's ``k`` draft decode iterations of ``num`` sequences holding ``ctx`` cached tokens
        (growing by ``num`` per iteration) on ``draft`` (s, one stage), their energy summed."""
        if not k:
            return 0.0
        seconds = float(draft.decode_times(num, ctx + num * np.arange(k)).sum())
        self._account_decodes(draft.decode_terms(num), k, k * max(ctx, 1) + num * k * (k - 1) / 2, seconds)
        return seconds

    def swap_s(self, blocks: int) -> float:
        """Moving ``blocks`` KV blocks between GPU and host memory (s)."""
        return blocks * self.block_bytes / PCIE_BPS

    def stretch(self, now: float, num: int, ctx: int, k: int, nxt: float, ahead: float) -> tuple[int, float, float]:
        """Up to ``k`` decode-only iterations of ``num`` sequences holding ``ctx`` cached tokens, from ``now``
        (s), stopping after the first that ends at or after ``nxt`` (s): (iterations, end time in s, GPU
        seconds on their own). Each iteration's time is the closed form of its cached tokens, which grow by
        ``num`` per iteration; the first one leaves the last pipeline stage no sooner than one stage after
        ``ahead`` (s), when the micro-batches ahead of it have."""
        step, terms = self._decode_step(num)
        fixed, a, m0, m1 = step  # one iteration: fixed + ((a ctx)^4 + (m0 + m1 ctx)^4)^(1/4)
        windowed = self._windowed
        # windowed layers add ((la y)^4 + (l0 + l1 y)^4)^(1/4) with y = min(ctx, cap)
        la, l0, l1, cap = self._decode_local(num) if windowed else (0.0, 0.0, 0.0, 0.0)
        stage_factor, scale, extra = self.stage_factor, self.scale, self.extra_s
        end = now
        gpu_s = 0.0
        x = float(max(ctx, 1))  # exact: token counts stay far below 2**53
        grow = float(num)
        if not windowed and stage_factor == 1.0 and scale == 1.0 and extra == 0.0 and ahead == -math.inf:
            # one stage on GPUs of its own (the common case): the loop below with its factors and the stage
            # check dropped, which changes no bit (x * 1.0 + 0.0 == x; end < -inf is never true)
            for j in range(1, k + 1):  # noqa: B007 (j, the iterations run, is read after the loop)
                c = a * x
                m = m0 + m1 * x
                raw = fixed + (c * c * c * c + m * m * m * m) ** 0.25
                gpu_s += raw
                end += raw
                x += grow
                if end >= nxt:
                    break
            if j > 1:
                self._account_decodes(terms, j, j * float(max(ctx, 1)) + grow * (j * (j - 1) // 2), gpu_s)
            return j, end, gpu_s
        for j in range(1, k + 1):
            c = a * x
            m = m0 + m1 * x
            t = fixed + (c * c * c * c + m * m * m * m) ** 0.25
            if windowed:
                y = x if x < cap else cap
                lc, lm = la * y, l0 + l1 * y
                t += (lc * lc * lc * lc + lm * lm * lm * lm) ** 0.25
            raw = t * stage_factor
            gpu_s += raw
            end += raw * scale + extra
            if j == 1 and end < ahead + raw / stage_factor:
                end = ahead + raw / stage_factor
            x += grow
            if end >= nxt:
                break
        if j > 1:  # a stretch of one iteration is priced like any other (stage_s), which counts it
            x0 = float(max(ctx, 1))
            self._account_decodes(terms, j, j * x0 + grow * (j * (j - 1) // 2), gpu_s / stage_factor)
        return j, end, gpu_s

    def energy_counts(self) -> EnergyCounts:
        """The run's energy terms on one tensor-parallel GPU through every pipeline stage."""
        f, m = self.stage_factor, self.model
        return EnergyCounts(hardware=m.hw, coeffs=m.co, dtype=m.dtype, dynamic_J=self.dynamic_J * f + self.vision_J,
                            prefill_attention_s=self.prefill_s * f, prefill_attention_flops=self.prefill_flops * f,
                            prefill_attention_bytes=self.prefill_bytes * f, decode_attention_s=self.decode_s * f,
                            decode_attention_flops=self.decode_flops * f, decode_attention_bytes=self.decode_bytes * f,
                            comm_s=self.comm_s * f, cpu_s=self.cpu_s * f)

    def breakdown(self) -> TimeBreakdown | None:
        """The run's time by part (an :class:`ExplainingClock`'s; None here)."""
        return None


class ExplainingClock(IterationClock):
    """An :class:`IterationClock` that also sums every iteration's time by part (GPU seconds, every stage)."""

    def __init__(self, model: IterationModel, *, pp: int, scale: float, extra_s: float,
                 block_bytes: float) -> None:
        super().__init__(model, pp=pp, scale=scale, extra_s=extra_s, block_bytes=block_bytes)
        # linear, attention prefill, attention decode, LM head, communication, CPU (IterationBreakdown's order)
        self._parts = [0.0] * 6
        self._vision_s = self._draft_s = self._swap_s = 0.0

    def stage_s(self, q: int, pairs: float, ctx: int, n_prefill: int, n_decode: int, dec_ctx: int,
                logits: int) -> float:
        priced = self._priced(q, pairs, ctx, n_prefill, n_decode, dec_ctx, logits)
        f = self.stage_factor
        for i in range(6):
            self._parts[i] += priced[i] * f
        return self._account(priced)

    def vision_s(self, images: int) -> float:
        seconds = super().vision_s(images)
        self._vision_s += seconds
        return seconds

    def image_cpu_s(self, images: int) -> float:
        seconds = super().image_cpu_s(images)
        self._parts[5] += seconds  # the iteration's CPU part
        return seconds

    def draft_s(self, draft: IterationModel, num: int, ctx: int, k: int) -> float:
        seconds = super().draft_s(draft, num, ctx, k)
        self._draft_s += seconds * self.stage_factor
        return seconds

    def swap_s(self, blocks: int) -> float:
        seconds = super().swap_s(blocks)
        self._swap_s += seconds
        return seconds

    def stretch(self, now: float, num: int, ctx: int, k: int, nxt: float, ahead: float) -> tuple[int, float, float]:
        j, end, gpu_s = super().stretch(now, num, ctx, k, nxt, ahead)
        if j <= 1:  # the engine prices a stretch of one iteration like any other (stage_s), which counts it
            return j, end, gpu_s
        linear, comm, head, cpu = self._decode_step(num)[1][:4]
        f = j * self.stage_factor
        parts = self._parts
        parts[0] += linear * f
        parts[3] += head * f
        parts[4] += comm * f
        parts[5] += cpu * f
        parts[2] += gpu_s - (linear + head + comm + cpu) * f  # the rest of each iteration is decode attention
        return j, end, gpu_s

    def breakdown(self) -> TimeBreakdown:
        linear, att_p, att_d, head, comm, cpu = self._parts
        return TimeBreakdown(linear_s=linear, attention_prefill_s=att_p, attention_decode_s=att_d, lm_head_s=head,
                             communication_s=comm, cpu_overhead_s=cpu, vision_encoder_s=self._vision_s,
                             draft_model_s=self._draft_s, kv_swap_s=self._swap_s)
