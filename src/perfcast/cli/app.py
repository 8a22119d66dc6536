"""The perfcast Typer app and the helpers every command shares.

Every command that prints results takes ``--json`` and then prints exactly one
JSON object whose keys name the quantity and its unit. A user error prints one
line (``error: ...``) to stderr and exits 2; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import functools
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import typer

from perfcast.errors import PerfcastError

__all__ = ["EXIT_BAD_INPUT", "EXIT_DOES_NOT_FIT", "app", "clusters_app", "does_not_fit", "emit_json", "flag_error",
           "handled", "hardware_app", "main", "models_app", "refuse_overwrite"]

# exit codes: 0 = an answer; 1 = it ran and the answer is "no" (does not fit, limits missed, a scenario failed);
# 2 = bad input (one `error:` line). Every command follows them; the README states them.
EXIT_DOES_NOT_FIT = 1
EXIT_BAD_INPUT = 2

if TYPE_CHECKING:
    from rich.console import Console

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  help="Predict the performance of ML workloads on hardware you may not have.")
hardware_app = typer.Typer(no_args_is_help=True, help="The hardware catalog.")
models_app = typer.Typer(no_args_is_help=True, help="The model catalog.")
clusters_app = typer.Typer(no_args_is_help=True, help="The cluster catalog.")
app.add_typer(hardware_app, name="hardware")
app.add_typer(models_app, name="models")
app.add_typer(clusters_app, name="clusters")

_STATE = {"debug": False}
_CONSOLES: dict[str, Console] = {}


def _console(stderr: bool = False) -> Console:
    """A rich console, created on first use (rich is imported only by commands that print tables)."""
    key = "err" if stderr else "out"
    if key not in _CONSOLES:
        from rich.console import Console

        _CONSOLES[key] = Console(stderr=stderr, highlight=False)
    return _CONSOLES[key]


def _table(*args: Any, **kwargs: Any) -> Any:
    from rich.table import Table

    return Table(*args, **kwargs)


def _print_fields(title: str, data: dict[str, Any]) -> None:
    """A two-column table of a record's fields (nested values as JSON)."""
    t = _table(title=title, show_header=False)
    t.add_column("field", no_wrap=True)
    t.add_column("value")
    for k, v in data.items():
        t.add_row(k, json.dumps(v) if isinstance(v, (dict, list)) else str(v))
    _console().print(t)
F = TypeVar("F", bound=Callable[..., Any])


def _clean(obj: Any) -> Any:
    if isinstance(obj, float):
        return None if math.isnan(obj) or math.isinf(obj) else obj
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def emit_json(obj: dict[str, Any]) -> None:
    """Print exactly one JSON object."""
    sys.stdout.write(json.dumps(_clean(obj), sort_keys=False) + "\n")


def refuse_overwrite(*paths: Path | None, force: bool) -> None:
    """Nothing a user wrote is overwritten without ``--force``: one error line for the first existing output."""
    from perfcast.errors import ConfigError

    for path in paths:
        if path is not None and path.exists() and not force:
            raise ConfigError(f"{path} exists; pass --force to overwrite it")


def does_not_fit(message: str) -> None:
    """End a command whose answer is "does not fit": one ``does not fit:`` line on stderr, exit code 1.

    The result (with its breakdown) has been printed already, as a table or as the ``--json`` object.
    """
    sys.stderr.write(f"does not fit: {message}\n")
    raise typer.Exit(EXIT_DOES_NOT_FIT)


def flag_error(exc: Any, *, default: str, renames: dict[str, str] | None = None,
               skip: tuple[str, ...] = ()) -> PerfcastError:
    """A pydantic ValidationError from options turned into one line naming the flag (``--seq-len: ...``).

    ``skip`` drops nesting levels that are not flags (``workload``); ``renames`` maps field names to the
    flags that set them when those differ.
    """
    from perfcast.errors import ConfigError

    err = exc.errors()[0]
    loc = [str(x) for x in err["loc"] if str(x) not in skip]
    name = (renames or {}).get(loc[0], loc[0]) if loc else default
    return ConfigError(f"--{name.replace('_', '-')}: {err['msg']}")


def handled(fn: F) -> F:
    """Turn PerfcastError into one stderr line and exit code 2."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except PerfcastError as exc:
            if _STATE["debug"]:
                raise
            sys.stderr.write(f"error: {exc}\n")
            if exc.hint:
                sys.stderr.write(f"hint: {exc.hint}\n")
            raise typer.Exit(EXIT_BAD_INPUT) from None

    return wrapper  # type: ignore[return-value]


@app.callback()
def _main(debug: bool = typer.Option(False, "--debug", help="Show tracebacks of user errors.")) -> None:
    _STATE["debug"] = debug


def _usage_error_types() -> tuple[type[BaseException], ...]:
    """Click's UsageError (Typer vendors Click in recent releases; older ones depend on it)."""
    return tuple(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")


def main() -> None:
    """Entry point of the ``perfcast`` script: usage errors become one ``error:`` line and exit 2."""
    usage = _usage_error_types()
    try:
        code = app(standalone_mode=False)
    except usage as exc:  # type: ignore[misc]
        if type(exc).__name__ == "NoArgsIsHelpError":  # bare `perfcast`: the help text, success
            sys.stdout.write(str(exc.format_message()) + "\n")  # type: ignore[attr-defined]
            sys.exit(0)
        ctx = getattr(exc, "ctx", None)
        where = f"perfcast {ctx.command_path.split(' ', 1)[1]}" if ctx and " " in ctx.command_path else "perfcast"
        message = " ".join(str(exc.format_message()).split())  # type: ignore[attr-defined]
        sys.stderr.write(f"error: {message} (see `{where} --help`)\n")
        sys.exit(2)
    except KeyboardInterrupt:
        sys.stderr.write("error: interrupted\n")
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)

