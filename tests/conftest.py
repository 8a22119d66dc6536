"""Test-wide setup: no test reads or writes the real user catalog (``~/.perfcast/catalog``).

Every test runs with ``PERFCAST_CATALOG`` pointing at an empty folder of its own session, so what a test
calibrates or adds to the user catalog stays in tmp, and what a developer calibrated never changes a test.
A test of the default location sets ``HOME`` and removes ``PERFCAST_CATALOG`` itself (monkeypatch).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True, scope="session")
def _hermetic_user_catalog(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PERFCAST_CATALOG", str(tmp_path_factory.mktemp("user-catalog")))
        yield


# every test carries the marker of the folder it sits in (tests/unit -> unit, ...): `pytest -m cli` selects by folder
FOLDER_MARKERS = ("unit", "property", "golden", "validation", "cli", "contract", "report")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = config.rootpath / "tests"
    for item in items:
        folder = item.path.relative_to(root).parts[0] if item.path.is_relative_to(root) else ""
        if folder not in FOLDER_MARKERS:
            raise pytest.UsageError(f"{item.path}: a test file sits in one of tests/{{{','.join(FOLDER_MARKERS)}}}")
        item.add_marker(getattr(pytest.mark, folder))
