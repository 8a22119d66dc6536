# perfcast: two entry points that work on a fresh clone with nothing installed by hand.
#   make suite   create .venv, install perfcast with its torch extra (CPU torch, transformers: scenario R6 measures
#                this CPU and, the first time, calibrates it), run the scenario suite
#   make test    create .venv, install perfcast with its test extras, run ruff, mypy and the tests
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
SUITESTAMP := $(VENV)/.installed-suite
TESTSTAMP := $(VENV)/.installed-test

.PHONY: suite test venv bench fuzz clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip>=23"

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e .
	$(BIN)/python -m compileall -q src  # bytecode once, even where PYTHONDONTWRITEBYTECODE is set
	touch $@

$(SUITESTAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e ".[torch]"
	$(BIN)/python -m compileall -q src
	touch $@ $(STAMP)

$(TESTSTAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e ".[test]"
	$(BIN)/python -m compileall -q src
	touch $@ $(SUITESTAMP) $(STAMP)

venv: $(STAMP)

suite: $(SUITESTAMP)
	$(BIN)/perfcast suite

test: $(TESTSTAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/mypy
	$(BIN)/python -m pytest

bench: $(STAMP)
	$(BIN)/python benchmarks/run.py

fuzz: $(TESTSTAMP)
	$(BIN)/python benchmarks/fuzz_cli.py --workers 2

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
