"""The brackets that the cursor's line may close: those the lines above left open and the code
below does not close.

A one-line completion stops before a closing bracket that closes nothing on its line
(postprocess.cut_unmatched_closer): a model often writes the `)` that the editor already put
after the cursor. But the last line of a call spread over lines closes the call's `(`:
`"Missing function: start_array");` under a `static_assert(`, and `"is out of range"), {{v}}));`
under a `throw error(format(concat(`. Those closers may stay when the code after the cursor does
not close the brackets itself (an editor's auto-closed `)` on the next line does).

A text scan, not a parse: quoted strings on one line and comments are skipped, by the
language's rules where it is known (`#` starts a comment in Python only: in C it starts a
directive and in TypeScript a private name; in Rust `'` starts a character literal only when
one closes right after it, else it is a lifetime), and at most SCAN_LINES lines each way are
read, a bound on every keystroke's work: what the code below does past them is taken to close
the brackets it has not closed yet, so that the line keeps as few closers as it can.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

CLOSER_OF = {"(": ")", "[": "]", "{": "}"}
OPENER_OF = {v: k for k, v in CLOSER_OF.items()}
SCAN_LINES = 40
LINE_COMMENTS = ("//", "#")  # when the language is not known, either starts a comment
LINE_COMMENTS_OF = {"python": ("#",)}  # every other known language: C's `//`
QUOTES = "\"'`"
RUST_CHAR = re.compile(r"'(?:\\.[^']*|[^'\\\n])'")  # 'a', '\n', '\u{1F600}'; not a lifetime
COMMENT, OPEN_QUOTE = "#", '"'  # code_marks' marks besides the brackets
# Lines that start a statement no open bracket can hold, per language: below the cursor, the
# brackets the lines above left open are closed before one (Python's `def`, `return`, `@`, ...;
# not `if`, `for` or `else`, which start lines inside comprehensions and conditionals too).
STATEMENT_START = {
    "python": re.compile(
        r"(?:def|class|return|import|from|pass|raise|assert|del|global|nonlocal|while|with"
        r"|try|except|finally|elif|async)\b|@"
    ),
}


def line_comments(language: str | None) -> tuple[str, ...]:
    if language is None:
        return LINE_COMMENTS
    return LINE_COMMENTS_OF.get(language, ("//",))


def marks_at(line: str, language: str | None = None) -> Iterator[tuple[int, str]]:
    """Where the line's brackets are, in order, outside quoted strings and comments; then
    COMMENT where a comment that the line does not close starts, or OPEN_QUOTE at the end
    when a quote is left open."""
    comments = line_comments(language)
    block_comments = "#" not in comments  # C's `/* ... */`
    quote = ""
    index = 0
    while index < len(line):
        ch = line[index]
        if quote:
            if ch == "\\":
                index += 1  # the escaped character is text: `"\\"` ends after the second
            elif ch == quote:
                quote = ""
        elif ch == "'" and language == "rust":
            literal = RUST_CHAR.match(line, index)
            index = literal.end() if literal else index + 1  # else a lifetime: `'a`
            continue
        elif ch in QUOTES:
            quote = ch
        elif line.startswith(comments, index):
            yield index, COMMENT
            return
        elif block_comments and line.startswith("/*", index):
            end = line.find("*/", index + 2)
            if end == -1:
                yield index, COMMENT
                return
            index = end + 2
            continue
        elif ch in CLOSER_OF or ch in OPENER_OF:
            yield index, ch
        index += 1
    if quote:
        yield len(line), OPEN_QUOTE


def code_marks(line: str, language: str | None = None) -> Iterator[str]:
    """The line's brackets in order, outside quoted strings and comments; then COMMENT where a
    comment starts, or OPEN_QUOTE at the end when a quote is left open."""
    return (mark for _, mark in marks_at(line, language))


def brackets(line: str, language: str | None = None) -> Iterator[str]:
    """The line's brackets in order, outside quoted strings and comments."""
    return (mark for mark in code_marks(line, language) if mark not in (COMMENT, OPEN_QUOTE))


def open_brackets(
    lines_above: Sequence[str], line_prefix: str, language: str | None = None
) -> tuple[list[str], list[str]]:
    """The brackets that the lines above leave open and the cursor's line up to the cursor does
    not close, and those that prefix opens and leaves open itself, each outermost first.
    Closers with no opener in the lines read (it is further up) are passed over."""
    stack: list[tuple[str, bool]] = []  # (opener, opened on the cursor's line)
    for line, own in [*((row, False) for row in lines_above[-SCAN_LINES:]), (line_prefix, True)]:
        for ch in brackets(line, language):
            if ch in CLOSER_OF:
                stack.append((ch, own))
            elif stack and stack[-1][0] == OPENER_OF[ch]:
                stack.pop()
    return [opener for opener, own in stack if not own], [opener for opener, own in stack if own]


def suffix_closes_own(line_prefix: str, line_suffix: str, language: str | None = None) -> bool:
    """Whether the cursor's line after the cursor closes the innermost bracket its text before
    the cursor leaves open: an editor's auto-closed pair (`foo(|)`), or code the person writes in
    front of (`foo(|bar)`). A completion then closes none of the brackets open at the cursor:
    `x)` there would close the `(` a second time. The line is read whole, so that a string the
    cursor is in goes on into the text after it."""
    stack: list[str] = []
    depth_at_cursor: int | None = None
    for at, mark in marks_at(line_prefix + line_suffix, language):
        after_cursor = at >= len(line_prefix)
        if after_cursor and depth_at_cursor is None:
            if not stack:
                return False
            depth_at_cursor = len(stack)
        if mark in CLOSER_OF:
            stack.append(mark)
        elif mark in OPENER_OF:
            if stack and stack[-1] == OPENER_OF[mark]:
                stack.pop()
                if depth_at_cursor is not None and len(stack) < depth_at_cursor:
                    return True
            elif after_cursor:
                return False  # it closes another bracket: no pair to tell
            # before the cursor, a closer of a line above: passed over (open_brackets)
    return False


def unmatched_closers(
    lines_below: Sequence[str], skip: int, count: int, language: str | None = None
) -> tuple[list[str], bool]:
    """The first `count` closers of the lines with no opener among them, past the first `skip`
    (they close what the cursor's line opened), and whether that is all there is to know:
    `count` found, the text ended, or a line (past the first: the cursor's) starts a statement
    no bracket can hold (STATEMENT_START). Fewer and False: SCAN_LINES lines were read."""
    found: list[str] = []
    depth = 0
    statement = STATEMENT_START.get(language or "")
    for index, line in enumerate(lines_below[:SCAN_LINES]):
        if index and statement is not None and statement.match(line.lstrip()):
            return found, True
        for ch in brackets(line, language):
            if ch in CLOSER_OF:
                depth += 1
            elif depth:
                depth -= 1
            elif skip:
                skip -= 1
            else:
                found.append(ch)
                if len(found) == count:
                    return found, True
    return found, len(lines_below) <= SCAN_LINES


def closers_for_line(
    lines_above: Sequence[str],
    line_prefix: str,
    suffix_lines: Sequence[str],
    language: str | None = None,
) -> str:
    """The closers the cursor's line may end with, innermost first, after those of the brackets
    it opens itself: those of the brackets `lines_above` (the lines before the cursor's) leave
    open that `suffix_lines` (the cursor's line after the cursor, then the lines below) do not
    close. The code below closes the outer ones, in order: with `(((` open above and `));` on
    the next line (an editor's auto-closed pairs), the line closes one. As few as what the code
    below holds within SCAN_LINES allows."""
    openers, own = open_brackets(lines_above, line_prefix, language)
    if not openers:
        return ""
    below, known = unmatched_closers(suffix_lines, len(own), len(openers), language)
    for closed_here in range(len(openers) + 1):
        outer = openers[: len(openers) - closed_here]
        wanted = [CLOSER_OF[o] for o in reversed(outer)]  # what the code below must close
        seen = below[: len(wanted)]
        if seen != wanted[: len(seen)]:
            continue  # it closes something else first
        if len(seen) == len(wanted) or not known:  # past SCAN_LINES: taken to close the rest
            return "".join(CLOSER_OF[o] for o in reversed(openers[len(outer) :]))
    return ""
