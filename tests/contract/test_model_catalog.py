"""Contract: the packaged model catalog is complete, sourced, and names every model the ground truth uses.

Ground truth is found through ``PERFCAST_GROUNDTRUTH``, a ``shared/groundtruth``
folder above this file, or ``/work/shared/groundtruth``; the tests that need it
skip with the reason when none exists.
"""

from __future__ import annotations

import csv
import gzip
import json
import re
from pathlib import Path

import pytest
import yaml

from perfcast.catalog import list_models, load_model
from perfcast.catalog.paths import normalize_name
from perfcast.datafiles import data_dir, data_path
from perfcast.errors import UnknownNameError, UnsupportedError
from perfcast.groundtruth.files import find_groundtruth

MODELS_DIR = data_dir("models")
JSON_FILES = sorted(MODELS_DIR.glob("*.json"))
MODEL_IDS = [p.stem for p in JSON_FILES]

# training.csv `params_b` is nominal ("1.7") or NumParams/1e9 (llm-foundry); a correct shape lands within
# rounding of the nominal figure. llm-foundry counts grow with the run's max_seq_len (learned positions), so
# rows longer than the catalog model's max_positions are left out.
NOMINAL_PARAMS_TOLERANCE = 0.05


GROUNDTRUTH = find_groundtruth(required=False)
needs_groundtruth = pytest.mark.skipif(
    GROUNDTRUTH is None,
    reason="ground truth not found (set PERFCAST_GROUNDTRUTH, or place shared/groundtruth above the repo)",
)


# names the ground truth uses for checkpoints perfcast does not model, each -> (the model_type its refusal names,
# why it is refused); every other name in the tables must resolve (issue 16)
_VIDEO = ("diffusers video pipeline", "3D / spatio-temporal UNets")
NOT_MODELLED: dict[str, tuple[str, str]] = {
    "RWKV/rwkv-raven-7b": ("rwkv", "recurrent RWKV-4 blocks, no attention"),
    "facebook/chameleon-7b": ("chameleon", "early-fusion image-token model"),
    "facebook/chameleon-30b": ("chameleon", "early-fusion image-token model"),
    "microsoft/Phi-3-small-8k-instruct": ("phi3small", "blocksparse attention layers"),
    "microsoft/Phi-3-vision-128k-instruct": ("phi3_v", "remote-code HD image encoder"),
    "Neutralzz/BiLLa-7B-SFT": ("llama", "extended vocabulary of unknown size: no config shipped"),
    **dict.fromkeys((
        "ali-vilab/i2vgen-xl", "ali-vilab/text-to-video-ms-1.7b", "guoyww/animatediff-motion-adapter-v1-5-3",
        "stabilityai/stable-video-diffusion-img2vid", "stabilityai/stable-video-diffusion-img2vid-xt"), _VIDEO),
    **dict.fromkeys(("kandinsky-community/kandinsky-2-2-decoder", "kandinsky-community/kandinsky-3"),
                    ("diffusers kandinsky pipeline", "image-embedding UNet + MoVQ; Kandinsky 3's own UNet")),
    "stabilityai/stable-diffusion-3-medium-diffusers": ("sd3_transformer_2d", "MMDiT denoiser"),
    "segmind/SSD-1B": ("unet_2d_condition", "distilled SDXL whose per-block config is not shipped"),
}
# the tables whose model columns name checkpoints (energy, online serving), beside the published and vidur ones
_MODEL_ID_TABLES = ("energy/llm_serving_energy.csv", "energy/mllm_serving_energy.csv", "energy/diffusion_energy.csv",
                    "energy/legacy_v1_bs1_llm_energy.csv", "serving_online/serving_online.csv")
# Megatron-Bridge appends the routing mode to a MoE model's name: "Qwen3_30B_a3B (tokendrop)"
ROUTING_QUALIFIER = re.compile(r"\s*\((dropless|tokendrop)\)$")


def _csv_rows(path: Path) -> list[dict[str, str]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def _groundtruth_names() -> list[str]:
    """Every model name the ground-truth tables use, as written there."""
    if GROUNDTRUTH is None:
        return []
    names: set[str] = set()
    for table in ("training.csv", "inference.csv"):
        path = GROUNDTRUTH / "published" / table
        if path.exists():
            for row in _csv_rows(path):
                names.update(ROUTING_QUALIFIER.sub("", v) for v in (row.get("model_id", ""), row.get("model", ""))
                             if v.strip())
    for table in _MODEL_ID_TABLES:
        path = GROUNDTRUTH / table
        if path.exists():
            for row in _csv_rows(path):
                names.update(v.strip() for v in (row.get("model_id", ""), row.get("base_model_id", "")) if v.strip())
    compute = GROUNDTRUTH / "vidur" / "compute"
    if compute.is_dir():
        names.update(d.name for d in compute.glob("*/*") if d.is_dir())
    vidur_models = GROUNDTRUTH / "vidur" / "configs" / "models.json"
    if vidur_models.exists():
        names.update(m["name"] for m in json.loads(vidur_models.read_text())["models"])
    neusight = GROUNDTRUTH / "neusight"
    names.update(p.stem for p in (neusight / "models").glob("*.json"))
    for table in ("e2e.csv", "e2e_extra.csv"):
        if (neusight / table).exists():
            names.update(row["model"] for row in _csv_rows(neusight / table))
    return sorted(names)


def test_catalog_is_not_empty() -> None:
    assert len(JSON_FILES) >= 50


@pytest.mark.parametrize("path", JSON_FILES, ids=MODEL_IDS)
def test_every_config_has_a_sourced_sidecar(path: Path) -> None:
    sidecar = path.with_suffix(".yaml")
    assert sidecar.exists(), f"{path.name} has no sidecar {sidecar.name}"
    meta = yaml.safe_load(sidecar.read_text(encoding="utf-8"))
    assert set(meta) == {"hf_id", "aliases", "source", "notes"}, f"{sidecar.name} keys: {sorted(meta)}"
    assert isinstance(meta["source"], list) and all(isinstance(s, str) and s.strip() for s in meta["source"])
    assert meta["source"], f"{sidecar.name} has an empty source"
    assert isinstance(meta["aliases"], list)
    assert meta["hf_id"] is None or "/" in meta["hf_id"]


@pytest.mark.parametrize("path", JSON_FILES, ids=MODEL_IDS)
def test_every_config_is_a_hf_config_json(path: Path) -> None:
    raw = json.loads(path.read_text(encoding="utf-8"))
    assert isinstance(raw.get("model_type"), str) and raw["model_type"]
    assert isinstance(raw.get("architectures"), list) and raw["architectures"]


def test_ids_are_lowercase_with_dashes() -> None:
    for model_id in MODEL_IDS:
        assert model_id == normalize_name(model_id), model_id
        assert "_" not in model_id and " " not in model_id


@pytest.mark.parametrize("model_id", MODEL_IDS)
def test_every_model_loads(model_id: str) -> None:
    cfg = load_model(model_id)
    assert cfg.id == model_id
    assert cfg.source, f"{model_id} lost its source"
    assert cfg.num_params() > 0
    assert 0 < cfg.num_active_params() <= cfg.num_params()
    if cfg.moe is None and cfg.vision is None:
        assert cfg.num_active_params() == cfg.num_params()


def test_list_models_matches_the_files() -> None:
    ids = [m.id for m in list_models()]
    assert ids == sorted(ids)
    assert set(MODEL_IDS) <= set(ids)


def test_names_are_unique_across_models() -> None:
    owner: dict[str, str] = {}
    for path in JSON_FILES:
        meta = yaml.safe_load(path.with_suffix(".yaml").read_text(encoding="utf-8"))
        names = [path.stem, *meta["aliases"], *([meta["hf_id"]] if meta["hf_id"] else [])]
        for name in names:
            key = normalize_name(name)
            assert owner.setdefault(key, path.stem) == path.stem, (
                f"{name!r} names both {owner[key]} and {path.stem}"
            )


def test_unknown_name_lists_the_nearest() -> None:
    with pytest.raises(UnknownNameError, match="llama-2-7b"):
        load_model("llama-2-7c")


@needs_groundtruth
@pytest.mark.parametrize("name", _groundtruth_names())
def test_every_groundtruth_model_name_resolves_or_is_refused_naming_its_architecture(name: str) -> None:
    if name in NOT_MODELLED:
        model_type, _why = NOT_MODELLED[name]
        with pytest.raises(UnsupportedError) as err:
            load_model(name)
        message = str(err.value)
        assert "\n" not in message and message.startswith(f"{name}: ")
        assert f"model_type {model_type!r} is not modelled" in message or f"a {model_type} checkpoint" in message
        return
    cfg = load_model(name)
    assert cfg.num_layers > 0


def test_every_unmodelled_name_is_listed_here_and_none_resolves() -> None:
    """The shipped refusals and this test's list agree, and no refused name has gained a catalog config (an entry
    left behind when an architecture becomes modelled would be dead)."""
    from perfcast.catalog.unmodelled import unmodelled_entries

    listed = {name: entry.model_type for entry in unmodelled_entries().values() for name in entry.names}
    assert {k: v[0] for k, v in NOT_MODELLED.items()}.items() <= listed.items()
    _, catalog_names = _catalog_names()
    stale = sorted(n for n in listed if normalize_name(n) in catalog_names)
    assert not stale, f"names both in the catalog and in data/models/unmodelled/: {stale}"


def test_an_unmodelled_entry_names_an_unsupported_model_type_unless_it_says_the_architecture_is_modelled() -> None:
    """When an architecture becomes modelled, its entry must go (or its checkpoints get catalog configs): a stale
    entry would refuse them with a wrong reason."""
    from perfcast.catalog.normalize import supported_model_types
    from perfcast.catalog.unmodelled import unmodelled_entries

    supported = set(supported_model_types())
    for slug, entry in unmodelled_entries().items():
        assert (entry.model_type in supported) == entry.architecture_modelled, slug


def _catalog_names() -> tuple[object, dict[str, str]]:
    from perfcast.catalog.models import _catalog

    return _catalog()


@needs_groundtruth
def test_groundtruth_names_were_found() -> None:
    assert len(_groundtruth_names()) > 100


@needs_groundtruth
@pytest.mark.parametrize(
    ("model_id", "neusight_file"),
    [
        ("bert-base", "bert.json"),
        ("bert-large", "bert_large.json"),
        ("gpt2-medium", "gpt2_med.json"),
        ("gpt2-large", "gpt2_large.json"),
        ("gpt2-xl", "gpt2_xl.json"),
        ("gpt3-xl", "gpt3_xl.json"),
        ("gpt3-2.7b", "gpt3_27.json"),
        ("gpt3-6.7b", "gpt3_67.json"),
        ("gpt3-13b", "gpt3_13.json"),
        ("opt-1.3b", "opt_13.json"),
        ("switch-xl", "switchxl4.json"),
        ("opt-toy-1layer", "opt.json"),
    ],
)
def test_neusight_configs_are_verbatim(model_id: str, neusight_file: str) -> None:
    original = GROUNDTRUTH / "neusight" / "models" / neusight_file
    if not original.exists():
        pytest.skip(f"{original} not present")
    assert (MODELS_DIR / f"{model_id}.json").read_bytes() == original.read_bytes()
    assert load_model(Path(neusight_file).stem).id == model_id


def _training_rows_with_params() -> list[tuple[str, str, str]]:
    if GROUNDTRUTH is None or not (GROUNDTRUTH / "published" / "training.csv").exists():
        return []
    seen: dict[tuple[str, str], str] = {}
    for row in _csv_rows(GROUNDTRUTH / "published" / "training.csv"):
        name = row["model_id"] or row["model"]
        if row["params_b"] and name:
            seen.setdefault((name, row["params_b"]), row["seq_len"])
    return [(name, params, seq) for (name, params), seq in sorted(seen.items())]


@needs_groundtruth
@pytest.mark.parametrize(("name", "params_b", "seq_len"), _training_rows_with_params())
def test_catalog_sizes_match_published_params(name: str, params_b: str, seq_len: str) -> None:
    # Expected value: the `params_b` column of published/training.csv (its `source` column names the paper
    # or README of each row).
    cfg = load_model(name)
    if seq_len and int(seq_len) > cfg.max_positions:
        pytest.skip(f"run used {seq_len} tokens; the catalog model has {cfg.max_positions} positions")
    expected = float(params_b) * 1e9
    assert cfg.num_params() == pytest.approx(expected, rel=NOMINAL_PARAMS_TOLERANCE)


def _vidur_models() -> list[dict[str, object]]:
    path = GROUNDTRUTH / "vidur" / "configs" / "models.json" if GROUNDTRUTH else None
    if path is None or not path.exists():
        return []
    return json.loads(path.read_text())["models"]


@needs_groundtruth
@pytest.mark.parametrize("vidur", _vidur_models(), ids=lambda m: str(m["name"]))
def test_shapes_agree_with_vidur(vidur: dict[str, object]) -> None:
    # An independent transcription of the same models (vidur/config/model_config.py). Vidur pads some
    # vocabularies and shortens some contexts, so vocab_size and max positions are not compared.
    cfg = load_model(str(vidur["name"]))
    assert cfg.num_layers == vidur["num_layers"]
    assert cfg.hidden_size == vidur["embedding_dim"]
    assert cfg.num_heads == vidur["num_q_heads"]
    assert cfg.num_kv_heads == vidur["num_kv_heads"]
    assert cfg.head_dim == vidur["head_dim"]
    assert cfg.intermediate_size == vidur["mlp_hidden_dim"]
    assert cfg.gated_mlp == vidur["use_gated_mlp"]
    assert cfg.qkv_bias == vidur["use_qkv_bias"]
    assert cfg.mlp_bias == vidur["use_bias"]
    assert cfg.rotary_frac == pytest.approx(vidur["partial_rotary_factor"])
    assert cfg.norm == {"rms_norm": "rmsnorm", "layer_norm": "layernorm"}[str(vidur["norm"])]
    assert (cfg.num_norms_per_layer == 2) == vidur["post_attn_norm"]


def test_hf_config_defaults_are_sourced_data_for_supported_types() -> None:
    """The transformers config-class defaults are a data file: every family names its source and holds a mapping
    of defaults, and every family is a model_type (or a vision tower) the normalizers read."""
    from perfcast.catalog.normalize import supported_model_types

    path = data_path("defaults", "hf_config_defaults.yaml")
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    towers = {"clip_vision_model", "llama4_vision_model"}
    assert set(data) <= set(supported_model_types()) | towers
    for family, entry in data.items():
        assert set(entry) == {"source", "defaults"}, family
        assert entry["source"].strip() and isinstance(entry["defaults"], dict) and entry["defaults"], family
