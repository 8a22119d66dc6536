"""The perfcast command line: one Typer app, one thin function per command.

Every command that prints results takes ``--json`` and then prints exactly one
JSON object whose keys name the quantity and its unit. A user error prints one
line (``error: ...``) to stderr and exits 2; ``--debug`` shows the traceback.
Each command (or command group) lives in its own module and registers itself on
:data:`app` when imported here; the import order below is the order of
``perfcast --help``.
"""

from __future__ import annotations

# isort: off
from perfcast.cli import accel, calibrate, capture
from perfcast.cli import collective, predict, predict_batch, adapt, validate, fit, suite
from perfcast.cli import replay, report, run, search, serve, train
from perfcast.cli import catalog  # the command groups hardware, models and clusters
# isort: on
from perfcast.cli.app import app, main

__all__ = ["accel", "adapt", "app", "calibrate", "capture", "catalog", "collective", "fit", "main", "predict",
           "predict_batch", "replay", "report", "run", "search", "serve", "suite", "train", "validate"]

if __name__ == "__main__":
    main()
