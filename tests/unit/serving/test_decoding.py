"""Unit tests of ``perfcast.serving.decoding``: the decode set advanced in O(1) per iteration."""

from __future__ import annotations

from perfcast.serving.decoding import DecodeSet
from perfcast.serving.request import Request


def _req(rid: int, prompt: int, output: int, generated: int, run_seq: int) -> Request:
    r = Request(rid, 0.0, prompt, output)
    r.computed_tokens = r.prefill_target
    r.generated = generated
    r.run_seq = run_seq
    return r


def test_members_advance_together_and_finish_in_running_order() -> None:
    dec = DecodeSet()
    a, b, c = _req(0, 100, 5, 1, run_seq=2), _req(1, 10, 3, 1, run_seq=0), _req(2, 7, 3, 1, run_seq=1)
    for r in (a, b, c):
        dec.add(r)
    assert len(dec) == 3 and dec.context_tokens == 100 + 10 + 7 + 3
    assert dec.steps_to_finish() == 2  # b and c need two more tokens
    dec.advance(2)
    assert dec.generated(a) == 3 and dec.context_tokens == 117 + 9
    assert dec.pop_finished() == [b, c]  # both done at the same step: running order, not id or join order
    assert (b.generated, c.generated, b.decode_set) == (3, 3, None)
    assert len(dec) == 1 and dec.context_tokens == 100 + 3 and dec.steps_to_finish() == 2


def test_a_member_that_leaves_or_gets_ahead_keeps_the_totals_right() -> None:
    dec = DecodeSet()
    a, b = _req(0, 50, 10, 1, run_seq=0), _req(1, 60, 10, 4, run_seq=1)
    dec.add(a)
    dec.advance(3)
    dec.add(b)  # joins later: counted from its own step
    dec.bump(a, 2)  # two accepted draft tokens
    assert dec.generated(a) == 6 and dec.generated(b) == 4
    assert dec.context_tokens == 56 + 64
    assert dec.steps_to_finish() == 4  # a needs 4 more, b 6
    dec.remove(a)  # preempted: generated is written back, and its heap entry goes stale
    assert a.generated == 6 and len(dec) == 1 and dec.context_tokens == 64
    assert dec.steps_to_finish() == 6
    dec.advance(6)
    assert dec.pop_finished() == [b] and b.generated == 10 and not dec
