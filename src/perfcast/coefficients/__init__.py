"""Fitted coefficients: the data types of every fitted part, their versioned-JSON loaders, and
:class:`Calibration`, the one frozen bundle of them that public entry points take.

A low package (on ``jsonio``, ``errors`` and ``datafiles`` only) so every layer that prices with a part, or
passes the bundle on, can import it; the JSON files are in the data tree (``data/coefficients/kernel.json`` ...).
"""

from perfcast.coefficients.bundle import CALIBRATION_SCHEMA_VERSION, Calibration, resolve_calibration
from perfcast.coefficients.collectives import CollectiveCoefficients, load_collective_coefficients
from perfcast.coefficients.compose import ComposeCoefficients, load_compose_coefficients
from perfcast.coefficients.intervals import Intervals, load_intervals
from perfcast.coefficients.kernel import Coefficients, load_coefficients
from perfcast.coefficients.serving import ServingCoefficients, load_serving_coefficients
from perfcast.coefficients.training import TrainingCoefficients, load_training_coefficients

__all__ = [
    "CALIBRATION_SCHEMA_VERSION",
    "Calibration",
    "Coefficients",
    "CollectiveCoefficients",
    "ComposeCoefficients",
    "Intervals",
    "ServingCoefficients",
    "TrainingCoefficients",
    "load_coefficients",
    "load_collective_coefficients",
    "load_compose_coefficients",
    "load_intervals",
    "load_serving_coefficients",
    "load_training_coefficients",
    "resolve_calibration",
]
