"""One calibration: every fitted part of perfcast as one frozen, versioned value.

A :class:`Calibration` holds the kernel, composition, interval, collective, training and serving coefficients.
Public entry points take one (``calibration=None`` is :meth:`Calibration.shipped`, resolved only by
:func:`resolve_calibration`); the functions below them take the part they need. A user's fitted file makes a
new bundle with that part replaced (:meth:`Calibration.from_files`, ``with_kernel`` ...), never a changed one.
``digest`` is the sha256 of the canonical JSON of every part: caches key on it (or on a part's
:func:`perfcast.digest.content_digest`), so equal calibrations share entries and different ones cannot.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any

from perfcast.coefficients.collectives import CollectiveCoefficients, load_collective_coefficients
from perfcast.coefficients.compose import ComposeCoefficients, load_compose_coefficients
from perfcast.coefficients.intervals import Intervals, load_intervals
from perfcast.coefficients.kernel import Coefficients, load_coefficients
from perfcast.coefficients.serving import ServingCoefficients, load_serving_coefficients
from perfcast.coefficients.training import TrainingCoefficients, load_training_coefficients
from perfcast.digest import json_digest

__all__ = ["CALIBRATION_SCHEMA_VERSION", "Calibration", "resolve_calibration"]

CALIBRATION_SCHEMA_VERSION = 1

PARTS = ("kernel", "compose", "intervals", "collectives", "training", "serving")


@dataclass(frozen=True, eq=False)
class Calibration:
    """Every fitted coefficient perfcast prices with (each part keeps its own file and schema_version)."""

    kernel: Coefficients
    compose: ComposeCoefficients
    intervals: Intervals
    collectives: CollectiveCoefficients
    training: TrainingCoefficients
    serving: ServingCoefficients
    schema_version: int = CALIBRATION_SCHEMA_VERSION
    digest: str = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "digest", json_digest(self.as_json_data()))

    def as_json_data(self) -> dict[str, Any]:
        """The bundle as JSON data: its schema version and every part's fields (what ``digest`` hashes)."""
        parts = {name: getattr(self, name).model_dump(mode="json") for name in PARTS}
        return {"schema_version": self.schema_version, **parts}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Calibration) and other.digest == self.digest

    def __hash__(self) -> int:
        return hash(self.digest)

    @classmethod
    def shipped(cls) -> Calibration:
        """The coefficients shipped with perfcast (read once per process)."""
        return _shipped()

    @classmethod
    def from_files(cls, *, kernel: str | Path | None = None, compose: str | Path | None = None,
                   intervals: str | Path | None = None, collectives: str | Path | None = None,
                   training: str | Path | None = None, serving: str | Path | None = None) -> Calibration:
        """The shipped bundle with each part given as a file (``perfcast fit`` outputs) read from it instead."""
        base = _shipped()
        return replace(
            base,
            kernel=base.kernel if kernel is None else load_coefficients(kernel),
            compose=base.compose if compose is None else load_compose_coefficients(compose),
            intervals=base.intervals if intervals is None else load_intervals(intervals),
            collectives=base.collectives if collectives is None else load_collective_coefficients(collectives),
            training=base.training if training is None else load_training_coefficients(training),
            serving=base.serving if serving is None else load_serving_coefficients(serving))

    def with_kernel(self, kernel: Coefficients) -> Calibration:
        """This bundle with other kernel coefficients."""
        return replace(self, kernel=kernel)

    def with_compose(self, compose: ComposeCoefficients) -> Calibration:
        """This bundle with other composition coefficients."""
        return replace(self, compose=compose)

    def with_intervals(self, intervals: Intervals) -> Calibration:
        """This bundle with other prediction intervals."""
        return replace(self, intervals=intervals)

    def with_collectives(self, collectives: CollectiveCoefficients) -> Calibration:
        """This bundle with other collective coefficients."""
        return replace(self, collectives=collectives)

    def with_training(self, training: TrainingCoefficients) -> Calibration:
        """This bundle with other training coefficients."""
        return replace(self, training=training)

    def with_serving(self, serving: ServingCoefficients) -> Calibration:
        """This bundle with other serving coefficients."""
        return replace(self, serving=serving)


@cache
def _shipped() -> Calibration:
    return Calibration(kernel=load_coefficients(), compose=load_compose_coefficients(), intervals=load_intervals(),
                       collectives=load_collective_coefficients(), training=load_training_coefficients(),
                       serving=load_serving_coefficients())


def resolve_calibration(calibration: Calibration | None) -> Calibration:
    """The one place a missing calibration becomes the shipped one."""
    return _shipped() if calibration is None else calibration
