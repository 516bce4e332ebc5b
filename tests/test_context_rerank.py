"""The packer's second-stage ranker: asked only when the candidates overflow, and obeyed."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from memosight_lsp.context import Rerank, build_context
from memosight_lsp.inference.compression_policy import Thresholds
from memosight_lsp.inference.loading import load_model
from memosight_lsp.pipeline.local_backend import LocalBackend
from memosight_lsp.pipeline.request import CompletionRequest
from memosight_lsp.workspace import WorkspaceIndex

# Twenty helpers, each imported and used once above the cursor: more candidates than room.
HELPERS = "\n\n".join(
    f'def helper_{i}(value: int) -> int:\n    """Helper number {i}, doubled."""\n'
    f"    return value * {i}"
    for i in range(20)
)
APP = (
    "from .helpers import "
    + ", ".join(f"helper_{i}" for i in range(20))
    + "\n\n\ndef run(total):\n"
    + "".join(f"    total += helper_{i}(total)\n" for i in range(20))
    + "    \n    return total\n"
)
CURSOR = (APP.split("\n").index("    "), 4)


def char_count(text: str) -> int:
    return (len(text) + 3) // 4


class PreferNumber:
    """A second-stage ranker that prefers chunks naming one helper (and records its calls)."""

    def __init__(self, number: int) -> None:
        self.wanted = f"helper_{number}("
        self.calls: list[tuple[int, str]] = []

    def __call__(self, chunks: Sequence[str], target: str) -> list[float]:
        self.calls.append((len(chunks), target))
        return [1.0 if self.wanted in chunk else 0.0 for chunk in chunks]


def make_index(tmp_path: Path) -> tuple[WorkspaceIndex, Path]:
    root = tmp_path / "proj"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "helpers.py").write_text(HELPERS + "\n")
    (root / "pkg" / "app.py").write_text(APP)
    index = WorkspaceIndex(root, use_cache=False)
    index.scan()
    return index, root


def pack(index, root, budget: int, rerank: Rerank | None):
    return build_context(
        text=APP,
        path=str(root / "pkg" / "app.py"),
        line=CURSOR[0],
        column=CURSOR[1],
        language_id="python",
        budget_tokens=budget,
        count_tokens=char_count,
        index=index,
        rerank=rerank,
    )


def helpers_in(packed) -> set[str]:
    return {s.symbol for s in packed.snippets if s.path == "pkg/helpers.py"}


def test_the_second_stage_orders_overflowing_candidates(tmp_path) -> None:
    index, root = make_index(tmp_path)
    plain = pack(index, root, 200, None)
    # The structural ranker favours the helpers used nearest the cursor; helper_0 is farthest.
    assert "helper_0" not in helpers_in(plain) and not plain.reranked
    prefer = PreferNumber(0)
    scored = pack(index, root, 200, Rerank(score=prefer))
    assert scored.reranked and "helper_0" in helpers_in(scored)
    assert scored.prompt_tokens <= 200
    (asked, target), *_ = prefer.calls
    assert 2 <= asked <= 32
    assert target.endswith("total += helper_19(total)\n    ")  # judged on the code above


def test_the_second_stage_is_not_asked_when_everything_fits(tmp_path) -> None:
    index, root = make_index(tmp_path)
    prefer = PreferNumber(0)
    roomy = pack(index, root, 4000, Rerank(score=prefer))
    assert prefer.calls == [] and not roomy.reranked
    assert len(helpers_in(roomy)) == 20


def test_the_model_scores_chunks_only_where_the_policy_allows(tiny_model_dir, tmp_path) -> None:
    index, root = make_index(tmp_path)
    loaded = load_model(tiny_model_dir, device="cpu")
    request = CompletionRequest(
        text=APP,
        line=CURSOR[0],
        column=CURSOR[1],
        path=str(root / "pkg" / "app.py"),
        language_id="python",
        budget_tokens=600,  # past the current file's own floor (pack.MIN_OWN_TOKENS)
        index=index,
    )
    # Defaults: one pass per chunk is refused on CPU.
    assert LocalBackend(loaded).chunk_rerank(4096) is None
    allowed = Thresholds(
        chunk_on_cpu=True,
        chunk_min_budget_tokens=256,
        chunk_max_candidates=12,
        chunk_min_overflow=1.0,
    )
    engine = LocalBackend(loaded, compression=allowed, time_passes=False)
    assert engine.chunk_rerank(128) is None  # below the budget threshold
    rerank = engine.chunk_rerank(300)
    assert rerank is not None and (rerank.max_candidates, rerank.min_overflow) == (12, 1.0)
    gains = rerank.score(["def helper_3(value):\n    return value\n", "x = 1\n"], APP)
    assert len(gains) == 2 and all(torch.isfinite(torch.tensor(gains)))
    prompt = engine.prepare(request)
    assert prompt.context.reranked
    assert len(prompt.text) > 0
