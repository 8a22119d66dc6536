"""Every output a command writes is checked before the work starts: a missing folder, a place that is not a
folder or not writable, an existing file without ``--force`` are one ``error:`` line and exit 2, and the user's
file is left as it was (bytes and modification time)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cli_helpers import invoke, parse_json, user_error

# each command with the option that names an output file; the rest of its arguments are valid but never get
# used, because the check comes first (the suite, search and capture would otherwise run for seconds)
FILE_OUTPUTS = {
    "serve --trace-out": ["serve", "-m", "gpt2", "-H", "t4", "-n", "4", "--prompt-tokens", "8", "--output-tokens",
                          "8", "--trace-out"],
    "serve --requests-out": ["serve", "-m", "gpt2", "-H", "t4", "-n", "4", "--prompt-tokens", "8",
                             "--output-tokens", "8", "--requests-out"],
    "train --trace": ["train", "-m", "gpt2", "-c", "dgx-h100", "--trace"],
    "search --out": ["search", "-m", "gpt2", "--gpus", "8", "-c", "dgx-h100", "--global-batch", "8", "--out"],
    "accel --out": ["accel", "--layer", "resnet50.conv1", "--out"],
    "predict-batch -o": ["predict-batch", "table.csv", "-o"],
    "fit -o": ["fit", "--stages", "none", "-o"],
    "fit --intervals-out": ["fit", "--stages", "none", "--intervals-out"],
    "fit --collectives-out": ["fit", "--stages", "collectives", "--collectives-out"],
    "capture --out": ["capture", "model.onnx", "--out"],
    "calibrate --out": ["calibrate", "--quick", "--out"],
    "report --out": ["report", ".", "--out"],
}


@pytest.fixture()
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _untouched(path: Path, content: bytes, mtime_ns: int) -> bool:
    return path.read_bytes() == content and path.stat().st_mtime_ns == mtime_ns


@pytest.mark.parametrize("command", FILE_OUTPUTS.values(), ids=FILE_OUTPUTS.keys())
def test_an_existing_file_is_not_replaced_without_force(in_tmp: Path, command: list[str]) -> None:
    mine = in_tmp / "mine.out"
    mine.write_bytes(b"the user's own bytes\n")
    os.utime(mine, ns=(1_000_000_000, 1_000_000_000))
    line = user_error(invoke([*command, str(mine)]))
    assert str(mine) in line and "exists" in line and "--force" in line
    assert _untouched(mine, b"the user's own bytes\n", 1_000_000_000)


@pytest.mark.parametrize("command", FILE_OUTPUTS.values(), ids=FILE_OUTPUTS.keys())
def test_a_missing_folder_is_refused_before_the_work(in_tmp: Path, command: list[str]) -> None:
    line = user_error(invoke([*command, str(in_tmp / "no-such-folder" / "out.json")]))
    assert "the folder" in line and "does not exist" in line
    assert not (in_tmp / "no-such-folder").exists()


@pytest.mark.parametrize("command", FILE_OUTPUTS.values(), ids=FILE_OUTPUTS.keys())
def test_a_file_where_a_folder_should_be_is_refused(in_tmp: Path, command: list[str]) -> None:
    (in_tmp / "a-file").write_text("x", encoding="utf-8")
    line = user_error(invoke([*command, str(in_tmp / "a-file" / "out.json")]))
    assert "is a file, not a folder" in line


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes in any folder")
@pytest.mark.parametrize("command", FILE_OUTPUTS.values(), ids=FILE_OUTPUTS.keys())
def test_an_unwritable_folder_is_refused(in_tmp: Path, command: list[str]) -> None:
    locked = in_tmp / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        line = user_error(invoke([*command, str(locked / "out.json")]))
    finally:
        locked.chmod(0o700)
    assert "cannot write" in line and "permission denied" in line


def test_a_folder_given_as_an_output_file_is_refused(in_tmp: Path) -> None:
    line = user_error(invoke([*FILE_OUTPUTS["search --out"], str(in_tmp)]))
    assert "is a folder" in line


def test_two_outputs_on_one_path_are_refused(in_tmp: Path) -> None:
    line = user_error(invoke([*FILE_OUTPUTS["serve --trace-out"], "x.json", "--requests-out", "./x.json"]))
    assert "the same file" in line


def test_the_older_spellings_of_fit_outputs_still_work_but_not_beside_the_new_ones(in_tmp: Path) -> None:
    (in_tmp / "i.json").write_text("mine", encoding="utf-8")
    assert "--force" in user_error(invoke(["fit", "--stages", "none", "--intervals", "i.json"]))
    line = user_error(invoke(["fit", "--stages", "none", "--intervals", "a.json", "--intervals-out", "b.json"]))
    assert "--intervals is the older name of --intervals-out" in line


# -- folders: suite --out and validate --out ---------------------------------------------------------------------
def test_suite_out_protects_results_json_and_csv_and_takes_force(in_tmp: Path) -> None:
    out = in_tmp / "results"
    parse_json(invoke(["suite", "--only", "R2", "--json", "--out", str(out)]))
    for name in ("results.json", "results.csv"):
        assert (out / name).is_file()
    csv_before = (out / "results.csv").read_bytes()
    (out / "results.json").write_bytes(b"my notes")
    line = user_error(invoke(["suite", "--only", "R2", "--out", str(out)]))
    assert "results.json exists" in line and "--force" in line
    assert (out / "results.json").read_bytes() == b"my notes"
    (out / "results.json").unlink()
    assert "results.csv exists" in user_error(invoke(["suite", "--only", "R2", "--out", str(out)]))
    assert (out / "results.csv").read_bytes() == csv_before
    data = parse_json(invoke(["suite", "--only", "R2", "--json", "--out", str(out), "--force"]))
    assert data["scenarios"][0]["id"] == "R2" and (out / "results.json").is_file()


@pytest.mark.parametrize("command", [["suite", "--only", "R2"], ["validate"]], ids=["suite", "validate"])
def test_an_out_folder_in_a_missing_folder_or_on_a_file_is_refused(in_tmp: Path, command: list[str]) -> None:
    line = user_error(invoke([*command, "--out", str(in_tmp / "missing" / "results")]))
    assert "does not exist" in line
    (in_tmp / "a-file").write_text("x", encoding="utf-8")
    assert "is a file" in user_error(invoke([*command, "--out", str(in_tmp / "a-file")]))


def test_suite_checks_its_validation_input_before_running(in_tmp: Path) -> None:
    line = user_error(invoke(["suite", "--only", "R2", "--validation", "nope.json"]))
    assert "--validation nope.json does not exist" in line
