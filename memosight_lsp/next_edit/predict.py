"""Next-edit prediction: the edit the user is likely to make next, from the edits just made.

A window of about WINDOW_LINES lines around the cursor and the last edit is rewritten by the
model (prompt: prompt.py) with plain greedy's tokens, decoded speculatively with the
window's current text as the main draft (inference/edit_draft.py): where the rewrite copies, a pass
accepts many tokens. The answer is the minimal edits between the old window and the rewrite
(difflib on lines, then the changed lines cut to the characters that differ), minus what is
not worth proposing (`refusal`): a change of whitespace only, a deletion of more than
MAX_DELETED_LINES lines, a change of more than MAX_CHANGED_LINES lines, the user's last edit
undone, a change that shares no word with the recent edits (`unrelated`), or more than
MAX_HUNKS changes at once.

Before any model: when the last edit renamed an identifier, the next place still using the old
name is the answer, with no model call (rename_follow_up.py; `rename_follow_up_edit`); when it
changed a string constant that the scope holds elsewhere, the next of those changed the same way
(string_follow_up.py; `string_follow_up_edit`); when it removed a parameter from a definition,
the next call with that argument deleted (call_site_follow_up.py; `call_site_follow_up_edit`).
The model rewrite answers every other edit.

Bounded: the rewrite has at most the window's tokens + a margin, and ends by maxWaitMs with what
it has (a rewrite cut short proposes only the changes in the lines it wrote). It also ends once
it has re-converged (`early_stop`): after a change worth proposing, the old text copied again
across a line end and a line more (inference/edit_draft.py, Reconverged). The old tokens it did
not write are then taken as written unchanged, so the proposal is the full rewrite's whenever
the model would have copied the rest: a full rewrite with one change. A policy bound likewise:
a rewrite copying the old text past COPY_LINES lines below the cursor and the last edit ends
there (`copy_lines`, CopyBound), the rest taken as written: a change the model would write
further down is not waited for.

The window (`window_of`) and the proposals (`finish`) are the same whoever rewrites: the local
model (local.py, NextEditor) or a serving engine (remote.py). This module
imports no model code (no torch): the server imports it before any model is loaded.
"""

from __future__ import annotations

import difflib
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from memosight_lsp.workspace.languages import language_for

from . import call_site_follow_up, string_follow_up
from .edit_history import Edit
from .prompt import NextEditPrompt, build_next_edit_prompt
from .rename_follow_up import follow_up

WINDOW_LINES = 30
LINES_BEFORE = 8  # of the window, above the cursor or the last edit, whichever is higher
MAX_DELETED_LINES = 3
MAX_CHANGED_LINES = 6  # old lines one change may rewrite: a next edit is small
MAX_HUNKS = 4
WORD = re.compile(r"\w+")  # identifiers, numbers, the words of strings
MARGIN_TOKENS = 16  # beyond the window's tokens (plus a quarter of them) the rewrite may grow
# Lines below the cursor and the last edit (the lower of the two) an unchanged copy goes on for.
COPY_LINES = 8


@dataclass(frozen=True, kw_only=True)
class NextEditRequest:
    text: str  # the whole document
    cursor_line: int  # 0-based
    cursor: int | None = None  # document offset of the cursor; None: the start of cursor_line
    edits: tuple[Edit, ...] = ()  # the buffer's recent edits, oldest first
    path: str | None = None
    language_id: str | None = None
    max_wait_ms: int = 1500
    plain: bool = False  # plain greedy decoding, no drafts (the reference)
    buffer_id: str | None = None  # the decoder's per-buffer cache key
    window_lines: int = WINDOW_LINES
    lines_before: int = LINES_BEFORE  # of the window, above the cursor and the last edit
    prompt_format: str = "auto"  # nextEdit.promptFormat (prompt.py)
    early_stop: bool = True  # end the rewrite once it re-converges after a change (Reconverged)
    # With early_stop, end a rewrite copying past this many lines below the cursor and the last
    # edit (CopyBound; 0: never).
    copy_lines: int = COPY_LINES


@dataclass(frozen=True)
class Hunk:
    """Replace text[start:end] (document offsets) with new_text."""

    start: int
    end: int
    new_text: str


@dataclass(kw_only=True)
class NextEdit:
    hunks: list[Hunk]
    reason: str | None = None  # why there is no edit, when hunks is empty
    source: str = "model"  # "rename" / "string" / "callsite": a follow-up, no model ran
    first_line: int = 0  # the window: lines first_line .. end_line - 1
    end_line: int = 0
    window_start: int = 0  # document offsets of the window
    window_end: int = 0
    rewrite: str = ""
    complete: bool = False  # the end marker closed the rewrite (the old one, when converged)
    family: str = ""
    model: str = ""
    prompt_tokens: int = 0
    new_tokens: int = 0
    draft_tokens: int = 0  # the window's tokens (+ the end marker): the draft
    forward_passes: int = 0
    prefill_ms: float = 0.0
    decode_ms: float = 0.0
    total_ms: float = 0.0
    stop_reason: str = ""
    tokens: list[int] = field(default_factory=list)  # the rewrite's token ids (the model's)
    unwritten_tokens: int = 0  # old tokens taken as copied after an early stop ("converged")
    stats: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> dict[str, Any]:
        if self.source != "model":
            return dict(self.stats)
        return {
            "family": self.family,
            "promptTokens": self.prompt_tokens,
            "newTokens": self.new_tokens,
            "draftTokens": self.draft_tokens,
            "forwardPasses": self.forward_passes,
            "prefillMs": round(self.prefill_ms, 1),
            "decodeMs": round(self.decode_ms, 1),
            "stopReason": self.stop_reason,
            "complete": self.complete,
            "unwrittenTokens": self.unwritten_tokens,
            # The local model's: prompt tokens taken from the buffer's kept cache, and of those
            # the ones the pause's pre-warm prefilled (local.py, NextEditor.prewarm).
            **(
                {
                    "reusedTokens": self.stats["reusedPromptTokens"],
                    "prewarmedTokens": self.stats.get("prewarmedTokens", 0),
                }
                if "reusedPromptTokens" in self.stats
                else {}
            ),
            **{
                k: self.stats[k]
                for k in ("tokensPerPass", "acceptedBySource", "acceptedDraftTokens", "engine")
                if k in self.stats
            },
        }


def choose_window(
    lines: Sequence[str],
    cursor_line: int,
    edits: Sequence[Edit],
    size: int = WINDOW_LINES,
    before: int = LINES_BEFORE,
) -> tuple[int, int]:
    """Lines [first, end) to rewrite: `size` lines from `before` above the higher of the
    cursor and the last edit (when that edit is near: within `size` lines of the cursor)."""
    top = cursor_line
    if edits and abs(edits[-1].line - cursor_line) < size:
        top = min(top, edits[-1].line)
    first = max(0, min(top - before, len(lines) - size))
    return first, min(len(lines), first + size)


@dataclass(frozen=True)
class Window:
    """The lines a rewrite replaces: [first, end) of the document, its text (ending with a
    newline), its document offsets and the cursor's offset in it (None: not in it)."""

    first: int
    end: int
    text: str
    start: int
    stop: int
    cursor: int | None

    def prompt(self, model: Any, request: NextEditRequest) -> NextEditPrompt:
        """The prompt of this window for `model` (ModelTraits, or a local tokenizer)."""
        return build_next_edit_prompt(
            model,
            window=self.text,
            edits=request.edits,
            path=request.path or "",
            language=(request.language_id or "").lower(),
            setting=request.prompt_format,
            cursor=self.cursor,
            first_line=self.first,
        )


def window_of(request: NextEditRequest) -> Window:
    lines = request.text.splitlines(keepends=True) or [""]
    first, end = choose_window(
        lines, request.cursor_line, request.edits, request.window_lines, request.lines_before
    )
    text = "".join(lines[first:end])
    if not text.endswith("\n"):
        text += "\n"
    start = sum(len(line) for line in lines[:first])
    stop = min(len(request.text), start + len(text))
    cursor = None if request.cursor is None else request.cursor - start
    if cursor is not None and not 0 <= cursor <= stop - start:
        cursor = None  # the cursor is outside the window (the last edit drew it elsewhere)
    return Window(first, end, text, start, stop, cursor)


def copy_bound_line(request: NextEditRequest, window: Window) -> int | None:
    """The last line of the window (0-based in it) an unchanged copy is waited for: copy_lines
    below the lower of the cursor and the last edit's last line; None: no bound (no early stop,
    copy_lines 0, or the window ends first)."""
    if not request.early_stop or request.copy_lines <= 0:
        return None
    lowest = request.cursor_line
    if request.edits:  # the last edit, when the window holds it
        last = request.edits[-1]
        end = last.line + last.after.count("\n")
        if window.first <= end < window.end:
            lowest = max(lowest, end)
    line = lowest - window.first + request.copy_lines
    return line if line < window.end - window.first - 1 else None


def rewrite_budget(draft_tokens: int) -> int:
    """The most tokens a rewrite may have: the window's (with the end marker), a quarter more
    and a margin; a next edit is small, so a longer rewrite is going astray."""
    return draft_tokens + draft_tokens // 4 + MARGIN_TOKENS


def finish(result: NextEdit, request: NextEditRequest, window: Window) -> NextEdit:
    """The proposals of a rewrite (result.rewrite, result.complete) in document offsets, or why
    there are none; the window's place and the total time filled in."""
    result.first_line, result.end_line = window.first, window.end
    result.window_start, result.window_end = window.start, window.stop
    hunks, result.reason = window_proposals(request, window, result.rewrite, result.complete)
    original = window.stop - window.start
    result.hunks = [
        Hunk(window.start + min(h.start, original), window.start + min(h.end, original), h.new_text)
        for h in hunks
    ]
    return result


def window_proposals(
    request: NextEditRequest, window: Window, rewrite: str, complete: bool
) -> tuple[list[Hunk], str | None]:
    """`proposals` of a rewrite of the request's window (offsets in the window's text)."""
    last = request.edits[-1] if request.edits else None
    spec = language_for(request.path, request.language_id)
    keywords = spec.keywords if spec is not None else frozenset()
    return proposals(window.text, rewrite, complete, last, request.edits, keywords)


def line_hunks(old: str, new: str, complete: bool = True) -> list[tuple[int, int, str, str]]:
    """(start, end, old lines, new lines) in `old`'s offsets, per changed block of whole lines.
    A rewrite that did not complete is compared up to its last whole line, and the old lines it
    did not reach are not deleted."""
    old_lines = old.splitlines(keepends=True)
    new_lines = new.splitlines(keepends=True)
    if not complete and new_lines and not new_lines[-1].endswith("\n"):
        new_lines.pop()
    starts = [0]
    for line in old_lines:
        starts.append(starts[-1] + len(line))
    matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    out = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        if not complete and i2 == len(old_lines) and j2 == len(new_lines):
            if tag == "delete":
                continue  # the lines the rewrite did not reach
            if tag == "replace":
                i2 = min(i2, i1 + (j2 - j1))  # only as many old lines as it wrote
        out.append((starts[i1], starts[i2], "".join(old_lines[i1:i2]), "".join(new_lines[j1:j2])))
    return out


def trim(start: int, old: str, new: str) -> Hunk:
    """The hunk cut to the characters that differ (common prefix and suffix left out)."""
    prefix = 0
    limit = min(len(old), len(new))
    while prefix < limit and old[prefix] == new[prefix]:
        prefix += 1
    suffix = 0
    while suffix < limit - prefix and old[len(old) - 1 - suffix] == new[len(new) - 1 - suffix]:
        suffix += 1
    return Hunk(start + prefix, start + len(old) - suffix, new[prefix : len(new) - suffix])


def refusal(old: str, new: str, last: Edit | None) -> str | None:
    """Why a changed block (whole lines, old -> new) is not worth proposing; None: it is."""
    if "".join(old.split()) == "".join(new.split()):
        return "whitespace only (re-indent or reformat)"
    if old.count("\n") - new.count("\n") > MAX_DELETED_LINES:
        return f"deletes more than {MAX_DELETED_LINES} lines"
    if max(old.count("\n"), new.count("\n")) > MAX_CHANGED_LINES:
        return f"rewrites more than {MAX_CHANGED_LINES} lines"
    if last is not None and last.after != last.before and last.after.strip():
        undone = last.after in old and old.replace(last.after, last.before, 1) == new
        return "undoes the last edit" if undone else None
    return None


def unrelated(
    old_block: str, new_block: str, recent: Sequence[Edit], keywords: frozenset[str] = frozenset()
) -> bool:
    """Whether a changed block has nothing to do with the recent edits. Related: a word it adds
    or removes is a word of their changed text (a name, a string carried on), or its lines name
    what the edited lines name (a call site of the function whose parameters changed), keywords
    of the language aside; for a change of punctuation only, its text is in one of them. A
    change that shares nothing with them is the model's own idea of better code, and the editor
    would show it after every pause."""
    changed = set(WORD.findall(old_block)) ^ set(WORD.findall(new_block))
    theirs: set[str] = set()
    named: set[str] = set()
    for edit in recent:
        theirs |= set(WORD.findall(edit.old)) | set(WORD.findall(edit.new))
        named |= set(WORD.findall(edit.after))
    named = {word for word in named - keywords if len(word) > 1 and not word.isdigit()}
    if named & set(WORD.findall(old_block)):
        return False
    if changed:
        return not changed & theirs
    diff = trim(0, old_block, new_block)
    text = (old_block[diff.start : diff.end] + diff.new_text).strip()
    return not any(text in edit.old + edit.new for edit in recent)


def proposals(
    old: str,
    new: str,
    complete: bool,
    last: Edit | None,
    recent: Sequence[Edit] = (),
    keywords: frozenset[str] = frozenset(),
) -> tuple[list[Hunk], str | None]:
    """The minimal edits from the old window to the rewrite worth proposing (offsets in `old`),
    and why there are none when there are none. With `recent` (the buffer's recent edits),
    changes unrelated to them are dropped too."""
    blocks = line_hunks(old, new, complete)
    if not blocks:
        return [], "no edit predicted" if complete else "the rewrite was cut short unchanged"
    if len(blocks) > MAX_HUNKS:
        return [], f"the rewrite changed more than {MAX_HUNKS} places"
    kept: list[Hunk] = []
    reasons: list[str] = []
    for start, _end, old_block, new_block in blocks:
        why = refusal(old_block, new_block, last)
        if why is None and recent and unrelated(old_block, new_block, recent, keywords):
            why = "unrelated to the recent edits"
        if why is None:
            kept.append(trim(start, old_block, new_block))
        else:
            reasons.append(why)
    return kept, None if kept else "dropped: " + "; ".join(dict.fromkeys(reasons))


def rename_follow_up_edit(request: NextEditRequest) -> NextEdit | None:
    """The next edit after a rename, found with no model (rename_follow_up.py): the place nearest
    the cursor still using the old name, renamed; none (with a reason) when no such place is
    left. None when the last edit renamed no identifier: the model decides."""
    return _follow_up_edit(request, follow_up, "rename")


def string_follow_up_edit(request: NextEditRequest) -> NextEdit | None:
    """The next edit after a string constant was changed, found with no model
    (string_follow_up.py): the nearest other literal of the scope holding the old constant,
    changed the same way. None when the last edit changed no string constant, or no other
    literal holds it: the model decides."""
    return _follow_up_edit(request, string_follow_up.follow_up, "string")


def call_site_follow_up_edit(request: NextEditRequest) -> NextEdit | None:
    """The next edit after a parameter was removed from a definition, found with no model
    (call_site_follow_up.py): the call nearest the cursor with that argument deleted; none (with
    a reason) when no call is left to update, or when parameters with defaults were added. None
    when the last edits changed no parameter list that way: the model decides."""
    return _follow_up_edit(request, call_site_follow_up.follow_up, "callsite")


def _follow_up_edit(
    request: NextEditRequest, find: Callable[..., Any], source: str
) -> NextEdit | None:
    """A follow-up's answer as a NextEdit: `find` (text, cursor, edits, path, language_id) gives
    what it found (`next`: the place and its new text, or None; `reason`; `describe()`), or None
    when the last edits are not its kind."""
    if not request.edits:
        return None
    started = time.perf_counter()
    found = find(
        request.text,
        cursor_of(request),
        request.edits,
        path=request.path,
        language_id=request.language_id,
    )
    if found is None:
        return None
    place = found.next
    return NextEdit(
        hunks=[] if place is None else [Hunk(*place)],
        reason=found.reason,
        source=source,
        complete=True,
        stats={source: found.describe()},
        total_ms=(time.perf_counter() - started) * 1000,
    )


def cursor_after(edits: Sequence[Edit]) -> int | None:
    """Where the cursor is after the last edit (document offset): the end of its new text, what
    the user typed last; None without edits. The request after a pause is expected there."""
    if not edits:
        return None
    return edits[-1].start + len(edits[-1].new)


def cursor_of(request: NextEditRequest) -> int:
    """The request's cursor offset (the start of its line when it has none)."""
    if request.cursor is not None:
        return request.cursor
    lines = request.text.splitlines(keepends=True)
    return sum(len(line) for line in lines[: request.cursor_line])
