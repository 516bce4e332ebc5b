"""The rewrite's early stop (inference/edit_draft.py, Reconverged): a rewrite ends once it has
written a change and copied the old text again across a line end and a line more; the proposal
is then the full rewrite's. Driven with real tokenization (the test models' BPE tokenizer) of
real code, and through NextEditor with a scripted model that writes a chosen rewrite."""

from __future__ import annotations

import pytest
import torch
from test_speculative import FLAT_COST
from transformers import AutoTokenizer

from memosight_lsp.inference.decoder import Decoder, Run, StopRules
from memosight_lsp.inference.drafters import AcceptanceStats, CostModel, DraftState
from memosight_lsp.inference.edit_draft import (
    RESYNC_TOKENS,
    CopyBound,
    Reconverged,
    WindowDraft,
    line_end_token,
)
from memosight_lsp.inference.greedy import greedy_generate
from memosight_lsp.inference.loading import load_model
from memosight_lsp.inference.speculative import SpeculativeDecoder
from memosight_lsp.next_edit.edit_history import EditHistory
from memosight_lsp.next_edit.local import NextEditor
from memosight_lsp.next_edit.predict import (
    NextEditRequest,
    copy_bound_line,
    line_hunks,
    proposals,
    window_of,
)
from memosight_lsp.next_edit.prompt import PLAIN_END

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# From textwrap.py (CPython's standard library).
CODE = """def indent(text, prefix, predicate=None):
    prefixed_lines = []
    if predicate is None:
        predicate = str.isspace
    for line in text.splitlines(True):
        if not predicate(line):
            prefixed_lines.append(prefix)
        prefixed_lines.append(line)
    return ''.join(prefixed_lines)


def dedent(text):
    margin = None
    text = _whitespace_only_re.sub('', text)
    indents = _leading_whitespace_re.findall(text)
    for indent in indents:
        if margin is None:
            margin = indent
        elif indent.startswith(margin):
            pass
        elif margin.startswith(indent):
            margin = indent
        else:
            for i, (x, y) in enumerate(zip(margin, indent)):
                if x != y:
                    margin = margin[:i]
                    break
    if margin:
        text = re.sub(r'(?m)^' + margin, '', text)
    return text
"""


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    return AutoTokenizer.from_pretrained(tiny_model_dir)


def stop_point(tokenizer, old: str, new: str) -> tuple[int | None, str, str]:
    """Where the rule ends the rewrite `new` of `old` (tokens written; None: it never does),
    fed one token at a time as the decoder does; the text written, and with the old rest taken
    as written (`Reconverged.rest`), without the end marker."""
    target = tokenizer.encode(old + PLAIN_END, add_special_tokens=False)
    rewrite = tokenizer.encode(new + PLAIN_END, add_special_tokens=False)
    ends = ["\n" in tokenizer.decode([t]) for t in target]
    rule = Reconverged(target, ends)
    k = next((k for k in range(1, len(rewrite) + 1) if rule(rewrite[:k])), None)
    if k is None:
        return None, new, new
    completed = tokenizer.decode(rewrite[:k] + rule.rest())
    assert completed.endswith(PLAIN_END)
    return k, tokenizer.decode(rewrite[:k]), completed[: -len(PLAIN_END)]


def spans(old: str, hunks) -> list[tuple[int, int, str, str]]:
    return [(h.start, h.end, old[h.start : h.end], h.new_text) for h in hunks]


def test_a_copy_with_no_change_is_not_stopped(tokenizer):
    assert stop_point(tokenizer, CODE, CODE)[0] is None


def test_stops_after_a_change_and_a_line_more_of_copy(tokenizer):
    new = CODE.replace("prefixed_lines.append(prefix)", "out.append(prefix)")
    k, written, completed = stop_point(tokenizer, CODE, new)
    assert k is not None and len(written) < len(new) // 2  # the dedent function is not written
    assert not written.rsplit("\n", 1)[1].strip()  # at a line end (a token may hold indent)
    # Never before the change: the change is written, and a whole old line after it.
    assert "out.append(prefix)\n        prefixed_lines.append(line)\n" in written
    assert completed == new  # the rest taken as the old text: here the full rewrite
    full = proposals(CODE, new, True, None)
    assert proposals(CODE, completed, True, None) == full
    assert proposals(CODE, written, False, None) == full  # the cut-short reading agrees
    assert spans(CODE, full[0]) == [
        (
            CODE.index("prefixed_lines.append(prefix)"),
            CODE.index(".append(prefix)"),
            "prefixed_lines",
            "out",
        )
    ]


def test_not_before_the_change_is_complete(tokenizer):
    """A second change within RESYNC_TOKENS of the first line end after a change (here the next
    line, changed near its start) keeps the rewrite going: both changes are written."""
    new = CODE.replace("if not predicate(line):", "if predicate(line):").replace(
        "            prefixed_lines.append(prefix)", "            prefixed_lines.append(suffix)"
    )
    k, written, completed = stop_point(tokenizer, CODE, new)
    assert k is not None and completed == new
    assert "append(suffix)" in written and "prefixed_lines.append(line)\n" in written
    second_at = len(tokenizer.encode(new[: new.index("suffix")], add_special_tokens=False))
    assert k > second_at + RESYNC_TOKENS // 2


def test_a_second_change_after_the_re_sync_is_left_out(tokenizer):
    """Far apart, the second change is not waited for: the rewrite proposes one change at a time
    (the next request, after the first is applied, finds the next)."""
    new = CODE.replace("prefixed_lines = []", "out = []").replace("return text\n", "return out\n")
    k, _written, completed = stop_point(tokenizer, CODE, new)
    assert k is not None
    assert [h[2:] for h in line_hunks(CODE, completed, True)] == [
        ("    prefixed_lines = []\n", "    out = []\n")
    ]


def single_changes(old: str):
    """Every one-place change of each line of `old`: a word renamed, a line inserted after it, the
    line deleted, it and the next one rewritten."""
    lines = old.splitlines(keepends=True)
    for i, line in enumerate(lines):
        head, tail = lines[:i], lines[i + 1 :]
        words = line.split()
        if words:
            word = words[-1].rstrip(":)")
            if word:
                yield "".join([*head, line.replace(word, word + "_x", 1), *tail])
        indent = line[: len(line) - len(line.lstrip())]
        yield "".join([*head, line, f"{indent}log(step={i})\n", *tail])
        yield "".join([*head, *tail])
        if tail:
            yield "".join([*head, f"{indent}first = {i}\n", f"{indent}second = {i}\n", *tail[1:]])


def test_the_proposal_is_the_full_rewrites_when_it_has_one_change(tokenizer):
    """Every single-place change of every line: where the rule stops, the rewrite with the old
    rest is the full one (so are its proposals), and most stop well before the end."""
    stopped = saved = 0
    changes = list(single_changes(CODE))
    for new in changes:
        k, written, completed = stop_point(tokenizer, CODE, new)
        assert completed == new, (new, written)
        if k is not None:
            stopped += 1
            saved += len(new) - len(written)
    assert len(changes) > 100 and stopped > len(changes) * 3 // 4, (len(changes), stopped)
    assert saved > sum(len(new) for new in changes) // 3


class Scripted(Decoder):
    """A "model" that writes `tokens` (then nothing), through the decoders' own step and stop
    rules: what NextEditor makes of a chosen rewrite."""

    def __init__(self, tokens: list[int]) -> None:
        super().__init__()
        self.tokens = tokens

    def generate(self, run: Run) -> None:
        run.new_cache()
        run.prefilled()
        vocab = max(self.tokens) + 1
        for token in self.tokens:
            logits = torch.full((vocab,), -1.0)  # [V]
            logits[token] = 1.0
            run.result.forward_passes += 1
            if run.take_next(logits) is None:
                return


def edited(old: str, new: str):
    history = EditHistory()
    history.opened("u", old)
    history.changed("u", new)
    return tuple(history.recent("u"))


def scripted_predict(loaded, request: NextEditRequest, new_window: str):
    editor = NextEditor(loaded, FLAT_COST)
    script = loaded.tokenizer.encode(new_window + PLAIN_END, add_special_tokens=False)
    editor.decoder = Scripted(script)
    return editor.predict(request), len(script)


def test_next_editor_stops_early_with_the_full_rewrites_proposal(tiny_model_dir):
    loaded = load_model(tiny_model_dir, device="cpu")
    renamed = CODE.replace("prefixed_lines = []", "out = []")
    request = NextEditRequest(
        text=renamed, cursor_line=1, edits=edited(CODE, renamed), path="tw.py", max_wait_ms=60_000
    )
    window = window_of(request).text
    new = window.replace("prefixed_lines.append(prefix)", "out.append(prefix)")
    early, script = scripted_predict(loaded, request, new)
    full, _ = scripted_predict(
        loaded, NextEditRequest(**{**request.__dict__, "early_stop": False}), new
    )
    # (The test tokenizer spells the end marker in more tokens than the end check reads: the
    # script's end ends the full rewrite.)
    assert (full.complete, full.new_tokens, full.unwritten_tokens) == (True, script, 0)
    assert (early.stop_reason, early.complete) == ("converged", True)
    assert early.new_tokens < script // 2 and early.new_tokens + early.unwritten_tokens == script
    assert early.rewrite == full.rewrite
    assert early.hunks == full.hunks and len(full.hunks) == 1
    assert renamed[full.hunks[0].start : full.hunks[0].end] == "prefixed_lines"


def test_a_change_not_worth_proposing_does_not_stop_the_rewrite(tiny_model_dir):
    """The rewrite first undoes the user's rename (dropped), then renames the next use: the
    stop waits for the change it can propose."""
    loaded = load_model(tiny_model_dir, device="cpu")
    renamed = CODE.replace("prefixed_lines = []", "out = []")
    request = NextEditRequest(
        text=renamed, cursor_line=1, edits=edited(CODE, renamed), path="tw.py", max_wait_ms=60_000
    )
    window = window_of(request).text
    new = window.replace("out = []", "prefixed_lines = []").replace(
        "    return ''.join(prefixed_lines)", "    return ''.join(out)"
    )
    result, script = scripted_predict(loaded, request, new)
    assert result.stop_reason == "converged" and result.new_tokens < script
    assert [(renamed[h.start : h.end], h.new_text) for h in result.hunks] == [
        ("prefixed_lines", "out")
    ]


def bound_point(tokenizer, old: str, new: str, line: int) -> tuple[int | None, str]:
    """Where CopyBound (waiting for old line `line`) ends the rewrite `new` of `old`, and the
    text with the old rest taken as written (without the end marker)."""
    target = tokenizer.encode(old + PLAIN_END, add_special_tokens=False)
    rewrite = tokenizer.encode(new + PLAIN_END, add_special_tokens=False)
    newlines = [tokenizer.decode([t]).count("\n") for t in target]
    bound = line_end_token(newlines, line)
    assert bound is not None
    rule = CopyBound(target, [n > 0 for n in newlines], bound)
    k = next((k for k in range(1, len(rewrite) + 1) if rule(rewrite[:k])), None)
    if k is None:
        return None, new
    completed = tokenizer.decode(rewrite[:k] + rule.rest())
    return k, completed[: -len(PLAIN_END)]


def test_an_unchanged_copy_ends_at_the_end_of_the_line_waited_for(tokenizer):
    k, completed = bound_point(tokenizer, CODE, CODE, 5)
    assert k is not None and completed == CODE
    written = tokenizer.decode(tokenizer.encode(CODE, add_special_tokens=False)[:k])
    # Lines 0..5 and no more (the line end's token may hold the next line's indent).
    assert written.count("\n") == 6 and not written.rsplit("\n", 1)[1].strip()


def test_a_change_before_the_bound_is_written_and_copied_past(tokenizer):
    """A change on line 4, bound at line 5: the rewrite goes on past the bound until it has
    copied RESYNC_TOKENS after finding its place again, then stops at a line end."""
    new = CODE.replace("for line in text.splitlines(True):", "for line in text.split():")
    k, completed = bound_point(tokenizer, CODE, new, 5)
    assert k is not None and completed == new
    change = len(tokenizer.encode(new[: new.index("split()")], add_special_tokens=False))
    assert k > change + RESYNC_TOKENS


def test_a_change_past_the_bound_is_not_seen(tokenizer):
    """The policy's price: a change the model writes after the lines waited for is not read."""
    new = CODE.replace("return text\n", "return out\n")
    k, completed = bound_point(tokenizer, CODE, new, 5)
    assert k is not None and completed == CODE


def test_the_bound_is_copy_lines_below_the_cursor_and_the_last_edit():
    renamed = CODE.replace("prefixed_lines = []", "out = []")
    edits = edited(CODE, renamed)
    request = NextEditRequest(text=renamed, cursor_line=1, edits=edits, copy_lines=4)
    window = window_of(request)
    assert window.first == 0 and copy_bound_line(request, window) == 5
    later = NextEditRequest(text=renamed, cursor_line=3, edits=edits, copy_lines=4)
    assert copy_bound_line(later, window_of(later)) == 7  # the cursor below the edit
    for off in (
        NextEditRequest(text=renamed, cursor_line=1, edits=edits, copy_lines=0),
        NextEditRequest(text=renamed, cursor_line=1, edits=edits, early_stop=False),
        NextEditRequest(text=renamed, cursor_line=1, edits=edits, copy_lines=40),
    ):
        assert copy_bound_line(off, window_of(off)) is None


def test_next_editor_ends_an_unchanged_copy_below_the_cursor(tiny_model_dir):
    loaded = load_model(tiny_model_dir, device="cpu")
    renamed = CODE.replace("prefixed_lines = []", "out = []")
    request = NextEditRequest(
        text=renamed,
        cursor_line=1,
        edits=edited(CODE, renamed),
        path="tw.py",
        max_wait_ms=60_000,
        copy_lines=4,
    )
    window = window_of(request).text
    bounded, script = scripted_predict(loaded, request, window)
    full, _ = scripted_predict(
        loaded, NextEditRequest(**{**request.__dict__, "early_stop": False}), window
    )
    assert (full.complete, full.new_tokens, full.hunks) == (True, script, [])
    assert (bounded.stop_reason, bounded.complete, bounded.hunks) == ("bounded", True, [])
    assert bounded.rewrite == window and bounded.new_tokens < script // 2
    assert bounded.new_tokens + bounded.unwritten_tokens == script


@pytest.mark.parametrize(
    "change",
    [
        None,
        ("for line in text.splitlines(True):", "for line in text.split():"),  # before the bound
        ("prefixed_lines = []", "out = []"),  # on the first line
    ],
)
def test_the_tokens_left_are_those_a_copy_from_here_writes_before_the_stop(tokenizer, change):
    """At every token of the rewrite from which it copies the old tokens up to where the copy
    bound stops it, `copy_left` counts the tokens it still writes: a draft of that many holds
    every token the rewrite writes and none it would discard."""
    new = CODE if change is None else CODE.replace(*change)
    target = tokenizer.encode(CODE + PLAIN_END, add_special_tokens=False)
    rewrite = tokenizer.encode(new + PLAIN_END, add_special_tokens=False)
    newlines = [tokenizer.decode([t]).count("\n") for t in target]
    bound = line_end_token(newlines, 5)
    assert bound is not None
    rule = CopyBound(target, [n > 0 for n in newlines], bound)
    seen = [(rule.place.pos, rule.copy_left())]  # after j tokens: the place, the tokens left
    k = 0
    while not rule(rewrite[: k + 1]):  # one token at a time, as the decoder asks
        k += 1
        seen.append((rule.place.pos, rule.copy_left()))
    k += 1  # tokens written when it stops
    copying = [
        (j, left) for j, (pos, left) in enumerate(seen) if target[pos : pos + k - j] == rewrite[j:k]
    ]
    assert len(copying) > RESYNC_TOKENS  # at least the copy after the change
    for j, left in copying:
        assert left == k - j, j


def test_the_window_draft_ends_where_the_copy_bound_stops_a_copy(tokenizer):
    target = tokenizer.encode(CODE + PLAIN_END, add_special_tokens=False)
    newlines = [tokenizer.decode([t]).count("\n") for t in target]
    bound = line_end_token(newlines, 5)
    assert bound is not None
    rule = CopyBound(target, [n > 0 for n in newlines], bound)
    draft = WindowDraft()
    state = DraftState(committed=[1, 2], prompt_len=2)
    for copy_left, longest in ((None, len(target)), (rule.copy_left, bound + 1)):
        draft.set_target(target, copy_left)
        draft.stats = AcceptanceStats({("window", 1): 0.999})  # no probability cut
        draft.start(state)
        (candidate,) = draft.candidates(state, room=len(target) + 10)
        assert len(candidate.tokens) == longest
        assert candidate.tokens == target[:longest]


def test_a_copy_stopped_by_the_bound_verifies_no_row_past_the_stop(tiny_model_dir):
    """Through the speculative decoder with a real (tiny) model whose greedy tokens are the old
    ones: with the draft ended where the copy bound stops, the tokens are plain greedy's up to
    the stop and every drafted token is one the rewrite writes; without it the pass drafts
    past the stop."""
    loaded = load_model(tiny_model_dir, device="cpu")
    prompt = loaded.tokenizer.encode(CODE[:200], add_special_tokens=False)
    greedy = greedy_generate(loaded.model, prompt, StopRules(max_new_tokens=60)).tokens
    line_ends = [i % 8 == 7 for i in range(len(greedy))]  # a line every 8 tokens
    flat = CostModel({1: 1.0, 128: 1.0})  # any draft the source gives is verified whole
    drafted = {}
    for capped in (False, True):
        rule = CopyBound(greedy, line_ends, 28)  # stops once token 31 (a line end) is copied
        draft = WindowDraft()
        draft.stats = AcceptanceStats({("window", 1): 0.999})
        draft.set_target(greedy, rule.copy_left if capped else None)
        decoder = SpeculativeDecoder(
            sources=[draft], cost_model=flat, max_draft=64, max_depth=64, calibrate=False
        )
        got = decoder(loaded.model, prompt, StopRules(max_new_tokens=60, should_stop=rule))
        assert got.tokens == greedy[:32] and got.stop_reason == "stop", capped
        drafted[capped] = got.stats["draftedTokens"]
    assert drafted[True] == 31  # the first token comes from the prompt's pass
    assert drafted[False] > 31
