"""Model catalog: Hugging Face ``config.json`` files, normalized into one typed view.

Each shipped model is ``data/models/<id>.json`` (the HF config, verbatim) plus
``data/models/<id>.yaml`` (``hf_id``, ``aliases``, ``source``, ``notes``). Any
path to a ``config.json`` is accepted too. Synthetic Megatron-style GPT shapes
("GPT-18B (hidden 6144, 40 layers, vocab 51200)") are built from the numbers in
their name by :func:`perfcast.catalog.synthetic.parse_synthetic_gpt`.

``ModelConfig`` keeps the HF config and exposes the architecture in plain
fields (``hidden_size``, ``num_heads``, ``num_kv_heads``, ``head_dim`` ...) that
the workload builders read. The field meanings follow HF conventions; where HF
families disagree the normalizer in :func:`from_hf_config` decides and says why.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from perfcast.catalog.paths import catalog_dirs, normalize_name
from perfcast.errors import CatalogError, ConfigError, UnknownNameError

__all__ = ["MLAConfig", "MoEConfig", "ModelConfig", "from_hf_config", "list_models", "load_model"]


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MoEConfig(_Frozen):
    """Mixture-of-experts feed-forward layers.

    A layer ``i`` (0-based, per stack) is an MoE layer iff ``i >= first_dense_layers``
    and ``(i + 1) % layer_step == 0``: step 1 = every layer (Mixtral), step 2 = every
    second layer starting at layer 1 (Switch, Llama-4 Maverick).
    """

    num_experts: int = Field(gt=0)
    experts_per_token: int = Field(gt=0, description="top-k routed experts per token")
    expert_intermediate_size: int = Field(gt=0)
    num_shared_experts: int = Field(default=0, ge=0)
    shared_intermediate_size: int = Field(default=0, ge=0, description="per shared expert")
    layer_step: int = Field(default=1, gt=0)
    first_dense_layers: int = Field(default=0, ge=0)
    expert_capacity_tokens: int | None = Field(default=None, description="fixed capacity (Switch); None = dropless")
    gated: bool = True

    def is_moe_layer(self, index: int) -> bool:
        """Whether layer ``index`` (0-based) of a stack is an MoE layer."""
        return index >= self.first_dense_layers and (index + 1) % self.layer_step == 0

    def num_moe_layers(self, num_layers: int) -> int:
        """How many of ``num_layers`` layers are MoE layers."""
        return sum(self.is_moe_layer(i) for i in range(num_layers))


class MLAConfig(_Frozen):
    """Multi-head latent attention (DeepSeek-V2/V3): low-rank compressed K/V (and Q)."""

    q_lora_rank: int | None = None
    kv_lora_rank: int = Field(gt=0)
    qk_nope_head_dim: int = Field(gt=0)
    qk_rope_head_dim: int = Field(gt=0)
    v_head_dim: int = Field(gt=0)


class ModelConfig(_Frozen):
    """A model architecture, normalized from its Hugging Face config.

    Sizes are counts (elements); ``num_layers`` is the decoder stack for decoder
    models, the encoder stack for encoders and encoder-decoders (then
    ``num_decoder_layers`` is the decoder stack).
    """

    id: str
    hf_id: str | None = None
    aliases: tuple[str, ...] = ()
    source: tuple[str, ...] = ()
    notes: str = ""
    model_type: str = Field(description="HF model_type, e.g. gpt2, llama, bert")
    kind: Literal["decoder", "encoder", "encoder-decoder"]
    num_layers: int = Field(gt=0)
    num_decoder_layers: int = Field(default=0, ge=0)
    hidden_size: int = Field(gt=0)
    num_heads: int = Field(gt=0)
    num_kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    intermediate_size: int = Field(gt=0)
    vocab_size: int = Field(gt=0)
    max_positions: int = Field(gt=0)
    norm: Literal["layernorm", "rmsnorm"] = "layernorm"
    activation: str = "gelu"
    gated_mlp: bool = False
    qkv_bias: bool = True
    out_bias: bool = True
    mlp_bias: bool = True
    parallel_block: bool = Field(default=False, description="attention and MLP read the same input (GPT-J, phi-2, Falcon)")
    position: Literal["learned", "rotary", "alibi", "relative", "none"] = "learned"
    tie_word_embeddings: bool = True
    type_vocab_size: int = 0
    sliding_window: int | None = None
    moe: MoEConfig | None = None
    mla: MLAConfig | None = None
    hf_config: dict[str, Any] = Field(default_factory=dict, repr=False)

    @property
    def q_dim(self) -> int:
        """Width of the query projection output (heads x head_dim)."""
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of one of the K or V projection outputs (kv heads x head_dim)."""
        return self.num_kv_heads * self.head_dim

    def num_params(self) -> int:
        """Total parameters (all experts), counted from the architecture; see :mod:`perfcast.catalog.params`."""
        from perfcast.catalog.params import count_params

        return count_params(self).total

    def num_active_params(self) -> int:
        """Parameters touched per token (routed experts counted top-k times)."""
        from perfcast.catalog.params import count_params

        return count_params(self).active


def from_hf_config(raw: dict[str, Any], *, model_id: str, meta: dict[str, Any] | None = None) -> ModelConfig:
    """Normalize a Hugging Face config dict into a ModelConfig (raises CatalogError)."""
    from perfcast.catalog.normalize import normalize_hf

    meta = meta or {}
    try:
        fields = normalize_hf(raw)
    except (KeyError, TypeError, ValueError) as exc:
        raise CatalogError(f"{model_id}: cannot read the config ({exc.__class__.__name__}: {exc})") from None
    try:
        return ModelConfig(
            id=model_id,
            hf_id=meta.get("hf_id"),
            aliases=tuple(meta.get("aliases", ())),
            source=tuple(meta.get("source", ())),
            notes=meta.get("notes", ""),
            hf_config=raw,
            **fields,
        )
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "(root)"
        raise CatalogError(f"{model_id}: config field {where}: {err['msg']}") from None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        with path.open(encoding="utf-8") as fh:
            raw = json.load(fh)
    except OSError as exc:
        raise ConfigError(f"cannot read model config {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{path}: malformed config.json (line {exc.lineno}: {exc.msg}); expected a Hugging Face config.json object"
        ) from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: a config.json must be a JSON object of fields")
    return raw


def _read_meta(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise CatalogError(f"{path.with_suffix('.json')}: missing sidecar {path.name} with its source")
    with path.open(encoding="utf-8") as fh:
        meta = yaml.safe_load(fh) or {}
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
            files[model_id] = (path, meta)
            aliases = [model_id, *meta.get("aliases", [])]
            if meta.get("hf_id"):
                aliases.append(meta["hf_id"])
            for alias in aliases:
                names[normalize_name(alias)] = model_id
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
    """Look up a model by id, alias, HF repo id, synthetic GPT name, or path to a config.json."""
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
    from perfcast.catalog.synthetic import parse_synthetic_gpt

    synthetic = parse_synthetic_gpt(text)
    if synthetic is not None:
        return synthetic
    raise UnknownNameError("model", text, files.keys(), list_command="perfcast models list")
