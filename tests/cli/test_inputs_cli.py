"""Inputs beyond what perfcast reads are refused in one line naming the bound, never a traceback or an
out-of-memory kill: deeply nested, huge, binary or self-referencing files, non-finite numbers in files,
and absurd sizes on the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import invoke, user_error

from perfcast.jsonio import MAX_FILE_BYTES, MAX_NESTING, MAX_VALUES

SCENARIO = "id: x\ntitle: t\nkind: model_latency\nhardware: [t4]\nruns: [{model: gpt2, batch_size: 1, seq_len: 8}]\n"


def _write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return path


@pytest.mark.parametrize("args_of", [
    lambda p: ["models", "show", str(p)],
    lambda p: ["predict", "-m", str(p), "-H", "h100"],
    lambda p: ["predict", "--workload", str(p), "-H", "h100"],
], ids=["models show", "predict --model", "predict --workload"])
def test_deeply_nested_json_is_refused_naming_the_bound(tmp_path: Path, args_of) -> None:  # type: ignore[no-untyped-def]
    path = _write(tmp_path, "config.json", '{"model_type": "llama", "x": ' + "[" * 5000 + "]" * 5000 + "}")
    line = user_error(invoke(args_of(path)))
    assert f"nested more than {MAX_NESTING} levels" in line and str(path) in line


@pytest.mark.parametrize("text, fragment", [
    ('{"model_type": "gpt2", "n_embd": NaN}', "NaN"),
    ('{"model_type": "gpt2", "layer_norm_epsilon": Infinity}', "Infinity"),
    ('{"model_type": "gpt2", "layer_norm_epsilon": 1e400}', "1e400"),
    ('{"model_type": "gpt2", "n_embd": ' + "9" * 5000 + "}", "digits"),
])
def test_non_finite_or_absurd_numbers_in_a_config_are_refused(tmp_path: Path, text: str, fragment: str) -> None:
    line = user_error(invoke(["models", "show", str(_write(tmp_path, "config.json", text))]))
    assert fragment in line


def test_a_file_beyond_the_size_bound_is_refused_before_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    with path.open("wb") as fh:  # sparse: the size is what the bound looks at
        fh.truncate(MAX_FILE_BYTES + 1)
    line = user_error(invoke(["models", "show", str(path)]))
    assert "too large" in line and f"{MAX_FILE_BYTES // 2**20} MiB" in line


@pytest.mark.parametrize("args_of", [
    lambda p: ["run", str(p)],
    lambda p: ["suite", "--only", str(p)],
    lambda p: ["predict", "-m", "gpt2", "-H", str(p)],
    lambda p: ["train", "-m", "gpt2", "-s", "64", "-c", str(p)],
    lambda p: ["accel", "--layer", str(p)],
], ids=["run", "suite", "hardware yaml", "cluster yaml", "accel problem"])
def test_binary_yaml_files_are_refused_as_not_text(tmp_path: Path, args_of) -> None:  # type: ignore[no-untyped-def]
    path = _write(tmp_path, "x.yaml", bytes(range(256)) * 4)
    assert "not UTF-8 text" in user_error(invoke(args_of(path)))


def test_a_yaml_alias_bomb_is_refused_at_once(tmp_path: Path) -> None:
    lines = [SCENARIO.rstrip("\n"), 'a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]  # 10^9 values expanded
    path = _write(tmp_path, "bomb.yaml", "\n".join(lines) + "\n")
    line = user_error(invoke(["run", str(path)]))
    assert f"more than {MAX_VALUES:,} values" in line


def test_a_yaml_document_containing_itself_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, "cyc.yaml", SCENARIO + "notes: &n [*n]\n")
    assert "contains itself" in user_error(invoke(["run", str(path)]))


def test_non_finite_yaml_numbers_are_refused_naming_the_key(tmp_path: Path) -> None:
    text = "id: x\ntitle: t\nkind: serving\nruns: [{label: a, model: gpt2, hardware: t4, workload: {qps: .nan}}]\n"
    line = user_error(invoke(["run", str(_write(tmp_path, "nan.yaml", text))]))
    assert "runs[0].workload.qps is nan" in line


def test_what_perfcast_ships_is_within_the_bounds() -> None:
    from importlib import resources

    from perfcast.errors import ConfigError
    from perfcast.jsonio import read_json
    from perfcast.yamlio import read_yaml

    root = Path(str(resources.files("perfcast")))
    files = sorted(root.rglob("*.json")) + sorted(root.rglob("*.yaml"))
    assert len(files) > 100
    for path in files:
        (read_json if path.suffix == ".json" else read_yaml)(path, what="data file", error=ConfigError)


@pytest.mark.parametrize("args, fragment", [
    (["serve", "-m", "llama-2-7b", "-H", "h100", "-n", "100000000000"], "--num-requests: Input should be less than "
                                                                          "or equal to 1000000"),
    (["serve", "-m", "llama-2-7b", "-H", "h100", "--num-replicas", "100000000"], "less than or equal to 10000"),
    (["serve", "-m", "llama-2-7b", "-H", "h100", "--max-num-seqs", "1000000000"], "less than or equal to 65536"),
    (["serve", "-m", "llama-2-7b", "-H", "h100", "--swap-space", "1e300"], "--swap-space: Input should be a finite"),
    (["collective", "--op", "all_reduce", "--bytes", "1e30", "--gpus", "8", "--cluster", "dgx-h100"],
     "larger than the 80 GiB of one h100-sxm-80gb"),
    (["collective", "--op", "all_reduce", "--bytes", "1e400", "--gpus", "8", "--cluster", "dgx-h100"],
     "not a finite number of bytes"),
    (["accel", "--layer", "resnet50.conv1", "--samples", "1000000000"], "give 1 to 1,000,000"),
    (["accel", "--layer", "resnet50.conv1", "-b", "1000000000"], "a loop bound is 1 to 16,777,216"),
    (["train", "-m", "gpt2", "-c", "dgx-h100", "-s", "1024", "--pp", "2", "--global-batch", "10000000", "--trace",
      "t.json"], "a trace holds at most 200,000"),
    (["serve", "-m", "llama-2-7b", "-H", "h100", "--prompt-tokens", "9", "--output-tokens", "9", "--seed", "-1"],
     "--seed: Input should be greater than or equal to 0"),
    (["accel", "--layer", "resnet50.conv1", "--seed", "-1"], "seed -1: give a non-negative integer"),
], ids=["serve -n", "serve replicas", "serve max-num-seqs", "serve swap", "collective bytes", "collective inf",
        "accel samples", "accel batch", "train trace", "serve seed", "accel seed"])
def test_absurd_sizes_are_refused_with_their_bound(args: list[str], fragment: str, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert fragment in user_error(invoke(args))
    assert not (tmp_path / "t.json").exists()


def test_a_trace_file_that_is_json_but_not_a_workload_is_one_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "w.json", json.dumps([1, 2, 3]))
    assert "not a captured workload" in user_error(invoke(["predict", "--workload", str(path), "-H", "h100"]))


def test_a_captured_op_without_the_shape_of_its_kind_is_one_line(tmp_path: Path) -> None:
    # the fuzz's workload file: a vector op with one dim, which the kernel model reads as (rows, cols)
    from perfcast.capture.io import WORKLOAD_SCHEMA_VERSION

    op = {"name": "x", "op": "relu", "kind": "vector", "dims": [7], "dtype": "fp32", "flops": 7.0, "bytes_read": 28.0,
          "bytes_written": 28.0, "count": 1, "phase": "fwd", "group": "mlp", "chain": None, "fused_bytes": None,
          "weight_bytes": 0.0, "tp_split": "none", "params": 0, "meta": []}
    path = _write(tmp_path, "w.json", json.dumps({
        "schema_version": WORKLOAD_SCHEMA_VERSION, "model_id": "m", "mode": "inference", "batch_size": 1,
        "seq_len": 1, "dtype": "fp32", "ops": [op]}))
    line = user_error(invoke(["predict", "--workload", str(path), "-H", "a100-pcie-40gb"]))
    assert "a vector op has 1 dims; it carries 2" in line
