"""What running a scenario gives: one row per prediction, and the scenario's summary."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["ScenarioResult"]


@dataclass
class ScenarioResult:
    """One scenario's rows: a dict per prediction with metrics in base units (keys carry the unit).

    ``status`` is ``ok`` when at least one row was predicted, ``error`` when every row
    failed and ``skipped`` when the scenario had nothing to run (``error`` says why).
    A row with a measurement carries ``error_frac`` = predicted / measured - 1.
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
        """Set ``status`` from the rows: error if every row failed, skipped if there were none."""
        if not self.rows:
            self.status = "skipped" if self.status == "ok" else self.status
        elif all(r["status"] != "ok" for r in self.rows):
            self.status = "error"
        return self
