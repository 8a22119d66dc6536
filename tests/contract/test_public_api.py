"""Contract: the public surface (``perfcast.__all__``), the import direction between layers, no pickle,
and versioned JSON data files.

Layers (style guide section 2; an arrow means "may import", a layer never imports one above it)::

    errors < units, dtypes, jsonio, yamlio, registry  (base)
      < catalog < workload < kernel < compose < system < serving
      < scenarios, validate, report, sweep              (top tier: may use any layer, never the CLI)
      < cli                                             (nothing imports it)

``perfcast/__init__.py`` is the public facade and re-exports from every layer; it is not a layer.
Imports are read with ``ast`` from the whole module (including imports inside functions and under
``TYPE_CHECKING``), so a lazy import cannot hide a wrong-way dependency.
"""

from __future__ import annotations

import ast
import importlib
import json
import types
from functools import cache
from pathlib import Path

import pytest

import perfcast

pytestmark = pytest.mark.contract

SRC = Path(perfcast.__file__).resolve().parent

BASE = {"errors", "units", "dtypes", "jsonio", "yamlio", "registry"}
RANK: dict[str, float] = {
    **{b: 0.5 for b in BASE},
    "errors": 0,  # the error tree imports nothing from perfcast; the other base modules may raise its errors
    "jsonio": 0.4,  # the bounded reader of data files (size, nesting, finite numbers); yamlio reads through it
    "results": 0.6,  # result values one package produces and report reads (scenario rows, validation.json)
    "catalog": 1,
    "workload": 2,
    "capture": 2.5,  # the user's model as workload IR: catalog, workload and base modules only
    "kernel": 3,
    "accel": 3,  # spatial accelerators: workload and catalog only
    "compose": 4,
    "system": 5,
    "serving": 6,
    "groundtruth": 6.5,  # measured tables and their predictions: every layer below, and calibrate (this CPU)
    "scenarios": 7,
    "validate": 7,
    "calibrate": 3.5,  # microbenchmarks of this CPU -> a hardware entry (catalog, kernel)
    "report": 7,
    "sweep": 7,
    "cli": 8,
}
TOP_TIER = 7


def _module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = sorted(p for p in SRC.rglob("*.py"))
MODULE_IDS = [_module_name(p) for p in MODULES]


def _layer(module: str) -> str:
    """``perfcast.kernel.gemm`` -> ``kernel``; ``perfcast.errors`` -> ``errors``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


@cache
def _imports(path: Path) -> tuple[str, ...]:
    """Every module ``path`` imports (absolute names), wherever the import statement is."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    me = _module_name(path)
    package = me if path.name == "__init__.py" else me.rsplit(".", 1)[0]
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            out.append(target)
            # ``from perfcast import x`` may name a submodule
            out.extend(f"{target}.{alias.name}" for alias in node.names if target == "perfcast")
    return tuple(out)


def _perfcast_imports(path: Path) -> list[str]:
    return [m for m in _imports(path) if m == "perfcast" or m.startswith("perfcast.")]


# -- perfcast.__all__ ---------------------------------------------------------------------------------------------
def test_all_is_sorted_and_unique() -> None:
    assert list(perfcast.__all__) == sorted(perfcast.__all__)
    assert len(set(perfcast.__all__)) == len(perfcast.__all__)


@pytest.mark.parametrize("name", perfcast.__all__)
def test_every_exported_name_is_importable(name: str) -> None:
    value = getattr(perfcast, name)
    assert value is not None
    exec(f"from perfcast import {name}", {})  # noqa: S102 - the import statement users write


def test_all_is_complete() -> None:
    """Every name the facade imports from perfcast (directly, or for type checkers and lazily) is in
    ``__all__`` and vice versa (httpx's test_exported_members)."""
    tree = ast.parse((SRC / "__init__.py").read_text(encoding="utf-8"))
    imported = {alias.asname or alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                and (node.module or "").startswith("perfcast.") for alias in node.names}
    assert imported == set(perfcast.__all__)
    lazy = getattr(perfcast, "_WHERE", None)
    if lazy is not None:  # names loaded on first use
        assert set(lazy) == set(perfcast.__all__)
    public = {n for n, v in vars(perfcast).items() if not n.startswith("_") and not isinstance(v, types.ModuleType)
              and str(getattr(v, "__module__", "")).startswith("perfcast")}
    assert public <= set(perfcast.__all__)


def test_the_house_api_is_public() -> None:
    for name in ("load_hardware", "load_model", "predict_kernel", "predict_step", "run_scenario", "predict",
                 "PerfcastError", "ConfigError", "UnknownNameError", "CatalogError", "UnsupportedError", "DataError"):
        assert name in perfcast.__all__


def test_unknown_attribute_is_attribute_error() -> None:
    with pytest.raises(AttributeError):
        perfcast.no_such_name  # noqa: B018


def test_error_tree() -> None:
    from perfcast import errors

    assert issubclass(errors.UnknownNameError, errors.ConfigError)
    for cls in (errors.ConfigError, errors.CatalogError, errors.UnsupportedError, errors.DataError):
        assert issubclass(cls, errors.PerfcastError)
        assert not issubclass(cls, (ValueError, AssertionError))


@pytest.mark.parametrize("path", [p for p in MODULES if p.name not in ("__init__.py", "__main__.py")],
                         ids=[m for p, m in zip(MODULES, MODULE_IDS, strict=True)
                              if p.name not in ("__init__.py", "__main__.py")])
def test_modules_declare_all(path: Path) -> None:
    module = importlib.import_module(_module_name(path))
    names = getattr(module, "__all__", None)
    assert names is not None, f"{_module_name(path)} has no __all__"
    missing = [n for n in names if not hasattr(module, n)]
    assert not missing, f"{_module_name(path)}.__all__ names undefined {missing}"


# -- import direction -----------------------------------------------------------------------------------------------
LAYERED = [(p, m) for p, m in zip(MODULES, MODULE_IDS, strict=True) if m not in ("perfcast", "perfcast.__main__")]


@pytest.mark.parametrize("path", [p for p, _ in LAYERED], ids=[m for _, m in LAYERED])
def test_a_layer_only_imports_layers_below_it(path: Path) -> None:
    me = _module_name(path)
    mine = _layer(me)
    assert mine in RANK, f"{me}: layer {mine!r} has no rank in this contract; add it"
    bad = []
    for target in _perfcast_imports(path):
        other = _layer(target)
        if other == "" or other == mine:
            if other == "" and target == "perfcast" and mine != "cli":
                bad.append(target)  # the facade imports every layer
            continue
        assert other in RANK, f"{me} imports {target}: unknown layer {other!r}"
        allowed = RANK[other] < RANK[mine] or (RANK[mine] == TOP_TIER and RANK[other] == TOP_TIER)
        if not allowed:
            bad.append(target)
    assert not bad, f"{me} (layer {mine}) imports from layers at or above it: {bad}"


@pytest.mark.parametrize(("layer", "forbidden"), [
    ("catalog", {"workload", "kernel", "compose", "validate", "scenarios", "report", "cli"}),
    ("workload", {"kernel", "compose", "validate", "scenarios", "report", "cli"}),
    ("kernel", {"compose", "validate", "cli", "scenarios", "report"}),
    ("compose", {"validate", "cli", "scenarios", "report"}),
    ("report", {"validate", "cli", "sweep"}),
])
def test_explicit_forbidden_edges(layer: str, forbidden: set[str]) -> None:
    offenders = []
    for path, name in zip(MODULES, MODULE_IDS, strict=True):
        if _layer(name) != layer:
            continue
        offenders += [(name, t) for t in _perfcast_imports(path) if _layer(t) in forbidden]
    assert not offenders


def test_nothing_imports_the_cli() -> None:
    """Only the CLI package itself and ``python -m perfcast`` import the CLI."""
    offenders = [m for p, m in zip(MODULES, MODULE_IDS, strict=True)
                 if _layer(m) != "cli" and m != "perfcast.__main__"
                 and any(_layer(t) == "cli" for t in _perfcast_imports(p))]
    assert not offenders


def test_no_lower_layer_imports_validate() -> None:
    """validate/ imports the layers it checks; no predicting layer depends on it."""
    offenders = [(m, t) for p, m in zip(MODULES, MODULE_IDS, strict=True)
                 if RANK.get(_layer(m), 0) < TOP_TIER for t in _perfcast_imports(p) if _layer(t) == "validate"]
    assert not offenders


# -- data formats ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", MODULES, ids=MODULE_IDS)
def test_no_pickle(path: Path) -> None:
    banned = {"pickle", "cPickle", "dill", "cloudpickle", "joblib", "shelve", "marshal"}
    used = {m.split(".")[0] for m in _imports(path)} & banned
    assert not used, f"{_module_name(path)} imports {used}: use versioned JSON or YAML"
    text = path.read_text(encoding="utf-8")
    assert "yaml.unsafe_load" not in text and "yaml.full_load" not in text
    if path.name != "yamlio.py":
        assert "yaml.load(" not in text, "read YAML through perfcast.yamlio.safe_load"


DATA_JSON = sorted(p for p in SRC.rglob("*.json") if "catalog" not in p.relative_to(SRC).parts)


def test_there_are_versioned_json_files() -> None:
    names = {p.relative_to(SRC).as_posix() for p in DATA_JSON}
    assert {"kernel/coefficients.json", "compose/intervals.json"} <= names


@pytest.mark.parametrize("path", DATA_JSON, ids=[p.relative_to(SRC).as_posix() for p in DATA_JSON])
def test_every_json_data_file_has_schema_version(path: Path) -> None:
    raw = json.loads(path.read_text(encoding="utf-8"))
    assert isinstance(raw, dict)
    assert isinstance(raw.get("schema_version"), int) and not isinstance(raw["schema_version"], bool)
    assert raw.get("produced_by"), f"{path.name} must say what produced it"


def test_packaged_json_files_load_with_their_readers() -> None:
    from perfcast.compose.coefficients import COMPOSE_SCHEMA_VERSION, load_compose_coefficients
    from perfcast.compose.interval import INTERVAL_SCHEMA_VERSION, load_intervals
    from perfcast.kernel.coefficients import SCHEMA_VERSION, load_coefficients

    assert load_coefficients(SRC / "kernel" / "coefficients.json").schema_version == SCHEMA_VERSION
    if (SRC / "compose" / "coefficients.json").exists():
        assert load_compose_coefficients(SRC / "compose" / "coefficients.json").schema_version == \
            COMPOSE_SCHEMA_VERSION
    assert "step" in load_intervals(str(SRC / "compose" / "intervals.json"))
    assert json.loads((SRC / "compose" / "intervals.json").read_text())["schema_version"] == INTERVAL_SCHEMA_VERSION


def test_package_ships_py_typed() -> None:
    assert (SRC / "py.typed").exists()
