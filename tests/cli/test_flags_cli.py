"""Flags mean one thing everywhere: ``--version``; ``--debug`` before or after the command; every number is
finite; outputs are spelled ``--out`` / ``--*-out``; a usage error is one ``error:`` line through the script."""

from __future__ import annotations

import json
from typing import Any

import pytest
import typer
from cli_helpers import invoke, invoke_main, user_error

from perfcast import __version__
from perfcast.cli import app


def test_version_prints_the_version() -> None:
    res = invoke_main(["--version"])
    assert res.exit_code == 0 and res.stdout == f"perfcast {__version__}\n" and res.stderr == ""


@pytest.mark.parametrize("args", [
    ["--debug", "predict", "-m", "gtp2", "-H", "t4"],
    ["predict", "-m", "gtp2", "-H", "t4", "--debug"],
    ["predict", "--debug", "-m", "gtp2", "-H", "t4"],
], ids=["before", "after", "between"])
def test_debug_works_in_any_position(args: list[str]) -> None:
    from perfcast.errors import UnknownNameError

    with pytest.raises(UnknownNameError):
        invoke_main(args)


def test_without_debug_the_same_error_is_one_line() -> None:
    assert "unknown model 'gtp2'" in user_error(invoke_main(["predict", "-m", "gtp2", "-H", "t4"]))


def test_debug_after_a_double_dash_is_an_argument() -> None:
    line = user_error(invoke_main(["models", "show", "--", "--debug"]))
    assert "unknown model '--debug'" in line


@pytest.mark.parametrize("args", [
    ["predict", "-m", "gpt2", "-H", "t4", "-b", "abc"],
    ["predict", "-m", "gpt2", "-H", "t4", "--no-such-flag"],
    ["serve", "-m", "gpt2", "-H", "t4", "-n", "1.5"],
    ["nonsense"],
])
def test_usage_errors_are_one_line_through_the_script(args: list[str]) -> None:
    line = user_error(invoke_main(args))
    assert "--help" in line


@pytest.mark.parametrize("args, flag", [
    (["train", "-m", "mixtral-8x7b", "-c", "dgx-h100", "--ep", "8", "--moe-skew", "inf"], "--moe-skew"),
    (["serve", "-m", "gpt2", "-H", "t4", "--qps", "nan"], "--qps"),
    (["serve", "-m", "gpt2", "-H", "t4", "--slo-ttft-p99", "-inf", "--find-max-qps"], "--slo-ttft-p99"),
    (["serve", "-m", "gpt2", "-H", "t4", "--kv-transfer-bandwidth", "inf"], "--kv-transfer-bandwidth"),
    (["search", "-m", "gpt2", "--gpus", "8", "-c", "dgx-h100", "--global-batch", "8", "--price-per-gpu-hour",
      "nan"], "--price-per-gpu-hour"),
    (["search", "-m", "gpt2", "--gpus", "8", "-c", "dgx-h100", "--global-batch", "8", "--max-memory-fraction",
      "NaN"], "--max-memory-fraction"),
])
def test_non_finite_numbers_are_refused_naming_the_flag(args: list[str], flag: str) -> None:
    line = user_error(invoke(args))
    assert line.startswith(f"error: {flag} ") and "not a finite number" in line


def _commands(group: Any, prefix: str = "") -> dict[str, Any]:
    """Every leaf command of a (Typer-vendored) Click group, by its full name."""
    out: dict[str, Any] = {}
    for name, cmd in group.commands.items():
        if hasattr(cmd, "commands"):
            out.update(_commands(cmd, f"{prefix}{name} "))
        else:
            out[f"{prefix}{name}"] = cmd
    return out


def test_no_visible_output_option_is_spelled_output() -> None:
    """Outputs are ``--out`` or ``--*-out``; the older ``--output`` spellings are hidden aliases at most."""
    commands = _commands(typer.main.get_command(app))
    assert {"serve", "fit", "hardware show"} <= set(commands)
    visible = {name: {o for p in cmd.params if not getattr(p, "hidden", False) for o in p.opts}
               for name, cmd in commands.items()}
    assert {"--intervals-out", "--collectives-out", "--out"} <= visible["fit"] and "--intervals" not in visible["fit"]
    spelled = [(name, opt) for name, cmd in commands.items() for p in cmd.params
               if not getattr(p, "hidden", False) for opt in p.opts
               if opt == "--output" or opt.endswith("-output")]
    assert spelled == []


@pytest.mark.parametrize("args, fragment", [
    (["serve", "-m", "llama-2-7b", "-H", "h100", "-n", "1e11"], "--num-requests: Input should be less than or equal to "
                                                                 "1000000 (got 100000000000)"),
    (["serve", "-m", "llama-2-7b", "-H", "h100", "--num-requests=1e11"], "less than or equal to 1000000"),
    (["train", "-m", "gpt2", "-c", "dgx-h100", "--zero", "4e0"], "--zero: Input should be 0, 1, 2 or 3 (got 4)"),
])
def test_whole_numbers_in_scientific_notation_reach_their_bounds(args: list[str], fragment: str) -> None:
    assert fragment in user_error(invoke_main(args))


def test_whole_numbers_in_scientific_notation_are_answered() -> None:
    res = invoke_main(["predict", "-m", "gpt2", "-H", "t4", "-b", "2e0", "--seq-len=1.28e2", "--json"])
    assert res.exit_code == 0, res.stderr
    data = json.loads(res.stdout)
    assert (data["batch_size"], data["seq_len"]) == (2, 128)
