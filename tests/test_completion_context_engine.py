"""LocalBackend.prepare packs the ranked workspace context (or the file alone) into the
prompt."""

from __future__ import annotations

from pathlib import Path

import pytest

from memosight_lsp.context import PackedContext
from memosight_lsp.inference.loading import load_model
from memosight_lsp.pipeline.local_backend import LocalBackend
from memosight_lsp.pipeline.request import CompletionRequest
from memosight_lsp.workspace import WorkspaceIndex

B_PY = "from a import compute_total\n\n\ndef checkout(cart):\n    return compute_total("


@pytest.fixture(scope="module")
def engine(tiny_model_dir: Path) -> LocalBackend:
    return LocalBackend(
        load_model(str(tiny_model_dir), device="cpu"), speculative=False, time_passes=False
    )


@pytest.fixture
def index(tmp_path: Path) -> WorkspaceIndex:
    (tmp_path / "a.py").write_text(
        'def compute_total(prices, tax_rate):\n    """Sum and tax."""\n'
        "    return sum(prices) * (1 + tax_rate)\n"
    )
    (tmp_path / "b.py").write_text(B_PY)
    index = WorkspaceIndex(tmp_path, use_cache=False)
    index.scan()
    return index


def request(index: WorkspaceIndex | None, text: str = B_PY, **extra) -> CompletionRequest:
    lines = text.split("\n")
    return CompletionRequest(
        text=text,
        line=len(lines) - 1,
        column=len(lines[-1]),
        path=str(index.root / "b.py") if index else "/nowhere/b.py",
        language_id="python",
        index=index,
        **extra,
    )


def test_prepare_ranks_the_other_files_definition_into_the_prompt(engine, index):
    prompt = engine.prepare(request(index))
    assert isinstance(prompt.context, PackedContext)
    assert "# file: a.py\ndef compute_total(prices, tax_rate):" in prompt.text
    # As its own chunk, or inside a window of similar code (context.similarSnippets).
    assert any(
        s.path == "a.py"
        and ((s.symbol, s.kind) == ("compute_total", "full") or s.kind == "window")
        and "def compute_total(prices, tax_rate):" in s.text
        for s in prompt.context.snippets
    )
    assert prompt.text.index("# file: a.py") < prompt.text.index("# file: b.py")


def test_without_an_index_the_prompt_is_the_file_alone(engine, index):
    prompt = engine.prepare(request(None))
    assert "compute_total(prices" not in prompt.text
    assert {s.kind for s in prompt.context.snippets} <= {"prefix", "suffix"}


def test_budget_is_honoured(engine, index):
    small = engine.prepare(request(index, budget_tokens=24))
    assert 0 < small.context.prompt_tokens <= 24
    assert engine.count_tokens(small.text) <= 24 + 8  # FIM markers and healing aside


def test_huge_and_binary_texts_get_no_cross_file_ranking(engine, index):
    huge = "x = 1\n" * 200_000 + B_PY
    prompt = engine.prepare(request(index, huge))
    assert all(s.path != "a.py" for s in prompt.context.snippets)
    assert "def checkout(cart):" in prompt.text
    binary = "\x00\x01\n" + B_PY
    assert all(s.path != "a.py" for s in engine.prepare(request(index, binary)).context.snippets)
