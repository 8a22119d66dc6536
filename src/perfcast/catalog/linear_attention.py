"""Linear-attention mixer layers: Gated DeltaNet (Yang, Kautz & Hatamizadeh, arXiv:2412.06464) as Qwen3-Next uses
it beside gated full attention (:class:`GatedDeltaNetConfig`).

A Gated DeltaNet layer keeps, per sequence and value head, a ``key_head_dim x value_head_dim`` matrix state S and
updates it once per token: ``S <- exp(g) S + beta k (v - exp(g) S^T k)^T`` (a decayed delta rule), reading out
``o = S^T q``. Unlike attention its state does not grow with the sequence: what a serving engine keeps per
sequence is that state plus the causal conv1d's last ``conv_kernel - 1`` inputs (:meth:`state_elements`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["GatedDeltaNetConfig", "LinearLayerType"]

LinearLayerType = Literal["linear_attention", "full_attention"]


class GatedDeltaNetConfig(BaseModel):
    """Gated DeltaNet layers and the per-layer pattern of a hybrid linear / full attention stack (Qwen3-Next).

    The mixer (transformers' ``Qwen3NextGatedDeltaNet``): ``in_proj_qkvz`` (hidden -> q, k of ``key_dim`` each and
    v, z of ``value_dim`` each), ``in_proj_ba`` (hidden -> beta and the decay input a, one per value head), a
    bias-free depthwise causal conv1d over q, k, v (``conv_dim`` channels) and SiLU, ``beta = sigmoid(b)``, ``g =
    -exp(A_log) * softplus(a + dt_bias)``, L2-normalized q and k repeated from ``num_key_heads`` to
    ``num_value_heads`` heads, the chunked gated delta rule (``chunk_size`` tokens per chunk), a gated RMSNorm
    over each value head (weight ``value_head_dim``, times silu(z)) and ``out_proj`` (``value_dim`` -> hidden).

    ``layer_types`` has one entry per layer: ``linear_attention`` (this mixer) or ``full_attention`` (the model's
    attention). Every layer also has a feed-forward block (dense or MoE by ``ModelArchitecture.moe``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_key_heads: int = Field(gt=0, description="query/key heads (linear_num_key_heads)")
    num_value_heads: int = Field(gt=0, description="value heads, each with its own state (linear_num_value_heads)")
    key_head_dim: int = Field(gt=0, description="width of one query/key head (elements)")
    value_head_dim: int = Field(gt=0, description="width of one value head (elements)")
    conv_kernel: int = Field(gt=0, description="taps of the depthwise causal conv1d (tokens)")
    chunk_size: int = Field(
        default=64, gt=0, description="tokens per chunk of the chunked delta rule (fla's chunk_gated_delta_rule: 64)")
    layer_types: tuple[LinearLayerType, ...] = Field(description="each layer's mixer, one entry per layer")

    @model_validator(mode="after")
    def _check_heads(self) -> GatedDeltaNetConfig:
        if self.num_value_heads % self.num_key_heads:
            raise ValueError(f"linear_num_value_heads={self.num_value_heads} is not a multiple of "
                             f"linear_num_key_heads={self.num_key_heads}")
        return self

    @property
    def key_dim(self) -> int:
        """Width of q (and of k): key heads x key head width (elements)."""
        return self.num_key_heads * self.key_head_dim

    @property
    def value_dim(self) -> int:
        """Width of v (and of z and the output): value heads x value head width (elements)."""
        return self.num_value_heads * self.value_head_dim

    @property
    def conv_dim(self) -> int:
        """Channels of the causal conv1d: q, k and v."""
        return 2 * self.key_dim + self.value_dim

    @property
    def conv_state_elements(self) -> int:
        """Conv state of one layer and sequence (elements): the last ``conv_kernel - 1`` inputs of each channel."""
        return (self.conv_kernel - 1) * self.conv_dim

    @property
    def recurrent_state_elements(self) -> int:
        """Delta-rule state of one layer and sequence (elements): value heads x key head dim x value head dim."""
        return self.num_value_heads * self.key_head_dim * self.value_head_dim

    def state_elements(self) -> tuple[int, int]:
        """(conv state, recurrent state) of one Gated DeltaNet layer for one sequence, in elements; times the
        cache dtype's bytes per element for bytes. Neither grows with the sequence length."""
        return self.conv_state_elements, self.recurrent_state_elements

    def num_linear_layers(self) -> int:
        """Layers whose mixer is a Gated DeltaNet."""
        return sum(t == "linear_attention" for t in self.layer_types)
