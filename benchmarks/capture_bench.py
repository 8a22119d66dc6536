"""Speed of ``perfcast capture`` and of predicting captured workloads, merged and unmerged.

Run from the repository root (needs the ``torch`` extra and transformers, the test extra)::

    .venv/bin/python benchmarks/capture_bench.py          # human-readable report
    .venv/bin/python benchmarks/capture_bench.py --json   # exactly one JSON object on stdout

For GPT-2 (124M), BERT-base, a 8-layer Llama-style decoder and ResNet-50 built from transformers configs with
random weights (no downloads), it reports: the capture (torch.export, emit, merge) in seconds; the merge alone;
op counts before and after merging; a cold and a warm single-GPU step prediction (A100) of the unmerged and
the merged workload; and a training-step prediction (8 x A100, data parallel) from the capture. Model
construction (random initialization) is not timed. Speed is measured here, never asserted in tests.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any


def _models() -> list[tuple[str, Any, dict[str, Any]]]:
    import torch
    import transformers as tf

    ids = {"input_ids": torch.randint(0, 100, (8, 512))}
    return [
        ("gpt2 b8 s512", lambda: tf.GPT2LMHeadModel(tf.GPT2Config()), {**ids, "use_cache": False}),
        ("bert-base b8 s512", lambda: tf.BertForPreTraining(tf.BertConfig()), ids),
        ("llama-style 8 layers b8 s512", lambda: tf.LlamaForCausalLM(tf.LlamaConfig(
            num_hidden_layers=8, hidden_size=1024, num_attention_heads=16, num_key_value_heads=4,
            intermediate_size=2816, vocab_size=32000)), {**ids, "use_cache": False}),
        ("resnet-50 b32 224px", lambda: tf.ResNetForImageClassification(tf.ResNetConfig(
            depths=[3, 4, 6, 3], hidden_sizes=[256, 512, 1024, 2048], embedding_size=64, layer_type="bottleneck",
            num_labels=1000)), {"pixel_values": torch.randn(32, 3, 224, 224)}),
    ]


def _median_ms(fn: Any, runs: int) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--runs", type=int, default=20, help="timed warm predictions per case")
    args = parser.parse_args()

    from perfcast.capture import capture_module, merge_repeated, training_forward
    from perfcast.compose.step import predict_step
    from perfcast.dtypes import DType
    from perfcast.system.plan import ParallelPlan
    from perfcast.system.training import simulate_training

    out: dict[str, Any] = {}
    for label, make, inputs in _models():
        sys.stderr.write(f"{label}...\n")
        model = make()
        t = time.perf_counter()
        raw = capture_module(model, inputs, merge=False)
        capture_s = time.perf_counter() - t
        t = time.perf_counter()
        merged = merge_repeated(raw)
        merge_s = time.perf_counter() - t
        row: dict[str, Any] = {"capture_s": capture_s + merge_s, "merge_ms": merge_s * 1e3,
                               "ops_unmerged": len(raw.ops), "ops_merged": len(merged.ops)}
        for name, w in (("unmerged", raw), ("merged", merged)):
            t = time.perf_counter()
            predict_step(w, "a100")  # first call: kernel predictions computed
            row[f"predict_cold_{name}_ms"] = (time.perf_counter() - t) * 1e3
            # a fresh Workload object each time: the step cache is keyed on the object, the kernel cache on shapes
            row[f"predict_warm_{name}_ms"] = _median_ms(
                lambda w=w: predict_step(w.__class__(**{f: getattr(w, f) for f in w.__slots__}), "a100"), args.runs)
        t = time.perf_counter()
        ct = training_forward(merged, DType.BF16)
        simulate_training(ct.config, "dgx-a100", ParallelPlan(micro_batch=ct.micro_batch,
                                                              seq_len=ct.tokens_per_sample, dp=8), forward=ct.forward)
        row["train_dp8_predict_ms"] = (time.perf_counter() - t) * 1e3
        out[label] = row
        del model
    if args.json:
        sys.stdout.write(json.dumps({"capture_benchmarks": out}) + "\n")
        return 0
    for label, row in out.items():
        sys.stdout.write(
            f"{label}: capture {row['capture_s']:.2f} s (merge {row['merge_ms']:.1f} ms), "
            f"ops {row['ops_unmerged']} -> {row['ops_merged']}; "
            f"predict cold {row['predict_cold_unmerged_ms']:.1f} / {row['predict_cold_merged_ms']:.1f} ms, "
            f"warm {row['predict_warm_unmerged_ms']:.2f} / {row['predict_warm_merged_ms']:.2f} ms "
            f"(unmerged / merged); training dp8 {row['train_dp8_predict_ms']:.1f} ms\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
