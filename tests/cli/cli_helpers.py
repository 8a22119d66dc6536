"""What every CLI test checks the same way: one ``error:`` line and exit 2 for a user error, exactly one JSON
object for ``--json``."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass

from typer.testing import CliRunner, Result

from perfcast.cli import app, main

__all__ = ["MainResult", "does_not_fit", "invoke", "invoke_main", "parse_json", "user_error", "with_flags"]

runner = CliRunner()


def invoke(args: list[str]) -> Result:
    """Run ``perfcast ARGS`` in-process (the Typer app)."""
    return runner.invoke(app, args)


@dataclass(frozen=True)
class MainResult:
    """What the ``perfcast`` script printed and its exit code."""

    exit_code: int
    stdout: str
    stderr: str


def invoke_main(args: list[str]) -> MainResult:
    """Run ``perfcast ARGS`` in-process through the script's entry point (:func:`perfcast.cli.main`), as a shell
    runs it: usage errors are its one ``error:`` line, ``--debug`` may come anywhere."""
    argv = sys.argv
    with runner.isolation() as (out, err, _):
        sys.argv = ["perfcast", *args]
        try:
            main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        finally:
            sys.argv = argv
            sys.stdout.flush()
            sys.stderr.flush()
        return MainResult(code, out.getvalue().decode("utf-8", "replace"), err.getvalue().decode("utf-8", "replace"))


def _one_line(res: Result | MainResult, code: int, prefix: str) -> str:
    """Exit ``code``, no traceback, exactly one stderr line starting with ``prefix``; returns that line."""
    assert res.exit_code == code, (res.stdout, res.stderr)
    assert "Traceback" not in res.stdout + res.stderr
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(prefix), res.stderr
    return lines[0]


def user_error(res: Result | MainResult) -> str:
    """Exit 2, no traceback, exactly one stderr line starting with ``error:``; returns that line."""
    return _one_line(res, 2, "error: ")


def does_not_fit(res: Result | MainResult) -> str:
    """Exit 1 (it ran, the answer is no), no traceback, exactly one stderr line ``does not fit: ...``; returns it."""
    return _one_line(res, 1, "does not fit: ")


def parse_json(res: Result | MainResult) -> dict:
    """Exit 0 and exactly one JSON object on stdout."""
    assert res.exit_code == 0, res.stderr
    assert len(res.stdout.strip().splitlines()) == 1
    data = json.loads(res.stdout)
    assert isinstance(data, dict)
    return data


def with_flags(command: list[str], base: list[str], changes: list[str]) -> list[str]:
    """``command`` with the ``--flag value`` pairs of ``base``, each replaced or extended by ``changes``."""
    flags = dict(zip(base[::2], base[1::2], strict=True))
    flags.update(zip(changes[::2], changes[1::2], strict=True))
    return [*command, *(x for pair in flags.items() for x in pair)]
