"""perfcast capture and predict --workload: happy paths, JSON keys, one-line errors with exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from perfcast.cli import app

pytest.importorskip("torch")
runner = CliRunner()

MODEL = '''
import torch, torch.nn as nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(64, 128)
        self.b = nn.Linear(128, 10)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))

class Bad(nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x * 2
        return x

def build():
    return Net(), (torch.randn(8, 64),)

def bare():
    return Net()

def bad():
    return Bad(), (torch.randn(2, 2),)
'''


@pytest.fixture
def model_file(tmp_path: Path) -> Path:
    path = tmp_path / "model.py"
    path.write_text(MODEL)
    return path


def test_capture_then_predict(model_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "w.json"
    res = runner.invoke(app, ["capture", f"{model_file}:build", "--out", str(out), "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["num_ops"] == 3 and data["flops_by_kind"]["gemm"] == 2 * 8 * (64 * 128 + 128 * 10) + 8 * 138
    assert out.is_file()
    again = runner.invoke(app, ["capture", f"{model_file}:build", "--out", str(out)])
    assert again.exit_code == 2 and "--force" in again.stderr
    pred = runner.invoke(app, ["predict", "--workload", str(out), "-H", "a100", "--json"])
    assert pred.exit_code == 0, pred.output
    step = json.loads(pred.stdout)
    assert step["step_time_s"] > 0
    assert step["energy_J"] > 0 and 0 < step["avg_power_W"] <= 400  # an A100 SXM's TDP
    # the captured shapes are the workload's: -b 64 printed the captured batch's time under the user's 64
    for flags in (["-b", "64"], ["-s", "4096"], ["--attention", "flash"]):
        res = runner.invoke(app, ["predict", "--workload", str(out), "-H", "a100", *flags])
        assert res.exit_code == 2 and "captured workload keeps the shapes" in res.stderr, res.stderr


def test_bare_module_takes_input_shapes(model_file: Path) -> None:
    res = runner.invoke(app, ["capture", f"{model_file}:bare", "-i", "4x64", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["batch_size"] == 4
    res = runner.invoke(app, ["capture", f"{model_file}:bare"])
    assert res.exit_code == 2 and "--input-shape" in res.stderr


@pytest.mark.parametrize(("args", "needle"), [
    (["{file}:bad", "--method", "fx"], "torch.export"),
    (["{file}:nope"], "has no function 'nope'"),
    (["{tmp}/broken.onnx"], "does not parse as an ONNX model"),
    (["model.txt"], "FILE.py:FUNCTION"),
])
def test_bad_input_is_one_line(model_file: Path, tmp_path: Path, args: list[str], needle: str) -> None:
    (tmp_path / "broken.onnx").write_bytes(b"\x00garbage")
    res = runner.invoke(app, ["capture", *(a.format(file=model_file, tmp=tmp_path) for a in args)])
    assert res.exit_code == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], res.stderr


def test_predict_needs_model_or_workload() -> None:
    res = runner.invoke(app, ["predict", "-H", "a100"])
    assert res.exit_code == 2 and "--workload" in res.stderr


LAYERED = '''
import torch, torch.nn as nn

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(64)
        self.up = nn.Linear(64, 256)
        self.down = nn.Linear(256, 64)

    def forward(self, x):
        return x + self.down(torch.relu(self.up(self.norm(x))))

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(500, 64)
        self.blocks = nn.ModuleList([Block() for _ in range(6)])
        self.head = nn.Linear(64, 500)

    def forward(self, ids):
        x = self.embed(ids)
        for b in self.blocks:
            x = b(x)
        return self.head(x)

def build():
    return Net(), (torch.randint(0, 500, (4, 32)),)
'''


def test_capture_merges_layers_and_trains_with_data_parallelism(tmp_path: Path) -> None:
    src = tmp_path / "layered.py"
    src.write_text(LAYERED)
    out = tmp_path / "w.json"
    res = runner.invoke(app, ["capture", f"{src}:build", "--out", str(out), "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["repeated_layers"] == [{"module": "blocks.0-5", "layers": 6}]
    assert data["num_ops"] == 1 + 5 + 1  # embedding, one block's norm/up/relu/down/add, head
    res = runner.invoke(app, ["train", "--workload", str(out), "-c", "dgx-a100", "--dp", "4", "--json"])
    assert res.exit_code == 0, res.output
    step = json.loads(res.stdout)
    assert step["num_gpus"] == 4 and step["plan"]["micro_batch"] == 4 and step["plan"]["seq_len"] == 32
    assert step["step_time_s"] > 0 and step["comm_total_s"]["dp_comm_s"] > 0
    assert step["memory_breakdown_bytes"]["activations_bytes"] > 0
    sharded = runner.invoke(app, ["train", "--workload", str(out), "-c", "dgx-a100", "--tp", "2", "--json"])
    assert sharded.exit_code == 0, sharded.output  # up/down: a Megatron column/row pair
    assert json.loads(sharded.stdout)["comm_total_s"]["tp_comm_s"] > 0
    for args, needle in ((["--cp", "2"], "context and expert"), (["--micro-batch", "8"], "captured with batch 4"),
                         (["--lora-rank", "8"], "LoRA")):
        bad = runner.invoke(app, ["train", "--workload", str(out), "-c", "dgx-a100", *args])
        assert bad.exit_code == 2 and bad.stderr.count("\n") == 1 and needle in bad.stderr, bad.stderr
    piped = runner.invoke(app, ["train", "--workload", str(out), "-c", "dgx-a100", "--pp", "2", "--dp", "2",
                                "--global-batch", "16", "--json"])
    assert piped.exit_code == 0, piped.output
    assert [s["layers"] for s in json.loads(piped.stdout)["stages"]] == [3, 3]
    flat = runner.invoke(app, ["capture", f"{src}:build", "--no-merge", "--json"])
    assert flat.exit_code == 0 and json.loads(flat.stdout)["num_ops"] == 1 + 6 * 5 + 1
    assert json.loads(flat.stdout)["flops"] == data["flops"]
    one = runner.invoke(app, ["predict", "--workload", str(out), "-H", "a100", "--mode", "training", "--dtype",
                              "bf16", "--json"])
    assert one.exit_code == 0, one.output
    phases = json.loads(one.stdout)["time_by_phase_s"]
    assert phases["bwd"] > phases["fwd"] > 0 and phases["opt"] > 0
    four = runner.invoke(app, ["predict", "--workload", str(out), "-H", "a100", "--mode", "training", "--dtype",
                               "bf16", "--parallelism", "dp4", "--json"])
    assert four.exit_code == 0 and json.loads(four.stdout)["comm_s"] > 0
    assert json.loads(four.stdout)["batch_size"] == 16  # the captured batch on each of 4 GPUs
    for args, needle in ((["--parallelism", "tp2"], "tensor parallelism"), (["--mode", "decode"], "KV cache")):
        bad = runner.invoke(app, ["predict", "--workload", str(out), "-H", "a100", *args])
        assert bad.exit_code == 2 and bad.stderr.count("\n") == 1 and needle in bad.stderr, bad.stderr
    both = runner.invoke(app, ["train", "-c", "dgx-a100"])
    assert both.exit_code == 2 and "--workload" in both.stderr
