"""Unit tests of ``perfcast.system.plan``: ParallelPlan's derived quantities and check_plan's constraints."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from perfcast.catalog.models import ModelConfig, load_model
from perfcast.errors import ConfigError
from perfcast.system.cluster import Cluster, load_cluster
from perfcast.system.plan import ParallelPlan, check_plan, divisors


@pytest.fixture(scope="module")
def llama() -> ModelConfig:
    return load_model("llama-2-7b")  # 32 heads, 32 KV heads, 32 layers, rotary, 4096 positions


@pytest.fixture(scope="module")
def mixtral() -> ModelConfig:
    return load_model("mixtral-8x7b")  # MoE, 8 experts, 32 layers, 32 heads


@pytest.fixture(scope="module")
def gpt2() -> ModelConfig:
    return load_model("gpt2")  # 12 heads, 12 layers, learned positions up to 1024


@pytest.fixture(scope="module")
def dgx() -> Cluster:
    return load_cluster("dgx-h100")  # 1 node of 8 GPUs


def _error(plan: ParallelPlan, cfg: ModelConfig, cluster: Cluster, *, num_gpus: int | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        check_plan(plan, cfg, cluster, num_gpus=num_gpus)
    msg = str(info.value)
    assert "\n" not in msg
    return msg


def test_catalog_facts_the_tests_rely_on(llama: ModelConfig, mixtral: ModelConfig, gpt2: ModelConfig,
                                         dgx: Cluster) -> None:
    assert (llama.num_heads, llama.num_layers, llama.position, llama.max_positions) == (32, 32, "rotary", 4096)
    assert mixtral.moe is not None and mixtral.moe.num_experts == 8 and mixtral.num_layers == 32
    assert (gpt2.num_heads, gpt2.num_layers, gpt2.position, gpt2.max_positions) == (12, 12, "learned", 1024)
    assert (dgx.gpus_per_node, dgx.nodes, dgx.domain) == (8, 1, 8)
    assert dgx.with_nodes(4).num_gpus == 32


# --- properties -----------------------------------------------------------------------------------------------


def test_num_gpus_is_tp_pp_dp_cp_with_ep_carved_out_of_dp() -> None:
    assert ParallelPlan().num_gpus == 1
    assert ParallelPlan(tp=2, pp=3, dp=4, cp=5).num_gpus == 120
    assert ParallelPlan(tp=2, dp=8, ep=4).num_gpus == 16
    assert ParallelPlan(pp=4, vp=2, dp=2).num_gpus == 8


def test_effective_global_batch_defaults_to_micro_batch_times_dp() -> None:
    assert ParallelPlan(dp=8, micro_batch=2).effective_global_batch == 16
    assert ParallelPlan(dp=8, micro_batch=2, global_batch=256).effective_global_batch == 256


def test_microbatches_is_gradient_accumulation_per_data_parallel_rank() -> None:
    assert ParallelPlan(dp=8, micro_batch=2).microbatches == 1
    assert ParallelPlan(dp=8, micro_batch=2, global_batch=256).microbatches == 16
    assert ParallelPlan(pp=4, dp=2, micro_batch=1, global_batch=64).microbatches == 32
    assert ParallelPlan(tp=8, micro_batch=4, global_batch=4).microbatches == 1


@pytest.mark.parametrize(("schedule", "vp", "expected"), [
    ("1f1b", 1, "1f1b"), ("gpipe", 1, "gpipe"), ("interleaved", 1, "1f1b"),
    ("1f1b", 2, "interleaved"), ("gpipe", 4, "interleaved"), ("interleaved", 2, "interleaved"),
])
def test_effective_schedule_interleaves_exactly_when_vp_is_above_one(schedule: str, vp: int, expected: str) -> None:
    assert ParallelPlan(pp=2, vp=vp, schedule=schedule).effective_schedule == expected  # type: ignore[arg-type]


def test_plan_fields_are_validated_and_frozen() -> None:
    with pytest.raises(ValidationError):
        ParallelPlan(tp=0)
    with pytest.raises(ValidationError):
        ParallelPlan(schedule="zb-v")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        ParallelPlan(tensor_parallel=2)  # type: ignore[call-arg]
    plan = ParallelPlan()
    with pytest.raises(ValidationError):
        plan.tp = 2  # type: ignore[misc]


def test_divisors() -> None:
    assert divisors(12) == [1, 2, 3, 4, 6, 12]
    assert divisors(32, 8) == [1, 2, 4, 8]
    assert divisors(1) == [1]


# --- valid plans ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("plan", "nodes"), [
    (ParallelPlan(dp=8), 1),
    (ParallelPlan(tp=8), 1),
    (ParallelPlan(tp=4, pp=2), 1),
    (ParallelPlan(tp=2, pp=2, dp=2, sp=True, micro_batch=2, global_batch=64), 1),
    (ParallelPlan(tp=8, pp=4, vp=2, dp=2, global_batch=64), 8),
    (ParallelPlan(cp=2, dp=4, seq_len=4096), 1),
    (ParallelPlan(dp=8, lora_rank=16, qlora=True), 1),
])
def test_valid_llama_plans_pass(llama: ModelConfig, dgx: Cluster, plan: ParallelPlan, nodes: int) -> None:
    assert check_plan(plan, llama, dgx.with_nodes(nodes)) is None


def test_num_gpus_overrides_the_cluster_size(llama: ModelConfig, dgx: Cluster) -> None:
    assert check_plan(ParallelPlan(tp=4), llama, dgx, num_gpus=4) is None  # half a node
    _error(ParallelPlan(tp=8), llama, dgx, num_gpus=4)


# --- each constraint ------------------------------------------------------------------------------------------


def test_gpu_count_mismatch_suggests_a_data_parallel_degree(llama: ModelConfig, dgx: Cluster) -> None:
    msg = _error(ParallelPlan(tp=2, dp=2), llama, dgx)
    assert "tp*pp*dp*cp = 2*1*2*1 = 4 must equal the 8 GPUs" in msg
    assert "e.g. dp = 4" in msg
    assert check_plan(ParallelPlan(tp=2, dp=4), llama, dgx) is None  # the suggestion works


def test_gpu_count_mismatch_when_no_data_parallel_degree_fits(llama: ModelConfig, dgx: Cluster) -> None:
    msg = _error(ParallelPlan(tp=1, pp=3, uneven_stages=True), llama, dgx)
    assert "must equal the 8 GPUs" in msg
    assert "tp*pp*cp = 3 does not divide 8" in msg


def test_gpu_count_counts_context_parallel_ranks(llama: ModelConfig, dgx: Cluster) -> None:
    msg = _error(ParallelPlan(cp=2, dp=8), llama, dgx)
    assert "= 16 must equal the 8 GPUs" in msg


def test_tp_must_divide_attention_heads(gpt2: ModelConfig, llama: ModelConfig, dgx: Cluster) -> None:
    msg = _error(ParallelPlan(tp=8), gpt2, dgx)
    assert "tp=8 must divide num_attention_heads=12" in msg
    assert "use tp in {1, 2, 3, 4, 6, 12}" in msg
    msg = _error(ParallelPlan(tp=3), llama, dgx, num_gpus=3)
    assert "tp=3 must divide num_attention_heads=32" in msg
    assert "use tp in {1, 2, 4, 8, 16, 32}" in msg


def test_tp_must_divide_the_gpus_of_a_node(llama: ModelConfig, dgx: Cluster) -> None:
    # 16 divides llama's 32 heads but spans two 8-GPU nodes
    msg = _error(ParallelPlan(tp=16), llama, dgx.with_nodes(2))
    assert "tp=16 must divide the 8 GPUs of the job that share a scale-up fabric" in msg
    assert "use tp in {1, 2, 4, 8}" in msg
    assert check_plan(ParallelPlan(tp=8, dp=2), llama, dgx.with_nodes(2)) is None


def test_rack_scale_jobs_take_any_multiple_of_a_tray(llama: ModelConfig) -> None:
    """NVL72: 128 GPUs run as 64 + 64 on two racks, so tp=16 stays inside one NVLink domain; 72-GPU racks
    whole keep tp within 72."""
    from perfcast.system.cluster import load_cluster

    nvl = load_cluster("gb200-nvl72", nodes=32)
    assert check_plan(ParallelPlan(tp=16, dp=8), llama, nvl) is None
    msg = _error(ParallelPlan(tp=16, dp=9), llama, load_cluster("gb200-nvl72", nodes=36))
    assert "must divide the 72 GPUs of the job" in msg


def test_pp_must_divide_layers_unless_stages_may_be_uneven(llama: ModelConfig, dgx: Cluster) -> None:
    cl = dgx.with_nodes(3)
    msg = _error(ParallelPlan(tp=8, pp=3), llama, cl)
    assert "pp=3 must divide the 32 layers of llama-2-7b" in msg
    assert "use pp in {1, 2, 4, 8, 16, 32}" in msg
    assert check_plan(ParallelPlan(tp=8, pp=3, uneven_stages=True), llama, cl) is None


def test_pp_cannot_exceed_layers_even_when_uneven(gpt2: ModelConfig, dgx: Cluster) -> None:
    msg = _error(ParallelPlan(pp=16, uneven_stages=True), gpt2, dgx.with_nodes(2))
    assert "pp=16 exceeds the 12 layers of gpt2" in msg


def test_virtual_stages_need_pipeline_parallelism(llama: ModelConfig, dgx: Cluster) -> None:
    msg = _error(ParallelPlan(dp=8, vp=2), llama, dgx)
    assert "vp > 1" in msg and "pp > 1" in msg


def test_pp_times_vp_must_divide_layers(llama: ModelConfig, dgx: Cluster) -> None:
    msg = _error(ParallelPlan(pp=2, vp=3, dp=4), llama, dgx)
    assert "pp*vp = 6 must divide the 32 layers of llama-2-7b" in msg
    assert "use vp in {2, 4, 8, 16}" in msg
    for vp in (2, 4, 8, 16):  # every suggestion is valid
        assert check_plan(ParallelPlan(pp=2, vp=vp, dp=4, global_batch=8), llama, dgx) is None


def test_global_batch_must_split_into_micro_batches_over_dp(llama: ModelConfig, dgx: Cluster) -> None:
    msg = _error(ParallelPlan(dp=8, micro_batch=2, global_batch=20), llama, dgx)
    assert "global batch 20 must be divisible by micro_batch*dp = 2*8 = 16" in msg
    assert "e.g. global batch 16" in msg
    msg = _error(ParallelPlan(dp=8, micro_batch=1, global_batch=4), llama, dgx)
    assert "e.g. global batch 8" in msg
    assert check_plan(ParallelPlan(dp=8, micro_batch=2, global_batch=48), llama, dgx) is None


def test_expert_parallelism_needs_a_moe_model(llama: ModelConfig, dgx: Cluster) -> None:
    msg = _error(ParallelPlan(dp=8, ep=2), llama, dgx)
    assert "ep=2 needs a mixture-of-experts model" in msg and "dense (use ep=1)" in msg


def test_ep_must_divide_the_experts(mixtral: ModelConfig, dgx: Cluster) -> None:
    msg = _error(ParallelPlan(dp=8, ep=3), mixtral, dgx)
    assert "ep=3 must divide the 8 experts of mixtral-8x7b" in msg
    assert "use ep in {1, 2, 4, 8}" in msg
    for ep in (2, 4, 8):
        assert check_plan(ParallelPlan(dp=8, ep=ep), mixtral, dgx) is None


def test_ep_must_divide_the_data_parallel_ranks(mixtral: ModelConfig, dgx: Cluster) -> None:
    msg = _error(ParallelPlan(tp=2, dp=4, ep=8), mixtral, dgx)
    assert "ep=8 must divide dp*cp = 4" in msg
    assert "use ep in {1, 2, 4}" in msg


def test_ring_context_parallelism_needs_seq_divisible_by_2cp(llama: ModelConfig, dgx: Cluster) -> None:
    msg = _error(ParallelPlan(cp=4, dp=2, seq_len=2052), llama, dgx)  # 2052 = 4 * 513: not a multiple of 8
    assert "cp=4 (ring) needs a sequence length divisible by 8 (got 2052)" in msg
    # Ulysses only splits the sequence cp ways
    assert check_plan(ParallelPlan(cp=4, dp=2, seq_len=2052, cp_kind="ulysses"), llama, dgx) is None
    msg = _error(ParallelPlan(cp=4, dp=2, seq_len=2050, cp_kind="ulysses"), llama, dgx)
    assert "cp=4 (ulysses) needs a sequence length divisible by 4 (got 2050)" in msg


def test_ulysses_needs_heads_divisible_by_cp_times_tp(llama: ModelConfig, dgx: Cluster) -> None:
    msg = _error(ParallelPlan(tp=8, cp=8, cp_kind="ulysses"), llama, dgx.with_nodes(8))
    assert "Ulysses cp=8 with tp=8 must divide the 32 attention heads" in msg


def test_sequence_parallelism_needs_tensor_parallelism(llama: ModelConfig, dgx: Cluster) -> None:
    msg = _error(ParallelPlan(dp=8, sp=True), llama, dgx)
    assert "sequence parallelism" in msg and "tp > 1" in msg


def test_qlora_needs_a_lora_rank(llama: ModelConfig, dgx: Cluster) -> None:
    msg = _error(ParallelPlan(dp=8, qlora=True), llama, dgx)
    assert "QLoRA" in msg and "lora rank > 0" in msg


def test_learned_positions_bound_the_sequence(gpt2: ModelConfig, dgx: Cluster) -> None:
    msg = _error(ParallelPlan(dp=8, seq_len=2048), gpt2, dgx)
    assert "sequence length 2048 exceeds the 1024 learned positions of gpt2" in msg
    assert "use a sequence length in 1..1024" in msg
    assert check_plan(ParallelPlan(dp=8, seq_len=1024), gpt2, dgx) is None


def test_rotary_positions_bound_the_sequence_too(llama: ModelConfig, dgx: Cluster) -> None:
    msg = _error(ParallelPlan(dp=8, seq_len=100_000), llama, dgx)
    assert "sequence length 100000 exceeds the 4096-token context of llama-2-7b" in msg
    assert "use a sequence length in 1..4096" in msg


def test_rope_scaling_extends_the_context(dgx: Cluster) -> None:
    # Llama-3.1-8B: llama3 RoPE scaling, max_position_embeddings 131072
    long = load_model("llama-3.1-8b")
    assert check_plan(ParallelPlan(dp=8, seq_len=131072), long, dgx) is None
    assert "131072" in _error(ParallelPlan(dp=8, seq_len=131073), long, dgx)


# --- bugs -----------------------------------------------------------------------------------------------------


def test_interleaved_plan_needs_microbatches_divisible_by_pp(llama: ModelConfig, dgx: Cluster) -> None:
    plan = ParallelPlan(pp=4, vp=2, dp=2, global_batch=12)
    assert plan.microbatches == 6 and plan.effective_schedule == "interleaved"
    msg = _error(plan, llama, dgx)
    assert "micro-batches" in msg or "microbatches" in msg


def test_uneven_stages_may_interleave_and_suggested_vp_values_are_valid(llama: ModelConfig, dgx: Cluster) -> None:
    cl = dgx.with_nodes(3)
    # uneven stages: 32 layers over 3 x 2 virtual stages is accepted (some stages carry one layer more)
    assert check_plan(ParallelPlan(tp=8, pp=3, vp=2, uneven_stages=True, global_batch=3), llama, cl) is None
    # even stages: every suggested vp divides the layers with pp
    cl4 = dgx.with_nodes(4)
    msg = _error(ParallelPlan(tp=8, pp=4, vp=3, global_batch=4), llama, cl4)
    suggested = [int(x) for x in msg.split("use vp in {", 1)[1].split("}", 1)[0].split(", ")]
    assert suggested == [2, 4, 8]
    for vp in suggested:
        assert check_plan(ParallelPlan(tp=8, pp=4, vp=vp, global_batch=4), llama, cl4) is None


def test_megatron_counts_the_embedding_and_the_loss_as_pipeline_layers() -> None:
    """Llama-3.1-405B's 126 layers on pp 8 x vp 16 = 128 chunks: refused as a plain split, accepted with the
    embedding and the loss counted as layers, the first chunk holding only the embedding and the last only the
    head (Megatron's account_for_embedding/loss_in_pipeline_split)."""
    from perfcast.catalog.models import load_model
    from perfcast.system.cluster import load_cluster
    from perfcast.system.training import simulate_training, split_layers

    cfg, cl = load_model("llama-3.1-405b"), load_cluster("dgx-h100", nodes=8)
    plan = ParallelPlan(tp=8, pp=8, vp=16, dp=1, uneven_stages=True, seq_len=8192, global_batch=64,
                        precision="fp8", recompute="full")
    assert "exceeds the 126 layers" in _error(plan, cfg, cl)
    megatron = plan.model_copy(update={"embedding_in_pipeline_split": True})
    res = simulate_training(cfg, cl, megatron)
    assert sum(res.stage_layers) == 126 and res.stage_layers[0] == res.stage_layers[-1] == 0
    assert set(res.stage_layers[1:-1]) == {1}
    assert split_layers(126, 64, embedding_and_loss=True)[:2] == [1, 2]
    assert "must divide the 126 layers of llama-3.1-405b + 2" in _error(
        megatron.model_copy(update={"vp": 5}), cfg, cl)


def test_expert_parallelism_folds_over_tp_with_whole_experts() -> None:
    """Megatron's MoE parallel folding: with whole experts (etp=1) EP may span the TP ranks (Qwen3-235B-A22B on
    tp 2 x dp 16 with ep 32); split experts (etp = tp) carve EP out of the data-parallel ranks only."""
    from perfcast.catalog.models import load_model
    from perfcast.system.cluster import load_cluster

    cfg, cl = load_model("qwen3-235b-a22b"), load_cluster("dgx-h100", nodes=4)
    folded = ParallelPlan(tp=2, dp=16, ep=32, etp=1, sp=True, seq_len=4096, global_batch=64)
    assert check_plan(folded, cfg, cl) is None
    assert folded.expert_shards == 1
    assert "ep=32 must divide dp*cp = 16" in _error(folded.model_copy(update={"etp": "tp"}), cfg, cl)
    assert "need sequence parallelism" in _error(folded.model_copy(update={"sp": False}), cfg, cl)
    assert ParallelPlan(tp=2, dp=16, ep=8).expert_shards == 2 and ParallelPlan(dp=16).expert_shards == 16


def test_zero_shards_expert_states_over_the_expert_data_parallel_group() -> None:
    """The distributed optimizer shards an expert's states over the ranks holding a copy of it (dp*cp/ep), not
    over every data-parallel rank: with ep = dp each expert has one copy and its Adam states stay whole."""
    from perfcast.catalog.models import load_model
    from perfcast.system.cluster import load_cluster
    from perfcast.system.training import simulate_training

    cfg, cl = load_model("qwen3-30b-a3b"), load_cluster("dgx-h100", nodes=2)
    base = ParallelPlan(dp=16, seq_len=4096, global_batch=16, zero=1, precision="fp8", recompute="full")
    ep16 = simulate_training(cfg, cl, base.model_copy(update={"ep": 16}))
    ep1 = simulate_training(cfg, cl, base)
    # ep=16: 1/16 of the experts per GPU, each with whole optimizer states; ep=1: every expert, states / 16
    assert ep16.memory.optimizer_bytes == pytest.approx(ep1.memory.optimizer_bytes, rel=0.15)
    assert ep16.memory.weights_bytes < ep1.memory.weights_bytes / 4
