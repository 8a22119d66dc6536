"""Serving engines as data: one profile per engine and version (``data/engines/<id>.yaml``).

vLLM, SGLang and TensorRT-LLM schedule differently (which requests share an iteration, whether prompts are
chunked, the token and sequence budgets), hide more or less of their CPU work behind the GPU (an overlap
scheduler, captured graphs), and reduce small tensor-parallel messages with their own all-reduce kernels
rather than NCCL. A profile states those settings with their sources; the scheduler plug-ins
(:mod:`perfcast.serving.schedulers`) stay the mechanism and the profile names the one to use and its limits.
What a profile cannot state, the CPU time an iteration exposes, is a fitted coefficient per engine
(:class:`perfcast.coefficients.serving.ServingCoefficients`), keyed by the profile's ``id``.

:func:`engine_settings` turns a profile into :class:`~perfcast.serving.config.ServingConfig` fields for one
GPU; ``perfcast serve --engine`` and a table's ``framework`` column select a profile, and what the user sets
explicitly wins over it.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from perfcast.datafiles import data_dir
from perfcast.errors import ConfigError, UnknownNameError
from perfcast.yamlio import read_yaml, validation_message

__all__ = ["EngineProfile", "engine_for_version", "engine_names", "engine_settings", "load_engine"]


class EngineProfile(BaseModel):
    """One serving engine's defaults (vLLM's flag names; base units) and where they come from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    name: str
    version: str = Field(description="the release line the defaults describe")
    family: str = Field(default="", description="the engine this is a version of (the id when empty)")
    since_version: str = Field(default="0", pattern=r"^[0-9]+(\.[0-9]+)*$", description="the first release the "
                               "profile describes: engine_for_version picks, of a family, the newest profile "
                               "since a release at or before the one asked")
    aliases: list[str] = []
    scheduler: str = Field(description="the scheduler plug-in that runs its policy")
    enable_chunked_prefill: bool
    max_num_seqs: int = Field(ge=1)
    max_num_batched_tokens: int = Field(ge=1, description="token budget per iteration (the chunk size when "
                                        "prefill is chunked)")
    large_gpu_memory_bytes: float | None = Field(default=None, gt=0, description="GPUs with at least this memory "
                                                 "take the large_gpu_* budgets")
    large_gpu_max_num_seqs: int | None = Field(default=None, ge=1)
    large_gpu_max_num_batched_tokens: int | None = Field(default=None, ge=1)
    gpu_memory_utilization: float = Field(gt=0, le=1)
    kv_fraction_of_free_memory: bool = Field(default=False, description="gpu_memory_utilization is a share of the "
                                             "memory the weights leave free (TensorRT-LLM), not of the GPU (vLLM)")
    custom_allreduce: bool = Field(description="small tensor-parallel all-reduces run the engine's one-shot / "
                                   "two-shot kernels over the GPUs' direct links, not NCCL")
    custom_allreduce_max_bytes: float = Field(ge=0)
    fp8_context_attention: bool = Field(description="prefill attention in FP8 with an FP8 KV cache on GPUs with "
                                        "FP8 tensor cores")
    attention_kernels: Literal["native", "fa2"] = Field(
        default="native", description="native: attention kernels built for the GPU (FlashAttention-3, FlashInfer, "
        "TensorRT-LLM's FMHA); fa2: FlashAttention-2, whose Ampere mma.sync reaches about 2/3 of the tensor peak "
        "of Hopper and later GPUs (perfcast.kernel.legacy_mma)")
    moe_expand_kernel: bool = Field(default=False, description="MoE: every token's top-k rows are copied into "
                                    "expert order by a kernel of their own that writes them quantized, and the "
                                    "gated activation writes the second grouped GEMM's quantized input "
                                    "(TensorRT-LLM's CUTLASS MoE runner); false: the grouped GEMM gathers its rows "
                                    "after one per-token quantize (vLLM's and SGLang's fused_moe)")
    sampler: Literal["none", "torch-fp32"] = Field(
        default="none", description="the sampler's GPU kernels beside the LM head, per sampling sequence over the "
        "full vocabulary: torch-fp32: PyTorch kernels in FP32 (vLLM's V0 Sampler: upcast, temperature, softmax, "
        "log-softmax, the multinomial draw, the sampled token's rank; perfcast.serving.iteration.TORCH_SAMPLER); "
        "none: not priced (the engine's profile does not state its sampler)")
    source: list[str]
    notes: str = ""

    def budgets(self, gpu_memory_bytes: float) -> tuple[int, int]:
        """``(max_num_seqs, max_num_batched_tokens)`` the engine defaults to on a GPU of that memory (bytes)."""
        if self.large_gpu_memory_bytes is not None and gpu_memory_bytes >= self.large_gpu_memory_bytes:
            return (self.large_gpu_max_num_seqs or self.max_num_seqs,
                    self.large_gpu_max_num_batched_tokens or self.max_num_batched_tokens)
        return self.max_num_seqs, self.max_num_batched_tokens


def _load_file(path: Path) -> EngineProfile:
    raw = read_yaml(path, what="an engine profile", error=ConfigError)
    try:
        return EngineProfile.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"{path}: {validation_message(exc, EngineProfile)}") from None


@cache
def _profiles() -> dict[str, EngineProfile]:
    out: dict[str, EngineProfile] = {}
    for path in sorted(data_dir("engines").glob("*.yaml")):
        prof = _load_file(path)
        if prof.id != path.stem:
            raise ConfigError(f"{path}: id {prof.id!r} differs from the file name")
        out[prof.id] = prof
    return out


@cache
def _names() -> dict[str, str]:
    names: dict[str, str] = {}
    for prof in _profiles().values():
        for n in (prof.id, *prof.aliases):
            names[n.lower()] = prof.id
    return names


def engine_names() -> list[str]:
    """The shipped engine profiles' ids."""
    return sorted(_profiles())


def load_engine(name: str | Path) -> EngineProfile:
    """The profile of engine ``name`` (an id or alias, any case; or a YAML path)."""
    if isinstance(name, Path) or str(name).endswith((".yaml", ".yml")):
        return _load_file(Path(name))
    key = str(name).strip().lower()
    found = _names().get(key)
    if found is None:
        raise UnknownNameError("engine", str(name), engine_names(),
                               hint="an engine profile is data/engines/<id>.yaml (vLLM's flag names)")
    return _profiles()[found]


def engine_settings(profile: EngineProfile, gpu_memory_bytes: float,
                    weight_bytes_per_gpu: float | None = None) -> dict[str, Any]:
    """:class:`~perfcast.serving.config.ServingConfig` fields the profile sets on a GPU of that memory (bytes):
    the engine, its scheduler and chunking, budgets and memory share. A profile whose share is of the memory
    the weights leave free (TensorRT-LLM) needs ``weight_bytes_per_gpu`` to state it as a share of the GPU
    (without it, the share is taken of the whole GPU)."""
    seqs, tokens = profile.budgets(gpu_memory_bytes)
    chunked = profile.enable_chunked_prefill
    share = profile.gpu_memory_utilization
    if profile.kv_fraction_of_free_memory and weight_bytes_per_gpu is not None and gpu_memory_bytes > 0:
        free = max(gpu_memory_bytes - weight_bytes_per_gpu, 0.0)
        share = min(1.0, max(0.5 * share, (weight_bytes_per_gpu + share * free) / gpu_memory_bytes))
    out: dict[str, Any] = {"engine": profile.id, "max_num_seqs": seqs, "gpu_memory_utilization": share}
    if profile.scheduler == "vllm" and chunked or profile.scheduler == "sarathi":
        out.update(scheduler="sarathi", chunk_size=tokens)
    elif profile.scheduler == "sglang":
        out.update(scheduler="sglang", chunk_size=tokens)
    else:
        out.update(scheduler=profile.scheduler, max_num_batched_tokens=tokens)
    return out


def _release(text: str) -> tuple[int, ...]:
    parts = []
    for p in text.strip().lstrip("v").split("."):
        digits = "".join(ch for ch in p if ch.isdigit()) if p else ""
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def engine_for_version(family: str, version: str) -> EngineProfile:
    """The profile of engine ``family`` (a profile id or alias, any case) that describes release ``version``
    (``"0.5.4"``): of the family's profiles, the one with the newest ``since_version`` at or before it."""
    fam = load_engine(family)
    key = fam.family or fam.id
    release = _release(version)
    if not release:
        raise ConfigError(f"engine version {version!r} is not a release number (e.g. 0.5.4)")
    found = [p for p in _profiles().values() if (p.family or p.id) == key and _release(p.since_version) <= release]
    if not found:
        raise ConfigError(f"no {key} profile describes release {version} (data/engines/*.yaml since_version)")
    return max(found, key=lambda p: _release(p.since_version))
