"""A catalog model: :class:`ModelConfig`, normalized from a Hugging Face ``config.json`` by
:func:`from_hf_config`, and the context check every layer applies to it.

The fields and their meanings are those of :class:`perfcast.catalog.architecture.ModelArchitecture`; this module
adds the parameter counts (:mod:`perfcast.catalog.params`). The catalog's files are read by
:mod:`perfcast.catalog.models`.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from perfcast.catalog.architecture import ModelArchitecture
from perfcast.catalog.params import count_params
from perfcast.errors import CatalogError, ConfigError, UnsupportedError

__all__ = ["ModelConfig", "check_context", "from_hf_config"]


class ModelConfig(ModelArchitecture):
    """A model architecture, normalized from its Hugging Face config (fields: :class:`ModelArchitecture`), with its
    parameter counts."""

    def num_params(self) -> int:
        """Total parameters (all experts), counted from the architecture; see :mod:`perfcast.catalog.params`."""
        return count_params(self).total

    def num_active_params(self) -> int:
        """Parameters touched per token (routed experts counted top-k times)."""
        return count_params(self).active


def check_context(cfg: ModelConfig, tokens: int, *, what: str = "sequence length") -> None:
    """Raise ConfigError when ``tokens`` exceed the model's context, ``cfg.max_positions``.

    One limit for every position scheme: a learned table ends at its last row, a
    rotary model at ``max_position_embeddings`` (or the longer context its
    ``rope_scaling`` was trained for; :func:`perfcast.catalog.normalize.normalize_hf`
    derives it), ALiBi models at their configured ``max_seq_len``. Relative-position
    models with no limit in their config (T5 / Switch) are bounded only by
    perfcast's own 2**20 tokens. CNNs and diffusion models have no token context
    (their ``seq_len`` is the image side) and are not checked.
    """
    if cfg.kind in ("cnn", "diffusion") or tokens <= cfg.max_positions:
        return
    limit = cfg.max_positions
    if cfg.position == "relative":
        where = f"the {limit} tokens perfcast models for {cfg.id} (relative positions, no limit in its config)"
    elif cfg.position == "learned":
        where = f"the {limit} learned positions of {cfg.id}"
    else:
        where = f"the {limit}-token context of {cfg.id}"
    raise ConfigError(f"{what} {tokens} exceeds {where}; use a {what} in 1..{limit}")


_MAX_SIZE = 2**31  # widths, vocabularies, positions: far beyond any real model; FLOP counts stay finite floats


def _check_sizes(fields: dict[str, Any], model_id: str, where: str = "") -> None:
    """Refuse sizes no model has (a typo like 1e153) before they overflow the FLOP arithmetic."""
    for key, value in fields.items():
        if isinstance(value, dict):
            _check_sizes(value, model_id, f"{where}{key}.")
        elif isinstance(value, int) and not isinstance(value, bool) and value > _MAX_SIZE:
            raise CatalogError(f"{model_id}: config field {where}{key}={value} is beyond what perfcast models "
                               f"(at most {_MAX_SIZE})")


def from_hf_config(raw: dict[str, Any], *, model_id: str, meta: dict[str, Any] | None = None) -> ModelConfig:
    """Normalize a Hugging Face config dict into a ModelConfig (raises CatalogError)."""
    from perfcast.catalog.normalize import normalize_hf

    meta = meta or {}
    try:
        fields = normalize_hf(raw)
    except UnsupportedError as exc:  # an architecture or format perfcast does not model: its own message
        raise UnsupportedError(f"{model_id}: {exc.message}", hint=exc.hint) from None
    except (KeyError, TypeError, ValueError, ArithmeticError) as exc:  # ArithmeticError: 0 heads, Infinity
        raise CatalogError(f"{model_id}: cannot read the config ({exc.__class__.__name__}: {exc})") from None
    _check_sizes(fields, model_id)
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
        where = ".".join(str(p) for p in err["loc"])
        if not where:  # a check across fields: its message names them
            raise CatalogError(f"{model_id}: {str(err['msg']).removeprefix('Value error, ')}") from None
        raise CatalogError(f"{model_id}: config field {where}: {err['msg']}") from None
