"""The command line through Typer's CliRunner: --help, one small happy path per command, exit 2 on bad input.

A user error prints exactly one ``error: ...`` line to stderr and exits 2 (no traceback); ``--json``
prints exactly one JSON object.
"""

from __future__ import annotations

import contextlib
import csv
import json
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_helpers import invoke, parse_json, user_error
from typer.testing import CliRunner

from perfcast.cli import app
from perfcast.groundtruth.files import find_groundtruth

runner = CliRunner()

COMMANDS = [[], ["predict"], ["predict-batch"], ["validate"], ["fit"], ["suite"], ["hardware"], ["hardware", "list"],
            ["hardware", "show"], ["models"], ["models", "list"], ["models", "show"]]

# the NeuSight end-to-end schema (shared/groundtruth/neusight/e2e.csv); the measured values are placeholders
E2E_HEADER = ["device", "device_name", "vendor", "model", "mode", "batch_size", "seq_len", "fused", "parallelism",
              "num_gpus", "pp_microbatches", "measured_ms", "measured_fw_ms", "measured_bw_ms", "source_label"]
E2E_ROWS = [
    ["A100-PCIE-40GB", "NVIDIA A100-PCIE-40GB", "NVIDIA", "bert_large", "inference", "8", "512", "false", "none", "1",
     "", "100.0", "100.0", "0.0", "test"],
    ["V100-PCIE-32GB", "Tesla V100-PCIE-32GB", "NVIDIA", "gpt2_large", "training", "1", "1024", "false", "none", "1",
     "", "500.0", "200.0", "300.0", "test"],
    ["A100-PCIE-40GB", "NVIDIA A100-PCIE-40GB", "NVIDIA", "gpt2_large", "inference", "4", "1024", "true", "dp4", "4",
     "", "", "", "", "test"],
    ["NO-SUCH-GPU", "", "", "gpt2_large", "inference", "4", "1024", "false", "none", "1", "", "1.0", "1.0", "0.0",
     "test"],
]


@contextlib.contextmanager
def deadline(seconds: int) -> Iterator[None]:
    """Fail (instead of hanging the suite) when the block runs longer than ``seconds`` (POSIX only)."""
    if not hasattr(signal, "SIGALRM"):
        yield
        return

    def expire(_signum: int, _frame: object) -> None:
        raise TimeoutError(f"did not finish within {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def write_e2e(path: Path, rows: list[list[str]] = E2E_ROWS) -> Path:
    with path.open("w", encoding="utf-8", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(E2E_HEADER)
        w.writerows(rows)
    return path


# -- help ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: " ".join(c) or "perfcast")
def test_help(cmd: list[str]) -> None:
    res = invoke([*cmd, "--help"])
    assert res.exit_code == 0, res.stderr
    assert "Usage" in res.stdout
    assert "Traceback" not in res.stdout


def test_no_arguments_prints_help() -> None:
    res = invoke([])
    assert res.exit_code in (0, 2)
    assert "predict" in res.stdout + res.stderr


# -- predict -----------------------------------------------------------------------------------------------------
def test_predict_text() -> None:
    res = invoke(["predict", "-m", "gpt2", "-H", "a100-pcie-40gb", "-b", "2", "-s", "128"])
    assert res.exit_code == 0, res.stderr
    assert "gpt2 on a100-pcie-40gb" in res.stdout
    assert "step time" in res.stdout and "interval" in res.stdout
    assert res.stderr == ""


def test_predict_json() -> None:
    data = parse_json(invoke(["predict", "-m", "gpt2", "-H", "a100-pcie-40gb", "-b", "2", "-s", "128", "--json"]))
    for key in ("step_time_s", "step_time_low_s", "step_time_high_s", "device_busy_s", "host_s", "flops",
                "num_kernels", "time_by_phase_s"):
        assert key in data
    assert 0 < data["step_time_low_s"] < data["step_time_s"] < data["step_time_high_s"]
    assert (data["model"], data["hardware"], data["batch_size"], data["seq_len"]) == ("gpt2", "a100-pcie-40gb", 2, 128)
    assert "top_ops" not in data


def test_predict_json_matches_the_api() -> None:
    from perfcast import StepRequest, predict
    from perfcast.workload.types import Mode

    data = parse_json(invoke(["predict", "-m", "bert-base", "-H", "t4", "--mode", "training", "-b", "2", "-s", "64",
                              "--dtype", "fp16", "--json"]))
    st = predict(StepRequest(model="bert-base", hardware="t4", mode=Mode.TRAINING, batch_size=2, seq_len=64,
                             dtype="fp16"))
    assert data["step_time_s"] == pytest.approx(st.time_s, rel=1e-12)
    assert data["mode"] == "training" and data["dtype"] == "fp16"


def test_predict_explain_json_has_top_ops() -> None:
    data = parse_json(invoke(["predict", "-m", "gpt2", "-H", "h100-sxm-80gb", "--explain", "--json"]))
    top = data["top_ops"]
    assert 0 < len(top) <= 12
    assert {"name", "op", "dims", "count", "time_s", "share_frac", "bound", "flops", "bytes"} <= set(top[0])
    times = [o["time_s"] for o in top]
    assert times == sorted(times, reverse=True)
    assert all(0 < o["share_frac"] <= 1 for o in top)
    assert all(o["bound"] in ("compute", "memory", "latency", "host", "comm") for o in top)


def test_predict_explain_text() -> None:
    res = invoke(["predict", "-m", "gpt2", "-H", "h100-sxm-80gb", "--explain"])
    assert res.exit_code == 0 and "top ops" in res.stdout


@pytest.mark.parametrize("par", ["dp4", "tp4", "pp4"])
def test_predict_parallelism_json(par: str) -> None:
    data = parse_json(invoke(["predict", "-m", "gpt2", "-H", "a100-sxm-80gb", "--mode", "training", "-b", "8",
                              "-s", "256", "--parallelism", par, "--json"]))
    assert data["parallelism"] == par and data["comm_s"] > 0


def test_predict_decode_json() -> None:
    data = parse_json(invoke(["predict", "-m", "llama-2-7b", "-H", "h100-sxm-80gb", "--mode", "decode", "-b", "16",
                              "-s", "2048", "--dtype", "bf16", "--json"]))
    assert data["mode"] == "decode" and data["step_time_s"] > 0


# -- predict: user errors ----------------------------------------------------------------------------------------
def test_unknown_model_names_closest_ids() -> None:
    line = user_error(invoke(["predict", "-m", "gtp2", "-H", "a100-pcie-40gb"]))
    assert "unknown model 'gtp2'" in line and "gpt2" in line


def test_unknown_hardware_names_closest_ids() -> None:
    line = user_error(invoke(["predict", "-m", "gpt2", "-H", "a100-pcie-4gb"]))
    assert "unknown hardware 'a100-pcie-4gb'" in line and "a100-pcie-40gb" in line


@pytest.mark.parametrize(("args", "fragment"), [
    (["-b", "0"], "batch size must be a positive integer"),
    (["-b", str(10**400)], "beyond what perfcast models"),
    (["-s", "4096"], "exceeds the 1024 learned positions of gpt2"),
    (["--mode", "serve"], "unknown mode 'serve'"),
    (["--dtype", "fp13"], "unknown dtype"),
    (["--dtype", "("], "unknown dtype"),
    (["--parallelism", "ep4"], "unknown parallelism"),
    (["--parallelism", "tp5"], "use tp in {1, 2, 3, 4, 6, 12}"),
    (["--parallelism", "dp3", "-b", "4"], "divisible by 3"),
    (["--optimizer", "lion", "--mode", "training"], "unknown optimizer"),
    (["--attention", "ring"], "unknown attention"),
    (["--mode", "decode", "-H", "p100-pcie-16gb", "--dtype", "bf16"], "has no bf16 peak"),
])
def test_predict_bad_input_is_one_error_line(args: list[str], fragment: str) -> None:
    line = user_error(invoke(["predict", "-m", "gpt2", "-H", "a100-pcie-40gb", *args]))
    assert fragment in line


@pytest.mark.parametrize("args", [["-b", "abc"], ["--no-such-flag"], ["-s"]])
def test_usage_errors_exit_2_without_traceback(args: list[str]) -> None:
    """Arguments Click cannot parse are refused by Click itself (its usage panel, several lines)."""
    res = invoke(["predict", "-m", "gpt2", "-H", "t4", *args])
    assert res.exit_code == 2
    assert "Traceback" not in res.stdout + res.stderr
    assert res.stdout == ""


def test_serving_mode_on_encoder_is_unsupported() -> None:
    line = user_error(invoke(["predict", "-m", "bert-base", "-H", "a100-pcie-40gb", "--mode", "decode"]))
    assert "decoder-only" in line


def test_debug_shows_the_exception() -> None:
    res = runner.invoke(app, ["--debug", "predict", "-m", "gtp2", "-H", "a100-pcie-40gb"])
    assert res.exit_code != 0
    from perfcast.errors import UnknownNameError

    assert isinstance(res.exception, UnknownNameError)


# -- catalogs ----------------------------------------------------------------------------------------------------
def test_hardware_list_json() -> None:
    data = parse_json(invoke(["hardware", "list", "--json"]))
    ids = [h["id"] for h in data["hardware"]]
    assert "h100-sxm-80gb" in ids and ids == sorted(ids)
    assert all(h["memory_bandwidth_Bps"] > 0 and h["peak_fp32_flops_per_s"] > 0 for h in data["hardware"])


def test_hardware_list_text() -> None:
    from perfcast.catalog.hardware import list_hardware

    res = invoke(["hardware", "list"])
    assert res.exit_code == 0 and f"{len(list_hardware())} devices" in res.stdout


def test_hardware_show_json_by_alias() -> None:
    data = parse_json(invoke(["hardware", "show", "h100", "--json"]))
    assert data["id"] == "h100-sxm-80gb"
    assert data["source"] and data["memory_bandwidth_Bps"] > 0


def test_hardware_show_unknown() -> None:
    line = user_error(invoke(["hardware", "show", "h1000"]))
    assert "unknown hardware" in line


def test_models_list_json() -> None:
    data = parse_json(invoke(["models", "list", "--json"]))
    by_id = {m["id"]: m for m in data["models"]}
    assert by_id["gpt2"]["params"] == 124_439_808
    assert by_id["mixtral-8x7b"]["active_params"] < by_id["mixtral-8x7b"]["params"]


def test_models_list_text() -> None:
    from perfcast.catalog.models import list_models

    res = invoke(["models", "list"])
    assert res.exit_code == 0 and f"{len(list_models())} models" in res.stdout


def test_models_show_json() -> None:
    data = parse_json(invoke(["models", "show", "gpt2", "--json"]))
    assert (data["id"], data["hidden_size"], data["num_layers"], data["num_heads"]) == ("gpt2", 768, 12, 12)
    assert "hf_config" not in data


def test_models_show_config_path(tmp_path: Path) -> None:
    cfg = {"model_type": "gpt2", "n_embd": 256, "n_layer": 2, "n_head": 4, "vocab_size": 1000, "n_positions": 128}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg), encoding="utf-8")
    data = parse_json(invoke(["models", "show", str(path), "--json"]))
    assert (data["hidden_size"], data["num_layers"]) == (256, 2)
    pred = parse_json(invoke(["predict", "-m", str(path), "-H", "t4", "-s", "64", "--json"]))
    assert pred["step_time_s"] > 0


def test_models_show_malformed_config(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text("{ not json", encoding="utf-8")
    line = user_error(invoke(["models", "show", str(path)]))
    assert "malformed config.json" in line


@pytest.mark.parametrize(("text", "fragment"), [
    ('{"model_type": "gpt2", "n_head": 0}', "config"),
    ('{"model_type": "gpt2", "n_layer": Infinity}', "config"),
    ('{"model_type": "gpt2", "n_embd": 1e400}', "config"),
    ('{"model_type": "gpt2", "n_embd": 6.7e153}', "beyond what perfcast models"),
    ('{"model_type": "llama", "num_hidden_layers": 1000000000000000000000000000000}', "layer count"),
    ('{"model_type": "qwen2", "num_hidden_layers": 1e30}', "layer count"),
    ('{"model_type": "mixtral", "num_local_experts": 8, "num_experts_per_tok": 10}', "exceeds num_experts"),
    ("[1, 2]", "JSON object"),
])
def test_invalid_config_values_are_one_error_line(tmp_path: Path, text: str, fragment: str) -> None:
    """Division by zero heads, infinite sizes, absurd layer counts and top-k above the expert count are
    refused in one line (they used to raise ZeroDivisionError/OverflowError or hang)."""
    path = tmp_path / "config.json"
    path.write_text(text, encoding="utf-8")
    for args in (["models", "show", str(path)], ["predict", "-m", str(path), "-H", "t4", "-s", "16"]):
        with deadline(20):  # an absurd layer count once hung in per-layer loops
            res = invoke(args)
        line = user_error(res)
        assert fragment in line


# -- predict-batch ---------------------------------------------------------------------------------------------
def test_predict_batch_writes_predictions(tmp_path: Path) -> None:
    table = write_e2e(tmp_path / "e2e.csv")
    out = tmp_path / "pred.csv"
    data = parse_json(invoke(["predict-batch", str(table), "-o", str(out), "--json"]))
    assert data["kind"] == "neusight_e2e" and data["rows"] == len(E2E_ROWS)
    assert data["predicted_rows"] == 3
    with out.open(encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == len(E2E_ROWS)
    for col in ("pred_measured_ms", "pred_measured_ms_low", "pred_measured_ms_high", "pred_measured_fw_ms",
                "pred_measured_bw_ms", "status"):
        assert col in rows[0]
    for row in rows[:3]:
        assert row["status"] == "ok"
        lo, mid, hi = (float(row[c]) for c in ("pred_measured_ms_low", "pred_measured_ms", "pred_measured_ms_high"))
        assert 0 < lo < mid < hi
    assert float(rows[0]["pred_measured_bw_ms"]) == 0.0  # inference: no backward
    assert float(rows[1]["pred_measured_fw_ms"]) < float(rows[1]["pred_measured_ms"])
    assert rows[3]["status"].startswith("unsupported:") and rows[3]["pred_measured_ms"] == ""
    # the input columns are carried over unchanged
    assert [rows[i]["model"] for i in range(len(rows))] == [r[3] for r in E2E_ROWS]


def test_predict_batch_text(tmp_path: Path) -> None:
    table = write_e2e(tmp_path / "e2e.csv")
    res = invoke(["predict-batch", str(table), "-o", str(tmp_path / "out.csv.gz")])
    assert res.exit_code == 0, res.stderr
    assert "neusight_e2e: 4 rows, 3 predicted" in res.stdout
    assert (tmp_path / "out.csv.gz").stat().st_size > 0


def test_predict_batch_row_that_does_not_fit_says_so(tmp_path: Path) -> None:
    """Llama-2-7B at batch 64 x 4096 on a 16 GB T4 (FP32: ~300 GiB) was a row with status ok and a 17-minute step."""
    row = ["T4", "Tesla T4", "NVIDIA", "llama-2-7b", "inference", "64", "4096", "false", "none", "1", "", "", "", "",
           "test"]
    table = write_e2e(tmp_path / "e2e.csv", [*E2E_ROWS[:1], row])
    out = tmp_path / "pred.csv"
    data = parse_json(invoke(["predict-batch", str(table), "-o", str(out), "--json"]))
    assert data["predicted_rows"] == 1 and data["out_of_memory_rows"] == 1
    with out.open(encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert rows[0]["status"] == "ok"
    assert rows[1]["status"].startswith("out of memory: needs ") and "of 16.0 GiB" in rows[1]["status"]
    assert float(rows[1]["pred_measured_ms"]) > 0  # the times are kept, as predict prints them with its verdict


def test_predict_batch_refuses_to_overwrite(tmp_path: Path) -> None:
    table = write_e2e(tmp_path / "e2e.csv")
    out = tmp_path / "pred.csv"
    out.write_text("keep me", encoding="utf-8")
    line = user_error(invoke(["predict-batch", str(table), "-o", str(out)]))
    assert "--force" in line
    assert out.read_text(encoding="utf-8") == "keep me"
    res = invoke(["predict-batch", str(table), "-o", str(out), "--force"])
    assert res.exit_code == 0, res.stderr
    assert out.read_text(encoding="utf-8").startswith("device,")


@pytest.mark.parametrize(("content", "fragment"), [
    ("a,b,c\n1,2,3\n", "unrecognized table"),
    ("", "empty table"),
])
def test_predict_batch_bad_tables(tmp_path: Path, content: str, fragment: str) -> None:
    table = tmp_path / "t.csv"
    table.write_text(content, encoding="utf-8")
    line = user_error(invoke(["predict-batch", str(table), "-o", str(tmp_path / "o.csv")]))
    assert fragment in line


@pytest.mark.parametrize("content", [
    # a VIDUR table with no rows, and one with a time_stats column of an operator perfcast does not model
    "gpu_id,model_id,num_tokens,num_tensor_parallel_workers,n_embd,time_stats.emb.median\n",
    "gpu_id,model_id,num_tokens,num_tensor_parallel_workers,n_head,n_kv_head,n_embd,n_expanded_embd,vocab_size,"
    "use_gated_mlp,time_stats.emb.median,time_stats.foo.median\n"
    "a100-pcie-80gb,meta-llama/Llama-2-7b-hf,128,1,32,32,4096,11008,32000,true,0.1,0.2\n",
    # short rows: the missing fields are empty
    "device,op,split,batch,m_rows,k_reduction,n_cols,latency_ms\nA100-PCIE-40GB\n",
    "device,model,mode,batch_size,seq_len,measured_ms\nT4\n",
])
def test_predict_batch_odd_tables_are_answered(tmp_path: Path, content: str) -> None:
    table = tmp_path / "t.csv"
    table.write_text(content, encoding="utf-8")
    res = invoke(["predict-batch", str(table), "-o", str(tmp_path / "o.csv"), "--json"])
    data = parse_json(res)
    assert data["rows"] == content.count("\n") - 1
    with (tmp_path / "o.csv").open(encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == data["rows"]
    assert all(r["status"] == "ok" or r["status"].startswith("unsupported:") for r in rows)


def test_predict_batch_missing_table(tmp_path: Path) -> None:
    line = user_error(invoke(["predict-batch", str(tmp_path / "nope.csv"), "-o", str(tmp_path / "o.csv")]))
    assert "does not exist" in line


# -- suite -------------------------------------------------------------------------------------------------------
def test_suite_r1_json_writes_results(tmp_path: Path) -> None:
    out_dir = tmp_path / "results"
    data = parse_json(invoke(["suite", "--only", "R1", "--json", "--out", str(out_dir)]))
    (r1,) = data["scenarios"]
    assert r1["id"] == "R1" and r1["status"] == "ok"
    assert r1["predictions"] == len(r1["rows"]) > 0
    ok = [r for r in r1["rows"] if r["status"] == "ok"]
    assert all(r["step_time_low_s"] < r["step_time_s"] < r["step_time_high_s"] for r in ok)
    saved = json.loads((out_dir / "results.json").read_text(encoding="utf-8"))
    assert saved[0]["id"] == "R1" and len(saved[0]["rows"]) == len(r1["rows"])
    with (out_dir / "results.csv").open(encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == len(r1["rows"]) and rows[0]["scenario"] == "R1"
    assert {"model", "hardware", "step_time_s"} <= set(rows[0])


def test_suite_user_scenario_file_text(tmp_path: Path) -> None:
    sc = tmp_path / "mine.yaml"
    sc.write_text("id: mine\ntitle: a small one\nkind: model_latency\nhardware: [t4]\n"
                  "runs:\n  - {model: gpt2, batch_size: 1, seq_len: 64}\n", encoding="utf-8")
    res = invoke(["suite", "--only", str(sc)])
    assert res.exit_code == 0, res.stderr
    assert "mine" in res.stdout and "gpt2" in res.stdout


def test_suite_unknown_scenario() -> None:
    line = user_error(invoke(["suite", "--only", "Q77"]))
    assert "unknown scenario 'Q77'" in line and "known: " in line and "more" in line  # 38 ids: the first 8 shown
    assert "closest known: R9" in user_error(invoke(["suite", "--only", "R99"]))


def test_suite_bad_scenario_file(tmp_path: Path) -> None:
    sc = tmp_path / "bad.yaml"
    sc.write_text("id: bad\ntitle: t\nkind: model_latency\nhardware: [t4]\nruns: []\nbogus: 1\n", encoding="utf-8")
    line = user_error(invoke(["suite", "--only", str(sc)]))
    assert str(sc) in line


# -- validate and fit ----------------------------------------------------------------------------------------------
needs_groundtruth = pytest.mark.skipif(find_groundtruth(required=False) is None,
                                       reason="ground truth not found (set PERFCAST_GROUNDTRUTH)")


@needs_groundtruth
def test_validate_json_on_a_small_table(tmp_path: Path) -> None:
    table = write_e2e(tmp_path / "e2e.csv")
    data = parse_json(invoke(["validate", str(table), "--json"]))
    (report,) = [t for t in data["tables"] if t["target"] == "measured_ms"]
    assert report["kind"] == "neusight_e2e"
    assert report["overall"]["rows"] == 3 and report["overall"]["predicted_rows"] == 2


def test_fit_refuses_to_overwrite(tmp_path: Path) -> None:
    out = tmp_path / "coefficients.json"
    out.write_text("{}", encoding="utf-8")
    line = user_error(invoke(["fit", "-o", str(out)]))
    assert "--force" in line and out.read_text(encoding="utf-8") == "{}"


def test_fit_unknown_stage() -> None:
    line = user_error(invoke(["fit", "--stages", "warp"]))
    assert "unknown fit stages" in line


def test_fit_host_stage_needs_an_output() -> None:
    line = user_error(invoke(["fit", "--stages", "host"]))
    assert "--compose-out " in line


def test_predict_batch_row_with_an_infinite_count_is_a_malformed_row(tmp_path: Path) -> None:
    """The 10,000-case fuzz: a batch size of ``inf`` escaped as an OverflowError from ``int(float(...))``."""
    row = ["T4", "Tesla T4", "NVIDIA", "gpt2", "inference", "inf", "128", "false", "none", "1", "", "", "", "",
           "test"]
    table = write_e2e(tmp_path / "e2e.csv", [*E2E_ROWS[:1], row])
    out = tmp_path / "pred.csv"
    data = parse_json(invoke(["predict-batch", str(table), "-o", str(out), "--json"]))
    assert data["predicted_rows"] == 1
    with out.open(encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert rows[1]["status"].startswith("unsupported: malformed row") and rows[1]["pred_measured_ms"] == ""


def test_serve_refuses_an_encoder_decoder_naming_the_cross_attention_cache() -> None:
    line = user_error(invoke(["serve", "-m", "flan-t5-xl", "-H", "a100-sxm-80gb"]))
    assert "encoder-decoder" in line and "cross-attention KV cache" in line


def test_predict_prices_a_t5_forward_pass() -> None:
    res = invoke(["predict", "-m", "flan-t5-xl", "-H", "a100-sxm-80gb", "-b", "1", "-s", "512", "--json"])
    assert res.exit_code == 0, res.stdout
    assert parse_json(res)["step_time_s"] > 0


def test_models_show_json_carries_params_active_params_and_layer_types() -> None:
    """Issue 16: every family's layers by kind, beside its total and active parameters."""
    from collections import Counter

    def show(model: str) -> dict:
        res = invoke(["models", "show", model, "--json"])
        assert res.exit_code == 0, res.stderr
        return json.loads(res.stdout)

    nano = show("nemotron-3-nano-30b-a3b")
    assert Counter(nano["layer_types"]) == {"mamba2": 23, "moe": 23, "full_attention": 6}
    assert nano["active_params"] < nano["params"] / 5
    assert Counter(show("gemma-2-9b")["layer_types"]) == {"sliding_attention+mlp": 21, "full_attention+mlp": 21}
    assert Counter(show("deepseek-v3")["layer_types"]) == {"mla+mlp": 3, "mla+moe": 58}
    assert Counter(show("qwen3-next-80b-a3b")["layer_types"]) == {"linear_attention+moe": 36,
                                                                   "full_attention+moe": 12}
    assert Counter(show("jamba-v0.1")["layer_types"]) == {"mamba+mlp": 12, "mamba+moe": 16, "full_attention+mlp": 4}
    assert show("resnet-50")["layer_types"] == []
