"""How long an engine's batches take in one run: the execution-time predictor as the event loop sees it.

:class:`~perfcast.serving.iteration.IterationModel` prices one iteration on one pipeline stage; the clock
multiplies by the stages an iteration passes through, applies another model's share of the GPUs
(``time * scale + extra``, :mod:`perfcast.serving.experiments.colocation`), remembers the times of
prefill-only batches (their shapes repeat: the same prompt lengths) and runs decode stretches in closed
form (:meth:`IterationClock.stretch`). :class:`ExplainingClock` gives the same times and also sums them by
part (:class:`~perfcast.serving.explain.TimeBreakdown`), so a plain run pays nothing for explanations.
"""

from __future__ import annotations

from perfcast.serving.explain import TimeBreakdown
from perfcast.serving.iteration import IterationModel

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
        self._decode_steps: dict[int, tuple[float, float, float, float]] = {}  # model.decode_step per batch size
        self._prefill_times: dict[tuple[int, float, int, int, int], float] = {}  # prefill-only batches

    def stage_s(self, q: int, pairs: float, ctx: int, n_prefill: int, n_decode: int, dec_ctx: int,
                logits: int) -> float:
        """``model.time_s`` (s, one stage), remembered for prefill-only batches: their shapes repeat, while a
        batch with decodes rarely meets its cached tokens again."""
        if n_decode:
            return self.model.time_s(q, pairs, ctx, n_prefill, n_decode, dec_ctx, logits)
        key = (q, pairs, ctx, n_prefill, logits)
        hit = self._prefill_times.get(key)
        if hit is None:
            if len(self._prefill_times) > 1 << 16:
                self._prefill_times.clear()
            hit = self._prefill_times[key] = self.model.time_s(q, pairs, ctx, n_prefill, 0, 0, logits)
        return hit

    def vision_s(self, images: int) -> float:
        """The vision tower over ``images`` images (s)."""
        return self.model.vision_time_s(images)

    def draft_s(self, seconds: float) -> float:
        """A speculative step's draft iterations, ``seconds`` on one stage (noted by an explaining clock)."""
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
        step = self._decode_steps.get(num)
        if step is None:
            step = self._decode_steps[num] = self.model.decode_step(num)
        fixed, a, m0, m1 = step  # one iteration: fixed + ((a ctx)^4 + (m0 + m1 ctx)^4)^(1/4)
        stage_factor, scale, extra = self.stage_factor, self.scale, self.extra_s
        end = now
        gpu_s = 0.0
        x = float(max(ctx, 1))  # exact: token counts stay far below 2**53
        grow = float(num)
        for j in range(1, k + 1):
            c = a * x
            m = m0 + m1 * x
            raw = (fixed + (c * c * c * c + m * m * m * m) ** 0.25) * stage_factor
            gpu_s += raw
            end += raw * scale + extra
            if j == 1 and end < ahead + raw / stage_factor:
                end = ahead + raw / stage_factor
            x += grow
            if end >= nxt:
                return j, end, gpu_s
        return k, end, gpu_s

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
        parts = self.model.parts_s(q, pairs, ctx, n_prefill, n_decode, dec_ctx, logits)
        linear, att_p, att_d, head, comm, cpu = parts
        f = self.stage_factor
        for i, value in enumerate(parts):
            self._parts[i] += value * f
        return linear + att_p + att_d + head + comm + cpu  # IterationModel.time_s's order: bit-identical

    def vision_s(self, images: int) -> float:
        seconds = super().vision_s(images)
        self._vision_s += seconds
        return seconds

    def draft_s(self, seconds: float) -> float:
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
        linear, comm, head, cpu = self.model.decode_fixed_parts_s(num)
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
