"""``validation.json``, as ``perfcast validate --out DIR`` writes it and the HTML report reads it: every validated
table's errors, overall and per device, and a sample of its predicted and measured values.
"""

from __future__ import annotations

from pydantic import BaseModel

__all__ = ["VALIDATION_SCHEMA_VERSION", "Summary", "ValidationFile", "ValidationPoints", "ValidationTable"]

VALIDATION_SCHEMA_VERSION = 1

Summary = dict[str, float | int | None]


class ValidationPoints(BaseModel):
    """Predicted and measured values of a table's rows (in the table's unit), evenly sampled to at most a few
    thousand; ``total`` counts every row with both."""

    device: list[str]
    predicted: list[float]
    measured: list[float]
    total: int


class ValidationTable(BaseModel):
    """One table's (or split's) errors: overall and per device, as ``perfcast validate --json`` reports them."""

    table: str
    kind: str
    target: str
    note: str = ""
    status: str = "ok"
    overall: Summary
    groups: dict[str, Summary] = {}
    points: ValidationPoints | None = None


class ValidationFile(BaseModel):
    """``validation.json``: every validated table."""

    schema_version: int
    produced_by: str
    tables: list[ValidationTable]
