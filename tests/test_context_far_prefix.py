"""Compressing the far part of a long file's prefix: top-level blocks step down full text ->
signatures -> dropped, least relevant first, within the token budget."""

from __future__ import annotations

from memosight_lsp.context import build_context
from memosight_lsp.context.far_prefix import compress_prefix, summarize_above, top_level_blocks
from memosight_lsp.context.recursive import signature_summary
from memosight_lsp.context.tokens import TokenCounter
from memosight_lsp.context.types import SNIPPET_KINDS
from memosight_lsp.inference.loading import load_tokenizer


def words(text: str) -> int:
    return len(text.split())


WORDS = TokenCounter(words)

FILE = '''import os
import sys
LIMIT = 3


@cache
def parse_ledger(path, strict=True):
    """Read a ledger file."""
    rows = []
    for line in open(path):
        rows.append(line.split(","))
    return rows


def unrelated_helper(a, b):
    total = a + b
    total = total * 2
    total = total - 1
    return total


class Report:
    def __init__(self, rows):
        self.rows = rows

    def render(self):
        return "\\n".join(map(str, self.rows))
try:
    import fast
except ImportError:
    fast = None
'''


def test_blocks_keep_decorators_and_continuations_and_group_one_liners():
    lines = FILE.split("\n")
    starts = [lines[start] for start, _ in top_level_blocks(lines)]
    assert starts == [
        "import os",  # imports and a constant: one block of one-liners
        "@cache",  # the decorator opens its function's block
        "def unrelated_helper(a, b):",
        "class Report:",
        "try:",  # `except ImportError:` continues the try block
    ]


def test_signature_summary_keeps_multiline_headers_and_skips_docstrings():
    text = 'def f(\n    a,\n    b,\n):\n    """\n    def not_a_header():\n    """\n    return a\n'
    assert signature_summary(text) == "def f(\n    a,\n    b,\n):\n"


def test_the_block_defining_a_name_used_near_the_cursor_is_kept_first():
    lines = FILE.split("\n")
    near = "    rows = parse_ledger(name)\n    "
    budget = words(FILE) // 3
    far = summarize_above(lines, len(lines), near, budget, WORDS)
    assert words(far) <= budget
    assert "rows.append(line.split" in far  # the definition used near the cursor: whole
    assert "total = a + b" not in far  # an unrelated one: at most its header


def test_compress_prefix_fits_the_budget_and_keeps_the_lines_above_the_cursor():
    tokenizer = load_tokenizer()
    counter = TokenCounter(lambda text: len(tokenizer.encode(text, add_special_tokens=False)))
    filler = "".join(
        f"def step_{i}(value):\n    value = value + {i}\n    return value * {i + 1}\n\n\n"
        for i in range(120)
    )
    prefix = FILE + "\n\n" + filler + "def main(path):\n    rows = parse_ledger(path)\n    "
    total = counter(prefix)
    assert compress_prefix(prefix, total, counter) == prefix  # fits: untouched
    for ratio in (2, 4, 8):
        budget = total // ratio
        out = compress_prefix(prefix, budget, counter)
        assert counter(out) <= budget
        assert out.endswith("def main(path):\n    rows = parse_ledger(path)\n    ")
        # Truncation to the same budget loses the definition; the summary keeps its header.
        assert "def parse_ledger(path, strict=True):" in out
        assert counter(out) >= budget * 0.8  # the room is used, not wasted


def test_packer_without_an_index_compresses_the_far_part_instead_of_cutting_it():
    filler = "".join(f"def step_{i}(value):\n    return value + {i}\n\n\n" for i in range(80))
    text = FILE + "\n\n" + filler + "def main(path):\n    rows = parse_ledger(path)\n    \n"
    line = text.count("\n") - 1
    args = dict(text=text, path=None, line=line, column=4, language_id=None, count_tokens=words)
    packed = build_context(budget_tokens=120, **args)
    assert words(packed.prefix) + words(packed.suffix) <= 120
    assert packed.prefix.endswith("def main(path):\n    rows = parse_ledger(path)\n    ")
    assert "def parse_ledger(path, strict=True):" in packed.prefix
    far = [s for s in packed.snippets if s.kind == "far"]
    assert len(far) == 1 and far[0].text in packed.prefix and far[0].start_line == 0
    near = next(s for s in packed.snippets if s.kind == "prefix")
    assert far[0].end_line == near.start_line - 1
    assert {s.kind for s in packed.snippets} <= set(SNIPPET_KINDS)
    # A file that fits is left whole: nothing compressed.
    whole = build_context(budget_tokens=10_000, **args)
    assert whole.prefix == text[: len(whole.prefix)] and "far" not in {
        s.kind for s in whole.snippets
    }


def test_a_definition_starting_with_the_word_being_typed_is_kept():
    lines = FILE.split("\n")
    budget = words(FILE) // 3
    typed = summarize_above(lines, len(lines), "    total = unrelated_h", budget, WORDS)
    assert "total = a + b" in typed  # unrelated_helper completes the word at the cursor
    assert "total = a + b" not in summarize_above(lines, len(lines), "    value = x", budget, WORDS)


def test_room_a_big_block_leaves_goes_back_to_the_near_lines():
    # The cursor is deep inside one big class: above the near lines the class is one block that
    # only fits as its signatures, and the room that leaves extends the verbatim lines instead.
    methods = "".join(
        f"    def method_{i}(self, value):\n        value = value + {i}\n        return value\n\n"
        for i in range(80)
    )
    prefix = "import os\n\n\nclass Big:\n" + methods + "    def last(self):\n        "
    total = words(prefix)
    for ratio in (2, 4):
        budget = total // ratio
        out = compress_prefix(prefix, budget, WORDS)
        assert budget * 0.9 <= words(out) <= budget
        assert out.startswith("import os") or "class Big:" in out
