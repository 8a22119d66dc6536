"""The perfcast Typer app and the helpers every command shares.

Every command that prints results takes ``--json`` and then prints exactly one
JSON object whose keys name the quantity and its unit. A user error prints one
line (``error: ...``) to stderr and exits 2; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import functools
import inspect
import json
import math
import re
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import typer

from perfcast.errors import PerfcastError

__all__ = ["EXIT_BAD_INPUT", "EXIT_DOES_NOT_FIT", "app", "does_not_fit", "emit_json", "flag_error", "handled", "main",
           "one_of", "scenarios_failed"]

# exit codes: 0 = an answer; 1 = it ran and the answer is "no" (does not fit, limits missed, a scenario failed);
# 2 = bad input (one `error:` line). Every command follows them; the README states them.
EXIT_DOES_NOT_FIT = 1
EXIT_BAD_INPUT = 2

if TYPE_CHECKING:
    from rich.console import Console

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  help="Predict the performance of ML workloads on hardware you may not have.")

_STATE = {"debug": False}
_CONSOLES: dict[str, Console] = {}


def _console(stderr: bool = False) -> Console:
    """A rich console, created on first use (rich is imported only by commands that print tables)."""
    key = "err" if stderr else "out"
    if key not in _CONSOLES:
        from rich.console import Console

        _CONSOLES[key] = Console(stderr=stderr, highlight=False)
    return _CONSOLES[key]


def _progress(*, quiet: bool = False) -> Any:
    """A transient progress display on stderr, shown only on a terminal (piped or captured, it would leave a blank
    line before an ``error:`` line) and not with ``quiet`` (``--json``)."""
    from rich.progress import Progress

    err = _console(stderr=True)
    return Progress(console=err, transient=True, disable=quiet or not err.is_terminal)


def _table(*args: Any, **kwargs: Any) -> Any:
    from rich.table import Table

    return Table(*args, **kwargs)


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


POWER_LIMIT_HELP = ("The GPUs' power limit in watts (nvidia-smi -pl; default: TDP): clocks and energy are capped at "
                    "it (the hardware id gets an @<W>w suffix).")


def power_limited(hardware: str, power_limit_W: float | None) -> str:
    """``hardware`` under ``power_limit_W`` watts (its id with an ``@<W>w`` suffix; itself when None)."""
    if power_limit_W is None:
        return hardware
    from perfcast.catalog.hardware import with_power_limit

    return with_power_limit(hardware, power_limit_W).id


def one_of(new_flag: str, new: Any, old_flag: str, old: Any) -> Any:
    """The value of an option given under its current name or under its older (hidden) spelling, not both."""
    from perfcast.errors import ConfigError

    if new is not None and old is not None:
        raise ConfigError(f"{old_flag} is the older name of {new_flag}; give only {new_flag}")
    return new if new is not None else old


def does_not_fit(message: str) -> None:
    """End a command whose answer is "does not fit": one ``does not fit:`` line on stderr, exit code 1.

    The result (with its breakdown) has been printed already, as a table or as the ``--json`` object.
    """
    sys.stderr.write(f"does not fit: {message}\n")
    raise typer.Exit(EXIT_DOES_NOT_FIT)


def scenarios_failed(message: str) -> None:
    """End ``run`` or ``suite`` when a scenario's status is ``error``: one ``failed:`` line on stderr, exit code 1.

    The results (each scenario's status and error) have been printed already, as a table or as ``--json``.
    """
    sys.stderr.write(f"failed: {message}\n")
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
    value = err.get("input")
    given = f" (got {value!r})" if isinstance(value, (int, float, str)) and len(repr(value)) <= 40 else ""
    return ConfigError(f"--{name.replace('_', '-')}: {err['msg']}{given}")


def _float_flags(fn: Callable[..., Any]) -> dict[str, str]:
    """Parameter name -> the flag a user types, for the float options of a command."""
    out: dict[str, str] = {}
    for name, param in inspect.signature(fn).parameters.items():
        decls = getattr(param.default, "param_decls", None)
        if decls and "float" in str(param.annotation):
            out[name] = next((d.split("/")[0] for d in decls if d.startswith("--")), f"--{name.replace('_', '-')}")
    return out


def _check_finite(flags: dict[str, str], kwargs: dict[str, Any]) -> None:
    """Every number a user types is finite: ``inf`` and ``nan`` (which Click's FLOAT accepts) are refused."""
    from perfcast.errors import ConfigError

    for name, flag in flags.items():
        value = kwargs.get(name)
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{flag} {value}: not a finite number; give a finite value")


def handled(fn: F) -> F:
    """Turn PerfcastError into one stderr line and exit code 2 (non-finite float options are one)."""
    flags = _float_flags(fn)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            _check_finite(flags, kwargs)
            return fn(*args, **kwargs)
        except PerfcastError as exc:
            if _STATE["debug"]:
                raise
            sys.stderr.write(f"error: {exc}\n")
            if exc.hint:
                sys.stderr.write(f"hint: {exc.hint}\n")
            raise typer.Exit(EXIT_BAD_INPUT) from None

    return wrapper  # type: ignore[return-value]


def _print_version(value: bool) -> None:
    if value:
        import perfcast

        sys.stdout.write(f"perfcast {perfcast.__version__}\n")
        raise typer.Exit(0)


@app.callback()
def _main(debug: bool = typer.Option(False, "--debug", help="Show tracebacks of user errors (in any position)."),
          version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                       help="Print the version and exit.")) -> None:
    _STATE["debug"] = debug


def _lift_debug(argv: list[str]) -> list[str]:
    """``--debug`` anywhere before a bare ``--`` moves to the front, where the app's own option reads it: it then
    works after the command's options as well as before the command."""
    end = argv.index("--") if "--" in argv else len(argv)
    if "--debug" not in argv[:end]:
        return argv
    return ["--debug", *(a for a in argv[:end] if a != "--debug"), *argv[end:]]


_SCIENTIFIC = re.compile(r"^[+-]?[0-9]+(\.[0-9]*)?[eE]\+?[0-9]+$")


def _int_options(argv: list[str]) -> set[str]:
    """The option spellings of the command ``argv`` names whose values are whole numbers."""
    import typing

    import typer.main

    cmd: Any = typer.main.get_command(app)
    for token in argv:
        sub = getattr(cmd, "commands", {}).get(token) if not token.startswith("-") else None
        if sub is None and not token.startswith("-"):
            break
        cmd = sub or cmd
    out: set[str] = set()
    for param in getattr(cmd, "params", ()):
        ann = getattr(getattr(param, "type_descriptor", None), "annotation", None)
        if ann is int or int in typing.get_args(ann):
            out.update(param.opts)
    return out


def _whole_numbers(argv: list[str]) -> list[str]:
    """Whole numbers typed in scientific notation (``-n 1e6``) written out in digits for the options that take
    whole numbers, so that they reach the option's own bounds (``-n 1e11`` is refused for being beyond the
    requests a simulation holds, not for its spelling); ``1.5e0`` and other fractions stay as typed."""
    import decimal

    if not any(_SCIENTIFIC.match(t.partition("=")[2] or t) for t in argv):
        return argv
    ints = _int_options(argv)
    out = list(argv)
    for i, token in enumerate(argv):
        flag, eq, value = token.partition("=")
        if eq and flag in ints:
            target, text = i, value
        elif i > 0 and argv[i - 1] in ints:
            target, text = i, token
        else:
            continue
        if len(text) <= 12 and _SCIENTIFIC.match(text):
            number = decimal.Decimal(text)
            if number == number.to_integral_value():
                out[target] = f"{flag}={int(number)}" if eq else str(int(number))
    return out


def _usage_error_types() -> tuple[type[BaseException], ...]:
    """Click's UsageError (Typer vendors Click in recent releases; older ones depend on it)."""
    return tuple(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")


def main() -> None:
    """Entry point of the ``perfcast`` script: usage errors become one ``error:`` line and exit 2."""
    usage = _usage_error_types()
    try:
        code = app(args=_whole_numbers(_lift_debug(sys.argv[1:])), prog_name="perfcast", standalone_mode=False)
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

