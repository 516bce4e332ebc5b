"""Ranking and packing on real files with real tree-sitter, with a simple and a real tokenizer."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from memosight_lsp.context import PackedContext, build_context
from memosight_lsp.context.pack import joined
from memosight_lsp.context.select import Piece
from memosight_lsp.context.tokens import TokenCounter
from memosight_lsp.context.types import SNIPPET_KINDS
from memosight_lsp.workspace import WorkspaceIndex

MODELS = '''"""Models."""

DEFAULT_SIZE = 10


class Widget:
    """A widget with a size."""

    def __init__(self, name: str, size: int = DEFAULT_SIZE) -> None:
        self.name = name
        self.size = size

    def grow(self, by: int) -> "Widget":
        """Return a bigger widget."""
        return Widget(self.name, self.size + by)


def make_widgets(names: list[str]) -> list[Widget]:
    return [Widget(n) for n in names]
'''
UTIL = '''def frobnicate(value: int, *, scale: float = 2.0) -> float:
    """Scale a value the frob way."""
    result = value * scale
    result = result + 1
    result = result * 3
    return result - 7


def unrelated_helper(text):
    return text.strip()
'''
APP = """from .models import make_widgets
from .util import frobnicate


def main(argv):
    widgets = make_widgets(argv)
    total = 0
    for w in widgets:
        total += frobnicate(w.size)
    
    return total
"""  # noqa: W293  (the cursor line holds its indentation)


def char_count(text: str) -> int:
    return (len(text) + 3) // 4


@pytest.fixture(scope="module")
def bpe_count():
    """A real BPE tokenizer trained on the fly (the context package itself imports none)."""
    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["[UNK]"], show_progress=False)
    tokenizer.train_from_iterator([MODELS, UTIL, APP] * 20, trainer)

    def count(text: str) -> int:
        return len(tokenizer.encode(text).ids)

    return count


@pytest.fixture
def project(tmp_path: Path) -> tuple[WorkspaceIndex, Path]:
    return make_project(tmp_path)


def make_project(tmp_path: Path) -> tuple[WorkspaceIndex, Path]:
    """pkg/{models,util,app}.py under tmp_path/proj, indexed (no cache)."""
    root = tmp_path / "proj"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "models.py").write_text(MODELS)
    (root / "pkg" / "util.py").write_text(UTIL)
    (root / "pkg" / "app.py").write_text(APP)
    index = WorkspaceIndex(root, use_cache=False)
    index.scan()
    return index, root


def ctx(
    index, root, text=APP, line=9, column=4, budget=400, count=char_count, **kw
) -> PackedContext:
    return build_context(
        text=text,
        path=str(root / "pkg" / "app.py"),
        line=line,
        column=column,
        language_id="python",
        budget_tokens=budget,
        count_tokens=count,
        index=index,
        **kw,
    )


def by_symbol(packed: PackedContext) -> dict[str, str]:
    return {s.symbol: s.kind for s in packed.snippets if s.symbol}


def test_definitions_from_other_files_land_in_the_context(project) -> None:
    index, root = project
    packed = ctx(index, root)
    assert "# file: pkg/util.py\ndef frobnicate(value: int, *, scale: float = 2.0)" in packed.prefix
    assert "# file: pkg/models.py\n" in packed.prefix
    assert by_symbol(packed)["frobnicate"] == "full"
    assert by_symbol(packed)["make_widgets"] == "full"
    assert "unrelated_helper" not in packed.prefix
    # The current file comes last, under its own marker, and ends at the cursor.
    assert packed.prefix.endswith("# file: pkg/app.py\n" + APP[: APP.index("\n    return")])
    assert packed.suffix == "\n    return total\n"
    assert packed.prompt_tokens == char_count(packed.prefix) + char_count(packed.suffix)
    assert {s.kind for s in packed.snippets} <= set(SNIPPET_KINDS)
    assert [s.kind for s in packed.snippets][-2:] == ["prefix", "suffix"]


def test_hierarchy_full_then_signature_then_dropped(project) -> None:
    index, root = project
    kinds_by_budget = {b: by_symbol(ctx(index, root, budget=b)) for b in (60, 110, 400)}
    assert kinds_by_budget[400]["frobnicate"] == "full"
    assert kinds_by_budget[110]["frobnicate"] == "signature"
    signature = ctx(index, root, budget=110)
    assert '    """Scale a value the frob way."""\n' in signature.prefix
    assert "result * 3" not in signature.prefix
    assert "frobnicate" not in kinds_by_budget[60] or kinds_by_budget[60]["frobnicate"] != "full"


def test_second_hop_brings_types_of_signatures(project) -> None:
    index, root = project
    packed = ctx(index, root, budget=600)
    assert "Widget" in by_symbol(packed)  # make_widgets returns list[Widget]


@pytest.mark.parametrize("counter", ["chars", "bpe"])
def test_never_exceeds_the_budget(project, counter, bpe_count) -> None:
    index, root = project
    count = char_count if counter == "chars" else bpe_count
    lines = APP.split("\n")
    for budget in [1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377, 610]:
        for line in (0, 4, 8, 9, len(lines) - 1):
            for column in (0, len(lines[line])):
                packed = ctx(index, root, line=line, column=column, budget=budget, count=count)
                assert count(packed.prefix) + count(packed.suffix) <= budget
                assert packed.prompt_tokens <= budget


def test_budget_zero_and_no_index(project) -> None:
    index, root = project
    assert ctx(index, root, budget=0) == PackedContext.empty()
    plain = ctx(None, root, budget=1000)
    assert plain.prefix == "# file: app.py\n" + APP[: APP.index("\n    return")]
    assert plain.suffix == "\n    return total\n"
    assert {s.kind for s in plain.snippets} == {"prefix", "suffix"}
    # A tight budget keeps the lines nearest the cursor; the suffix gets at most a quarter.
    tight = ctx(None, root, budget=30)
    assert tight.prefix.endswith("        total += frobnicate(w.size)\n    ")
    assert "import" not in tight.prefix
    assert char_count(tight.suffix) <= 30 // 4


def test_unknown_language_gets_plain_context(project) -> None:
    index, root = project
    text = "alpha\nbeta\ngamma\n"
    packed = build_context(
        text=text,
        path=str(root / "notes.txt"),
        line=1,
        column=2,
        language_id="plaintext",
        budget_tokens=100,
        count_tokens=char_count,
        index=index,
    )
    assert (packed.prefix, packed.suffix) == ("alpha\nbe", "ta\ngamma\n")


def test_deterministic_and_stable_under_typing(project, bpe_count) -> None:
    index, root = project
    first = ctx(index, root, count=bpe_count)
    assert ctx(index, root, count=bpe_count) == first
    # Typing at the cursor changes only the tail of the prompt: the ranked chunks come first and
    # stay put, so a KV prefix cache over them survives the keystroke.
    typed = APP.replace("\n    \n    return", "\n    tot\n    return")
    after = ctx(index, root, text=typed, column=7, count=bpe_count)
    cross = first.prefix[: first.prefix.index("# file: pkg/app.py")]
    assert cross and after.prefix.startswith(cross)


def test_a_token_counter_keeps_its_memo_across_calls_and_a_function_keeps_none(project) -> None:
    index, root = project
    counted: list[str] = []

    def count(text: str) -> int:
        counted.append(text)
        return char_count(text)

    def calls(count_tokens) -> int:
        before = len(counted)
        ctx(index, root, count=count_tokens)
        return len(counted) - before

    # A plain function: nothing is kept between calls (no registry keyed by the function).
    assert calls(count) == calls(count)
    counter = TokenCounter(count)
    cold = calls(counter)
    warm = calls(counter)  # the lines and snippets were counted in the first call
    assert warm < cold / 2
    assert ctx(index, root, count=counter) == ctx(index, root, count=count)


def test_long_enclosing_function_keeps_its_head(project) -> None:
    index, root = project
    body = "".join(f"    step_{i} = compute_{i}(step_{i - 1})\n" for i in range(1, 120))
    text = (
        'def long_function(alpha, beta):\n    """Does many steps."""\n'
        + body
        + "    \n    return step_119\n"
    )
    cursor = text.split("\n").index("    ")
    packed = build_context(
        text=text,
        path=str(root / "pkg" / "long.py"),
        line=cursor,
        column=4,
        language_id="python",
        budget_tokens=300,
        count_tokens=char_count,
        index=index,
    )
    head = [s for s in packed.snippets if s.kind == "enclosing"]
    assert [s.symbol for s in head] == ["long_function"]
    assert 'def long_function(alpha, beta):\n    """Does many steps."""\n' in packed.prefix
    assert packed.prefix.endswith("    step_119 = compute_119(step_118)\n    ")
    assert "step_10 = " not in packed.prefix  # the middle is elided


def test_same_file_definitions_and_no_duplicates(project) -> None:
    index, root = project
    helper = "def far_helper(x):\n    return x * 2\n\n\n" + "\n" * 200
    text = helper + "def caller():\n    return far_helper(3)\n"
    packed = build_context(
        text=text,
        path=str(root / "pkg" / "same.py"),
        line=text.count("\n") - 1,
        column=11,
        language_id="python",
        budget_tokens=200,
        count_tokens=char_count,
        index=index,
    )
    assert by_symbol(packed).get("far_helper") == "full"
    assert packed.prefix.count("def far_helper") == 1


def test_recent_edits_and_open_buffers(project) -> None:
    index, root = project
    other = str(root / "pkg" / "util.py")
    plain = ctx(index, root, text="x = 1\n", line=1, column=0, budget=400)
    assert "unrelated_helper" not in plain.prefix
    recent = ctx(
        index, root, text="x = 1\n", line=1, column=0, budget=400, recent_edits=[(other, 9)]
    )
    assert by_symbol(recent).get("unrelated_helper") in ("full", "signature")
    # An open buffer's unsaved text is what gets shown.
    edited = UTIL.replace("return text.strip()", "return text.strip().lower()")
    opened = ctx(
        index,
        root,
        text="x = 1\n",
        line=1,
        column=0,
        budget=400,
        recent_edits=[(other, 9)],
        open_buffers={other: edited},
    )
    assert "text.strip().lower()" in opened.prefix


def test_similar_windows_from_open_buffers(project, tmp_path) -> None:
    index, root = project
    neighbour = (
        "x = 1\n" * 40
        + (
            "def configure(registry, settings):\n"
            "    registry.register_handler(settings.timeout, settings.retries)\n"
            "    registry.connect(settings.host, settings.port)\n"
        )
        + "y = 2\n" * 40
    )
    query = (
        "def setup(registry, settings):\n    registry.connect(settings.host, settings.port)\n    "
    )
    packed = build_context(
        text=query,
        path=str(root / "pkg" / "wire.py"),
        line=2,
        column=4,
        language_id="python",
        budget_tokens=400,
        count_tokens=char_count,
        index=index,
        open_buffers={str(root / "pkg" / "events.py"): neighbour},
    )
    windows = [s for s in packed.snippets if s.kind == "window"]
    assert windows and windows[0].path == "pkg/events.py"
    assert "registry.register_handler(settings.timeout" in packed.prefix


def test_snippets_apart_in_their_file_are_apart_in_the_prompt(project) -> None:
    """Two snippets of one file with lines between them get a blank line between them (glued,
    they read as one piece of code); adjacent ones stay as they are."""
    index, root = project
    packed = ctx(index, root)
    part = packed.prefix.split("# file: pkg/models.py\n", 1)[1].split("# file:", 1)[0]
    snippets = sorted(
        (s for s in packed.snippets if s.path.endswith("models.py")), key=lambda s: s.start_line
    )
    assert len(snippets) >= 2
    for before, after in itertools.pairwise(snippets):
        assert after.start_line > before.end_line + 1
        assert before.text.endswith("\n")
        assert before.text + "\n" + after.text in part

    def piece(start: int, end: int, text: str) -> Piece:
        return Piece("m.go", start, end, None, "full", text, 1, 1.0)

    assert joined([piece(0, 1, "a\nb\n"), piece(2, 2, "c\n")]) == "a\nb\nc\n"
    assert joined([piece(0, 1, "a\nb\n"), piece(5, 5, "c\n")]) == "a\nb\n\nc\n"
    assert joined([piece(0, 0, "a"), piece(5, 5, "c\n")]) == "a\n\nc\n"
    assert joined([piece(0, 1, "a\n\n"), piece(5, 5, "c\n")]) == "a\n\nc\n"
