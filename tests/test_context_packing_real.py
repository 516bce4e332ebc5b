"""Packing always ends and fits: seeded cases on real projects of eight languages.

The projects are pinned third-party code (bench/corpora.py: npm tarballs, Debian packages, a
Python sdist), fetched once into the cache; counting is the embedded model's real tokenizer.
A packing that never ended would stop this module at pytest-timeout's bound with its stack.
"""

from __future__ import annotations

import os

import pytest

from memosight_lsp.bench import corpora
from memosight_lsp.bench.packing import PackCase, cases, pack, project_trees, tokenizer_counter
from memosight_lsp.context import build_context
from memosight_lsp.context.tokens import TokenCounter

LANGUAGES = {"python", "typescript", "javascript", "go", "rust", "java", "c", "cpp"}
CASES = 1600


@pytest.fixture(scope="module")
def trees():
    try:
        return project_trees()
    except corpora.CorpusError as err:
        if os.environ.get("MEMOSIGHT_REQUIRE_CORPORA") == "1":
            raise
        pytest.skip(f"the pinned projects cannot be fetched here: {err}")


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    return TokenCounter(tokenizer_counter(None))


def test_the_pinned_projects_cover_eight_languages(trees) -> None:
    assert {project.language for project, _ in trees} == LANGUAGES
    for project, root in trees:
        assert corpora.source_files(root, project.language), project.key


@pytest.mark.timeout(600)
def test_every_seeded_packing_ends_and_fits_its_budget(trees, counter) -> None:
    results = [pack(case, counter) for case in cases(trees, CASES, seed=25)]
    over = [r.case.describe() for r in results if not r.fits]
    assert not over, over[:5]
    assert {r.case.language for r in results} == LANGUAGES
    # The cases reach what made packing loop: tiny budgets, no index, bounded suffixes.
    assert any(r.case.budget < 64 and r.case.index is None for r in results)
    assert any(r.case.max_suffix_tokens is not None for r in results)


@pytest.mark.timeout(120)
def test_the_position_that_looped_ends_and_fits(trees, counter) -> None:
    """A TypeScript file's last lines at every small budget: the far part's summary came back
    the same when asked for fewer tokens, and the trimming loop never ended."""
    root = next(r for p, r in trees if p.language == "typescript")
    path = max(corpora.source_files(root, "typescript"), key=lambda p: p.stat().st_size)
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    for line in (len(lines) - 1, len(lines) // 2):
        for budget in range(16, 640, 4):
            packed = build_context(
                text=text,
                path=str(path),
                line=line,
                column=0,
                language_id=None,
                budget_tokens=budget,
                count_tokens=counter,
            )
            assert counter(packed.prefix) + counter(packed.suffix) <= budget


def test_a_case_describes_where_it_packed(trees) -> None:
    case = next(cases(trees, 1, seed=1))
    assert isinstance(case, PackCase)
    assert case.path.name in case.describe() and str(case.budget) in case.describe()
