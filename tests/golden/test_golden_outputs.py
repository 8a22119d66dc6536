"""The golden outputs of ``tests/golden/outputs.py`` hold bit for bit: a move of code that changes one value
fails here, naming the case and the first values that moved."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import outputs  # noqa: E402  - the case table beside this file

_FAST = [(k, n) for k, n in outputs.all_cases() if k != "validate"]


def test_every_case_is_recorded() -> None:
    missing = [f"{k}-{n}" for k, n in outputs.all_cases() if not outputs.path_of(k, n).exists()]
    assert not missing, f"not recorded (tests/golden/outputs.py --write --only ...): {missing}"
    recorded = {p.stem for p in outputs.DATA.glob("*.json")}
    assert recorded == {f"{k}-{n}" for k, n in outputs.all_cases()}, "a recorded output has no case"


@pytest.mark.parametrize(("kind", "name"), _FAST, ids=[f"{k}-{n}" for k, n in _FAST])
def test_output_is_unchanged(kind: str, name: str) -> None:
    diff = outputs.check(kind, name)
    assert not diff, f"{len(diff)} values moved:\n" + "\n".join(diff[:20])


@pytest.mark.slow
def test_validate_figures_are_unchanged() -> None:
    diff = outputs.check("validate", "validate")
    assert not diff, f"{len(diff)} values moved:\n" + "\n".join(diff[:20])


def test_the_comparison_sees_one_moved_bit() -> None:
    recorded = {"volatile": ["/t_s"], "values": {"a": [1.0, 2.0], "t_s": 3.0, "n": None}}
    assert outputs.differences(recorded, {"a": [1.0, 2.0], "t_s": 9.0, "n": None}) == []
    moved = outputs.differences(recorded, {"a": [1.0, 2.0000000000000004], "t_s": 3.0, "n": None})
    assert moved == ["/a[1]: recorded 2.0, now 2.0000000000000004"]
    assert outputs.differences(recorded, {"a": [1.0], "t_s": 3.0, "n": None}) == ["/a[1]: recorded 2.0, now '(absent)'"]
