"""What running a scenario gives: one row per prediction, and the scenario's summary."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["STATUSES", "ScenarioResult"]

STATUSES = ("ok", "oom", "error")


@dataclass
class ScenarioResult:
    """One scenario's rows: a dict per prediction with metrics in base units (keys carry the unit).

    ``status`` is one of :data:`STATUSES`: ``ok`` when at least one row was predicted and
    fits in memory, ``oom`` when every predicted row is out of memory (``fits_in_memory``
    false; the rows carry the per-GPU breakdown and a note names each), ``error`` when every
    row failed or the scenario had nothing to run (``error`` says why). A row with a
    measurement carries ``error_frac`` = predicted / measured - 1.
    """

    id: str
    title: str
    status: str
    rows: list[dict[str, object]] = field(default_factory=list)
    error: str = ""
    kind: str = "model_latency"
    notes: list[str] = field(default_factory=list)

    def headline(self) -> dict[str, object]:
        """The scenario's summary metrics."""
        errs = [abs(float(str(r["error_frac"]))) for r in self.rows if r.get("error_frac") is not None]
        ok = [r for r in self.rows if r["status"] == "ok"]
        return {
            "predictions": len(ok),
            "with_measurement": len(errs),
            "mape_frac": round(sum(errs) / len(errs), 4) if errs else None,
        }

    def settle(self) -> ScenarioResult:
        """Set ``status`` from the rows (error if there were none or every row failed, oom if every predicted row
        is out of memory) and add a note with the memory breakdown of each row that does not fit."""
        ok = [r for r in self.rows if r["status"] == "ok"]
        oom = [r for r in ok if r.get("fits_in_memory") is False]
        for row in oom:
            self.notes.append(_oom_note(row))
        if not ok:
            self.status = "error"
            if not self.rows and not self.error:
                self.error = "the scenario has nothing to run"
        elif len(oom) == len(ok):
            self.status = "oom"
        return self


def _oom_note(row: dict[str, object]) -> str:
    """One line: which run is out of memory, by how much, and the per-GPU parts that make it up."""
    what = str(row.get("label") or row.get("model") or "run")
    parts = ", ".join(f"{k.removeprefix('memory_').removesuffix('_bytes')} {float(str(v)) / 2**30:.1f}"
                      for k, v in row.items()
                      if k.startswith("memory_") and k.endswith("_bytes") and k not in _TOTALS
                      and isinstance(v, (int, float)) and v > 0)
    need, cap = row.get("memory_per_gpu_bytes"), row.get("memory_capacity_bytes")
    size = (f"{float(str(need)) / 2**30:.1f} GiB per GPU > {float(str(cap)) / 2**30:.1f} GiB"
            if isinstance(need, (int, float)) and isinstance(cap, (int, float)) else "does not fit")
    return f"{what}: out of memory: {size} ({parts} GiB)" if parts else f"{what}: out of memory: {size}"


_TOTALS = ("memory_per_gpu_bytes", "memory_capacity_bytes")
