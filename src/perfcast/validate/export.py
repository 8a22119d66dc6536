"""``perfcast validate --out DIR``: the validation as ``DIR/validation.json`` for the HTML report.

The file (:class:`perfcast.results.validation.ValidationFile`) has, per table report, the error summary overall and per
device (as ``--json`` prints it) and the predicted and measured values of its rows, sampled evenly to at most
:data:`perfcast.validate.report.MAX_POINTS` (``points.total`` counts them all; the summaries use every row).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from perfcast.errors import ConfigError, DataError
from perfcast.jsonio import read_json
from perfcast.results.serialize import to_json
from perfcast.results.validation import VALIDATION_SCHEMA_VERSION, ValidationFile, ValidationPoints, ValidationTable
from perfcast.validate.report import ValidationReport

__all__ = ["VALIDATION_FILE", "check_validation_path", "validation_file", "write_validation"]

VALIDATION_FILE = "validation.json"


def _finite(d: dict[str, float | int]) -> dict[str, float | int | None]:
    """JSON has no NaN: an undefined error (no predicted row) is null."""
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in d.items()}


def validation_file(rep: ValidationReport) -> ValidationFile:
    """The report as the file's typed value."""
    tables = []
    for t in rep.tables:
        p = t.points
        tables.append(ValidationTable(
            table=t.table, kind=t.kind, target=t.target, note=t.note, status=t.status,
            overall=_finite(to_json(t.overall)), groups={g.group: _finite(to_json(g.summary)) for g in t.groups},
            points=ValidationPoints(device=p.device, predicted=p.predicted, measured=p.measured, total=p.total)
            if p is not None else None))
    return ValidationFile(schema_version=VALIDATION_SCHEMA_VERSION, produced_by="perfcast validate", tables=tables)


def _written_by_validate(path: Path) -> bool:
    try:
        raw = read_json(path, what="validation.json", error=DataError)
    except DataError:
        return False
    return isinstance(raw, dict) and raw.get("produced_by") == "perfcast validate"


def check_validation_path(folder: Path, *, force: bool) -> None:
    """Before validating: ``folder`` can take a validation.json (it is a folder or does not exist yet, and a
    validation.json there is one ``perfcast validate`` wrote, unless ``force``)."""
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"{folder} is a file; --out needs a folder")
    path = folder / VALIDATION_FILE
    if path.exists() and not force and not _written_by_validate(path):
        raise ConfigError(f"{path} exists and perfcast validate did not write it; pass --force to overwrite it")


def write_validation(rep: ValidationReport, folder: Path) -> Path:
    """Write ``folder/validation.json`` (creating the folder) and return its path."""
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"{folder} is a file; --out needs a folder")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / VALIDATION_FILE
    data = validation_file(rep).model_dump(mode="json")
    path.write_text(json.dumps(data, allow_nan=False) + "\n", encoding="utf-8")
    return path
