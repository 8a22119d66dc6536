"""The HTML report's inputs as files, read into plain values (the report never runs a prediction).

- ``results.json`` (written by ``perfcast suite --out DIR``): a list of scenario objects with ``id``, ``title``,
  ``kind``, ``status``, ``error``, ``metrics``, ``notes`` and ``rows`` (a dict per prediction).
- ``validation.json`` (written by ``perfcast validate --out DIR``):
  :class:`~perfcast.results.validation.ValidationFile`.
- ``*.search.json`` (written by ``perfcast search --json --out F.json``): a plan search with ``objective``,
  ``plans_evaluated``, ``plans_feasible``, ``best`` and ``pareto`` (lists of plan dicts with
  ``tflops_per_gpu``, ``memory_per_gpu_gib``, ``step_time_s``, the degrees ...) and a ``reference`` plan
  (a plan dict, or ``reference: true`` on a plan). A ``search`` scenario's row carrying these keys (directly
  or under ``search``) is read the same way.

A file that is not what it should be is a one-line :class:`~perfcast.errors.DataError`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from perfcast.errors import DataError
from perfcast.jsonio import read_json
from perfcast.results.validation import VALIDATION_SCHEMA_VERSION, ValidationFile

__all__ = ["ReportInputs", "SearchData", "read_inputs", "read_results", "read_search", "read_validation",
           "search_of_row", "search_of_rows"]


@dataclass
class SearchData:
    """One plan search: where it came from, its JSON object and what the page should say about it."""

    name: str
    data: dict[str, Any]
    notes: list[str] = field(default_factory=list)


@dataclass
class ReportInputs:
    """Everything one report shows; an empty part gets a page saying how to produce it."""

    results: list[dict[str, Any]] = field(default_factory=list)
    validation: ValidationFile | None = None
    searches: list[SearchData] = field(default_factory=list)
    source: str = ""


def _load_json(path: Path, what: str) -> Any:
    return read_json(path, what=what, error=DataError)  # bounded: size, nesting, finite numbers


def read_results(path: Path) -> list[dict[str, Any]]:
    """The scenario objects of a suite's ``results.json``."""
    raw = _load_json(path, "suite results")
    if not isinstance(raw, list) or not all(isinstance(s, dict) and "id" in s and isinstance(s.get("rows"), list)
                                            for s in raw):
        raise DataError(f"{path}: expected a list of scenario objects with id and rows "
                        "(as `perfcast suite --out DIR` writes)")
    return raw


def read_validation(path: Path) -> ValidationFile:
    """A ``validation.json`` of this schema version."""
    raw = _load_json(path, "validation results")
    found = raw.get("schema_version") if isinstance(raw, dict) else None
    if found != VALIDATION_SCHEMA_VERSION:
        raise DataError(f"{path}: validation schema_version {found!r}, this perfcast reads "
                        f"{VALIDATION_SCHEMA_VERSION}; re-run `perfcast validate --out DIR`")
    try:
        return ValidationFile.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise DataError(f"{path}: field {'.'.join(map(str, err['loc']))}: {err['msg']}") from None


def _is_search(obj: object) -> bool:
    return isinstance(obj, dict) and isinstance(obj.get("pareto"), list)


def read_search(path: Path) -> SearchData:
    """A plan search's JSON object (``perfcast search --json``)."""
    raw = _load_json(path, "search results")
    if not _is_search(raw):
        raise DataError(f"{path}: expected a search object with a pareto list of plans "
                        "(as `perfcast search --json --out F.json` writes)")
    name = path.name.removesuffix(".json").removesuffix(".search")
    return SearchData(name, raw)


def search_of_rows(sc: dict[str, Any]) -> list[SearchData]:
    """The searches a ``search`` scenario's results carry: each row carrying a search object, else one search made
    of its plan rows (the best plans, and the row with ``published_tflops_per_gpu`` as the reference plan)."""
    rows = sc.get("rows", [])
    out = []
    for row in rows:
        data = search_of_row(row)
        if data is not None and (sc.get("kind") == "search" or row.get("kind") == "search"):
            label = row.get("label") or ""
            out.append(SearchData(f"{sc['id']}{': ' + str(label) if label else ''}", data, list(sc.get("notes", []))))
    if out or sc.get("kind") != "search":
        return out
    plans = [r for r in rows if r.get("status") in ("ok", "oom") and "tflops_per_gpu" in r]
    if not plans:
        return []
    ref = next((r for r in plans if r.get("published_tflops_per_gpu") is not None), None)
    data = {"objective": sc.get("objective", "-"), "best": [r for r in plans if r is not ref], "pareto": [],
            "reference": ref}
    notes = list(sc.get("notes", [])) + ["These results carry the scenario's best plans and the published plan, "
                                         "not the Pareto front: `perfcast search --json --out DIR/NAME.search.json` "
                                         "writes a search with its front."]
    return [SearchData(f"{sc['id']}: {sc.get('title', '')}", data, notes)]


def search_of_row(row: dict[str, Any]) -> dict[str, Any] | None:
    """The search object a ``search`` scenario's row carries (the row itself or its ``search`` value)."""
    if _is_search(row):
        return row
    inner = row.get("search")
    return inner if _is_search(inner) else None


def read_inputs(folder: Path, *, validation: Path | None = None) -> ReportInputs:
    """A suite folder's results.json, validation.json (or ``validation``) and every ``*.search.json``."""
    if not folder.is_dir():
        raise DataError(f"{folder} is not a folder; give the folder `perfcast suite --out DIR` wrote")
    results_path = folder / "results.json"
    if not results_path.is_file():
        raise DataError(f"{folder} has no results.json; run `perfcast suite --out {folder}` first")
    val_path = validation if validation is not None else folder / "validation.json"
    if validation is not None and not validation.is_file():
        raise DataError(f"{validation} does not exist; write it with `perfcast validate --out DIR`")
    return ReportInputs(results=read_results(results_path),
                        validation=read_validation(val_path) if val_path.is_file() else None,
                        searches=[read_search(p) for p in sorted(folder.glob("*.search.json"))],
                        source=str(folder))
