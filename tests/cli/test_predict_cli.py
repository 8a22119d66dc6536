"""CLI: ``perfcast predict`` as issue 14 asks for it: ``--tp``, the checkpoint's dtype by default, and a memory
verdict (exit 1 with the breakdown) for a configuration that does not fit."""

from __future__ import annotations

import pytest
from cli_helpers import invoke, parse_json, user_error

pytestmark = pytest.mark.cli

GPT2 = ["predict", "-m", "gpt2", "-H", "a100-sxm-80gb", "-b", "4", "-s", "128", "--json"]


def test_predict_tp_is_a_spelling_of_parallelism_tp() -> None:
    by_tp = parse_json(invoke([*GPT2, "--tp", "2"]))
    by_parallelism = parse_json(invoke([*GPT2, "--parallelism", "tp2"]))
    assert by_tp["parallelism"] == "tp2" and by_tp["step_time_s"] == by_parallelism["step_time_s"]
    assert parse_json(invoke([*GPT2, "--tp", "2", "--parallelism", "tp2"]))["parallelism"] == "tp2"
    assert parse_json(invoke([*GPT2, "--tp", "1"]))["parallelism"] == "none"


@pytest.mark.parametrize(("args", "fragment"), [
    (["--tp", "2", "--parallelism", "dp2"], "--tp 2 and --parallelism dp2"),
    (["--tp", "0"], "--tp 0"),
    (["--tp", "5"], "tp=5"),  # gpt2 has 12 heads
])
def test_predict_tp_conflicts_and_bad_degrees_are_one_line(args: list[str], fragment: str) -> None:
    assert fragment in user_error(invoke([*GPT2, *args]))
