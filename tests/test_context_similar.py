"""Similar code across the workspace (context/similar.py), on a real index and tree-sitter."""

from __future__ import annotations

from pathlib import Path

import pytest

from memosight_lsp.context import Packing, build_context
from memosight_lsp.context.similar import similar_windows
from memosight_lsp.workspace import WorkspaceIndex, language_for

# Another module already does what the cursor's function starts to do: read the rows of a
# CSV report, skip the header, and total a column; then it writes the summary.
REPORTS = '''import csv


def monthly_totals(path):
    """Sum the amount column of a CSV report per month."""
    totals = {}
    with open(path, newline="") as handle:
        reader = csv.reader(handle)
        next(reader)
        for month, amount in reader:
            totals[month] = totals.get(month, 0) + float(amount)
    write_summary(totals, path + ".summary")
    return totals
'''

UNRELATED = "".join(f"def helper_{i}(x):\n    return x * {i} + {i}\n\n\n" for i in range(30))

CURRENT = """import csv


def yearly_totals(path):
    totals = {}
    with open(path, newline="") as handle:
        reader = csv.reader(handle)
        next(reader)
        for year, amount in reader:
            totals[year] = totals.get(year, 0) + float(amount)

"""


@pytest.fixture
def index(tmp_path: Path) -> WorkspaceIndex:
    (tmp_path / "reports.py").write_text(REPORTS)
    (tmp_path / "helpers.py").write_text(UNRELATED)
    (tmp_path / "notes.js").write_text(REPORTS.replace("import csv", "// csv"))
    (tmp_path / "yearly.py").write_text(CURRENT)
    index = WorkspaceIndex(tmp_path, cache_dir=tmp_path / ".cache")
    index.scan()
    return index


def cursor_query(text: str, line: int) -> set[str]:
    from memosight_lsp.context.similar import query_words

    spec = language_for("x.py")
    assert spec is not None
    return query_words(text.split("\n"), line, 4, spec)


def test_the_most_similar_window_comes_with_what_followed_it(index) -> None:
    spec = language_for("x.py")
    line = CURRENT.count("\n") - 1  # the empty line after the loop
    found = similar_windows(index, "yearly.py", spec, cursor_query(CURRENT, line), top=2)
    assert [w.path for w in found][:1] == ["reports.py"]  # not itself, not JavaScript
    best = found[0]
    assert "write_summary(totals" in best.text  # the lines after the match come along
    assert best.end_line > best.start_line and 0.1 <= best.score <= 1
    assert all(w.path not in ("yearly.py", "notes.js") for w in found)
    for a in found:  # never two overlapping windows of one file
        for b in found:
            if a is not b and a.path == b.path:
                assert a.end_line < b.start_line or b.end_line < a.start_line


def test_nothing_is_retrieved_for_an_empty_query_or_no_room(index) -> None:
    spec = language_for("x.py")
    assert similar_windows(index, "yearly.py", spec, set(), top=3) == []
    assert similar_windows(index, "yearly.py", spec, {"csv", "reader"}, top=0) == []
    assert similar_windows(index, "yearly.py", spec, {"zebra", "quokka"}, top=3) == []


def test_the_packing_variant_puts_similar_code_first_within_its_share(index, tmp_path) -> None:
    line = CURRENT.count("\n") - 1

    def pack(packing: Packing):
        return build_context(
            text=CURRENT,
            path=str(tmp_path / "yearly.py"),
            line=line,
            column=4,
            language_id="python",
            budget_tokens=800,
            count_tokens=lambda s: (len(s) + 3) // 4,
            index=index,
            packing=packing,
        )

    plain = pack(Packing(cross_share=0.5))
    similar = pack(Packing(cross_share=0.5, similar=2))
    assert "write_summary(totals" not in plain.prefix
    windows = [s for s in similar.snippets if s.kind == "window" and s.path == "reports.py"]
    assert windows and "write_summary(totals" in windows[0].text
    assert similar.prefix.index("write_summary(totals") < similar.prefix.index("def yearly_totals")
    assert similar.prompt_tokens <= 800
    cross = sum(s.tokens for s in similar.snippets if s.path != "yearly.py")
    assert cross <= 800 - 512  # the file keeps its first 512 tokens (pack.MIN_OWN_TOKENS)
