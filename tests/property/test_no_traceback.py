"""Property: whatever a user types, perfcast answers or refuses in one line; it never shows a traceback.

Hypothesis drives the CLI and the Python API. The whole command line is fuzzed by :mod:`cli_fuzz` (every command,
its flags, numbers typed as users type them, input files and configs, outputs that already hold a user's file),
through the ``perfcast`` script's entry point; older fuzzers below go deeper into ``predict``, config.json files
and tables. Every run exits 0 (an answer), 1 (the answer is no: one ``does not fit:`` or ``failed:`` line) or 2
(a user error: exactly one stderr line starting with ``error:``), leaves a user's file alone without ``--force``,
and the API raises nothing but ``PerfcastError`` (or pydantic's refusal of a typed config it is handed).

``PERFCAST_FUZZ_EXAMPLES=2000`` fuzzes deeper with fresh random examples; ``benchmarks/fuzz_cli.py`` draws ten
thousand and reports the failures.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
from cli_fuzz import Case, cases, problems, run_case
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from typer.testing import CliRunner, Result

from perfcast.cli import app
from perfcast.compose.predict import StepRequest
from perfcast.errors import PerfcastError
from perfcast.results.serialize import to_json
from perfcast.system.predict import predict

runner = CliRunner()
# PERFCAST_FUZZ_EXAMPLES=2000 fuzzes deeper with fresh random examples; the default run is small and fixed
_DEEP = int(os.environ.get("PERFCAST_FUZZ_EXAMPLES", "0"))


def fuzz_settings(examples: int) -> settings:
    return settings(max_examples=_DEEP or examples, deadline=None, suppress_health_check=list(HealthCheck),
                    derandomize=not _DEEP, database=None)


SETTINGS = fuzz_settings(40)

MODELS = ["gpt2", "bert-base", "opt-toy-1layer", "switch-xl", "llama-2-7b", "mixtral-8x7b", "deepseek-v3",
          "gpt2-xl", "phi-2", "falcon-180b", "GPT-18B (hidden 6144, 40 layers, vocab 51200)", "gpt2_large"]
HARDWARE = ["a100-pcie-40gb", "h100-sxm-80gb", "p100-pcie-16gb", "t4", "mi250", "gaudi2", "h100", "A100-PCIE-40GB"]
DTYPES = ["fp32", "fp16", "bf16", "fp8", "int8", "int4", "fp4", "tf32", "fp64", "bfloat16", "torch.float16",
          "fp8_e4m3 (1x128 block-scaled)", "amp_bf16", "(", "", " "]
PARALLEL = ["none", "dp2", "dp4", "tp2", "tp4", "tp8", "pp2", "pp4", "dp0", "tp", "pp1000", "ep4", "1", ""]
MODES = ["inference", "training", "prefill", "decode"]

names = st.one_of(st.text(max_size=20), st.sampled_from(["", ".", "/", "x.json", "x.yaml", "../config.json"]))
weird_sizes = st.one_of(st.integers(-3, 70), st.sampled_from([0, -1, 4096, 10**6, 2**31, 10**18, 10**30]))
# mostly sizes a model accepts, so that many examples get past validation into the predictors
sizes = st.one_of(st.integers(1, 64), st.integers(1, 64), weird_sizes)


def check_cli(res: Result) -> None:
    """Exit 0 (an answer), 1 (does not fit: one ``does not fit:`` line) or 2 (one ``error:`` line on stderr);
    never a traceback."""
    text = res.stdout + res.stderr
    assert "Traceback" not in text
    assert res.exit_code in (0, 1, 2), (res.exit_code, res.exception, text[-500:])
    lines = res.stderr.splitlines()
    if res.exit_code == 2:
        assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    elif res.exit_code == 1:
        assert len(lines) == 1 and lines[0].startswith(("does not fit: ", "failed: ")), res.stderr
    else:
        assert res.exception is None or isinstance(res.exception, SystemExit)


def predict_args(model: str, hardware: str, mode: str, batch: int, seq: int, dtype: str, par: str, fused: bool,
                 explain: bool, as_json: bool) -> list[str]:
    args = ["predict", f"--model={model}", f"--hardware={hardware}", f"--mode={mode}", f"--batch-size={batch}",
            f"--seq-len={seq}", f"--dtype={dtype}", f"--parallelism={par}"]
    return args + (["--fused"] if fused else []) + (["--explain"] if explain else []) + (["--json"] if as_json else [])


def mostly(valid: st.SearchStrategy, weird: st.SearchStrategy) -> st.SearchStrategy:
    """Three draws in four from ``valid``."""
    return st.one_of(valid, valid, valid, weird)


# -- the whole command line --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def fuzz_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder the cases run in (one subfolder each), with an empty user catalog of its own."""
    return tmp_path_factory.mktemp("fuzz")


_COUNT = [0]


@fuzz_settings(300)
@given(case=cases())
def test_cli_fuzz_every_command(fuzz_home: Path, case: Case) -> None:
    _COUNT[0] += 1
    folder = fuzz_home / f"case{_COUNT[0]}"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PERFCAST_CATALOG", str(folder / "user-catalog"))
        outcome = run_case(case, folder)
    found = problems(case, outcome)
    assert not found, (case.describe(), found, outcome.exit_code, outcome.stdout[-300:], outcome.stderr[-300:],
                       outcome.escaped)


# -- the Python API ----------------------------------------------------------------------------------------------
API_NUMBERS = st.one_of(st.floats(0.01, 100), st.sampled_from([0.0, -1.0, math.inf, -math.inf, math.nan, 1e300]))


@fuzz_settings(40)
@given(model=st.sampled_from(["llama-2-7b", "opt-125m", "mixtral-8x7b", "nope"]),
       hardware=st.sampled_from(["h100", "a100-sxm-80gb", "t4", "nope"]),
       n=st.one_of(st.integers(1, 16), st.sampled_from([0, -1, 10**12])),
       prompt=st.one_of(st.integers(1, 300), st.sampled_from([0, 10**9])), output=st.integers(1, 24),
       qps=st.one_of(st.none(), API_NUMBERS), tp=st.sampled_from([1, 2, 3, 8]),
       max_num_seqs=st.one_of(st.integers(1, 256), st.sampled_from([0, 10**9])),
       scheduler=st.sampled_from(["vllm", "sarathi", "orca", "static", "nope"]), swap=API_NUMBERS)
def test_api_serving_answers_or_raises_perfcast_error(model: str, hardware: str, n: int, prompt: int, output: int,
                                                      qps: float | None, tp: int, max_num_seqs: int, scheduler: str,
                                                      swap: float) -> None:
    from perfcast.serving.config import ServingConfig, WorkloadConfig
    from perfcast.serving.engine import simulate_serving

    try:
        cfg = ServingConfig(model=model, hardware=hardware, tensor_parallel_size=tp, max_num_seqs=max_num_seqs,
                            scheduler=scheduler, swap_space=swap * 2**30,
                            workload=WorkloadConfig(num_requests=n, prompt_tokens=prompt, output_tokens=output,
                                                    qps=qps))
    except ValidationError:
        return  # the typed config's own refusal
    except PerfcastError as exc:  # a name no registry knows (an unknown scheduler), refused in one line
        assert str(exc) and "\n" not in str(exc)
        return
    try:
        res = simulate_serving(cfg)
    except PerfcastError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    data = to_json(res)
    assert math.isfinite(data["ttft_s"]["mean"]) or data.get("completed", 1) == 0


@fuzz_settings(40)
@given(model=st.sampled_from(["gpt2", "llama-2-7b", "mixtral-8x7b", "nope"]),
       cluster=st.sampled_from(["dgx-h100", "dgx-a100", "nope"]), tp=st.sampled_from([1, 2, 3, 8, 0]),
       pp=st.sampled_from([1, 2, 4]), dp=st.sampled_from([1, 2, 8]), zero=st.integers(0, 3),
       micro=st.one_of(st.integers(1, 4), st.sampled_from([0, 10**9])), seq=st.sampled_from([128, 1024, 4096, 10**9]),
       skew=API_NUMBERS, keep_events=st.booleans())
def test_api_training_answers_or_raises_perfcast_error(model: str, cluster: str, tp: int, pp: int, dp: int,
                                                       zero: int, micro: int, seq: int, skew: float,
                                                       keep_events: bool) -> None:
    from perfcast.system.plan import ParallelPlan
    from perfcast.system.training import simulate_training

    try:
        plan = ParallelPlan(tp=tp, pp=pp, dp=dp, zero=zero, micro_batch=micro, seq_len=seq, moe_skew=skew)
        res = simulate_training(model, cluster, plan, keep_events=keep_events)
    except ValidationError:
        return
    except PerfcastError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    assert math.isfinite(res.step_time_s) and res.step_time_s > 0


@fuzz_settings(60)
@given(op=st.sampled_from(["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "nope"]),
       size=st.one_of(st.floats(0, 1e10), st.sampled_from([-1.0, math.inf, math.nan, 1e30])),
       group=st.one_of(st.integers(1, 64), st.sampled_from([0, -1, 10**9])),
       cluster=st.sampled_from(["dgx-h100", "dgx-a100", "nope"]),
       per_node=st.one_of(st.none(), st.integers(-1, 16)),
       algorithm=st.sampled_from([None, "ring", "tree", "nvls", "nope"]))
def test_api_collective_answers_or_raises_perfcast_error(op: str, size: float, group: int, cluster: str,
                                                         per_node: int | None, algorithm: str | None) -> None:
    from perfcast.system.collectives import collective_time

    try:
        t = collective_time(op, size, group, cluster, gpus_per_node=per_node, algorithm=algorithm)
    except PerfcastError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    assert t.time_s >= 0 and math.isfinite(t.time_s)


@SETTINGS
@given(model=mostly(st.sampled_from(MODELS), names), hardware=mostly(st.sampled_from(HARDWARE), names),
       mode=mostly(st.sampled_from(MODES), st.text(max_size=8)), batch=sizes, seq=sizes,
       dtype=mostly(st.sampled_from(["fp32", "fp16", "bf16"]), st.one_of(st.sampled_from(DTYPES), st.text(max_size=8))),
       par=mostly(st.sampled_from(["none", "dp2", "tp2", "pp2"]),
                  st.one_of(st.sampled_from(PARALLEL), st.text(max_size=6))),
       fused=st.booleans(), explain=st.booleans(), as_json=st.booleans())
def test_cli_predict_never_tracebacks(model: str, hardware: str, mode: str, batch: int, seq: int, dtype: str,
                                      par: str, fused: bool, explain: bool, as_json: bool) -> None:
    res = runner.invoke(app, predict_args(model, hardware, mode, batch, seq, dtype, par, fused, explain, as_json))
    check_cli(res)
    if res.exit_code in (0, 1) and as_json:
        data = json.loads(res.stdout)
        assert data["step_time_low_s"] <= data["step_time_s"] <= data["step_time_high_s"]
        assert data["fits"] is (res.exit_code == 0)


@SETTINGS
@given(model=st.sampled_from(MODELS), hardware=st.sampled_from(HARDWARE), mode=st.sampled_from(MODES),
       batch=sizes, seq=sizes, dtype=mostly(st.sampled_from(["fp32", "fp16", "bf16"]), st.sampled_from(DTYPES)),
       par=mostly(st.sampled_from(["none", "dp2", "tp2", "pp2"]), st.sampled_from(PARALLEL)), fused=st.booleans(),
       microbatches=st.one_of(st.none(), st.none(), st.integers(-2, 16)),
       optimizer=mostly(st.sampled_from(["adam", "sgd", "none"]), st.just("lion")),
       attention=mostly(st.sampled_from([None, "eager", "sdpa", "flash"]), st.just("ring")),
       style=mostly(st.sampled_from([None, "hf", "engine"]), st.just("jax")))
def test_api_predict_answers_or_raises_perfcast_error(model: str, hardware: str, mode: str, batch: int, seq: int,
                                                      dtype: str, par: str, fused: bool, microbatches: int | None,
                                                      optimizer: str, attention: str | None,
                                                      style: str | None) -> None:
    req = StepRequest(model=model, hardware=hardware, mode=mode, batch_size=batch, seq_len=seq,  # type: ignore[arg-type]
                      dtype=dtype, fused=fused, parallelism=par, microbatches=microbatches, optimizer=optimizer,
                      attention=attention, style=style)
    try:
        st_ = predict(req)
    except PerfcastError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    assert math.isfinite(st_.time_s) and st_.time_s > 0
    assert st_.low_s <= st_.time_s <= st_.high_s
    assert st_.device_busy_s <= st_.time_s * (1 + 1e-9) or st_.parallelism.startswith("pp")


@SETTINGS
@given(name=st.one_of(st.sampled_from(MODELS + HARDWARE), names), as_json=st.booleans(),
       which=st.sampled_from(["hardware", "models"]))
def test_cli_catalog_show_never_tracebacks(name: str, as_json: bool, which: str) -> None:
    # "--" ends the options: a name like "-0" is a name, not an unknown flag (a Click usage error)
    check_cli(runner.invoke(app, [which, "show"] + (["--json"] if as_json else []) + ["--", name]))


# -- malformed config.json --------------------------------------------------------------------------------------
CONFIG_KEYS = ["model_type", "n_embd", "n_layer", "n_head", "vocab_size", "n_positions", "hidden_size",
               "num_attention_heads", "num_hidden_layers", "intermediate_size", "num_key_value_heads",
               "max_position_embeddings", "head_dim", "activation_function", "hidden_act", "num_local_experts",
               "num_experts_per_tok", "sliding_window", "tie_word_embeddings", "rotary_dim", "kv_lora_rank",
               "n_inner", "ffn_dim", "word_embed_proj_dim", "layer_types", "text_config", "num_layers", "d_model"]
MODEL_TYPES = ["gpt2", "opt", "bert", "llama", "mistral", "mixtral", "qwen2", "qwen3_moe", "deepseek_v3", "gpt_oss",
               "falcon", "mpt", "phi", "gptj", "switch_transformers", "llava", "llama4", "t5", ""]
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-5, 70), st.sampled_from([0, 2**20, 10**9, 10**30]),
              st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=6)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(CONFIG_KEYS), inner,
                                                                          max_size=3)),
    max_leaves=6,
)
configs = st.builds(
    lambda mt, rest: {"model_type": mt, **rest},
    st.one_of(st.sampled_from(MODEL_TYPES), json_values),
    st.dictionaries(st.sampled_from(CONFIG_KEYS), json_values, max_size=8),
)
config_texts = st.one_of(configs.map(lambda d: json.dumps(d, allow_nan=True)), st.text(max_size=40),
                         st.sampled_from(["", "[]", "null", "{", '{"n_layer": Infinity}', '{"n_embd": 1e400}']))


@fuzz_settings(60)
@given(text=config_texts, mode=st.sampled_from(MODES), par=st.sampled_from(["none", "tp2", "pp2"]))
def test_cli_malformed_config_json_never_tracebacks(tmp_path_factory: pytest.TempPathFactory, text: str, mode: str,
                                                    par: str) -> None:
    folder = tmp_path_factory.mktemp("cfg")
    path = folder / "config.json"
    path.write_text(text, encoding="utf-8")
    check_cli(runner.invoke(app, ["models", "show", str(path), "--json"]))
    check_cli(runner.invoke(app, ["predict", "-m", str(path), "-H", "a100-pcie-40gb", "-s", "16", "-b", "2",
                                  "--mode", mode, "--parallelism", par, "--json"]))


# -- malformed tables for predict-batch ---------------------------------------------------------------------------
HEADERS = {
    "e2e": ["device", "model", "mode", "batch_size", "seq_len", "fused", "parallelism", "pp_microbatches",
            "measured_ms", "measured_fw_ms", "measured_bw_ms"],
    "gemm": ["device", "op", "split", "batch", "m_rows", "k_reduction", "n_cols", "latency_ms"],
    "vector": ["device", "op", "split", "rows", "cols", "latency_ms"],
    "conv": ["device", "op", "split", "batch", "in_channels", "out_channels", "kernel_size", "input_hw", "stride",
             "padding", "latency_ms"],
    "vidur": ["gpu_id", "model_id", "num_tokens", "num_tensor_parallel_workers", "n_head", "n_kv_head", "n_embd",
              "n_expanded_embd", "vocab_size", "use_gated_mlp", "time_stats.emb.median", "time_stats.add.median"],
    "published_gemm": ["gpu_id", "dtype", "m", "n", "k", "tflops"],
    "energy_legacy": ["system_prompt_variant", "model_id", "gpu_id", "num_gpus", "batch_size", "dtype",
                      "mean_output_tokens", "latency_per_response_s", "energy_per_request_J", "avg_power_W"],
    "unknown": ["a", "b"],
}
CELLS = ["", "0", "-1", "1", "2", "8", "512", "1e400", "nan", "inf", "-inf", "abc", "true", "false", "none", "dp4",
         "tp3", "pp2", "1.5", "10000000000000000000000", "A100-PCIE-40GB", "a100-pcie-80gb", "T4", "bert_large",
         "gpt2_large", "switchxl4", "meta-llama/Llama-2-7b-hf", "inference", "training", "decode", "bmm",
         "linear", "add", "softmax", "ln", "conv", "bf16", "fp8", '"', ",", "\n", "\x00"]
cells = st.one_of(st.sampled_from(CELLS), st.text(max_size=6))


@st.composite
def tables(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from([*HEADERS, "raw"]))
    if kind == "raw":
        return draw(st.binary(max_size=80))
    header = list(HEADERS[kind])
    if draw(st.booleans()) and len(header) > 2:
        header.pop(draw(st.integers(0, len(header) - 1)))  # a required column missing
    rows = draw(st.lists(st.lists(cells, min_size=0, max_size=len(header) + 2), max_size=4))
    import csv
    import io

    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(header)
    writer.writerows(rows)
    data = buf.getvalue()
    if draw(st.booleans()):
        data = data.replace('"', "", draw(st.integers(0, 3)))  # break the quoting
    return data.encode("utf-8", errors="surrogatepass")


@fuzz_settings(60)
@given(data=tables(), gz=st.booleans(), as_json=st.booleans())
def test_cli_predict_batch_malformed_tables_never_traceback(tmp_path_factory: pytest.TempPathFactory, data: bytes,
                                                            gz: bool, as_json: bool) -> None:
    folder: Path = tmp_path_factory.mktemp("tbl")
    table = folder / ("t.csv.gz" if gz else "t.csv")
    table.write_bytes(data)  # a .gz name with plain bytes inside is malformed too
    out = folder / "pred.csv"
    res = runner.invoke(app, ["predict-batch", str(table), "-o", str(out), "--force"]
                        + (["--json"] if as_json else []))
    check_cli(res)
    if res.exit_code == 0:
        assert out.exists()
