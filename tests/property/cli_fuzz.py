"""A property-based fuzz of the perfcast command line: draw command lines (commands, flags, numbers, input files
and configs, outputs that already hold a user's file) and check what the ``perfcast`` script does with them.

Used by ``tests/property/test_no_traceback.py`` (a few hundred fixed cases per run) and by
``benchmarks/fuzz_cli.py`` (ten thousand or more fresh ones, counted, failures reported). A case is a
:class:`Case`; :func:`run_case` runs it through :func:`perfcast.cli.main` in-process in its own folder, and
:func:`problems` lists what is wrong with the outcome (nothing, for a pass):

- no traceback and no exception escapes ``main()``;
- the exit code is 0 (an answer), 1 (the answer is no: one ``does not fit: ...`` or ``failed: ...`` line on
  stderr) or 2 (bad input: exactly one ``error: ...`` line on stderr, nothing on stdout);
- with ``--json``, an answer (0 or 1) is exactly one JSON object on stdout;
- no file that existed before the run changed (bytes or modification time) unless ``--force`` was given.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

__all__ = ["Case", "CaseTimeout", "Outcome", "cases", "problems", "run_case"]

OLD_NS = 1_000_000_000 * 1_000_000_000  # 2001-09-09: the modification time every pre-existing file gets


@dataclass(frozen=True)
class Case:
    """One command line, the files written in its folder first, and which of them it names as outputs."""

    argv: tuple[str, ...]
    files: tuple[tuple[str, bytes], ...] = ()
    outputs: tuple[str, ...] = ()

    def describe(self) -> str:
        """The command as a shell would show it (file contents left out)."""
        return "perfcast " + " ".join(a if a and " " not in a else repr(a) for a in self.argv)


@dataclass
class Outcome:
    """What the script printed, its exit code, and the exception that escaped it (if any)."""

    exit_code: int
    stdout: str
    stderr: str
    escaped: str | None = None
    time_s: float = 0.0
    changed: list[str] = field(default_factory=list)


class CaseTimeout(BaseException):  # noqa: N818 - a BaseException, so no `except Exception` in perfcast eats it
    """Raised in the main thread when a case runs past its time limit."""


@contextlib.contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    if seconds <= 0 or not hasattr(signal, "SIGALRM"):
        yield
        return

    def _raise(signum: int, frame: object) -> None:
        raise CaseTimeout(f"ran longer than {seconds:.0f} s")

    old = signal.signal(signal.SIGALRM, _raise)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    out = {}
    for p in folder.rglob("*"):
        if p.is_file():
            out[str(p.relative_to(folder))] = (p.read_bytes(), p.stat().st_mtime_ns)
    return out


def run_case(case: Case, folder: Path, *, time_limit_s: float = 0.0) -> Outcome:
    """Write the case's files in ``folder`` (outputs too: a user's file already there, with an old time), run
    ``perfcast ARGV`` there through the script's entry point and return what happened."""
    from typer.testing import CliRunner

    from perfcast.cli import main

    folder.mkdir(parents=True, exist_ok=True)
    for name, data in case.files:
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    for name in case.outputs:
        path = folder / name
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(f"a file of the user's: {name}\n".encode())
    for p in folder.rglob("*"):
        if p.is_file():
            os.utime(p, ns=(OLD_NS, OLD_NS))
    before = _snapshot(folder)
    cwd, argv = os.getcwd(), sys.argv
    escaped = None
    code = 0
    start = time.perf_counter()
    with CliRunner().isolation() as (out, err, _):
        os.chdir(folder)
        sys.argv = ["perfcast", *case.argv]
        try:
            with _time_limit(time_limit_s):
                main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except (Exception, CaseTimeout, RecursionError, MemoryError) as exc:  # noqa: BLE001 - the finding
            escaped = "".join(traceback.format_exception(exc)[-6:])
            code = -1
        finally:
            os.chdir(cwd)
            sys.argv = argv
            sys.stdout.flush()
            sys.stderr.flush()
        stdout = out.getvalue().decode("utf-8", "replace")
        stderr = err.getvalue().decode("utf-8", "replace")
    elapsed = time.perf_counter() - start
    after = _snapshot(folder)
    changed = [name for name, state in before.items() if after.get(name) != state]
    return Outcome(code, stdout, stderr, escaped, elapsed, changed)


def problems(case: Case, outcome: Outcome) -> list[str]:
    """What is wrong with ``outcome`` (empty: the case passes). Each problem is one short line."""
    found: list[str] = []
    text = outcome.stdout + outcome.stderr
    if outcome.escaped is not None:
        last = outcome.escaped.strip().splitlines()[-1] if outcome.escaped.strip() else "?"
        found.append(f"escaped: {last}")
        return found
    if "Traceback (most recent call last)" in text:
        found.append("a traceback was printed")
    lines = outcome.stderr.splitlines()
    if outcome.exit_code not in (0, 1, 2):
        found.append(f"exit code {outcome.exit_code}")
    elif outcome.exit_code == 2:
        if len(lines) != 1 or not lines[0].startswith("error: "):
            found.append(f"exit 2 without exactly one `error:` line: {outcome.stderr[:200]!r}")
        if outcome.stdout.strip():
            found.append("exit 2 with output on stdout")
    elif outcome.exit_code == 1:
        if len(lines) != 1 or not lines[0].startswith(("does not fit: ", "failed: ")):
            found.append(f"exit 1 without exactly one `does not fit:`/`failed:` line: {outcome.stderr[:200]!r}")
    if "--json" in case.argv and outcome.exit_code in (0, 1) and not {"--help", "--version"} & set(case.argv):
        body = outcome.stdout.strip()
        try:
            ok = len(body.splitlines()) == 1 and isinstance(json.loads(body), dict)
        except ValueError:
            ok = False
        if not ok:
            found.append(f"--json did not print exactly one JSON object: {body[:120]!r}")
    if outcome.changed and "--force" not in case.argv:
        found.append(f"changed without --force: {', '.join(sorted(outcome.changed))}")
    return found


# -- what is drawn --------------------------------------------------------------------------------------------------
# the first entries of each pool are valid; the cases that draw only valid values (half) take from those
MODELS = ["gpt2", "bert-base", "opt-toy-1layer", "llama-2-7b", "mixtral-8x7b", "gpt2-xl", "phi-2", "llama-3.2-1b",
          "qwen3-30b-a3b", "GPT-18B (hidden 6144, 40 layers, vocab 51200)", "gpt2_large", "deepseek-v3", "t5-small"]
VALID_MODELS = 10
SERVE_MODELS = ["llama-2-7b", "llama-3.2-1b", "mistral-7b", "mixtral-8x7b", "llama-3.1-8b", "opt-125m", "gpt2",
                "banana"]
HARDWARE = ["a100-pcie-40gb", "h100-sxm-80gb", "t4", "mi250", "h100", "A100-PCIE-40GB", "a100-sxm-80gb",
            "p100-pcie-16gb", "gaudi2", "local-cpu", "nope"]
VALID_HARDWARE = 7
CLUSTERS = ["dgx-h100", "dgx-a100", "DGX-H100", "gb200-nvl72", "nope"]
VALID_CLUSTERS = 4
DTYPES = ["fp32", "fp16", "bf16", "fp8", "int8", "int4", "fp4", "tf32", "fp64", "bfloat16", "(", ""]
PARALLEL = ["none", "dp2", "dp4", "tp2", "tp4", "tp8", "pp2", "pp4", "dp0", "tp", "pp1000", "ep4", "1", ""]
MODES = ["inference", "training", "prefill", "decode", "serve"]
OPS = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv", "allreduce", "gather"]
SIZES = ["1MB", "64MiB", "2e9", "0", "1", "1e30", "1e400", "-5", "lots", "8GB", "1.5TB", "nan", "inf", "80GiB"]
SCHEDULERS = ["vllm", "sarathi", "orca", "lightllm", "static", "fcfs"]
ACCEL_LAYERS = ["resnet50.conv1", "resnet50.layer1.0.conv2", "gpt2.attn", "resnet50", "nope.conv1", "bert-base.fc1"]
SUITE_IDS = ["T1.1", "T2.2", "R2", "E1", "Q77", "R99", "", ",", "t1.1"]
FORCE_COMMANDS = {"serve", "train", "search", "accel", "predict-batch", "fit", "capture", "calibrate", "report",
                  "suite", "validate"}

# numbers as a user types them: mostly valid and small, with the edges, the absurd and the malformed
_EDGE = ["0", "-1", "-0", "1e11", "1e30", "inf", "-inf", "nan", "NaN", "1.5", "0x10", "1_000", "", " ", "abc",
         "100000000000", "1000000000", "4294967297", str(10**30), "9" * 400]


def nums(lo: int = 1, hi: int = 64) -> st.SearchStrategy[str]:
    """A number as typed on the command line: three in four draws in ``lo..hi``."""
    valid = st.integers(lo, hi).map(str)
    return st.one_of(valid, valid, valid, st.sampled_from(_EDGE), st.integers(-10, 10**12).map(str))


def floats(lo: float = 0.01, hi: float = 100.0) -> st.SearchStrategy[str]:
    valid = st.floats(lo, hi, allow_nan=False).map(lambda x: f"{x:.4g}")
    return st.one_of(valid, valid, valid, st.sampled_from(_EDGE))


def mostly(valid: st.SearchStrategy[Any], weird: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Three draws in four from ``valid``."""
    return st.one_of(valid, valid, valid, weird)


_names = st.one_of(st.text(max_size=12), st.sampled_from(["", ".", "/", "-", "--", "x.json", "x.yaml", "-0"]))


def _pick(draw: st.DrawFn, pool: list[str]) -> str:
    return draw(mostly(st.sampled_from(pool), _names))


class _Args:
    """Collects a command line and its files while a case is drawn."""

    def __init__(self, draw: st.DrawFn, *command: str) -> None:
        self.draw = draw
        self.argv: list[str] = list(command)
        self.files: dict[str, bytes] = {}
        self.outputs: list[str] = []
        # which options appear: uniform chances (hypothesis' own draws lean to their edges, 0 most of all)
        self.rnd = draw(st.randoms(use_true_random=True))
        # half the cases draw only valid values, so that many get past validation into the predictors
        self.sane = self.chance(0.5)

    def chance(self, p: float) -> bool:
        """True with probability ``p``."""
        return self.rnd.random() < p

    def mostly(self, valid: st.SearchStrategy[Any], weird: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        return valid if self.sane else mostly(valid, weird)

    def nums(self, lo: int = 1, hi: int = 64) -> st.SearchStrategy[str]:
        return st.integers(lo, hi).map(str) if self.sane else nums(lo, hi)

    def floats(self, lo: float = 0.01, hi: float = 100.0) -> st.SearchStrategy[str]:
        return st.floats(lo, hi, allow_nan=False).map(lambda x: f"{x:.4g}") if self.sane else floats(lo, hi)

    def pick(self, pool: list[str], valid: int | None = None) -> str:
        """From ``pool`` (its first ``valid`` entries when this case draws only valid values), or a random name."""
        if self.sane:
            return self.draw(st.sampled_from(pool[:valid]))
        return self.draw(mostly(st.sampled_from(pool), _names))

    def opt(self, flag: str, values: st.SearchStrategy[str], p: float = 0.5) -> None:
        """``flag VALUE`` with probability ``p``."""
        if self.chance(p):
            self.argv += [flag, self.draw(values)]

    def switch(self, flag: str, p: float = 0.3) -> None:
        if self.chance(p):
            self.argv.append(flag)

    def output(self, flag: str, name: str, p: float = 0.4) -> None:
        """An output: a new file, a user's file already there, a missing folder, a folder, a file as folder."""
        if not self.chance(p):
            return
        kinds = ["existing", "new", "new"] if self.sane else ["existing", "existing", "new", "missing-folder",
                                                                 "folder", "under-file"]
        kind = self.draw(st.sampled_from(kinds))
        if kind == "existing":
            self.outputs.append(name)
            self.argv += [flag, name]
        elif kind == "new":
            self.argv += [flag, f"new-{name}"]
        elif kind == "missing-folder":
            self.argv += [flag, f"no-such-folder/{name}"]
        elif kind == "folder":
            self.files["a-folder/keep"] = b"x"
            self.argv += [flag, "a-folder"]
        else:
            self.files["plain-file"] = b"x"
            self.argv += [flag, f"plain-file/{name}"]

    def file(self, name: str, data: bytes) -> str:
        self.files[name] = data
        return name

    def case(self, force_p: float = 0.1) -> Case:
        takes_force = bool(self.argv) and self.argv[0] in FORCE_COMMANDS
        if self.chance(force_p if takes_force or not self.sane else 0.0):
            self.argv.append("--force")
        return Case(tuple(self.argv), tuple(sorted(self.files.items())), tuple(self.outputs))


# -- files ----------------------------------------------------------------------------------------------------------
CONFIG_KEYS = ["model_type", "n_embd", "n_layer", "n_head", "vocab_size", "n_positions", "hidden_size",
               "num_attention_heads", "num_hidden_layers", "intermediate_size", "num_key_value_heads",
               "max_position_embeddings", "head_dim", "hidden_act", "num_local_experts", "num_experts_per_tok",
               "sliding_window", "tie_word_embeddings", "rope_scaling", "torch_dtype", "quantization_config",
               "text_config", "vision_config", "layer_types", "kv_lora_rank", "rope_theta"]
MODEL_TYPES = ["gpt2", "opt", "bert", "llama", "mistral", "mixtral", "qwen2", "qwen3_moe", "deepseek_v3", "gpt_oss",
               "falcon", "phi", "gptj", "llava", "qwen2_vl", "t5", "mamba2", "banana", ""]
_json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-5, 70), st.sampled_from([0, 2**20, 10**9, 10**30]),
                       st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=6),
                       st.sampled_from(["bf16", "float16", "bfloat16", "fp8", "mxfp4", "linear", "yarn"]))
json_values = st.recursive(_json_leaf, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(CONFIG_KEYS + ["type", "factor"]), inner,
                                                 max_size=3)), max_leaves=8)
_LLAMA = {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 4, "num_hidden_layers": 2,
          "intermediate_size": 512, "vocab_size": 1000, "max_position_embeddings": 512, "torch_dtype": "bfloat16"}


@st.composite
def config_json(draw: st.DrawFn) -> bytes:
    """A config.json: a valid small Llama with some keys changed, a random one, or not JSON at all."""
    kind = draw(st.sampled_from(["edited", "edited", "random", "text", "deep", "constants", "binary"]))
    if kind == "edited":
        cfg = dict(_LLAMA)
        for key, value in draw(st.dictionaries(st.sampled_from(CONFIG_KEYS), json_values, max_size=3)).items():
            cfg[key] = value
        if draw(st.booleans()):
            cfg["model_type"] = draw(st.sampled_from(MODEL_TYPES))
        return json.dumps(cfg).encode()
    if kind == "random":
        return json.dumps(draw(st.dictionaries(st.sampled_from(CONFIG_KEYS), json_values, max_size=8))).encode()
    if kind == "text":
        return draw(st.sampled_from(["", "[]", "null", "{", "{}", '{"n_layer": 1e400}', "1"])).encode()
    if kind == "deep":
        n = draw(st.sampled_from([10, 40, 900, 5000]))
        return ('{"model_type": "llama", "x": ' + "[" * n + "]" * n + "}").encode()
    if kind == "constants":
        return draw(st.sampled_from(['{"model_type": "gpt2", "n_embd": NaN}', '{"n_embd": Infinity}',
                                     '{"n_embd": ' + "9" * 5000 + "}"])).encode()
    return draw(st.binary(max_size=64))


_WORKLOAD: list[str] = []


def _workload_text() -> str:
    """A valid captured workload (GPT-2 inference at batch 1, 32 tokens) as `perfcast capture` writes it."""
    if not _WORKLOAD:
        from perfcast.capture.io import workload_to_dict
        from perfcast.workload.build import WorkloadSpec, build_workload
        from perfcast.workload.types import Mode

        w = build_workload("gpt2", WorkloadSpec(mode=Mode.INFERENCE, batch_size=1, seq_len=32))
        _WORKLOAD.append(json.dumps(workload_to_dict(w, source="fuzz")))
    return _WORKLOAD[0]


@st.composite
def workload_json(draw: st.DrawFn) -> bytes:
    text = _workload_text()
    kind = draw(st.sampled_from(["valid", "edited", "edited", "binary", "text"]))
    if kind == "valid":
        return text.encode()
    if kind == "edited":
        data = json.loads(text)
        target = data if draw(st.booleans()) or not data.get("ops") else data["ops"][0]
        key = draw(st.sampled_from([*target.keys(), "bogus"]))
        target[key] = draw(json_values)
        return json.dumps(data).encode()
    if kind == "binary":
        return draw(st.binary(max_size=64))
    return draw(st.sampled_from(["", "[1, 2]", "{", '{"schema_version": 1}'])).encode()


SCENARIO_TEMPLATES = [
    "id: mine\ntitle: t\nkind: model_latency\nhardware: [t4]\nruns: [{model: gpt2, batch_size: 1, seq_len: 64}]\n",
    "id: mine\ntitle: t\nkind: training\nruns:\n  - label: a\n    model: gpt2\n    cluster: dgx-h100\n"
    "    plan: {tp: 1, dp: 8, seq_len: 1024, micro_batch: 1}\n",
    "id: mine\ntitle: t\nkind: collective\nruns:\n  - cluster: dgx-h100\n    ops: [all_reduce]\n"
    "    group_sizes: [8]\n    sizes_bytes: [1048576]\n",
    "id: mine\ntitle: t\nkind: serving\nruns:\n  - label: a\n    model: llama-2-7b\n    hardware: h100\n"
    "    workload: {num_requests: 10, prompt_tokens: 32, output_tokens: 8}\n",
    "id: big\ntitle: t\nkind: training\nruns:\n  - label: too big\n    model: llama-2-70b\n    cluster: dgx-h100\n"
    "    nodes: 4\n    plan: {tp: 8, dp: 4, zero: 1, seq_len: 4096, micro_batch: 1, global_batch: 128}\n",
]
_YAML_VALUES = ["0", "-1", "1e30", ".inf", ".nan", "null", "[]", "{}", "banana", "'1'", "100000000000", "true",
                "[1, 2]", "*nope", "&a [*a]"]


@st.composite
def scenario_yaml(draw: st.DrawFn) -> bytes:
    """A scenario file: a small valid one with a value or a key changed, or something that is not one."""
    kind = draw(st.sampled_from(["edited", "edited", "edited", "valid", "binary", "deep", "bomb", "text"]))
    base = draw(st.sampled_from(SCENARIO_TEMPLATES))
    if kind == "valid":
        return base.encode()
    if kind == "edited":
        lines = base.splitlines()
        i = draw(st.integers(0, len(lines) - 1))
        head, sep, _ = lines[i].partition(": ")
        lines[i] = f"{head}{sep or ': '}{draw(st.sampled_from(_YAML_VALUES))}"
        if draw(st.booleans()):
            lines.append(f"{draw(st.sampled_from(['bogus', 'notes', 'dtype', 'hardware']))}: "
                         f"{draw(st.sampled_from(_YAML_VALUES))}")
        return ("\n".join(lines) + "\n").encode()
    if kind == "binary":
        return draw(st.binary(max_size=80))
    if kind == "deep":
        return ("a: " + "[" * 3000 + "]" * 3000 + "\n").encode()
    if kind == "bomb":
        lines = [base.rstrip("\n"), 'a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
        lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 8)}]" for i in range(1, 9)]
        return ("\n".join(lines) + "\nnotes: *a8\n").encode()
    return draw(st.text(max_size=40)).encode("utf-8", "surrogatepass")


HEADERS = {
    "e2e": ["device", "model", "mode", "batch_size", "seq_len", "fused", "parallelism", "pp_microbatches",
            "measured_ms"],
    "gemm": ["device", "op", "split", "batch", "m_rows", "k_reduction", "n_cols", "latency_ms"],
    "vector": ["device", "op", "split", "rows", "cols", "latency_ms"],
}
CELLS = ["", "0", "-1", "1", "2", "8", "512", "1e400", "nan", "inf", "abc", "true", "false", "none", "dp4",
         "A100-PCIE-40GB", "T4", "gpt2", "bert_large", "inference", "training", "bmm", "linear", "add", '"', ","]


@st.composite
def table_csv(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from([*HEADERS, "raw"]))
    if kind == "raw":
        return draw(st.binary(max_size=80))
    header = HEADERS[kind]
    rows = draw(st.lists(st.lists(st.sampled_from(CELLS), min_size=len(header), max_size=len(header)),
                         max_size=3))
    return ("\n".join(",".join(r) for r in [header, *rows]) + "\n").encode()


# -- commands -------------------------------------------------------------------------------------------------------
@st.composite
def predict_case(draw: st.DrawFn) -> Case:
    a = _Args(draw, "predict")
    source = draw(st.sampled_from(["catalog", "catalog", "catalog", "config", "workload"]))
    if source == "catalog":
        a.argv += ["-m", a.pick(MODELS, VALID_MODELS)]
    elif source == "config":
        a.argv += ["-m", a.file("config.json", draw(config_json()))]
    else:
        a.argv += ["--workload", a.file("w.json", draw(workload_json()))]
    a.argv += ["-H", a.pick(HARDWARE, VALID_HARDWARE)]
    a.opt("--mode", a.mostly(st.sampled_from(MODES[:4]), st.sampled_from(MODES)))
    a.opt("-b", a.nums(1, 16))
    a.opt("-s", a.nums(1, 1024))
    a.opt("--dtype", a.mostly(st.sampled_from(["fp32", "fp16", "bf16"]), st.sampled_from(DTYPES)), 0.4)
    a.opt("--parallelism", a.mostly(st.sampled_from(["none", "dp2", "tp2", "pp2"]), st.sampled_from(PARALLEL)),
          0.3)
    a.opt("--microbatches", a.nums(1, 8), 0.1)
    a.opt("--optimizer", st.sampled_from(["adam", "sgd", "none", "lion"]), 0.1)
    a.opt("--attention", st.sampled_from(["eager", "sdpa", "flash", "ring"]), 0.1)
    a.opt("--style", st.sampled_from(["hf", "engine", "jax"]), 0.1)
    a.opt("--tp", a.nums(1, 8), 0.03)  # predict's --tp arrives with issue 14's train/predict work
    a.switch("--fused")
    a.switch("--explain")
    a.switch("--json", 0.5)
    return a.case()


@st.composite
def catalog_case(draw: st.DrawFn) -> Case:
    which = draw(st.sampled_from(["hardware", "models", "clusters"]))
    a = _Args(draw, which, draw(st.sampled_from(["show", "show", "list"])))
    if a.argv[1] == "show":
        pool = {"hardware": HARDWARE, "models": MODELS, "clusters": CLUSTERS}[which]
        if which == "models" and draw(st.booleans()):
            name = a.file("config.json", draw(config_json()))
        elif which != "models" and a.chance(0.3):
            name = a.file(f"{which}.yaml", draw(scenario_yaml()))
        else:
            name = a.pick(pool)
        a.argv += ["--", name] if name.startswith("-") else [name]
    a.switch("--json", 0.5)
    return a.case()


@st.composite
def collective_case(draw: st.DrawFn) -> Case:
    a = _Args(draw, "collective")
    a.argv += ["--op", a.pick(OPS), "--bytes", draw(a.mostly(st.sampled_from(SIZES[:3]), st.sampled_from(SIZES))),
               "--gpus", draw(a.nums(2, 16)), "--cluster", a.pick(CLUSTERS, VALID_CLUSTERS)]
    a.opt("--nodes", a.nums(1, 4), 0.2)
    a.opt("--gpus-per-node", a.nums(1, 8), 0.2)
    a.opt("--algorithm", st.sampled_from(["ring", "tree", "nvls", "direct", "hierarchical", "halving_doubling",
                                          "magic"]), 0.2)
    a.switch("--json", 0.5)
    return a.case()


@st.composite
def serve_case(draw: st.DrawFn) -> Case:
    a = _Args(draw, "serve")
    a.argv += ["-m", draw(a.mostly(st.sampled_from(SERVE_MODELS[:5]), st.sampled_from(SERVE_MODELS))), "-H",
               draw(a.mostly(st.sampled_from(["h100", "a100-sxm-80gb", "l4"]), st.sampled_from(HARDWARE)))]
    small = a.mostly(st.integers(1, 24).map(str), st.sampled_from(_EDGE))
    a.argv += ["-n", draw(small)]
    if draw(st.booleans()):
        a.argv += ["--prompt-tokens", draw(a.mostly(st.integers(1, 256).map(str), st.sampled_from(_EDGE))),
                   "--output-tokens", draw(a.mostly(st.integers(1, 32).map(str), st.sampled_from(_EDGE)))]
    else:
        a.opt("--trace", st.sampled_from(["arxiv_summarization", "splitwise_code", "nope"]), 0.7)
        if a.chance(0.2):
            a.argv += ["--trace", a.file("trace.csv", draw(table_csv()))]
    a.opt("--qps", a.floats(0.5, 50))
    a.opt("--scheduler", a.mostly(st.sampled_from(SCHEDULERS[:2]), st.sampled_from(SCHEDULERS)), 0.2)
    a.opt("--max-num-seqs", a.nums(1, 256), 0.15)
    a.opt("--block-size", a.nums(1, 32), 0.1)
    a.opt("--tensor-parallel-size", a.nums(1, 8), 0.15)
    a.opt("--num-replicas", a.nums(1, 4), 0.1)
    a.opt("--max-model-len", a.nums(64, 4096), 0.1)
    a.opt("--gpu-memory-utilization", a.floats(0.1, 1.0), 0.1)
    a.opt("--swap-space", a.floats(0, 8), 0.05)
    a.opt("--burstiness", a.floats(0.1, 4), 0.05)
    a.opt("--arrival", st.sampled_from(["poisson", "gamma", "fixed", "trace", "bursty"]), 0.1)
    a.opt("--max-concurrency", a.nums(1, 16), 0.1)
    a.opt("--seed", a.nums(0, 100), 0.1)
    a.opt("--quantization", st.sampled_from(["none", "fp8", "w4a16", "fp4", "int3"]), 0.1)
    a.opt("--dtype", st.sampled_from(["fp16", "bf16", "fp32"]), 0.1)
    if a.chance(0.1):
        a.argv += ["--find-max-qps", "--slo-ttft-p99", draw(a.floats(0.1, 5)), "-n", "16"]
    a.output("--trace-out", "timeline.json", 0.15)
    a.output("--requests-out", "requests.csv", 0.15)
    a.switch("--json", 0.5)
    return a.case()


@st.composite
def train_case(draw: st.DrawFn) -> Case:
    a = _Args(draw, "train")
    a.argv += ["-m", a.pick(MODELS, VALID_MODELS), "-c", a.pick(CLUSTERS, VALID_CLUSTERS)]
    for flag, hi in (("--tp", 8), ("--pp", 4), ("--dp", 8), ("--cp", 2), ("--ep", 8), ("--vp", 2)):
        a.opt(flag, a.nums(1, hi), 0.2)
    a.opt("--nodes", a.nums(1, 4), 0.15)
    a.opt("--zero", a.nums(0, 3), 0.2)
    a.opt("--recompute", st.sampled_from(["none", "selective", "full", "some"]), 0.2)
    a.opt("--micro-batch", a.nums(1, 4), 0.2)
    a.opt("--global-batch", a.nums(1, 256), 0.2)
    a.opt("-s", a.nums(64, 2048), 0.4)
    a.opt("--precision", st.sampled_from(["bf16", "fp16", "fp8", "fp32", "int8"]), 0.15)
    a.opt("--schedule", st.sampled_from(["1f1b", "gpipe", "interleaved", "zb"]), 0.1)
    a.opt("--lora-rank", a.nums(0, 64), 0.1)
    a.switch("--qlora", 0.05)
    a.opt("--moe-skew", a.floats(0, 2), 0.1)
    a.opt("--capacity-factor", a.floats(0.5, 2), 0.05)
    a.opt("--framework", st.sampled_from(["eager", "compiled", "graph", "jax"]), 0.1)
    a.output(a.draw(st.sampled_from(["--trace-out", "--trace"])), "step.json", 0.15)  # --trace: its hidden alias
    a.switch("--json", 0.5)
    return a.case()


@st.composite
def search_case(draw: st.DrawFn) -> Case:
    a = _Args(draw, "search")
    a.argv += ["-m", draw(a.mostly(st.sampled_from(["gpt2", "opt-toy-1layer", "llama-2-7b"]),
                                   st.sampled_from(MODELS)))]
    a.argv += ["--gpus", draw(a.mostly(st.sampled_from(["8", "16", "8,16"]), st.sampled_from(_EDGE + ["1,a", "0"])))]
    if a.chance(0.85):
        a.argv += ["-c", a.pick(CLUSTERS, VALID_CLUSTERS), "--global-batch", draw(a.nums(8, 64))]
        a.opt("-s", a.nums(128, 1024), 0.6)
        a.opt("--tp", st.sampled_from(["1,2", "1", "3", "0", "a", ""]), 0.2)
        a.opt("--zero", st.sampled_from(["0,1", "4", "x"]), 0.1)
        a.opt("--objective", st.sampled_from(["tflops", "step-time", "cost", "speed"]), 0.2)
        a.opt("--price-per-gpu-hour", a.floats(0.5, 5), 0.1)
        a.opt("--max-memory-fraction", a.floats(0.1, 1), 0.1)
        a.opt("--top", a.nums(1, 5), 0.2)
    else:
        a.argv += ["--serve", "-H", a.pick(["h100", "a100-sxm-80gb"]), "--slo-ttft-p99", draw(a.floats(0.2, 5)),
                   "--prompt-tokens", "64", "--output-tokens", "16", "--schedulers", "vllm", "--max-num-seqs", "64",
                   "--requests-per-replica", draw(a.mostly(st.integers(4, 16).map(str), st.sampled_from(_EDGE)))]
        a.opt("--tp", st.sampled_from(["1", "2", "3", "0"]), 0.3)
    a.output("--out", "search.json", 0.3)
    a.switch("--json", 0.5)
    return a.case()


@st.composite
def accel_case(draw: st.DrawFn) -> Case:
    a = _Args(draw, "accel")
    if a.chance(0.1):
        a.argv += draw(st.sampled_from([["--list-archs"], ["--list-layers", "resnet50"], ["--list-layers", "x"]]))
    else:
        layer = a.pick(ACCEL_LAYERS)
        if a.chance(0.15):
            layer = a.file("problem.yaml", draw(scenario_yaml()))
        a.argv += ["--layer", layer]
        a.opt("--arch", st.sampled_from(["eyeriss", "simba", "nope"]), 0.2)
        a.opt("--samples", a.mostly(st.integers(1, 300).map(str), st.sampled_from(_EDGE)), 0.9)
        a.opt("-b", a.nums(1, 4), 0.2)
        a.opt("--search", st.sampled_from(["random", "exhaustive", "genetic"]), 0.2)
        a.opt("--objective", st.sampled_from(["edp", "energy", "delay", "area"]), 0.2)
        a.opt("--seed", a.nums(0, 10), 0.2)
        if a.chance(0.1):
            a.argv += ["--mapping", a.file("mapping.yaml", draw(scenario_yaml()))]
        a.output("--out", "mapping.yaml", 0.3)
    a.switch("--json", 0.5)
    return a.case()


@st.composite
def run_case_args(draw: st.DrawFn) -> Case:
    a = _Args(draw, "run")
    name = draw(st.sampled_from(["mine.yaml", "mine.yaml", "mine.yml", "mine.json", "missing.yaml"]))
    if name != "missing.yaml":
        a.file(name, draw(scenario_yaml()))
    a.argv.append(name)
    a.switch("--json", 0.5)
    return a.case()


@st.composite
def suite_case(draw: st.DrawFn) -> Case:
    a = _Args(draw, "suite")
    if draw(st.booleans()):
        a.argv += ["--only", a.file("mine.yaml", draw(scenario_yaml()))]
    else:
        a.argv += ["--only", draw(st.sampled_from(SUITE_IDS))]
    kind = draw(st.sampled_from(["none", "new", "protected", "protected", "missing", "file"]))
    if kind == "new":
        a.argv += ["--out", "results"]
    elif kind == "protected":
        a.outputs.append(f"results/{draw(st.sampled_from(['results.json', 'results.csv', 'report.html']))}")
        a.argv += ["--out", "results"]
    elif kind == "missing":
        a.argv += ["--out", "no-such-folder/results"]
    elif kind == "file":
        a.files["results"] = b"x"
        a.argv += ["--out", "results"]
    a.opt("--validation", st.sampled_from(["nope.json"]), 0.1)
    a.switch("--json", 0.5)
    return a.case()


@st.composite
def report_case(draw: st.DrawFn) -> Case:
    a = _Args(draw, "report")
    folder = draw(st.sampled_from(["results", "results", "nowhere", "."]))
    if folder == "results" and draw(st.booleans()):
        a.file("results/results.json", draw(st.sampled_from([b"[]", b"{}", b"[{}]", b"not json", b"[" * 4000])))
    elif folder == "results":
        a.files["results/keep"] = b"x"
    a.argv.append(folder)
    a.output("--out", "report.html", 0.6)
    if a.chance(0.2):
        a.argv += ["--validation", a.file("validation.json", draw(config_json()))]
    a.switch("--json", 0.5)
    return a.case()


@st.composite
def table_case(draw: st.DrawFn) -> Case:
    a = _Args(draw, draw(st.sampled_from(["predict-batch", "predict-batch", "validate"])))
    table = a.file(draw(st.sampled_from(["t.csv", "t.csv.gz"])), draw(table_csv()))
    a.argv.append(table)
    if a.argv[0] == "predict-batch":
        a.output("-o", "pred.csv", 0.9)
    elif draw(st.booleans()):
        a.outputs.append("val/validation.json")
        a.argv += ["--out", "val"]
    a.switch("--json", 0.5)
    return a.case()


@st.composite
def refused_work_case(draw: st.DrawFn) -> Case:
    """Commands whose work takes minutes (fit, calibrate, validate --local, capture), drawn only with input they
    must refuse before working, or which fails fast."""
    kind = draw(st.sampled_from(["fit", "calibrate", "capture", "validate-local"]))
    if kind == "fit":
        a = _Args(draw, "fit", "--stages", draw(st.sampled_from(["none", "gemm,banana", "host", "collectives", ""])))
        flag = draw(st.sampled_from(["-o", "--intervals-out", "--compose-out", "--collectives-out", "--training-out",
                                     "--intervals", "--training-output"]))
        a.outputs.append("coeffs.json")
        a.argv += [flag, "coeffs.json"]
    elif kind == "calibrate":
        a = _Args(draw, "calibrate", "--quick")
        why = draw(st.sampled_from(["protected", "missing", "threads"]))
        if why == "protected":
            a.outputs.append("local-cpu.yaml")
            a.argv += ["--out", "local-cpu.yaml"]
        elif why == "missing":
            a.argv += ["--out", "no-such-folder/local-cpu.yaml"]
        else:
            a.argv += ["--threads", draw(st.sampled_from(["0", "-1", "100000", "abc", "1e9"])), "--out", "c.yaml"]
    elif kind == "capture":
        a = _Args(draw, "capture")
        if draw(st.booleans()):
            a.argv.append(a.file("m.onnx", draw(st.binary(max_size=64))))
        else:
            a.file("m.py", draw(st.sampled_from([b"def build(:\n", b"\x00\x01", b"def build():\n    return 3\n",
                                                 b"def build():\n    raise ValueError('no')\n"])))
            a.argv.append(draw(st.sampled_from(["m.py:build", "m.py", "m.py:nope", "nope.py:build"])))
        a.output("--out", "w.json", 0.5)
    else:
        a = _Args(draw, "validate", "--local")
    a.switch("--json", 0.4)
    return a.case(force_p=0.0)  # with --force they would do their minutes of work


@st.composite
def top_level_case(draw: st.DrawFn) -> Case:
    a = _Args(draw)
    a.argv += draw(st.sampled_from([["--version"], ["--help"], [], ["nonsense"], ["predict", "--help"],
                                    ["hardware"], ["models", "list", "--json"], ["--nope"], ["predict"],
                                    ["serve", "-m"], ["train", "--tp"]]))
    if a.chance(0.3):
        a.argv += draw(st.lists(st.one_of(_names, st.sampled_from(["--json", "--force", "-H", "-m", "-b"])),
                                max_size=4))
    return a.case()


def cases() -> st.SearchStrategy[Case]:
    """Every kind of case, the cheap ones drawn more often."""
    return st.one_of(*[predict_case()] * 4, *[catalog_case()] * 2, *[collective_case()] * 2, *[serve_case()] * 3,
                     *[train_case()] * 3, search_case(), *[accel_case()] * 2, *[run_case_args()] * 2, suite_case(),
                     report_case(), *[table_case()] * 2, *[refused_work_case()] * 2, top_level_case())
