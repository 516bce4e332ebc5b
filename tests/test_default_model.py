"""The shipped default model: loads offline with no path, has the FIM tokens, completes code."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

from tiny_models import STDLIB

from memosight_lsp.inference.heads import find_heads
from memosight_lsp.inference.loading import EMBEDDED_MODEL_DIR, load_model
from memosight_lsp.inference.ngram_model import find_ngram_table
from memosight_lsp.pipeline.local_backend import LocalBackend
from memosight_lsp.pipeline.request import CompletionRequest

OFFLINE_ENV = {
    **os.environ,
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HOME": "/nonexistent-hf-home",
    "NO_PROXY": "*",
    "http_proxy": "http://0.0.0.0:9",
    "https_proxy": "http://0.0.0.0:9",
}


def test_loads_with_no_path_and_names_itself():
    loaded = load_model(None)
    assert loaded.embedded and loaded.source == str(EMBEDDED_MODEL_DIR)
    assert loaded.name == "memosight-default"
    assert loaded.fim is not None and loaded.fim.name == "qwen"
    vocab = loaded.tokenizer.get_vocab()
    for token in (
        "<|fim_prefix|>",
        "<|fim_suffix|>",
        "<|fim_middle|>",
        "<|endoftext|>",
        "<|file_sep|>",
    ):
        assert token in vocab
    # Shipped small: bf16 weights well under the repo's size limit.
    weights = EMBEDDED_MODEL_DIR / "model.safetensors"
    assert weights.stat().st_size < 40 * 1024 * 1024


def test_ships_drafters_that_match_it():
    """Heads and the n-gram table are bound to the model's LM head: retraining the model
    without them would silently turn both off."""
    loaded = load_model(None)
    assert find_heads(loaded.model) is not None
    table = find_ngram_table(loaded.model)
    assert table is not None and len(table) > 100_000
    ids = loaded.tokenizer.encode("class Point:\n    def __init__(self")
    assert table.next_tokens(ids[-4:])  # common code has a guess
    assert table.next_tokens([]) == []


def held_out_stdlib_file() -> Path:
    corpus = json.loads((EMBEDDED_MODEL_DIR / "corpus.json").read_text())
    prefix = STDLIB.name + "/"
    candidates = [r.removeprefix(prefix) for r in corpus["val_relpaths"] if r.startswith(prefix)]
    for rel in sorted(candidates):
        path = STDLIB / rel
        if path.is_file() and path.stat().st_size > 4000:
            return path
    raise AssertionError("no held-out stdlib file recorded with the model")


def test_completes_a_held_out_stdlib_line_with_code_that_parses():
    path = held_out_stdlib_file()
    lines = path.read_text().split("\n")
    engine = LocalBackend(load_model(None))
    parsed = 0
    statements = [
        i
        for i, line in enumerate(lines[40:], start=40)
        if line.startswith("    ") and line.strip().startswith(("return ", "self."))
    ]
    for i in statements[:6]:
        indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
        text = "\n".join([*lines[:i], indent, *lines[i + 1 :]])
        completion = engine.complete(
            CompletionRequest(
                text=text,
                line=i,
                column=len(indent),
                multiline="never",
                max_new_tokens=32,
                plain=True,
            )
        )
        parsed += parses_as_a_line(completion.text.strip())
    assert parsed >= 3, f"only {parsed} of 6 completions in {path.name} parse"


def parses_as_a_line(line: str) -> bool:
    """Python accepts the line as a statement, a block header (given a body) or a decorator."""
    if not line:
        return False
    for program in (line, line + "\n    pass", line + "\ndef f():\n    pass"):
        try:
            ast.parse(program)
        except SyntaxError:
            continue
        return True
    return False


def test_cli_completes_offline_without_model_argument():
    sample = Path(__file__).resolve().parent.parent / "memosight_lsp" / "samples" / "quickstart.py"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "memosight_lsp.cli_main",
            "complete",
            str(sample),
            "--line",
            "18",
            "--character",
            "8",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=OFFLINE_ENV,
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["model"] == "memosight-default" and data["new_tokens"] > 0
