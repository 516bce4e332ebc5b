"""A pinned prompt head per buffer (stable_prompt.py), through LocalBackend.prepare with a
tiny model's real tokenizer: keystrokes keep the head, anything that stales it packs again, and
every prompt fits its budget."""

from __future__ import annotations

import pytest
from tiny_models import STDLIB

from memosight_lsp.inference.loading import load_model
from memosight_lsp.inference.prefix_cache import common_prefix
from memosight_lsp.pipeline.local_backend import LocalBackend
from memosight_lsp.pipeline.prompt import MARKER_RESERVE
from memosight_lsp.pipeline.request import CompletionRequest
from memosight_lsp.pipeline.stable_prompt import StablePrompts
from memosight_lsp.workspace import WorkspaceIndex

TEXT = (STDLIB / "shlex.py").read_text()
LINES = TEXT.split("\n")
LINE = 200  # an empty line inside a method body, far below the top
BUFFER = "file:///w/shlex.py"


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    engine = LocalBackend(load_model(tiny_model_dir, device="cpu"), time_passes=False)
    # A measured rate, so a cold prompt is smaller than the budget and has room to grow.
    engine.prefill_rate.observe(1000, 1000.0)  # 1,000 tokens/s
    return engine


@pytest.fixture(autouse=True)
def fresh_pins(engine):
    engine.stable = StablePrompts()


def request(text: str = TEXT, line: int = LINE, column: int = 0, **extra) -> CompletionRequest:
    fields = dict(path="/w/shlex.py", language_id="python", buffer_id=BUFFER)
    return CompletionRequest(text=text, line=line, column=column, **{**fields, **extra})


def typed(text: str, line: int, column: int, chars: str) -> tuple[str, int, int]:
    """The text after typing `chars` at (line, column) and the cursor after it."""
    lines = text.split("\n")
    lines[line] = lines[line][:column] + chars + lines[line][column:]
    text = "\n".join(lines)
    rows = chars.split("\n")
    if len(rows) == 1:
        return text, line, column + len(chars)
    return text, line + len(rows) - 1, len(rows[-1])


def fits(engine: LocalBackend, prompt, req: CompletionRequest) -> None:
    """The packed context and the model's prompt (FIM markers aside) fit the budget."""
    budget = engine.latency_budget(req)
    assert prompt.context.prompt_tokens <= budget.max_prompt_tokens
    real = len(engine.loaded.tokenizer.encode(prompt.text, add_special_tokens=True))
    assert real <= budget.max_prompt_tokens + MARKER_RESERVE
    if budget.suffix_tokens is not None:
        assert engine.count_tokens(prompt.context.suffix) <= budget.suffix_tokens


def test_a_cold_prompt_is_the_latency_budget_and_is_pinned(engine):
    req = request()
    budget = engine.latency_budget(req)
    assert budget.prompt_tokens < budget.max_prompt_tokens  # sized by the rate
    prompt = engine.prepare(req)
    assert not prompt.stable_head and prompt.budget == budget
    assert prompt.context.prompt_tokens <= budget.prompt_tokens
    assert engine.stable.stats() == {"buffers": 1, "reused": 0, "packed": 1}
    fits(engine, prompt, req)


def test_keystrokes_in_the_body_keep_the_pinned_head(engine):
    first = engine.prepare(request())
    window = next(s for s in first.context.snippets if s.kind == "prefix")
    head = first.context.prefix[: len(first.context.prefix) - len(window.text)]
    assert head and window.start_line < LINE
    text, line, column = TEXT, LINE, 0
    previous = first.context.prefix
    for chars in ("        x", " = ", "1", "\n        ", "y = x + 1", "\n        "):
        text, line, column = typed(text, line, column, chars)
        req = request(text, line, column)
        prompt = engine.prepare(req)
        assert prompt.stable_head
        # The same head, the same window start: only what was typed is new.
        assert prompt.context.prefix.startswith(head)
        assert prompt.context.prefix == previous + chars
        assert prompt.context.snippets[: len(first.context.snippets) - 2] == [
            s for s in first.context.snippets if s.kind not in ("prefix", "suffix")
        ]
        fits(engine, prompt, req)
        previous = prompt.context.prefix
    assert engine.stable.stats() == {"buffers": 1, "reused": 6, "packed": 1}
    # The model's prompt starts with the same tokens, so the KV prefix cache keeps the head.
    tokenizer = engine.loaded.tokenizer
    fim = engine.loaded.fim
    assert fim is not None and first.text.startswith(fim.prefix_token + head)
    head_ids = tokenizer.encode(fim.prefix_token + head)
    before, after = tokenizer.encode(first.text), tokenizer.encode(prompt.text)
    assert common_prefix(before, after) >= len(head_ids) - 1


def test_a_suffix_in_psm_order_is_bounded_on_the_pinned_head(engine):
    budget = engine.latency_budget(request())
    assert budget.suffix_tokens is not None  # the tiny model is Qwen-style PSM
    engine.prepare(request())
    text, line, column = typed(TEXT, LINE, 0, "        z")
    prompt = engine.prepare(request(text, line, column))
    assert prompt.stable_head and prompt.context.suffix
    assert engine.count_tokens(prompt.context.suffix) <= budget.suffix_tokens
    assert text[text.index("        z") + 9 :].startswith(prompt.context.suffix)


@pytest.mark.parametrize(
    "change",
    ["edit above", "cursor above", "other buffer", "budget", "path"],
)
def test_what_stales_the_head_packs_again(engine, change):
    first = engine.prepare(request(open_buffers={"/w/other.py": "def other():\n    pass\n"}))
    window = next(s for s in first.context.snippets if s.kind == "prefix")
    assert engine.stable.packed == 1
    kwargs: dict = {"open_buffers": {"/w/other.py": "def other():\n    pass\n"}}
    text, line = TEXT, LINE
    if change == "edit above":
        lines = TEXT.split("\n")
        lines[window.start_line - 1] += "  # edited"
        text = "\n".join(lines)
    elif change == "cursor above":
        line = window.start_line - 1
    elif change == "other buffer":
        kwargs["open_buffers"] = {"/w/other.py": "def other():\n    return 1\n"}
    elif change == "budget":
        kwargs["budget_tokens"] = 900
    elif change == "path":
        kwargs["path"] = "/w/renamed.py"
    req = request(text, line, 0, **kwargs)
    prompt = engine.prepare(req)
    assert not prompt.stable_head
    assert engine.stable.stats()["packed"] == 2
    fits(engine, prompt, req)
    # ... and the new head is pinned: the next keystroke reuses it.
    text, line, column = typed(text, line, 0, "        q")
    again = engine.prepare(request(text, line, column, **kwargs))
    assert again.stable_head and again.context.prefix == prompt.context.prefix + "        q"


def test_a_head_that_no_longer_fits_packs_again_and_still_fits(engine):
    engine.prepare(request())
    text, line, column = TEXT, LINE, 0
    block = "        value = compute(value, index, [item for item in items if item])\n"
    repacked_at = None
    for i in range(80):
        text, line, column = typed(text, line, column, block)
        req = request(text, line, column)
        prompt = engine.prepare(req)
        fits(engine, prompt, req)
        if not prompt.stable_head:
            repacked_at = i
            break
    assert repacked_at is not None and repacked_at > 0  # it grew first, then packed again
    assert engine.stable.stats()["packed"] == 2


def test_buffers_keep_their_own_heads(engine):
    engine.prepare(request(buffer_id="file:///a.py"))
    engine.prepare(request(buffer_id="file:///b.py", line=300))
    text, line, column = typed(TEXT, LINE, 0, "        a")
    assert engine.prepare(request(text, line, column, buffer_id="file:///a.py")).stable_head
    text, line, column = typed(TEXT, 300, 0, "b")
    assert engine.prepare(request(text, line, column, buffer_id="file:///b.py")).stable_head
    # A one-off prompt (stable=False) packs afresh and leaves the pin alone.
    assert not engine.prepare(request(buffer_id="file:///a.py"), stable=False).stable_head
    assert engine.stable.stats() == {"buffers": 2, "reused": 2, "packed": 2}
    engine.forget("file:///a.py")
    assert "file:///a.py" not in engine.stable and "file:///b.py" in engine.stable


def test_least_recently_used_buffers_are_dropped_first(engine):
    engine.stable = StablePrompts(max_buffers=2)
    for name in ("a", "b", "c"):
        engine.prepare(request(buffer_id=f"file:///{name}.py"))
    assert "file:///a.py" not in engine.stable
    assert engine.stable.stats()["buffers"] == 2


def test_a_head_pinned_at_the_end_of_a_file_still_gives_a_suffix_further_up(tiny_model_dir):
    # No measured rate: the whole budget and an unbounded suffix. A pre-warm pins the head with
    # the cursor at the end of the buffer (nothing after it); a later cursor with code below
    # must still see that code.
    engine = LocalBackend(load_model(tiny_model_dir, device="cpu"), time_passes=False)
    text = "def add(a, b):\n    \n\nprint(add(1, 2))\n"
    end_line = text.count("\n")
    engine.prepare(request(text, end_line, 0, budget_tokens=512))
    up = engine.prepare(request(text, 1, 4, budget_tokens=512))
    assert up.context.suffix.startswith("\n\nprint(add(1, 2))")
    assert [s.kind for s in up.context.snippets][-2:] == ["prefix", "suffix"]
    engine.stable.forget(BUFFER)
    fresh = engine.prepare(request(text, 1, 4, budget_tokens=512))
    assert fresh.context.suffix == up.context.suffix


def test_a_head_pinned_before_the_index_filled_is_packed_again(engine, tmp_path):
    """A completion can come while a new folder is still being scanned: its head, pinned on the
    empty index, must not hide the definitions the scan then finds."""
    (tmp_path / "helpers.py").write_text("def format_money(value):\n    return f'{value:.2f}'\n")
    main = "from helpers import format_money\n\nprint(format_money(\n"
    (tmp_path / "main.py").write_text(main)
    index = WorkspaceIndex(tmp_path, use_cache=False)  # not scanned yet
    fields = dict(path=str(tmp_path / "main.py"), buffer_id=(tmp_path / "main.py").as_uri())
    before = engine.prepare(request(main, 2, 19, index=index, **fields))
    assert "format_money(value)" not in before.context.prefix
    index.scan()
    after = engine.prepare(request(main, 2, 19, index=index, **fields))
    assert not after.stable_head and "def format_money(value)" in after.context.prefix
    again = engine.prepare(request(main, 2, 19, index=index, **fields))
    assert again.stable_head  # and the new head holds while nothing else changes


def test_another_buffer_reaching_the_index_after_the_pin_packs_again(engine, tmp_path):
    # The editor's didChange of another buffer reaches the index a moment later (its own
    # thread): a head pinned in between has the old definitions, and must not be kept.
    (tmp_path / "other.py").write_text("def other():\n    pass\n")
    index = WorkspaceIndex(tmp_path, use_cache=False)
    index.scan()
    here = str(tmp_path / "shlex.py")
    other, new = (
        str(tmp_path / "other.py"),
        "def other():\n    pass\n\n\ndef fresh(x):\n    return x\n",
    )
    index.update_buffer(other, "def other():\n    pass\n")
    kwargs = {"index": index, "path": here, "open_buffers": {other: new}}
    engine.prepare(request(**kwargs))
    assert engine.stable.packed == 1
    assert engine.prepare(request(**kwargs)).stable_head  # nothing moved: the head is kept
    index.update_buffer(other, new)  # the index catches up with the editor
    again = engine.prepare(request(**kwargs))
    assert not again.stable_head and engine.stable.packed == 2
    # The current buffer's own edits in the index do not stale its head.
    index.update_buffer(here, TEXT)
    assert engine.prepare(request(**kwargs)).stable_head
