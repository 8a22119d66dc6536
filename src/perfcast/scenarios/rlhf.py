"""Run an RLHF scenario: each run is one PPO iteration
(:func:`perfcast.serving.experiments.rlhf.simulate_rlhf_iteration`).

A row carries the iteration time and its breakdown by phase (``reshard_s``,
``generation_s`` = ``generation_prefill_s`` + ``generation_decode_s``,
``scoring_s`` = the sum of ``scoring_<role>_s``, ``training_s`` =
``actor_train_s`` + ``critic_train_s``), each phase's share of the iteration, and
the memory per GPU: each phase's total (``<phase>_phase_memory_bytes``), the
peak phase, and the parts of the peak (``memory_<part>_bytes``). A run whose peak
does not fit has ``fits_in_memory`` false (the scenario's status is then ``oom``).
"""

from __future__ import annotations

from perfcast.errors import PerfcastError
from perfcast.results.scenario import ScenarioResult
from perfcast.scenarios.schema import RLHFRun, RLHFScenario
from perfcast.serving.experiments.rlhf import RLHFResult
from perfcast.serving.experiments.run import RLHFIteration, run_experiment
from perfcast.system.memory import CUDA_CONTEXT_BYTES, FRAGMENTATION_FRAC

__all__ = ["rlhf_row", "run_rlhf_scenario"]


def _memory(res: RLHFResult) -> dict[str, object]:
    m = res.memory
    peak = m.peak_phase
    parts = {"actor_states": m.actor_states_bytes, "critic_states": m.critic_states_bytes,
             "frozen_weights": m.frozen_weights_bytes}
    parts.update({"generation": {"generation_weights": m.generation_weights_bytes, "kv_cache": m.kv_cache_bytes},
                  "scoring": {"scoring_logits": m.scoring_logits_bytes, "comm_buffers": m.comm_buffers_bytes},
                  "training": {"activations": m.training_activations_bytes,
                               "comm_buffers": m.comm_buffers_bytes}}[peak])
    tensors = sum(parts.values())
    row: dict[str, object] = {f"memory_{k}_bytes": v for k, v in parts.items()}
    row.update(memory_context_bytes=CUDA_CONTEXT_BYTES, memory_fragmentation_bytes=FRAGMENTATION_FRAC * tensors,
               memory_per_gpu_bytes=m.total_bytes, memory_capacity_bytes=m.capacity_bytes,
               fits_in_memory=m.fits, memory_peak_phase=peak)
    row.update({f"{phase}_phase_memory_bytes": v for phase, v in m.phase_bytes.items()})
    return row


def rlhf_row(res: RLHFResult, *, label: str = "") -> dict[str, object]:
    """The row of one predicted PPO iteration (keys carry units; see the module docstring)."""
    cfg = res.config
    total = res.iteration_time_s
    row: dict[str, object] = {
        "label": label, "actor": cfg.actor, "critic": cfg.critic, "reward": cfg.reward, "reference": cfg.reference,
        "cluster": cfg.cluster, "gpu": res.gpu_id, "num_gpus": res.num_gpus, "prompts": cfg.prompts,
        "prompt_tokens": cfg.prompt_tokens, "generated_tokens": cfg.generated_tokens,
        "generation_tp": cfg.generation_tp, "zero": cfg.zero, "status": "ok",
        "iteration_time_s": total, "reshard_s": res.reshard_s, "generation_s": res.generation_s,
        "generation_prefill_s": res.generation_prefill_s, "generation_decode_s": res.generation_decode_s,
        "scoring_s": res.scoring_total_s,
        **{f"scoring_{role}_s": t for role, t in res.scoring_s.items()},
        "training_s": res.training_s, "actor_train_s": res.actor_train_s, "critic_train_s": res.critic_train_s,
        "actor_train_mfu": res.actor_training.mfu,
        "generated_tokens_per_s": res.generated_tokens_per_s,
    }
    for phase in ("reshard", "generation", "scoring", "training"):
        row[f"{phase}_frac"] = float(str(row[f"{phase}_s"])) / total if total > 0 else 0.0
    row.update(_memory(res))
    return row


def _run_row(run: RLHFRun) -> dict[str, object]:
    try:
        return rlhf_row(run_experiment(RLHFIteration(run.config)), label=run.label)
    except PerfcastError as exc:
        return {"label": run.label, "actor": run.config.actor, "cluster": run.config.cluster, "status": "error",
                "error": str(exc)}


def run_rlhf_scenario(sc: RLHFScenario) -> ScenarioResult:
    """Predict every PPO iteration; one failure does not stop the others."""
    res = ScenarioResult(sc.id, sc.title, "ok", kind="rlhf", notes=list(sc.notes))
    res.rows.extend(_run_row(run) for run in sc.runs)
    return res.settle()
