"""The perfcast command line: one Typer app, one thin function per command.

Every command that prints results takes ``--json`` and then prints exactly one
JSON object whose keys name the quantity and its unit. A user error prints one
line (``error: ...``) to stderr and exits 2; ``--debug`` shows the traceback.
Commands live in submodules that register themselves on :data:`app` when imported.
"""

from __future__ import annotations

from perfcast.cli import accel, calibrate, capture, commands, report, run, search, serve, train
from perfcast.cli.app import app, main

__all__ = ["accel", "app", "calibrate", "capture", "commands", "main", "report", "run", "search", "serve", "train"]

if __name__ == "__main__":
    main()
