"""Few-sample adaptation from a measured table: ``perfcast adapt`` and ``perfcast predict-batch --adapt``.

A samples table is any table ``perfcast predict-batch`` recognizes, with its measured columns filled, run on the
device(s) to adapt to. Each sample row is predicted once to learn which catalog device it runs on (a row priced
on more than one device, or on none, is not a sample of one device and is left out); then each device's
:class:`~perfcast.catalog.corrections.DeviceCorrections` are fitted to its rows by
:func:`perfcast.calibrate.adapt.fit_corrections` (datasheet prior, ridge on the log multipliers). The fitted
devices are written as hardware YAML (:func:`adapted_entry`, :func:`hardware_yaml`) or used in place of their
catalog entries while a table is predicted (:func:`adapting`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from perfcast.calibrate.adapt import NOISE_SIGMA_LOG, PRIOR_SIGMA_LOG, AdaptFit, fit_corrections
from perfcast.catalog.corrections import DeviceCorrections
from perfcast.catalog.hardware import Hardware, adapted_hardware, load_hardware
from perfcast.coefficients.bundle import Calibration, resolve_calibration
from perfcast.errors import ConfigError
from perfcast.groundtruth.files import read_header, read_rows
from perfcast.groundtruth.predict_batch import BatchResult, predict_batch
from perfcast.groundtruth.tables import TableKind, predict_table, recognize, target_columns

__all__ = ["AdaptedDevice", "Samples", "adapted_entry", "adapting", "fit_samples", "hardware_yaml",
           "predict_adapted", "read_samples", "row_devices"]


@dataclass(frozen=True)
class Samples:
    """A samples table: its kind, header, rows and where it was read (``path``; None when built in memory)."""

    kind: TableKind
    header: list[str]
    rows: list[dict[str, str]]
    path: Path | None = None

    @property
    def targets(self) -> list[str]:
        """The measured columns perfcast predicts in this table."""
        return target_columns(self.kind, self.header)

    @property
    def fitted_target(self) -> str:
        """The column the corrections are fitted to: the first target with a measured value (a table's targets
        start with its headline figure; the others split it, e.g. forward vs backward time, which the
        per-device multipliers are not meant to bend)."""
        for t in self.targets:
            if any(_positive(r.get(t, "")) for r in self.rows):
                return t
        raise ConfigError(f"{self.path or 'samples'}: no measured value in "
                          f"{', '.join(self.targets) or 'its target columns'}: adapting needs the measured "
                          "columns filled")


@dataclass(frozen=True)
class AdaptedDevice:
    """One device fitted to its samples: its catalog id, the fit, and the sample rows it ran (``rows``)."""

    catalog_id: str
    fit: AdaptFit
    rows: int

    @property
    def corrections(self) -> DeviceCorrections:
        """The fitted corrections."""
        return self.fit.corrections


def read_samples(path: str | Path) -> Samples:
    """Read a samples table (ConfigError in one line when perfcast cannot adapt to it: unrecognized, a kind it
    does not predict, or no measured value)."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"samples table {p} does not exist")
    header = read_header(p)
    kind = recognize(header)
    if kind.predict is None:
        raise ConfigError(f"{p}: {kind.name} tables are not predicted ({kind.unsupported}), so nothing can be "
                          "adapted to them")
    samples = Samples(kind, header, list(read_rows(p)), p)
    samples.fitted_target  # noqa: B018 - raises ConfigError when nothing is measured
    return samples


def _positive(text: str) -> bool:
    try:
        value = float(text)
    except ValueError:
        return False
    return bool(np.isfinite(value) and value > 0)


def _measured(rows: list[dict[str, str]], targets: list[str]) -> np.ndarray:
    out = np.full((len(rows), len(targets)), np.nan)
    for i, r in enumerate(rows):
        for j, t in enumerate(targets):
            if _positive(r.get(t, "")):
                out[i, j] = float(r[t])
    return out


def row_devices(samples: Samples, cal: Calibration) -> list[str | None]:
    """Per sample row: the one catalog device its prediction is priced on, or None (not predicted, or priced on
    several devices)."""
    out: list[str | None] = []
    for r in samples.rows:
        seen: set[str] = set()

        def record(hw: Hardware, seen: set[str] = seen) -> Hardware:
            seen.add(hw.id)
            return hw

        with adapted_hardware(record):
            pred = predict_table(samples.kind, [r], cal)
        ok = pred.status[0].startswith("ok")
        out.append(next(iter(seen)) if ok and len(seen) == 1 else None)
    return out


def _with_corrections(fitted: dict[str, DeviceCorrections]) -> Callable[[Hardware], Hardware]:
    """A catalog entry with the corrections fitted for its id, if any (what :func:`adapted_hardware` applies)."""
    def adapt(hw: Hardware) -> Hardware:
        corrections = fitted.get(hw.id)
        return hw if corrections is None else hw.model_copy(update={"corrections": corrections})

    return adapt


def fit_samples(samples: Samples, cal: Calibration | None = None, *,
                devices: Sequence[str | None] | None = None) -> list[AdaptedDevice]:
    """Each device's corrections fitted to its sample rows (``devices``: each row's device when already known,
    see :func:`row_devices`). ConfigError when no row can be attributed to one device."""
    c = resolve_calibration(cal)
    per_row = list(devices) if devices is not None else row_devices(samples, c)
    names = sorted({d for d in per_row if d is not None})
    if not names:
        where = f"{samples.path}: " if samples.path else ""
        raise ConfigError(f"{where}no sample row is predicted on one catalog device (see predict-batch's status "
                          "column for why): nothing to adapt")
    targets = [samples.fitted_target]
    out = []
    for name in names:
        rows = [r for r, d in zip(samples.rows, per_row, strict=True) if d == name]
        measured = _measured(rows, targets)
        run = np.repeat(np.arange(len(rows)), len(targets))

        def predict(corrections: DeviceCorrections, rows: list[dict[str, str]] = rows,
                    name: str = name) -> np.ndarray:
            with adapted_hardware(_with_corrections({name: corrections})):
                pred = predict_table(samples.kind, rows, c)
            cols = [pred.pred.get(t, np.full(len(rows), np.nan)) for t in targets]
            values = np.stack(cols, axis=1) if cols else np.zeros((len(rows), 0))
            bad = np.array([not s.startswith("ok") for s in pred.status])
            values[bad] = np.nan
            return values.ravel()

        out.append(AdaptedDevice(name, fit_corrections(predict, measured.ravel(), runs=run), len(rows)))
    return out


@contextmanager
def adapting(devices: Sequence[AdaptedDevice]) -> Iterator[None]:
    """Within the block, each adapted device's catalog entry (by id or alias) carries its fitted corrections."""
    with adapted_hardware(_with_corrections({d.catalog_id: d.corrections for d in devices})):
        yield


def predict_adapted(table: str | Path, samples_path: str | Path, cal: Calibration | None = None
                    ) -> tuple[BatchResult, list[AdaptedDevice]]:
    """``table`` predicted with the devices adapted to the samples (a table of the same kind; ConfigError
    otherwise)."""
    samples = read_samples(samples_path)
    kind = recognize(read_header(table))
    if kind.name != samples.kind.name:
        raise ConfigError(f"{samples_path} is a {samples.kind.name} table and {table} a {kind.name} table: "
                          "adapt with samples of the table's own kind")
    c = resolve_calibration(cal)
    devices = fit_samples(samples, c)
    with adapting(devices):
        return predict_batch(table, c), devices


def _digest(path: Path | None) -> str:
    return "" if path is None else f", sha256 {hashlib.sha256(path.read_bytes()).hexdigest()[:12]}"


def adapted_entry(device: AdaptedDevice, samples: Samples, *, new_id: str | None = None) -> Hardware:
    """The hardware entry of an adapted device: its catalog entry with the fitted corrections, under ``new_id``
    (default ``<catalog id>-adapted``), no aliases, and a source line naming the samples."""
    base = load_hardware(device.catalog_id)
    fit = device.fit
    multipliers = ", ".join(f"{k} x{v:.3f}" for k, v in fit.corrections.model_dump().items())
    where = samples.path.name if samples.path is not None else "samples given in memory"
    line = (f"perfcast adapt: {base.id} fitted to {fit.runs} measured rows of {where} ({samples.kind.name}"
            f"{_digest(samples.path)}): {multipliers}; rms log error {fit.rms_log_before:.3f} -> "
            f"{fit.rms_log_after:.3f}; prior log-normal sigma {PRIOR_SIGMA_LOG} around 1, noise sigma "
            f"{NOISE_SIGMA_LOG}")
    not_seen = [k for k in fit.corrections.model_dump() if k not in fit.fitted]
    note = (f"Adapted from {base.id} (every other value is its datasheet entry's). "
            + (f"The samples do not depend on {', '.join(not_seen)}: kept at 1. " if not_seen else ""))
    try:
        return Hardware.model_validate({
            **base.model_dump(), "id": new_id or f"{base.id}-adapted", "name": f"{base.name} (adapted)",
            "aliases": (), "corrections": fit.corrections.model_dump(), "source": (line, *base.source),
            "notes": f"{note}{base.notes}".strip()})
    except ValueError as exc:
        raise ConfigError(f"bad id {new_id!r}: use lowercase letters, digits, '.' and '-' ({exc.__class__.__name__})"
                          ) from None


def hardware_yaml(hw: Hardware) -> str:
    """The YAML text of an adapted hardware entry (base SI units), with a header naming how it was made."""
    body = yaml.safe_dump(hw.model_dump(mode="json", exclude_none=True), sort_keys=False)
    return ("# A device adapted to its own measurements, written by `perfcast adapt` (base SI units).\n"
            "# Use it anywhere a hardware name is accepted: --hardware path/to/this.yaml\n" + body)
