# Quick start:  make demo  (set up, then complete a sample file with the code model that
#                          model.path "auto" finds on this machine, else the embedded model)
#               make test  (lint, type check, Python + Neovim + VS Code tests)
# A real model: make demo MODEL=~/models/qwen2.5-coder-0.5b-instruct.gguf  (a .gguf file or a
#               Hugging Face model folder; see README.md, "Use a real model")
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The torch to install when none is present. The default is the CPU wheel these machines keep
# on disk; on a GPU machine install torch first (pytorch.org) or run `make setup TORCH=torch`.
TORCH ?= torch==2.13.0
MODEL ?=
MODEL_ARG := $(if $(MODEL),--model $(MODEL),)

.PHONY: setup setup-dev demo test lint typecheck pytest vscode-test fuzz soak clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

setup: $(BIN)/python
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install -q "$(TORCH)"
	$(BIN)/python -m pip install -q -e .

setup-dev: setup
	$(BIN)/python -m pip install -q -e ".[dev]"

# Last: what auto found and picked, or the embedded fallback and the one command that fixes it.
demo: setup
	$(BIN)/memosight complete memosight_lsp/samples/quickstart.py --line 18 --character 8 --json $(MODEL_ARG)
	$(if $(MODEL),$(BIN)/memosight models $(MODEL_ARG),$(BIN)/memosight models --list)


lint:
	$(BIN)/ruff check memosight_lsp tests tools
	$(BIN)/ruff format --check memosight_lsp tests tools

typecheck:
	$(BIN)/mypy memosight_lsp tools

pytest:
	$(BIN)/python -m pytest -q -p no:cacheprovider

# The reliability harness (docs/reliability.md), kept out of the package: `make fuzz ARGS="--seed 3"`.
fuzz:
	$(BIN)/python -m tools.reliability.fuzz $(ARGS)

soak:
	$(BIN)/python -m tools.reliability.soak $(ARGS)

vscode-test:
	bash editors/vscode/scripts/ci.sh

test: setup-dev lint typecheck pytest vscode-test

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
