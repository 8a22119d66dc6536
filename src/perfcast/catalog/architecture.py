"""A model's architecture as plain typed fields: :class:`ModelArchitecture` and its parts (MoE layers, latent
attention, a vision tower, a ResNet).

:mod:`perfcast.catalog.params` counts the parameters of a :class:`ModelArchitecture`, and
:class:`perfcast.catalog.model_config.ModelConfig` (a :class:`ModelArchitecture` with those counts) calls it: the
fields live here so that the two import in one direction.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from perfcast.catalog.diffusion import UNetConfig, VAEDecoderConfig
from perfcast.catalog.linear_attention import GatedDeltaNetConfig
from perfcast.catalog.quantization import QuantizationConfig

__all__ = ["AttentionLayerType", "MLAConfig", "MoEConfig", "ModelArchitecture", "ResNetConfig", "SSMConfig",
           "VisionConfig"]

AttentionLayerType = Literal["full", "sliding", "chunked"]


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MoEConfig(_Frozen):
    """Mixture-of-experts feed-forward layers.

    A layer ``i`` (0-based, per stack) is an MoE layer iff ``i >= first_dense_layers``
    and ``(i + 1) % layer_step == 0``: step 1 = every layer (Mixtral), step 2 = every
    second layer starting at layer 1 (Switch, Llama-4 Maverick).
    """

    num_experts: int = Field(gt=0, description="routed experts per MoE layer")
    experts_per_token: int = Field(gt=0, description="top-k routed experts per token")
    expert_intermediate_size: int = Field(gt=0, description="MLP width of one routed expert (elements)")
    num_shared_experts: int = Field(default=0, ge=0, description="experts every token goes through")
    shared_intermediate_size: int = Field(default=0, ge=0, description="MLP width per shared expert (elements)")
    shared_expert_gate: bool = Field(
        default=False,
        description="the shared experts' output is scaled by sigmoid(x @ w), w a bias-free hidden -> 1 linear "
        "(Qwen2-MoE)",
    )
    layer_step: int = Field(default=1, gt=0, description="every layer_step-th layer is MoE (see above)")
    first_dense_layers: int = Field(default=0, ge=0, description="leading dense layers (DeepSeek-V3: 3)")
    expert_capacity_tokens: int | None = Field(default=None, description="fixed capacity (Switch); None = dropless")
    gated: bool = Field(default=True, description="experts (routed and shared) are GLU MLPs: gate, up, down")
    expert_bias: bool = Field(default=False, description="expert up/gate and down projections carry biases (gpt-oss)")
    router_bias: bool = Field(
        default=False,
        description="router has a per-expert bias vector (gpt-oss; DeepSeek-V3's e_score_correction_bias)",
    )

    @model_validator(mode="after")
    def _check_top_k(self) -> MoEConfig:
        if self.experts_per_token > self.num_experts:
            raise ValueError(f"experts_per_token={self.experts_per_token} exceeds num_experts={self.num_experts}")
        return self

    def is_moe_layer(self, index: int) -> bool:
        """Whether layer ``index`` (0-based) of a stack is an MoE layer."""
        return index >= self.first_dense_layers and (index + 1) % self.layer_step == 0

    def num_moe_layers(self, num_layers: int) -> int:
        """How many of ``num_layers`` layers are MoE layers."""
        return sum(self.is_moe_layer(i) for i in range(num_layers))


class MLAConfig(_Frozen):
    """Multi-head latent attention (DeepSeek-V2/V3): low-rank compressed K/V (and Q).

    All sizes are element counts per token. Q = W_qb(norm(W_qa x)) with rank
    ``q_lora_rank`` (or W_q x when None); the cached latent is ``kv_lora_rank``
    + ``qk_rope_head_dim`` wide; K_nope and V come from W_kvb(norm(latent)).
    For an MLA model ``ModelConfig.head_dim`` is the query/key head width
    ``qk_nope_head_dim + qk_rope_head_dim`` and ``v_head_dim`` is the value width.
    """

    q_lora_rank: int | None = Field(default=None, description="rank of the query compression; None = full q_proj")
    kv_lora_rank: int = Field(gt=0, description="width of the cached K/V latent (elements)")
    qk_nope_head_dim: int = Field(gt=0, description="per-head query/key width without RoPE (elements)")
    qk_rope_head_dim: int = Field(gt=0, description="per-head query/key RoPE width; the key part is shared by heads")
    v_head_dim: int = Field(gt=0, description="per-head value width (elements)")


LayerMixer = Literal["ssm", "attention", "mlp", "moe"]


class SSMConfig(_Frozen):
    """State-space (Mamba) mixer layers, alone (Mamba, Mamba-2) or beside attention (Jamba, Nemotron-H).

    Mamba-1 (``version`` 1; Gu & Dao, arXiv:2312.00752): ``in_proj`` (hidden -> 2 x ``intermediate_size``: x and
    the gate z), a depthwise causal conv1d over x, ``x_proj`` (-> ``time_step_rank`` + 2 x ``state_size``: dt, B,
    C), ``dt_proj`` (``time_step_rank`` -> ``intermediate_size``, with bias), the selective scan with ``A_log``
    (``intermediate_size x state_size``) and ``D``, gating by silu(z), ``out_proj``. Its state per layer and
    sequence is ``intermediate_size x state_size`` (ssm) plus ``intermediate_size x (conv_kernel - 1)`` (conv).

    Mamba-2 (``version`` 2; Dao & Gu, arXiv:2405.21060): ``in_proj`` (hidden -> z, x, B, C, dt: 2 x
    ``intermediate_size`` + 2 x ``n_groups x state_size`` + ``num_heads``), a causal conv1d over x, B, C
    (``conv_dim`` channels), the SSD chunked scan over ``num_heads`` heads of ``head_dim`` with ``chunk_size``
    token chunks (``A_log``, ``D``, ``dt_bias`` one per head), a gated RMSNorm (weight ``intermediate_size``),
    ``out_proj``. Its state is ``num_heads x head_dim x state_size`` plus ``conv_dim x (conv_kernel - 1)``.

    ``layer_mixers`` has one entry per layer: ``ssm`` (a Mamba mixer), ``attention``, ``mlp`` (Nemotron-H's
    MLP-only layers) or ``moe`` (Nemotron 3's MoE-only layers, by ``ModelArchitecture.moe``); ``ffn_per_layer``
    says every layer also has a feed-forward block after its mixer (Jamba: dense or MoE by
    ``ModelArchitecture.moe``), else a layer is its mixer alone (Mamba, Nemotron-H).
    """

    version: Literal[1, 2] = Field(description="1 = Mamba (selective scan), 2 = Mamba-2 (SSD)")
    state_size: int = Field(gt=0, description="d_state: state elements per channel (Mamba-1) or per head dim")
    conv_kernel: int = Field(gt=0, description="taps of the depthwise causal conv1d (tokens)")
    intermediate_size: int = Field(gt=0, description="d_inner: width of x, z and the scan's output (elements)")
    time_step_rank: int = Field(default=0, ge=0, description="Mamba-1 rank of the dt projection (elements)")
    num_heads: int = Field(default=0, ge=0, description="Mamba-2 heads (each with its own A, D, dt)")
    head_dim: int = Field(default=0, ge=0, description="Mamba-2 head width (elements); heads x head_dim = d_inner")
    n_groups: int = Field(default=1, gt=0, description="Mamba-2 groups sharing one B and C (like GQA's KV heads)")
    chunk_size: int = Field(default=256, gt=0, description="Mamba-2 SSD chunk length (tokens)")
    proj_bias: bool = Field(default=False, description="in_proj and out_proj carry biases")
    conv_bias: bool = Field(default=True, description="the conv1d carries a bias")
    dt_norms: bool = Field(default=False, description="RMSNorms on dt, B and C (Jamba's mamba mixer)")
    layer_mixers: tuple[LayerMixer, ...] = Field(description="each layer's mixer, one entry per layer")
    ffn_per_layer: bool = Field(default=False, description="every layer has a dense or MoE FFN after its mixer")

    @model_validator(mode="after")
    def _check_heads(self) -> SSMConfig:
        if self.version == 1 and not self.time_step_rank:
            raise ValueError("a Mamba-1 mixer needs time_step_rank")
        if self.version == 2:
            if self.num_heads * self.head_dim != self.intermediate_size:
                raise ValueError(f"Mamba-2 num_heads x head_dim = {self.num_heads * self.head_dim} differs from "
                                 f"the intermediate size {self.intermediate_size}")
            if self.num_heads % self.n_groups:
                raise ValueError(f"Mamba-2 num_heads={self.num_heads} is not a multiple of n_groups={self.n_groups}")
        return self

    @property
    def conv_dim(self) -> int:
        """Channels of the conv1d: x (Mamba-1); x, B and C (Mamba-2)."""
        if self.version == 1:
            return self.intermediate_size
        return self.intermediate_size + 2 * self.n_groups * self.state_size

    @property
    def scan_heads(self) -> tuple[int, int, int]:
        """(heads, head_dim, groups) of the scan: Mamba-1 is d_inner heads of width 1 sharing one B and C."""
        if self.version == 1:
            return self.intermediate_size, 1, 1
        return self.num_heads, self.head_dim, self.n_groups

    @property
    def ssm_state_elements(self) -> int:
        """SSM state of one layer and sequence: d_inner x d_state (heads x head_dim x d_state for Mamba-2)."""
        return self.intermediate_size * self.state_size

    @property
    def conv_state_elements(self) -> int:
        """Conv state of one layer and sequence: the last conv_kernel - 1 inputs of each channel."""
        return self.conv_dim * (self.conv_kernel - 1)

    def cache_state_elements(self, tp: int = 1) -> tuple[int, int]:
        """(conv, ssm) state elements one serving GPU caches per sequence for ONE Mamba layer, ``tp`` GPUs
        splitting the mixer; multiply by the cache dtype's bytes (vLLM: the model dtype unless
        ``mamba_ssm_cache_dtype`` names another for the ssm part).

        vLLM's ``MambaStateShapeCalculator`` (v1 ``MambaSpec``): Mamba-1 conv ``(intermediate_size / tp,
        conv_kernel - 1)``, ssm ``(intermediate_size / tp, state_size)``; Mamba-2 conv ``(conv_kernel - 1,
        conv_dim / tp)`` with ``conv_dim = intermediate_size + 2 x n_groups x state_size``, ssm ``(num_heads / tp,
        head_dim, state_size)``. When ``tp`` does not divide ``n_groups`` the groups are replicated to ``tp``
        (``extra_groups_for_head_shards``: a single group becomes one per GPU). Integer division as vLLM's
        ``divide``, which the model's own tensor-parallel check makes exact.
        """
        if tp < 1:
            raise ValueError(f"tp={tp} must be >= 1")
        k = self.conv_kernel - 1
        if self.version == 1:
            inner = self.intermediate_size // tp
            return inner * k, inner * self.state_size
        groups = self.n_groups if self.n_groups % tp == 0 else self.n_groups + (tp - self.n_groups)
        conv_dim = self.intermediate_size + 2 * groups * self.state_size
        return k * (conv_dim // tp), (self.num_heads // tp) * self.head_dim * self.state_size

    def num_ssm_layers(self) -> int:
        """Layers whose mixer is a Mamba mixer."""
        return sum(m == "ssm" for m in self.layer_mixers)


class VisionConfig(_Frozen):
    """Vision encoder (a ViT) of a multimodal model and the projector into the text model.

    The encoder is a pre-LN ViT: a bias-free patch embedding (``num_channels *
    temporal_patch_size * patch_size_px**2 -> hidden_size``), by default a class token, learned positions for
    every patch plus the class token, LayerNorms with bias before and after the
    stack (``stack_norms``), and ``num_layers`` blocks of biased MHA + biased non-gated MLP
    (CLIP ViT-L/14-336 for LLaVA-1.5 and LLaVA-NeXT, Llama-4's 34-layer ViT). The projector is
    a chain of linear layers whose widths are ``projector_dims`` (first = the
    width entering it, last = the text model's hidden size), with a GELU between two of them.

    The other fields describe today's towers; their defaults are the ViT above:

    * Qwen2-VL / Qwen2.5-VL: a Conv3d patch embedding over ``temporal_patch_size`` (2) frames (an image is
      repeated to 2), 2D rotary positions (``position`` rotary: no table, no class token), no norms around the
      stack, RMSNorm + gated SiLU MLP (2.5), window attention over ``window_patches`` patches except in
      ``full_attention_blocks`` (2.5), then the patch merger: a norm (``merge_norm``), ``spatial_merge_size**2``
      neighbouring patches concatenated into one token, and the projector MLP;
    * Pixtral (Mistral 3): 2D rotary, one RMSNorm before the stack, RMSNorm + bias-free gated SiLU MLP, then the
      projector's RMSNorm, the patch merger's bias-free ``merge_linear`` (``4 x hidden -> hidden``) and the
      projector;
    * LLaVA-NeXT anyres: one image is ``tiles_per_image`` tiles of ``image_size_px`` (the base image and the grid
      tiles), each through the tower and projector (``projector_tokens_per_image`` tokens in all), plus a learned
      ``image_newline`` vector (the text width) after each row of features.

    ``image_size_px`` is the side of the square image the tower is priced on (for tiled towers, of one tile);
    ``num_image_tokens`` are the text-sequence tokens one such image becomes (merged patches plus row-break /
    newline tokens).
    """

    model_type: str = Field(description="HF model_type of the vision config, e.g. clip_vision_model")
    num_layers: int = Field(gt=0, description="ViT blocks")
    hidden_size: int = Field(gt=0, description="ViT width (elements)")
    num_heads: int = Field(gt=0, description="attention heads per ViT block")
    intermediate_size: int = Field(gt=0, description="ViT MLP width (elements)")
    image_size_px: int = Field(gt=0, description="side of the (square) input image or tile, pixels")
    patch_size_px: int = Field(gt=0, description="side of one square patch, pixels")
    num_channels: int = Field(default=3, gt=0, description="input image channels")
    activation: str = Field(default="gelu", description="ViT MLP activation, HF spelling")
    projector_dims: tuple[int, ...] = Field(
        default=(), description="widths of the projector's linear chain, input first (elements)"
    )
    projector_bias: bool = Field(default=True, description="the projector's linear layers carry biases")
    num_image_tokens: int = Field(gt=0, description="text-sequence tokens one image (tile) becomes")
    norm: Literal["layernorm", "rmsnorm"] = Field(default="layernorm", description="the tower's norms")
    position: Literal["learned", "rotary"] = Field(
        default="learned", description="learned: a position table (and class token); rotary: 2D RoPE, no table")
    class_token: bool = Field(default=True, description="a learned class token joins the patches")
    stack_norms: int = Field(default=2, ge=0, le=2, description="norms around the stack: CLIP's pre and post "
                             "LayerNorm (2), Pixtral's ln_pre (1), none (Qwen2-VL)")
    gated_mlp: bool = Field(default=False, description="the ViT MLP is gate/up/down (Qwen2.5-VL, Pixtral)")
    attention_bias: bool = Field(default=True, description="q/k/v and output projections carry biases")
    mlp_bias: bool = Field(default=True, description="the ViT MLP's projections carry biases")
    temporal_patch_size: int = Field(default=1, gt=0, description="frames one patch spans (Qwen2-VL's Conv3d: 2)")
    spatial_merge_size: int = Field(default=1, gt=0, description="patches merged per side into one token (2 = 4 "
                                    "patches -> 1)")
    merge_norm: bool = Field(default=False, description="a norm over the patches before merging (Qwen ln_q, "
                             "Mistral 3's projector norm)")
    merge_linear: bool = Field(default=False, description="a bias-free merge_size**2 x hidden -> hidden linear "
                               "after merging (Pixtral's patch merger)")
    window_patches: int | None = Field(default=None, gt=0, description="side of an attention window in patches "
                                       "(Qwen2.5-VL: 8); None = every block attends over the whole image")
    full_attention_blocks: tuple[int, ...] = Field(default=(), description="0-based blocks with full attention "
                                                   "when the others use windows")
    tiles_per_image: int = Field(default=1, gt=0, description="tiles of image_size_px one image is cut into")
    projector_tokens_per_image: int | None = Field(
        default=None, gt=0, description="tokens through the projector per image; None = num_image_tokens")
    image_newline: bool = Field(default=False, description="a learned text-width newline vector (LLaVA-NeXT)")

    @model_validator(mode="after")
    def _check_tower(self) -> VisionConfig:
        if any(not 0 <= i < self.num_layers for i in self.full_attention_blocks):
            raise ValueError(f"full_attention_blocks must be block indices in [0, {self.num_layers})")
        if len(set(self.full_attention_blocks)) != len(self.full_attention_blocks):
            raise ValueError("full_attention_blocks lists a block twice")
        if self.num_patches % self.spatial_merge_size**2:
            raise ValueError(f"{self.num_patches} patches do not merge {self.spatial_merge_size} x "
                             f"{self.spatial_merge_size} into whole tokens")
        return self

    @property
    def num_patches(self) -> int:
        """Patches per image (tile), without the class token."""
        return (self.image_size_px // self.patch_size_px) ** 2

    @property
    def patch_in_features(self) -> int:
        """Pixels (times channels and frames) one patch embedding reads."""
        return self.num_channels * self.temporal_patch_size * self.patch_size_px**2


_MAX_CNN_SIZE = 2**31  # channels, pixels, blocks per stage: far beyond any real CNN; FLOP counts stay finite


class ResNetConfig(_Frozen):
    """A ResNet image classifier as HF ``ResNetModel`` / torchvision build it (ResNet v1.5).

    The stem (HF ``embedder``) is a bias-free 7x7 stride-2 convolution to
    ``embedding_size`` channels, BatchNorm, ReLU and a 3x3 stride-2 max pool.
    Then one stage per entry of ``depths``/``hidden_sizes``: ``depths[i]``
    residual blocks whose output width is ``hidden_sizes[i]``. A ``basic`` block
    (ResNet-18/34) is two 3x3 convolutions; a ``bottleneck`` block
    (ResNet-50/101/152) is 1x1, 3x3, 1x1 convolutions with an inner width of
    ``hidden_sizes[i] / 4``. Every convolution is bias-free and followed by a
    BatchNorm (weight and bias per channel). The first block of every stage but
    the first halves the feature map (the first stage's too with
    ``downsample_in_first_stage``); a bottleneck strides on its 3x3 convolution
    (v1.5) unless ``downsample_in_bottleneck`` puts the stride on the first 1x1
    (v1, the paper). A block whose input and output differ in width or size has
    a projection shortcut (1x1 convolution + BatchNorm). A global average pool
    and one linear layer with bias over ``num_labels`` classes end the model.
    """

    layer_type: Literal["basic", "bottleneck"] = Field(description="residual block: basic or bottleneck")
    num_channels: int = Field(default=3, gt=0, le=_MAX_CNN_SIZE, description="input image channels")
    embedding_size: int = Field(gt=0, le=_MAX_CNN_SIZE, description="channels out of the stem convolution")
    hidden_sizes: tuple[int, ...] = Field(min_length=1, description="output channels of each stage's blocks")
    depths: tuple[int, ...] = Field(min_length=1, description="residual blocks per stage")
    downsample_in_first_stage: bool = Field(default=False, description="the first stage also strides by 2")
    downsample_in_bottleneck: bool = Field(
        default=False, description="a bottleneck strides on its first 1x1 convolution (v1), not the 3x3 (v1.5)"
    )
    num_labels: int = Field(gt=0, le=_MAX_CNN_SIZE, description="classes of the linear classifier")
    image_size_px: int = Field(default=224, gt=0, le=_MAX_CNN_SIZE,
                               description="side of the square input image, pixels")

    @model_validator(mode="after")
    def _check_stages(self) -> ResNetConfig:
        if len(self.hidden_sizes) != len(self.depths):
            raise ValueError(f"{len(self.hidden_sizes)} hidden_sizes for {len(self.depths)} depths (one per stage)")
        if any(not 0 < n <= _MAX_CNN_SIZE for n in (*self.hidden_sizes, *self.depths)):
            raise ValueError(f"hidden_sizes and depths must be integers in 1..{_MAX_CNN_SIZE}")
        if self.layer_type == "bottleneck" and any(n % 4 for n in self.hidden_sizes):
            raise ValueError("bottleneck hidden_sizes must be multiples of 4 (inner width = hidden size / 4)")
        return self

    @property
    def inner_sizes(self) -> tuple[int, ...]:
        """Width inside each stage's blocks: ``hidden_size / 4`` for bottlenecks, else ``hidden_size``."""
        return tuple(n // 4 for n in self.hidden_sizes) if self.layer_type == "bottleneck" else self.hidden_sizes

    def stage_strides(self) -> tuple[int, ...]:
        """Stride of the first block of each stage (2 halves the feature map)."""
        first = 2 if self.downsample_in_first_stage else 1
        return (first, *(2 for _ in self.depths[1:]))


class ModelArchitecture(_Frozen):
    """A model architecture, normalized from its Hugging Face config.

    Sizes are counts (elements); ``num_layers`` is the decoder stack for decoder
    models, the encoder stack for encoders and encoder-decoders (then
    ``num_decoder_layers`` is the decoder stack). Multimodal models (LLaVA,
    Llama-4) describe their text model here and their vision tower in ``vision``.
    Convolutional image classifiers (``kind == "cnn"``, ResNet) keep their
    architecture in ``resnet``, latent-diffusion networks (``kind == "diffusion"``) in
    ``unet`` or ``vae`` (:mod:`perfcast.catalog.diffusion`); the transformer fields then hold stand-ins
    that :func:`perfcast.catalog.normalize.normalize_hf` documents.

    For MoE models ``intermediate_size`` is the MLP width of the dense
    (non-MoE) layers; ``moe.expert_intermediate_size`` is each expert's width.
    Per-layer attention: ``attention_layer_types`` is empty when every layer is
    alike (then "sliding" if ``sliding_window`` is set, else "full"); use
    :meth:`attention_type` rather than reading the fields directly.
    """

    id: str = Field(description="catalog id (file stem), or the normalized text of a synthetic name")
    hf_id: str | None = Field(default=None, description="Hugging Face Hub repo id, None if not a Hub model")
    aliases: tuple[str, ...] = ()
    source: tuple[str, ...] = Field(default=(), description="where the config comes from (repo + file, paper + table)")
    notes: str = ""
    model_type: str = Field(description="HF model_type, e.g. gpt2, llama, bert")
    kind: Literal["decoder", "encoder", "encoder-decoder", "cnn", "diffusion"]
    num_layers: int = Field(
        gt=0,
        description="decoder layers (decoder), encoder layers (encoder, encoder-decoder), residual blocks (cnn)",
    )
    num_decoder_layers: int = Field(default=0, ge=0, description="decoder layers of an encoder-decoder, else 0")
    hidden_size: int = Field(gt=0, description="residual-stream width (elements)")
    num_heads: int = Field(gt=0, description="query heads")
    num_kv_heads: int = Field(gt=0, description="key/value heads (= num_heads for MHA, 1 for MQA)")
    head_dim: int = Field(gt=0, description="width of one query/key head (elements)")
    intermediate_size: int = Field(
        gt=0, description="MLP width of one branch (elements): gated MLPs have gate and up of this width"
    )
    vocab_size: int = Field(gt=0, description="rows of the token-embedding table (tokens)")
    max_positions: int = Field(
        gt=0,
        description="the hard context limit (tokens) for every position scheme: the learned table's rows, a rotary "
        "model's max_position_embeddings extended by its rope_scaling, ALiBi's max_seq_len; 2**20 (perfcast's own "
        "bound) for relative-position models with no limit in their config (T5/Switch); see check_context",
    )
    norm: Literal["layernorm", "rmsnorm", "batchnorm", "groupnorm"] = "layernorm"
    activation: str = Field(default="gelu", description="MLP activation, HF spelling (gelu_new, silu, relu, relu2)")
    gated_mlp: bool = Field(default=False, description="GLU MLP: act(gate(x)) * up(x), then down")
    qkv_bias: bool = Field(default=True, description="q/k/v projections carry biases")
    out_bias: bool = Field(default=True, description="the attention output projection carries a bias")
    mlp_bias: bool = Field(default=True, description="the dense MLP's projections carry biases")
    parallel_block: bool = Field(default=False,
                                 description="attention and MLP read the same input (GPT-J, phi-2, Falcon)")
    position: Literal["learned", "rotary", "alibi", "relative", "none"] = "learned"
    tie_word_embeddings: bool = Field(default=True, description="the LM head reuses the token-embedding matrix")
    type_vocab_size: int = Field(default=0, ge=0, description="rows of BERT's token-type embedding table")
    sliding_window: int | None = Field(default=None, gt=0, description="tokens a query sees in sliding layers")
    rotary_frac: float = Field(
        default=1.0,
        gt=0,
        le=1,
        description="fraction of head_dim that gets rotary embedding (HF partial_rotary_factor, rotary_pct; "
        "GPT-J rotary_dim/head_dim); 1 when position is not rotary",
    )
    attention_layer_types: tuple[AttentionLayerType, ...] = Field(
        default=(),
        description="per-layer attention span, one entry per layer: full (causal over all tokens), sliding "
        "(last sliding_window tokens), chunked (only tokens of the same attention_chunk_size block); "
        "empty = every layer alike",
    )
    attention_chunk_size: int | None = Field(
        default=None, gt=0, description="tokens per block for chunked layers (Llama-4: 8192)"
    )
    nope_layers: tuple[int, ...] = Field(
        default=(), description="0-based layers that apply no position encoding (Llama-4's NoPE layers)"
    )
    qk_norm: Literal["none", "rmsnorm", "layernorm", "l2"] = Field(
        default="none",
        description="norm on each query/key head before attention: rmsnorm has a head_dim weight shared by "
        "heads (Qwen3), layernorm a head_dim weight and bias (phi qk_layernorm), l2 no weight (Llama-4 Scout)",
    )
    qk_norm_span: Literal["head", "projection"] = Field(
        default="head",
        description="what the QK norm normalizes: each head over head_dim with a weight shared by heads (Qwen3, "
        "Gemma 3), or the whole q / k projection output with a weight of its width (OLMo 2)",
    )
    attention_sinks: bool = Field(default=False, description="one learned sink logit per head (gpt-oss)")
    norm_placement: Literal["pre", "post", "sandwich"] = Field(
        default="pre",
        description="where a sequential block's norms sit: pre (before attention and MLP), post (on the attention "
        "and MLP outputs, before the residual add: OLMo 2), sandwich (both: Gemma 2/3, whose num_norms_per_layer "
        "is 4)",
    )
    embedding_multiplier: float | None = Field(
        default=None, gt=0, description="the token embeddings are multiplied by this (Gemma: sqrt(hidden_size), "
        "Granite: embedding_multiplier); None = no multiply")
    residual_multiplier: float | None = Field(
        default=None, gt=0, description="attention and MLP outputs are multiplied by this before each residual add "
        "(Granite); None = no multiply")
    logits_multiplier: float | None = Field(
        default=None, gt=0, description="the logits are multiplied by this (Cohere logit_scale, Granite "
        "1/logits_scaling); None = no multiply")
    attn_logit_softcap: float | None = Field(
        default=None, gt=0, description="attention scores pass through cap*tanh(scores/cap) (Gemma 2); None = not")
    final_logit_softcap: float | None = Field(
        default=None, gt=0, description="the logits pass through cap*tanh(logits/cap) (Gemma 2); None = not")
    fused_qkv: bool = Field(default=False, description="one qkv_proj GEMM in the model's own code (Phi-3)")
    fused_gate_up: bool = Field(default=False, description="one gate_up_proj GEMM in the model's own code (Phi-3)")
    qkv_clip: float | None = Field(
        default=None, gt=0, description="q/k/v are clamped to [-clip, clip] after their projection (DBRX clip_qkv); "
        "None = not")
    num_norms_per_layer: int = Field(
        default=2,
        ge=0,
        description="normalization layers per block, not counting a decoder's cross-attention norm: 2 = before "
        "(or after) attention and MLP; 1 = one norm shared by a parallel block (GPT-J, phi-2, Falcon-7B, Cohere); "
        "4 = before and after each (Gemma 2/3)",
    )
    norm_bias: bool = Field(default=True, description="layernorms carry a bias (MPT: no); ignored for rmsnorm")
    embedding_norm: bool = Field(default=False, description="a norm right after the embeddings (BERT)")
    final_norm: bool = Field(default=True, description="a norm after the last layer (pre-LN models)")
    lm_head_bias: bool = Field(default=False, description="the LM head has a bias (GPT-J, phi-2)")
    embedding_size: int | None = Field(
        default=None,
        gt=0,
        description="token-embedding width when it differs from hidden_size (OPT word_embed_proj_dim); "
        "bias-free project_in/project_out linears map it to and from hidden_size",
    )
    moe: MoEConfig | None = None
    mla: MLAConfig | None = None
    ssm: SSMConfig | None = Field(default=None, description="Mamba mixers and the per-layer pattern (SSMConfig)")
    linear_attention: GatedDeltaNetConfig | None = Field(
        default=None, description="Gated DeltaNet linear-attention layers and the per-layer pattern (Qwen3-Next)")
    attention_output_gate: bool = Field(
        default=False, description="q_proj also emits a per-element output gate: the attention output is multiplied "
        "by sigmoid(gate) before o_proj (Qwen3-Next's gated attention)")
    vision: VisionConfig | None = None
    resnet: ResNetConfig | None = None
    unet: UNetConfig | None = None
    vae: VAEDecoderConfig | None = None
    torch_dtype: Literal["fp32", "fp16", "bf16"] | None = Field(
        default=None, description="the checkpoint's dtype (HF torch_dtype / dtype); None when the config names none"
    )
    quantization: QuantizationConfig | None = Field(
        default=None, description="how the checkpoint stores its quantized weights (HF quantization_config); None "
        "for an unquantized checkpoint")
    hf_config: dict[str, Any] = Field(default_factory=dict, repr=False)

    @model_validator(mode="after")
    def _check_layers(self) -> ModelArchitecture:
        layers = self.num_layers
        if (self.kind == "cnn") != (self.resnet is not None):
            raise ValueError("kind cnn and a resnet architecture go together (a cnn model needs `resnet`)")
        if (self.kind == "diffusion") != ((self.unet is None) != (self.vae is None)):
            raise ValueError("kind diffusion goes with exactly one of a unet or a vae architecture")
        if self.attention_layer_types:
            if len(self.attention_layer_types) != layers:
                raise ValueError(
                    f"attention_layer_types has {len(self.attention_layer_types)} entries for {layers} layers"
                )
            if "sliding" in self.attention_layer_types and not self.sliding_window:
                raise ValueError("sliding layers need sliding_window")
            if "chunked" in self.attention_layer_types and not self.attention_chunk_size:
                raise ValueError("chunked layers need attention_chunk_size")
        if self.ssm is not None and len(self.ssm.layer_mixers) != layers:
            raise ValueError(f"ssm.layer_mixers has {len(self.ssm.layer_mixers)} entries for {layers} layers")
        if self.ssm is not None and "moe" in self.ssm.layer_mixers and self.moe is None:
            raise ValueError("ssm.layer_mixers has moe layers but the architecture has no moe config")
        if self.linear_attention is not None and len(self.linear_attention.layer_types) != layers:
            raise ValueError(f"linear_attention.layer_types has {len(self.linear_attention.layer_types)} entries for "
                             f"{layers} layers")
        if any(not 0 <= i < layers for i in self.nope_layers):
            raise ValueError(f"nope_layers must be layer indices in [0, {layers})")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_attention_heads={self.num_heads} is not a multiple of num_key_value_heads="
                             f"{self.num_kv_heads} (each KV head serves a whole group of query heads); use a divisor "
                             f"of {self.num_heads}")
        return self

    @property
    def q_dim(self) -> int:
        """Width of the query projection output (heads x head_dim)."""
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of one of the K or V projection outputs (kv heads x head_dim)."""
        return self.num_kv_heads * self.head_dim

    @property
    def token_embedding_size(self) -> int:
        """Width of the token-embedding table (``embedding_size`` or ``hidden_size``)."""
        return self.embedding_size or self.hidden_size

    def attention_type(self, index: int) -> AttentionLayerType:
        """Attention span of decoder layer ``index`` (0-based): full, sliding or chunked."""
        if self.attention_layer_types:
            return self.attention_layer_types[index]
        return "sliding" if self.sliding_window else "full"

    def layer_types(self) -> tuple[str, ...]:
        """Each decoder layer's kind, one entry per layer: its mixer (``full_attention``, ``sliding_attention``,
        ``chunked_attention``, ``mla`` (DeepSeek's latent attention), ``mamba`` / ``mamba2``, ``linear_attention``
        (Gated DeltaNet), or a Nemotron-H ``mlp`` / ``moe`` layer with no mixer) and, after ``+``, its
        feed-forward block (``mlp`` or ``moe``) where it has one. Empty for models without decoder layers."""
        if self.kind != "decoder":
            return ()
        out: list[str] = []
        for i in range(self.num_layers):
            mixer = self.ssm.layer_mixers[i] if self.ssm is not None else "attention"
            if mixer in ("mlp", "moe"):  # Nemotron-H: a layer that is its feed-forward block alone
                out.append(mixer)
                continue
            if mixer == "ssm":
                assert self.ssm is not None
                name = "mamba" if self.ssm.version == 1 else "mamba2"
                if not self.ssm.ffn_per_layer:
                    out.append(name)
                    continue
            elif self.linear_attention is not None and self.linear_attention.layer_types[i] == "linear_attention":
                name = "linear_attention"
            else:
                name = "mla" if self.mla is not None else f"{self.attention_type(i)}_attention"
                if self.ssm is not None and not self.ssm.ffn_per_layer:  # Nemotron-H: attention alone
                    out.append(name)
                    continue
            out.append(name + ("+moe" if self.moe is not None and self.moe.is_moe_layer(i) else "+mlp"))
        return tuple(out)

    def attention_window(self, index: int) -> int | None:
        """Tokens a query of layer ``index`` can see at most (None = all earlier tokens)."""
        kind = self.attention_type(index)
        if kind == "sliding":
            return self.sliding_window
        if kind == "chunked":
            return self.attention_chunk_size
        return None
