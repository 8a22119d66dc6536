"""Contract: the shipped data is one tree (perfcast/data/<kind>/), every file in it belongs to a listed kind and
loads through that kind's schema, the kinds with sources carry them, and README.md there lists every kind with
schemas that exist."""

from __future__ import annotations

import gzip
import hashlib
import importlib
import json
import re
from collections.abc import Callable, Sequence
from fnmatch import fnmatch
from pathlib import Path
from typing import Protocol

import pytest

import perfcast
from perfcast.accel.spec import load_arch, load_mapping
from perfcast.catalog.config_defaults import load_config_defaults
from perfcast.catalog.hardware import load_hardware
from perfcast.catalog.models import load_model
from perfcast.catalog.pipelines import load_pipeline
from perfcast.catalog.synthetic import sc21_heads
from perfcast.catalog.unmodelled import unmodelled_entries
from perfcast.coefficients.collectives import load_collective_coefficients
from perfcast.coefficients.compose import load_compose_coefficients
from perfcast.coefficients.energy import load_energy_coefficients
from perfcast.coefficients.intervals import load_intervals
from perfcast.coefficients.kernel import load_coefficients
from perfcast.coefficients.serving import load_serving_coefficients
from perfcast.coefficients.training import load_training_coefficients
from perfcast.datafiles import DATA_KINDS, data_dir, data_path
from perfcast.errors import UnsupportedError
from perfcast.scenarios.schema import load_scenario
from perfcast.serving.engines import load_engine
from perfcast.serving.sources.datasets import dataset_names, load_dataset
from perfcast.serving.sources.mlperf import benchmark_names, load_benchmark
from perfcast.serving.sources.traces import load_trace, shipped_traces
from perfcast.sweep.published import load_published
from perfcast.system.cluster import load_cluster

ROOT = Path(perfcast.__file__).resolve().parent / "data"


def _sources(values: str | Sequence[str]) -> list[str]:
    """The non-blank source strings of a ``source`` value (a string or a sequence of strings)."""
    items = [values] if isinstance(values, str) else list(values)
    return [s for s in items if isinstance(s, str) and s.strip()]


def _hardware(path: Path) -> list[str]:
    return _sources(load_hardware(path).source)


def _model(path: Path) -> list[str]:
    cfg = load_model(path.stem)  # through the catalog: the config and its sidecar
    assert cfg.id == path.stem
    return _sources(cfg.source)


def _unmodelled(path: Path) -> list[str]:
    entry = unmodelled_entries()[path.stem]
    said = f"a {entry.model_type} checkpoint" if entry.architecture_modelled else f"model_type {entry.model_type!r}"
    for name in entry.names:  # each refused in one line naming its model_type
        with pytest.raises(UnsupportedError, match=re.escape(said)):
            load_model(name)
    return _sources(entry.source)


def _pipeline(path: Path) -> list[str]:
    pipe = load_pipeline(path.stem)  # through the catalog; its networks resolve to diffusion entries
    assert load_pipeline(pipe.id) is pipe
    assert load_model(pipe.unet).unet is not None and load_model(pipe.vae).vae is not None
    return _sources(pipe.source)


def _cluster(path: Path) -> list[str]:
    return _sources(load_cluster(path).source)


def _arch(path: Path) -> list[str]:
    return _sources(load_arch(path).source)


def _mapping(path: Path) -> None:
    load_mapping(path)


def _trace_index(path: Path) -> list[str]:
    assert path == data_path("traces", "index.yaml")
    return [s for t in shipped_traces().values() for s in _sources(t.source)]


def _trace(path: Path) -> list[str]:
    (name, entry), = [(n, t) for n, t in shipped_traces().items() if t.file == path.name]
    trace = load_trace(name)
    assert trace.num_requests == entry.rows
    assert hashlib.sha256(gzip.decompress(path.read_bytes())).hexdigest() == entry.sha256
    return _sources(trace.source)


def _mlperf(path: Path) -> None:
    assert path == data_path("presets", "mlperf.yaml")
    for name in benchmark_names():
        bench = load_benchmark(name)
        assert bench.input.mean_basis and bench.output.mean_basis, name


def _datasets(path: Path) -> None:
    assert path == data_path("presets", "datasets.yaml")
    for name in dataset_names():
        preset = load_dataset(name)
        assert preset.input.mean_basis and preset.output.mean_basis, name


def _published(path: Path) -> list[str]:
    assert path == data_path("presets", "published_plans.yaml")
    source, plans = load_published()
    assert plans
    return _sources(source)


def _scenario(path: Path) -> None:
    assert load_scenario(path).id == path.stem


class _Fitted(Protocol):
    produced_by: str
    fitted_on: dict[str, str]


def _fitted(load: Callable[[Path], _Fitted]) -> Callable[[Path], list[str]]:
    def check(path: Path) -> list[str]:
        coefficients = load(path)
        assert coefficients.fitted_on, f"{path.name}: empty fitted_on"
        return _sources(coefficients.produced_by)
    return check


def _intervals(path: Path) -> list[str]:
    assert load_intervals(str(path))
    return _sources(json.loads(path.read_text(encoding="utf-8"))["produced_by"])


def _config_defaults(path: Path) -> list[str]:
    assert path == data_path("defaults", "hf_config_defaults.yaml")
    families = load_config_defaults()
    sources = [s for f in families.values() for s in _sources(f.source)]
    assert len(sources) == len(families)
    return sources


def _heads(path: Path) -> list[str]:
    assert path == data_path("defaults", "sc21_heads.yaml")
    return _sources(sc21_heads().source)


def _blas_tiles(path: Path) -> list[str]:
    from perfcast.catalog.blas_tiles import _table, fp32_tiles

    assert path == data_path("defaults", "blas_tiles.yaml")
    assert all(fp32_tiles(arch) is not None for arch in _table().fp32)
    return _sources(_table().source)


def _engine(path: Path) -> list[str]:
    profile = load_engine(path)
    assert profile.id == path.stem and load_engine(path.stem) == profile
    assert profile.id in load_serving_coefficients().engines, f"{profile.id}: no CPU overhead coefficients"
    return _sources(profile.source)


def _doc(path: Path) -> None:
    assert path.read_text(encoding="utf-8").strip()


# kind -> (pattern relative to the kind's folder, loader); a loader that returns a list returns the file's sources,
# which must not be empty; one that returns None is a kind (or file) without sources (data/README.md says why).
Loader = Callable[[Path], "list[str] | None"]
KINDS: dict[str, list[tuple[str, Loader]]] = {
    "hardware": [("*.yaml", _hardware)],
    "models": [("*.json", _model), ("*.yaml", _model), ("unmodelled/*.yaml", _unmodelled),
               ("pipelines/*.yaml", _pipeline)],
    "clusters": [("*.yaml", _cluster)],
    "accelerators": [("*.yaml", _arch), ("mappings/*.yaml", _mapping)],
    "traces": [("index.yaml", _trace_index), ("*.csv.gz", _trace), ("README.md", _doc)],
    "presets": [("mlperf.yaml", _mlperf), ("published_plans.yaml", _published), ("datasets.yaml", _datasets)],
    "scenarios": [("*.yaml", _scenario)],
    "engines": [("*.yaml", _engine)],
    "coefficients": [("kernel.json", _fitted(load_coefficients)),
                     ("compose.json", _fitted(load_compose_coefficients)),
                     ("collectives.json", _fitted(load_collective_coefficients)),
                     ("training.json", _fitted(load_training_coefficients)),
                     ("serving.json", _fitted(load_serving_coefficients)),
                     ("energy.json", _fitted(load_energy_coefficients)),
                     ("intervals.json", _intervals)],
    "defaults": [("hf_config_defaults.yaml", _config_defaults), ("sc21_heads.yaml", _heads),
                 ("blas_tiles.yaml", _blas_tiles)],
}

FILES = sorted(p for p in ROOT.rglob("*") if p.is_file() and "__pycache__" not in p.parts and p != ROOT / "README.md")


def _loader(path: Path) -> Loader:
    rel = path.relative_to(ROOT)
    kind, inside = rel.parts[0], "/".join(rel.parts[1:])
    assert kind in KINDS, f"{rel}: folder {kind!r} is not a data kind ({', '.join(KINDS)})"
    # fnmatch's * crosses "/", so a pattern matches only paths with as many parts as itself
    matches = [load for pattern, load in KINDS[kind]
               if fnmatch(inside, pattern) and pattern.count("/") == inside.count("/")]
    assert len(matches) == 1, f"{rel}: matches {len(matches)} patterns of kind {kind!r}, not one"
    return matches[0]


def test_the_kinds_are_the_folders() -> None:
    assert set(KINDS) == set(DATA_KINDS)
    assert sorted(p.name for p in ROOT.iterdir() if p.is_dir() and p.name != "__pycache__") == sorted(DATA_KINDS)
    for kind in DATA_KINDS:
        assert data_dir(kind) == ROOT / kind


def test_the_tree_holds_no_code() -> None:
    assert [p for p in ROOT.rglob("*.py")] == []


def test_every_kind_has_files() -> None:
    for kind in DATA_KINDS:
        assert any(f.relative_to(ROOT).parts[0] == kind for f in FILES), kind


@pytest.mark.parametrize("path", FILES, ids=[p.relative_to(ROOT).as_posix() for p in FILES])
def test_every_file_belongs_to_a_kind_and_loads_through_its_schema(path: Path) -> None:
    sources = _loader(path)(path)
    if sources is not None:
        assert sources, f"{path.relative_to(ROOT)}: no source"


def test_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown data kind"):
        data_dir("hardwares")


def _readme_rows() -> dict[str, str]:
    rows = {}
    for line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0] in DATA_KINDS:
            rows[cells[0]] = line
    return rows


def test_the_readme_lists_every_kind_with_schemas_that_exist() -> None:
    rows = _readme_rows()
    assert set(rows) == set(DATA_KINDS)
    for kind, line in rows.items():
        assert f"`{kind}/`" in line
        names = re.findall(r"`(perfcast\.[\w.]+)`", line)
        assert names, kind
        for dotted in names:
            module, _, attr = dotted.rpartition(".")
            assert hasattr(importlib.import_module(module), attr), dotted
