"""Model catalog: Hugging Face ``config.json`` files, normalized into one typed view.

Each shipped model is ``perfcast/data/models/<id>.json`` (the HF config, verbatim) plus
``data/models/<id>.yaml`` (``hf_id``, ``aliases``, ``source``, ``notes``); checkpoints perfcast knows by name
but does not model are listed in ``data/models/unmodelled/`` and refused naming their ``model_type``. Any
path to a ``config.json`` is accepted too. Synthetic Megatron-style GPT shapes
("GPT-18B (hidden 6144, 40 layers, vocab 51200)") are built from the numbers in
their name by :func:`perfcast.catalog.synthetic.parse_synthetic_gpt`.

``ModelConfig`` keeps the HF config and exposes the architecture in plain
fields (``hidden_size``, ``num_heads``, ``num_kv_heads``, ``head_dim`` ...) that
the workload builders read. The field meanings follow HF conventions; where HF
families disagree the normalizer in :func:`from_hf_config` decides and says why.
This module reads the catalog's files; the schema is :mod:`perfcast.catalog.architecture` (the fields) and
:mod:`perfcast.catalog.model_config` (``ModelConfig``, :func:`from_hf_config`, :func:`check_context`), whose names
it re-exports.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from perfcast.catalog.architecture import MLAConfig, MoEConfig, ResNetConfig, VisionConfig
from perfcast.catalog.model_config import ModelConfig, check_context, from_hf_config
from perfcast.catalog.paths import catalog_dirs, normalize_name
from perfcast.catalog.quantization import QuantizationConfig
from perfcast.catalog.synthetic import parse_synthetic_gpt
from perfcast.catalog.unmodelled import unmodelled_refusal
from perfcast.errors import CatalogError, ConfigError, UnknownNameError
from perfcast.jsonio import read_json
from perfcast.yamlio import safe_load

__all__ = [
    "MLAConfig",
    "MoEConfig",
    "ModelConfig",
    "QuantizationConfig",
    "ResNetConfig",
    "VisionConfig",
    "check_context",
    "from_hf_config",
    "list_models",
    "load_model",
]


def _read_json(path: Path) -> dict[str, Any]:
    raw = read_json(path, what="config.json", error=ConfigError)  # bounded: size, nesting, finite numbers
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: a config.json must be a JSON object of fields")
    return raw


def _read_meta(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise CatalogError(f"{path.with_suffix('.json')}: missing sidecar {path.name} with its source")
    with path.open(encoding="utf-8") as fh:
        meta = safe_load(fh) or {}
    if not isinstance(meta, dict) or not meta.get("source"):
        raise CatalogError(f"{path}: sidecar must be a mapping with a non-empty `source`")
    src = meta["source"]
    meta["source"] = [src] if isinstance(src, str) else list(src)
    return meta


@lru_cache(maxsize=1)
def _catalog() -> tuple[dict[str, tuple[Path, dict[str, Any]]], dict[str, str]]:
    files: dict[str, tuple[Path, dict[str, Any]]] = {}
    names: dict[str, str] = {}
    for folder in catalog_dirs("models"):
        for path in sorted(folder.glob("*.json")):
            meta = _read_meta(path.with_suffix(".yaml"))
            model_id = path.stem
            if model_id in files:  # a user directory replaces a packaged model of the same id
                names = {k: v for k, v in names.items() if v != model_id}
            files[model_id] = (path, meta)
            aliases = [model_id, *meta.get("aliases", [])]
            if meta.get("hf_id"):
                aliases.append(meta["hf_id"])
            for alias in aliases:
                key = normalize_name(str(alias))
                other = names.get(key)
                if other is not None and other != model_id:
                    raise CatalogError(
                        f"{path.with_suffix('.yaml')}: name {alias!r} is already taken by model {other!r}; "
                        "ids, aliases and hf_ids must be unique across the catalog"
                    )
                names[key] = model_id
    return files, names


@lru_cache(maxsize=256)
def _load_catalog_model(model_id: str) -> ModelConfig:
    files, _ = _catalog()
    path, meta = files[model_id]
    return from_hf_config(_read_json(path), model_id=model_id, meta=meta)


def list_models() -> list[ModelConfig]:
    """Every catalog model, sorted by id."""
    files, _ = _catalog()
    return [_load_catalog_model(k) for k in sorted(files)]


def load_model(name: str | Path | ModelConfig) -> ModelConfig:
    """Look up a model by id, alias, HF repo id, synthetic GPT name, or path to a config.json.

    Raises UnsupportedError for a name listed in ``data/models/unmodelled/`` (a checkpoint of an architecture
    perfcast does not model; :mod:`perfcast.catalog.unmodelled`), UnknownNameError for any other unknown name.
    """
    if isinstance(name, ModelConfig):
        return name
    text = str(name)
    path = Path(text)
    if text.endswith(".json") or path.is_dir():
        if path.is_dir():
            path = path / "config.json"
        if not path.is_file():
            raise ConfigError(f"model config {path} does not exist; give a catalog id or a path to a config.json")
        return from_hf_config(_read_json(path), model_id=path.parent.name if path.name == "config.json" else path.stem)
    files, names = _catalog()
    key = names.get(normalize_name(text))
    if key is not None:
        return _load_catalog_model(key)
    synthetic = parse_synthetic_gpt(text)
    if synthetic is not None:
        return synthetic
    refusal = unmodelled_refusal(text)  # a known checkpoint of an architecture perfcast does not model
    if refusal is not None:
        raise refusal
    raise UnknownNameError("model", text, files.keys(), list_command="perfcast models list")
