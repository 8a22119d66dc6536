"""Contract: the public surface (``perfcast.__all__``), the import direction between packages, no import cycle
between files, no pickle, and versioned JSON data files.

Packages in order, bottom to top (:data:`RANK` gives each its rank and the reason for it). A package imports only
packages of a lower rank; packages of one rank do not import each other::

    errors < jsonio < units, dtypes, yamlio, registry, digest  (base)
      < results, coefficients < catalog < workload < kernel, accel, capture < compose, calibrate < system < serving
      < groundtruth < validate, sweep < scenarios < report  (report: result types only)
      < cli                                               (nothing imports it)

``perfcast/__init__.py`` is the public facade and re-exports from every layer; it is not a layer.
Imports are read with ``ast`` from the whole module (including imports inside functions and under
``TYPE_CHECKING``), so a lazy import cannot hide a wrong-way dependency or a cycle.
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

SRC = Path(perfcast.__file__).resolve().parent

RANK: dict[str, int] = {
    "errors": 0,  # the error tree; imports nothing from perfcast
    "jsonio": 1,  # the bounded reader of data files (size, nesting, finite numbers); raises errors
    "units": 2,  # SI constants, parse/format "80GB": base, on errors
    "dtypes": 2,  # dtype names and sizes: base, on errors
    "yamlio": 2,  # YAML read through jsonio's bounds: base
    "registry": 2,  # generic Registry[T]: base, on errors
    "datafiles": 2,  # where the shipped data tree (perfcast/data/<kind>) is: base, imports nothing from perfcast
    "digest": 2,  # content digests (sha256 of a value's JSON/repr) that caches key on instead of id(): base
    "results": 3,  # values one package produces and report reads (scenario rows, validation.json): plain data
    "coefficients": 3,  # the fitted parts and their one Calibration bundle: plain data on jsonio, below every layer
    "catalog": 4,  # hardware and model schemas and their loaders, on base modules only
    "workload": 5,  # op IR and graph builders from catalog models
    "kernel": 6,  # per-op time of workload ops on catalog hardware
    "accel": 6,  # spatial accelerators: workload and catalog only
    "capture": 6,  # the user's torch/ONNX model as workload IR: catalog and workload only
    "compose": 7,  # one device's step from kernel times
    "calibrate": 7,  # microbenchmarks of this CPU fitted to kernel's CPU model -> a catalog hardware entry
    "system": 8,  # many devices (plans, collectives, pipeline schedules, memory) on compose
    "serving": 9,  # the serving simulator, on system and below
    "groundtruth": 10,  # the measured tables (and this CPU) and their predictions by every layer below
    "validate": 11,  # error metrics and fitting over groundtruth's predictions; only the CLI imports it
    "sweep": 11,  # design-space search over system and serving plans
    "replay": 11,  # profiler traces replayed as dependency graphs, repriced by kernel, system and catalog
    "scenarios": 12,  # the suite: runs the layers, groundtruth's tables and sweep's searches
    "report": 13,  # tables, JSON, HTML of result types only (results, <layer>.types); never calls a predictor
    "cli": 14,  # one Typer app, a thin shell over everything; nothing imports it
}
BASE = {name for name, rank in RANK.items() if rank <= RANK["registry"]}


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
def _import_statements(path: Path) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(absolute module, names imported from it) of every import statement in ``path``, wherever it is;
    ``import a.b`` is ``("a.b", ())``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    me = _module_name(path)
    package = me if path.name == "__init__.py" else me.rsplit(".", 1)[0]
    out: list[tuple[str, tuple[str, ...]]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((alias.name, ()) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            out.append((target, tuple(alias.name for alias in node.names)))
    return tuple(out)


def _imports(path: Path) -> tuple[str, ...]:
    """Every module ``path`` imports (absolute names), wherever the import statement is."""
    out: list[str] = []
    for target, names in _import_statements(path):
        out.append(target)
        if target == "perfcast":  # ``from perfcast import x`` may name a submodule
            out.extend(f"{target}.{name}" for name in names)
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
        if RANK[other] >= RANK[mine]:
            bad.append(f"{target} ({other}, rank {RANK[other]})")
    assert not bad, f"{me} ({mine}, rank {RANK[mine]}) imports from packages of its rank or above: {bad}"


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


def test_only_the_cli_imports_validate() -> None:
    """validate/ imports the layers it checks; no other package depends on it (architecture.md)."""
    offenders = [(m, t) for p, m in zip(MODULES, MODULE_IDS, strict=True)
                 if _layer(m) not in ("validate", "cli") for t in _perfcast_imports(p) if _layer(t) == "validate"]
    assert not offenders


def _is_result_type(module: str) -> bool:
    """Base modules, the shared result values, and a layer's own ``types`` module."""
    return _layer(module) in BASE or _layer(module) == "results" or module.endswith(".types")


def test_report_imports_only_result_types() -> None:
    """report/ formats values; it never calls a predictor, a validation or a scenario (style guide, package layout)."""
    offenders = [(m, t) for p, m in zip(MODULES, MODULE_IDS, strict=True) if _layer(m) == "report"
                 for t in _perfcast_imports(p) if _layer(t) != "report" and not _is_result_type(t)]
    assert not offenders


# -- file-level import cycles ---------------------------------------------------------------------------------------
def _imported_modules(path: Path, known: set[str]) -> set[str]:
    """The perfcast modules ``path`` imports: ``from a.b import c`` is ``a.b.c`` when that is a module, else ``a.b``
    (its ``__init__``); a package's ``__init__`` run only as the parent of an imported module is not counted."""
    out: set[str] = set()
    for target, names in _import_statements(path):
        out.update({f"{target}.{n}" if f"{target}.{n}" in known else target for n in names} if names else {target})
    return out & known


def _import_graph() -> dict[str, set[str]]:
    known = set(MODULE_IDS)
    return {m: _imported_modules(p, known) for p, m in zip(MODULES, MODULE_IDS, strict=True)}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (``[a, b, ..., a]``) per strongly connected component of more than one module or with a
    self-import (Tarjan's algorithm), in a stable order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph.get(v, ()):
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_cycle_through(sorted(c)[0], set(c), graph) for c in sorted(components)]


def _cycle_through(start: str, component: set[str], graph: dict[str, set[str]]) -> list[str]:
    """The shortest import path from ``start`` back to itself inside its component (breadth first)."""
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & component):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [*reversed(path), start]
                if w not in came_from:
                    came_from[w] = v
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"{start} is in a component without a cycle through it")


def test_cycles_finds_a_cycle_and_its_path() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}, "f": {"a"}}
    assert _cycles(graph) == [["a", "b", "c", "a"], ["e", "e"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_file_imports_itself_through_others() -> None:
    """No module imports (directly or through others, at module level or inside a function) a module that imports
    it back: the file-level import graph of src/perfcast is acyclic."""
    cycles = _cycles(_import_graph())
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


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


DATA_JSON = sorted(p for p in SRC.rglob("*.json") if "models" not in p.relative_to(SRC).parts)


def test_there_are_versioned_json_files() -> None:
    names = {p.relative_to(SRC).as_posix() for p in DATA_JSON}
    assert {"data/coefficients/kernel.json", "data/coefficients/intervals.json"} <= names


@pytest.mark.parametrize("path", DATA_JSON, ids=[p.relative_to(SRC).as_posix() for p in DATA_JSON])
def test_every_json_data_file_has_schema_version(path: Path) -> None:
    raw = json.loads(path.read_text(encoding="utf-8"))
    assert isinstance(raw, dict)
    assert isinstance(raw.get("schema_version"), int) and not isinstance(raw["schema_version"], bool)
    assert raw.get("produced_by"), f"{path.name} must say what produced it"


def test_packaged_json_files_load_with_their_readers() -> None:
    from perfcast.coefficients.compose import COMPOSE_SCHEMA_VERSION, load_compose_coefficients
    from perfcast.coefficients.intervals import INTERVAL_SCHEMA_VERSION, load_intervals
    from perfcast.coefficients.kernel import SCHEMA_VERSION, load_coefficients

    coefficients = SRC / "data" / "coefficients"
    assert load_coefficients(coefficients / "kernel.json").schema_version == SCHEMA_VERSION
    assert load_compose_coefficients(coefficients / "compose.json").schema_version == COMPOSE_SCHEMA_VERSION
    assert "step" in load_intervals(str(coefficients / "intervals.json")).kinds
    assert json.loads((coefficients / "intervals.json").read_text())["schema_version"] == INTERVAL_SCHEMA_VERSION


def test_package_ships_py_typed() -> None:
    assert (SRC / "py.typed").exists()


# -- tests mirror the tree they test --------------------------------------------------------------------------------
def test_every_unit_test_folder_is_a_package_it_tests() -> None:
    """tests/unit/<package>/ mirrors src/perfcast/<package>/: a unit test sits beside the package it tests."""
    unit = Path(__file__).resolve().parent.parent / "unit"
    folders = sorted(p.name for p in unit.iterdir() if p.is_dir() and p.name != "__pycache__")
    assert folders
    assert [f for f in folders if not (SRC / f).is_dir()] == []
