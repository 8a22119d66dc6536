"""Write suite results as JSON and CSV."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from perfcast.errors import ConfigError
from perfcast.scenarios.run import ScenarioResult

__all__ = ["write_results"]


def write_results(results: list[ScenarioResult], folder: Path) -> None:
    """results.json (a list of objects with id, status and metrics) and results.csv (one row per run)."""
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"{folder} is a file; --out needs a folder")
    folder.mkdir(parents=True, exist_ok=True)
    data = [{"id": r.id, "title": r.title, "status": r.status, "metrics": r.headline(), "rows": r.rows}
            for r in results]
    (folder / "results.json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    keys: list[str] = ["scenario"]
    for r in results:
        for row in r.rows:
            for k in row:
                if k not in keys:
                    keys.append(k)
    with (folder / "results.csv").open("w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=keys, lineterminator="\n")
        w.writeheader()
        for r in results:
            for row in r.rows:
                w.writerow({"scenario": r.id, **row})
