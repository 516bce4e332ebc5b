"""Trim raw model output into what an editor should show at the cursor, never anything
embarrassing: a degenerate loop is cut to its first copy (and decoding stops once one shows),
a statement keyword where an expression goes (`foo(a, ` -> `def __init__(...`) is dropped, and
so is a line on a blank line that is the code right below it (`repeats_next_line`).
A decoding still under way is shown only up to a line or word end (`partial`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .open_brackets import (
    CLOSER_OF,
    COMMENT,
    OPEN_QUOTE,
    OPENER_OF,
    brackets,
    marks_at,
    open_brackets,
)
from .policy import BRACE_LANGUAGES, CursorSituation, leading_ws

MAX_BLOCK_LINES = 16
TAB_WIDTH = 4
CLOSERS = OPENER_OF  # each closer's opener (open_brackets.py)
# A loop: a unit of up to MAX_LOOP_UNIT characters, with a letter or digit in it, that ends the
# text repeated LOOP_COPIES times in a row (LOOP_COPIES_SHORT for units of SHORT_UNIT or fewer:
# `(0, 0, 0)` is code, `6, 6, 6, 6, 6` is not). Punctuation runs (`# -----`) are never loops.
MAX_LOOP_UNIT = 32
LOOP_COPIES = 3
LOOP_COPIES_SHORT = 4
SHORT_UNIT = 4
# Python statements that cannot start inside brackets (`for`, `if`, `else`, `lambda`, `await`,
# `yield` and `async for` can: comprehensions, conditional expressions).
STATEMENT_IN_BRACKETS = {
    "python": re.compile(
        r"(?:def|class|return|import|raise|try|except|finally|while|with|elif|pass|break"
        r"|continue|del|global|nonlocal|assert|async\s+def)\b|from\s+[\w.]+\s+import\b|@\w"
    ),
}
WORD_TAIL = re.compile(r"\w+\Z")
# A line that only closes brackets (`}`, `});`, `},`, `)`): the end of a brace block.
CLOSER_LINE = re.compile(r"[)\]}]+[;,)]*")
WORD = re.compile(r"\w+")
# A completion that writes again the code its line has before the cursor, from a word's start
# on (`compile(z.tuple([]))` after `const aot = compile(`), restarted the line's expression: FIM
# models lose their place in a prefix that ends mid-expression. At least this many characters:
# a shorter tail is a word being typed, which token healing already finishes from its start.
RESTART_MIN_CHARS = 4


def first_line_done(text: str) -> bool:
    """True once a single-line completion has a line break after some content (or at once)."""
    return "\n" in text


def on_blank_line(situation: CursorSituation) -> bool:
    """The cursor's line holds nothing but whitespace."""
    return not situation.line_prefix.strip() and not situation.line_suffix.strip()


def skip_blank_start(text: str, situation: CursorSituation) -> str:
    """A one-line completion on a blank line starts at the model's first code: the line breaks
    it writes first (a blank line it would leave above its code) are skipped. Stopping at them
    instead answers empty, and a person waiting on an empty line sees nothing at all."""
    if not on_blank_line(situation):
        return text
    while True:  # each turn drops one line: ends with the text
        head, newline, rest = text.partition("\n")
        if not newline or head.strip():
            return text
        text = rest


def block_end(text: str, situation: CursorSituation) -> int | None:
    """Offset where a block completion should end: a line dedented below the block, or the cap."""
    lines = text.split("\n")
    offset = len(lines[0]) + 1
    started = bool(lines[0].strip())
    for number, line in enumerate(lines[1:-1], start=1):  # the last line may be incomplete
        if line.strip():
            if started and width(leading_ws(line)) < width(situation.indent):
                return offset - 1
            started = True
        if number >= MAX_BLOCK_LINES:
            return offset - 1
        offset += len(line) + 1
    return None


def width(indent: str) -> int:
    """Columns of an indentation, a tab as TAB_WIDTH: a tab-indented body is inside a block
    whose indentation was guessed in spaces."""
    return len(indent.expandtabs(TAB_WIDTH))


def should_stop(text: str, situation: CursorSituation, multiline: bool) -> bool:
    if loop_start(text) is not None:
        return True  # a degenerate loop never ends by itself
    if not multiline:
        return first_line_done(skip_blank_start(text, situation)) or at_closer_after_cursor(
            text, situation
        )
    if situation.language in BRACE_LANGUAGES:
        closing = closing_line(text, situation.language)
        if closing is not None and "\n" in text[closing:]:
            return True  # the line that closes the block is complete
    return block_end(text, situation) is not None or "\n\n\n" in text


def loop_start(text: str) -> int | None:
    """Where a degenerate loop ending the text repeats for the first time (the end of its first
    copy), None when the text does not end in one."""
    for size in range(1, min(MAX_LOOP_UNIT, len(text) // LOOP_COPIES) + 1):
        unit = text[-size:]
        if not any(ch.isalnum() for ch in unit):
            continue
        copies = 1
        while text.endswith(unit, 0, len(text) - copies * size):
            copies += 1
        if copies >= (LOOP_COPIES_SHORT if size <= SHORT_UNIT else LOOP_COPIES):
            return run_start(text, size) + size
    return None


def run_start(text: str, size: int) -> int:
    """Where the run that repeats the text's last `size` characters began (it may begin out of
    phase with the unit: "or or or")."""
    start = len(text) - size
    while start > 0 and text[start - 1] == text[start - 1 + size]:
        start -= 1
    return start


def cut_loop(text: str) -> str:
    """The text up to the end of the first copy of a degenerate loop that ends it, with or
    without its trailing whitespace (`name, name, name, ` is a loop of `name, `: the loop
    that stopped decoding; stripped, it is not one)."""
    for end in (text, text.rstrip()):
        start = loop_start(end)
        if start is not None:
            return text[:start]
    return text


def without_restart(text: str, situation: CursorSituation) -> str:
    """The completion without the code of the cursor's line before the cursor that it writes
    again at its start (RESTART_MIN_CHARS): what the model meant to follow that code."""
    code = situation.line_prefix
    for word in WORD.finditer(code):  # the longest tail first
        tail = code[word.start() :]
        if len(tail) < RESTART_MIN_CHARS:
            break
        if text.startswith(tail):
            return text[len(tail) :]
    return text


def statement_in_expression(text: str, situation: CursorSituation) -> bool:
    """Whether the completion's first line starts a statement where the cursor is inside
    brackets (the syntax tree says so): a block-level line in the middle of an expression."""
    rule = STATEMENT_IN_BRACKETS.get(situation.language or "")
    if rule is None or not situation.in_brackets:
        return False
    first = text.split("\n", 1)[0].strip() or text.strip().split("\n", 1)[0]
    return rule.match(first) is not None


def remove_suffix_overlap(text: str, line_suffix: str, language: str | None = None) -> str:
    """Drop the end of the completion that repeats what already follows the cursor; never a
    closing bracket of one the completion's line opened itself: `f(x)` before an editor's `)`
    keeps its own (the line's brackets it closes were cut before: cut_unmatched_closer)."""
    tail = line_suffix.strip()
    if not tail:
        return text
    last_newline = text.rfind("\n")
    last_line = text[last_newline + 1 :]
    for size in range(min(len(tail), len(last_line)), 0, -1):
        if last_line.rstrip().endswith(tail[:size]):
            cut = len(last_line.rstrip()) - size
            kept, dropped = last_line[:cut], last_line[cut:]
            if open_brackets([], kept, language)[1] and any(
                mark in OPENER_OF for mark in brackets(dropped, language)
            ):
                continue
            return text[: last_newline + 1] + kept
    return text


def cut_unmatched_closer(
    text: str, situation: CursorSituation, *, ignore_suffix: bool = False
) -> str:
    """Stop before a closing bracket that closes nothing opened on the line or in the text.
    Closers that start a line (the prefix is blank) close the enclosing block and stay:
    `} else {`, `});`; so do the closers of `may_close` in their order once the line's own are
    closed (CursorSituation.line_may_close: brackets of the lines above that nothing after the
    cursor closes). When the text after the cursor closes the innermost bracket open at the
    cursor (`foo(|)`, CursorSituation.suffix_closes_bracket) the text may close none of those:
    it ends where it would (`x) {` is `x`); `ignore_suffix` reads the line as if it did not.
    Brackets in strings and comments do not count, the prefix's included: the text
    goes on in the string the cursor is in (open_brackets.marks_at)."""
    line_prefix, language = situation.line_prefix, situation.language
    _, stack = open_brackets([], line_prefix, language)
    may_close = situation.line_may_close
    if situation.suffix_closes_bracket and not ignore_suffix:
        stack, may_close = [], ""
    depth_in_text: list[str] = []
    start = 0
    if not line_prefix.strip():
        start = len(text) - len(text.lstrip(" \t)]}"))
    for at, ch in marks_at(line_prefix + text, language):
        index = at - len(line_prefix)
        if index < start or ch in (COMMENT, OPEN_QUOTE):
            continue
        if ch in CLOSER_OF:
            depth_in_text.append(ch)
        elif depth_in_text and depth_in_text[-1] == CLOSERS[ch]:
            depth_in_text.pop()
        elif stack and stack[-1] == CLOSERS[ch]:
            stack.pop()
        elif not stack and may_close[:1] == ch:
            may_close = may_close[1:]
        else:
            return text[:index]
    return text


def closing_line(text: str, language: str | None) -> int | None:
    """Where the line holding the first bracket that closes one opened before the completion
    starts (the block's own `{`); None when there is none. Brackets in strings, character
    literals and comments do not count, by the language's rules (open_brackets.marks_at: in
    Rust a `'` starts a lifetime unless a character literal closes right after it)."""
    depth = 0
    line_start = 0
    for line in text.split("\n"):
        for _, mark in marks_at(line, language):
            if mark in CLOSER_OF:
                depth += 1
            elif mark in CLOSERS:
                depth -= 1
                if depth < 0:
                    return line_start
        line_start += len(line) + 1
    return None


def block_text(text: str, situation: CursorSituation) -> str:
    """A block completion cut where the block ends: a line dedented below it, the line that
    closes its brace (brace languages, whatever the indentation), or the cap. That closing line
    (`}`, `});`) is kept when nothing after the cursor closes the block already, so the
    completion never repeats the closing text that follows the cursor."""
    end = block_end(text + "\n", situation)
    if situation.language not in BRACE_LANGUAGES:
        return text if end is None else text[:end]
    closing = closing_line(text, situation.language)
    if closing == 0:
        return ""  # the first line closes the block: an empty body, nothing to add
    if closing is not None and (end is None or closing - 1 <= end):
        end = max(0, closing - 1)
    if end is None:
        return text
    ended_by = text[end:].lstrip("\n").split("\n", 1)[0]
    if closes_block(ended_by, situation) and not suffix_closes(ended_by, situation):
        return text[:end] + "\n" + ended_by.rstrip()
    return text[:end]


def closes_block(line: str, situation: CursorSituation) -> bool:
    """The line only closes brackets, dedented below the block's body: the block's own end."""
    return CLOSER_LINE.fullmatch(line.strip()) is not None and width(leading_ws(line)) < width(
        situation.indent
    )


def suffix_closes(closer: str, situation: CursorSituation) -> bool:
    """The code after the cursor already closes the block: on the cursor's line (`{|}`), or on
    the next line at the closer's indentation or deeper (an editor's auto-closed pair)."""
    if situation.line_suffix.strip()[:1] in CLOSERS:
        return True
    following = situation.next_line
    return following.strip()[:1] in CLOSERS and width(leading_ws(following)) >= width(
        leading_ws(closer)
    )


def drop_repetition(text: str) -> str:
    """Cut a line that repeats three times in a row (a degenerate loop) to its first copy.
    Lines of punctuation alone are not loops: nested blocks end in `}`, `}`, `}`."""
    lines = text.split("\n")
    stripped = [line.strip() for line in lines]  # the first line has no indentation of its own
    for i in range(len(lines) - 2):
        looping = any(ch.isalnum() for ch in stripped[i])
        if looping and stripped[i] == stripped[i + 1] == stripped[i + 2]:
            return "\n".join(lines[: i + 1])
    return text


def after_indent(text: str, situation: CursorSituation) -> str:
    """The text without what it writes before its first code when the cursor already sits after
    the line's indentation: models write a line's indentation themselves, so keeping it would
    indent the code twice."""
    if not situation.line_prefix.strip() and not text.startswith("\n"):
        return text.lstrip(" \t")
    return text


@dataclass(frozen=True)
class OneLine:
    """A one-line completion's line before the closer rule, and where it starts in the model's
    text."""

    start: int
    text: str


def one_line(text: str, situation: CursorSituation) -> OneLine | None:
    """The line a one-line completion answers, trimmed but not yet cut at a closer that matches
    nothing; None when it starts a statement inside brackets (nothing to answer). Each step
    only drops text before the line or after it, so the line is `text[start:start + len]`."""
    answered = without_restart(skip_blank_start(text, situation), situation)
    if statement_in_expression(answered, situation):
        return None
    line = cut_loop(answered)
    kept = after_indent(line, situation)
    start = len(text) - len(answered) + len(line) - len(kept)
    return OneLine(start, drop_repetition(kept.split("\n", 1)[0]).rstrip())


def cut_closer_at(text: str, situation: CursorSituation) -> int | None:
    """Where `finish` cuts a one-line completion before a closing bracket that closes nothing
    (cut_unmatched_closer): that bracket's offset in the model's text; None when it does not, or
    when the line ends earlier at the bracket the text after the cursor closes: that is the
    answer's end, not a stray closer (closer_readings)."""
    line = one_line(text, situation)
    if line is None:
        return None
    head, stray = closer_readings(line.text, situation)
    if len(stray) == len(line.text) or len(head) < len(stray):
        return None
    return line.start + len(stray)


def closer_readings(line: str, situation: CursorSituation) -> tuple[str, str]:
    """The line cut as `finish` cuts it, and cut as if the code after the cursor closed no
    bracket (cut_unmatched_closer's `ignore_suffix`). The first is the shorter when the line
    writes the closer of the bracket the code after the cursor closes (`x) {` at `foo(|)`)
    before any closer that closes nothing: `finish` ends it there. Without that code both
    readings are the same, read once."""
    full = cut_unmatched_closer(line, situation, ignore_suffix=True)
    if not situation.suffix_closes_bracket:
        return full, full
    return cut_unmatched_closer(line, situation), full


def at_closer_after_cursor(text: str, situation: CursorSituation) -> bool:
    """A one-line completion has written the closer of the bracket the code after the cursor
    closes, and what it writes from there is no longer the line through that code
    (`through_rest`): `finish` ends the line before the closer, nothing after it is shown, and
    decoding can stop. Checked at every decoding step: the line is read only where the flag
    says it may."""
    if not situation.suffix_closes_bracket:
        return False
    line = one_line(text, situation)
    if line is None:
        return False
    head, full = closer_readings(line.text, situation)
    if len(head) == len(full):
        return False  # no closer of the bracket the code after the cursor closes yet
    after = line.text[len(head) :]
    rest = cursor_line_rest(situation)
    return not (after.startswith(rest) or rest.startswith(after))


def cursor_line_rest(situation: CursorSituation) -> str:
    """The code after the cursor on its line, without a CRLF file's carriage return."""
    return situation.line_suffix.removesuffix("\r")


def through_rest(text: str, situation: CursorSituation, multiline: bool) -> str | None:
    """The completion's line when it writes the code after the cursor at the end of its own and
    goes on past it: at `func TestX(|)` the model's `t *testing.T) {` is the line from the
    cursor to its end, where `finish` shows `t *testing.T` before the editor's `)` and stops.
    That rest of the line must follow, verbatim, the bracket `finish` ends before, and not
    occur again after it (a client finds the kept code at its last occurrence); None
    otherwise, for multi-line completions and where the code after the cursor does not close
    a bracket."""
    rest = cursor_line_rest(situation)
    if multiline or not situation.suffix_closes_bracket or not rest.strip():
        return None
    line = one_line(text, situation)
    if line is None:
        return None
    head, full = closer_readings(line.text, situation)
    full = full.rstrip()
    after = full[len(head) :]
    if not after.startswith(rest) or not after[len(rest) :].strip():
        return None
    if full.rfind(rest) != len(head):
        return None
    return full


def finish(text: str, situation: CursorSituation, multiline: bool) -> str:
    if multiline:
        if statement_in_expression(text, situation):
            return ""
        text = after_indent(cut_loop(without_restart(text, situation)), situation)
        text = block_text(text, situation).split("\n\n\n", 1)[0]
        text = drop_repetition(text).rstrip()
    else:
        line = one_line(text, situation)
        if line is None:
            return ""
        text = cut_unmatched_closer(line.text, situation)
    text = remove_suffix_overlap(text, situation.line_suffix, situation.language)
    if repeats_next_line(text, situation):
        return ""
    return text if text.strip() else ""


def repeats_next_line(text: str, situation: CursorSituation) -> bool:
    """On a blank line, a completion whose first line is the code of the next non-blank line
    below: the model skipped the line the person is about to write (it wrote what follows), and
    the suggestion would only duplicate it. Lines of closers alone (`}`) are left to the block
    rules: a block's end may well follow another's."""
    first = text.lstrip("\n").split("\n", 1)[0].strip()
    return (
        on_blank_line(situation)
        and any(ch.isalnum() for ch in first)
        and first == situation.next_line.strip()
    )


def partial(text: str, situation: CursorSituation, multiline: bool) -> str:
    """What a decoding still under way has verified, shown up to where it makes sense: the end of
    its last whole line, else of its last whole word (the next token may continue a word), then
    trimmed as a finished completion would be."""
    if not multiline:
        text = skip_blank_start(text, situation)
        if "\n" in text:
            return finish(text, situation, multiline)  # the line is done
    line_start = text.rfind("\n") + 1
    last = text[line_start:]
    shown = finish(text[:line_start] + WORD_TAIL.sub("", last), situation, multiline)
    return held_back(shown).rstrip()


def held_back(text: str) -> str:
    """The text up to the end of the first copy of a unit that nearly repeats twice at its end:
    a loop in the making, which the finished completion will cut there, so a partial answer
    never shows `or or` or `6, 6, 6` on its way to a loop. Units of word characters only
    (`ll`, `00`) are not held back."""
    cut = len(text)
    for size in range(1, min(MAX_LOOP_UNIT, (len(text) + 1) // 2) + 1):
        unit = text[-size:]
        if not any(ch.isalnum() for ch in unit) or WORD.fullmatch(unit):
            continue
        start = run_start(text, size)
        if len(text) - start >= 2 * size - 1:
            cut = min(cut, start + size)
    return text[:cut]
