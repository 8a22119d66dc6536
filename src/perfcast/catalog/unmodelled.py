"""Models perfcast knows by name but does not model: each refused in one line naming its architecture.

A benchmark table may name a checkpoint whose architecture perfcast does not build (RWKV, Chameleon, a
diffusers pipeline...). Looked up like any other name, it would fail as an unknown model, which reads as a
typo. Instead ``perfcast/data/models/unmodelled/<slug>.yaml`` lists such names per architecture, with the
``model_type`` of their published ``config.json`` and why perfcast refuses them, and
:func:`unmodelled_refusal` turns a listed name into an :class:`~perfcast.errors.UnsupportedError`:

    RWKV/rwkv-raven-7b: model_type 'rwkv' is not modelled by perfcast: RWKV-4 recurrent blocks ...

The lookup runs after the catalog and the synthetic GPT names (:func:`perfcast.catalog.models.load_model`),
so a name that gains a catalog config resolves to it (the contract tests then flag the stale entry). A
``config.json`` given by path whose ``model_type`` is listed is refused with the entry's reason too
(:func:`unmodelled_reason`, read by :mod:`perfcast.catalog.normalize`).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from perfcast.catalog.paths import catalog_dirs, normalize_name
from perfcast.errors import CatalogError, UnsupportedError
from perfcast.yamlio import load_model_file

__all__ = ["UnmodelledEntry", "unmodelled_entries", "unmodelled_reason", "unmodelled_refusal"]

FOLDER = "unmodelled"  # under each catalog ``models`` folder


class UnmodelledEntry(BaseModel):
    """Checkpoints of one architecture perfcast does not model, and why."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model_type: str = Field(min_length=1, description="the model_type of their config.json (or the diffusers "
                            "pipeline class)")
    reason: str = Field(min_length=1, description="what perfcast does not model, one sentence, no newline")
    names: tuple[str, ...] = Field(min_length=1, description="checkpoint names as benchmarks write them")
    source: tuple[str, ...] = Field(min_length=1, description="where the model_type was read")
    architecture_modelled: bool = Field(
        default=False, description="perfcast models the model_type, but not these checkpoints (a vocabulary it "
        "does not know, a quantization format it does not read)")

    @field_validator("reason")
    @classmethod
    def _one_line(cls, value: str) -> str:
        if "\n" in value.strip():
            raise ValueError("the reason is printed as one line; it must not contain a newline")
        return value.strip()

    def refusal(self, name: str) -> UnsupportedError:
        """The one-line error for ``name``."""
        if self.architecture_modelled:
            return UnsupportedError(f"{name}: a {self.model_type} checkpoint perfcast does not model: {self.reason}")
        return UnsupportedError(f"{name}: model_type {self.model_type!r} is not modelled by perfcast: {self.reason}")


def _read(path: Path) -> UnmodelledEntry:
    entry: UnmodelledEntry = load_model_file(path, UnmodelledEntry, what="unmodelled-model file",
                                             error=CatalogError)
    return entry


@lru_cache(maxsize=1)
def unmodelled_entries() -> dict[str, UnmodelledEntry]:
    """Every listed entry by slug (file stem), package data first, then the user catalog folders."""
    entries: dict[str, UnmodelledEntry] = {}
    for folder in catalog_dirs("models"):
        for path in sorted((folder / FOLDER).glob("*.yaml")):
            entries[path.stem] = _read(path)
    return entries


@lru_cache(maxsize=1)
def _by_name() -> dict[str, UnmodelledEntry]:
    names: dict[str, UnmodelledEntry] = {}
    for slug, entry in unmodelled_entries().items():
        for name in entry.names:
            key = normalize_name(name)
            if key in names and names[key] is not entry:
                raise CatalogError(f"unmodelled/{slug}.yaml: name {name!r} is listed twice")
            names[key] = entry
    return names


def unmodelled_refusal(name: str) -> UnsupportedError | None:
    """The refusal for a listed name, None for a name not listed."""
    entry = _by_name().get(normalize_name(name))
    return None if entry is None else entry.refusal(name)


def unmodelled_reason(model_type: str) -> str | None:
    """Why perfcast refuses ``model_type``, when a listed entry of that type says (for a config.json given by
    path: its refusal names the missing feature, e.g. DeepSeek-V3.2's sparse attention), else None."""
    for entry in unmodelled_entries().values():
        if entry.model_type == model_type and not entry.architecture_modelled:
            return entry.reason
    return None
