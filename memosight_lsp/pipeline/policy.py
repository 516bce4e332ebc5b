"""Where to complete and how much: single line vs block, mid-word, block end."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from .open_brackets import SCAN_LINES, closers_for_line, suffix_closes_own

BLOCK_OPENERS = (":", "{", "(", "[", "=>", "->")
INDENT_UNIT = "    "
# Grammars whose blocks are braces: a block ends at the brace that closes it, whatever the
# indentation says.
BRACE_LANGUAGES = {"go", "rust", "javascript", "typescript", "tsx", "java", "c", "cpp"}
# A generated file says so in its first lines (Go's `// Code generated ... DO NOT EDIT.`,
# protoc, `@generated` of Rust/Java/JS tools): nobody types it, so it is not completed, and
# looking costs a search of its first HEADER_CHARS characters.
GENERATED_MARK = re.compile(r"DO NOT EDIT|@generated\b")
HEADER_CHARS = 2000
# A cursor's line this long is minified code or data (JSON, CSV, base64): not completed, and no
# prompt is packed for it.
MAX_LINE_CHARS = 3000
LANGUAGE_INDENT = {"go": "\t"}  # gofmt indents with tabs, whatever the file shows so far
# Indented lines of the prefix looked at to tell its indentation unit (tab, 2 or 4 spaces).
INDENT_SAMPLE_LINES = 40


@dataclass(frozen=True, kw_only=True)
class CursorSituation:
    line_prefix: str  # the cursor's line before the cursor
    line_suffix: str  # the cursor's line after the cursor
    previous_line: str  # the nearest non-blank line above
    indent: str  # indentation of the block the completion belongs to
    # From the syntax tree: in a string, comment or bracketed expression (None: no grammar).
    in_expression: bool | None = None
    in_brackets: bool = False  # in a bracketed expression (not a string or comment)
    language: str | None = None  # the grammar's name (workspace/languages.py), if any
    next_line: str = ""  # the nearest non-blank line below the cursor's line
    # The closers of the brackets the lines above left open that the code after the cursor does
    # not close, innermost first: the cursor's line may end with them (open_brackets.py).
    line_may_close: str = ""
    # The cursor's line after the cursor closes the innermost bracket open before it (`foo(|)`):
    # the completion closes none of the brackets open at the cursor (open_brackets.py).
    suffix_closes_bracket: bool = False

    @property
    def mid_word(self) -> bool:
        return bool(self.line_prefix[-1:].isalnum() or self.line_prefix[-1:] == "_") and bool(
            self.line_suffix[:1].isalnum() or self.line_suffix[:1] == "_"
        )


def leading_ws(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


def indent_unit(lines: list[str], language: str | None = None) -> str:
    """The file's indentation step, read from its last indented lines: a tab when most of them
    start with one (Go, C, many TypeScript projects), else the commonest step between
    consecutive indentations (2 or 4 spaces; aligned continuation lines are the rarer steps);
    when nothing says, the language's own (gofmt: a tab), else INDENT_UNIT."""
    tabs = spaces = 0
    steps: Counter[int] = Counter()
    previous = -1
    for row in reversed(lines):
        if not row.strip():
            continue
        ws = leading_ws(row)
        tabs += ws.startswith("\t")
        spaces += ws.startswith(" ")
        if previous >= 0 and len(ws) != previous and not ws.startswith("\t"):
            steps[abs(len(ws) - previous)] += 1
        previous = len(ws)
        if tabs + spaces >= INDENT_SAMPLE_LINES:
            break
    if tabs > spaces:
        return "\t"
    if not steps:
        return LANGUAGE_INDENT.get(language or "", INDENT_UNIT)
    common = [step for step, _ in steps.most_common() if step in (2, 4, 8)]
    return " " * common[0] if common else LANGUAGE_INDENT.get(language or "", INDENT_UNIT)


def describe_cursor(
    prefix: str,
    suffix: str,
    *,
    in_expression: bool | None = None,
    in_brackets: bool = False,
    language: str | None = None,
) -> CursorSituation:
    before_lines = prefix.split("\n")
    line_prefix = before_lines[-1]
    after_lines = suffix.split("\n", 64)  # enough to find the next non-blank line
    line_suffix = after_lines[0]
    previous = next((row for row in reversed(before_lines[:-1]) if row.strip()), "")
    following = next((row for row in after_lines[1:64] if row.strip()), "")
    if line_prefix.rstrip().endswith(BLOCK_OPENERS):
        # The body of the header being completed, one step in (a tab in a tab-indented file).
        indent = leading_ws(line_prefix) + indent_unit(before_lines[-400:], language)
    elif line_prefix.strip():
        indent = leading_ws(line_prefix)
    elif previous.rstrip().endswith(BLOCK_OPENERS) and len(line_prefix) <= len(
        leading_ws(previous)
    ):
        indent = leading_ws(previous) + indent_unit(before_lines[-400:], language)
    else:
        indent = line_prefix
    return CursorSituation(
        line_prefix=line_prefix,
        line_suffix=line_suffix,
        previous_line=previous,
        indent=indent,
        in_expression=in_expression,
        in_brackets=in_brackets,
        language=language,
        next_line=following,
        line_may_close=closers_for_line(
            before_lines[-SCAN_LINES - 1 : -1], line_prefix, after_lines, language
        ),
        suffix_closes_bracket=suffix_closes_own(line_prefix, line_suffix, language),
    )


def file_refusal(text: str, line_chars: int) -> str | None:
    """Why a file is not completed at all, found without reading past its first lines: it is
    generated, or the cursor's line (`line_chars` long) is minified code or data."""
    if GENERATED_MARK.search(text, 0, HEADER_CHARS):
        return "a generated file (DO NOT EDIT / @generated near its top)"
    if line_chars > MAX_LINE_CHARS:
        return f"a line of {line_chars} characters (minified code or data)"
    return None


def mid_word_refusal(situation: CursorSituation, policy: str) -> str | None:
    """Why the midWord policy gives no completion at this cursor; None when it gives one."""
    if policy == "skip" and situation.mid_word:
        return "the cursor is inside a word (midWord is 'skip')"
    return None


def wants_multiline(situation: CursorSituation, policy: str) -> bool:
    """A block header or an empty body gets a block; mid-expression gets one line."""
    if policy == "always":
        return True
    if policy == "never":
        return False
    if situation.line_suffix.strip() or situation.in_expression:
        return False  # code follows, or inside a string/comment/expression: finish it only
    stripped = situation.line_prefix.strip()
    if stripped:
        return stripped.endswith(BLOCK_OPENERS)
    # Blank line: a block if it opens a body, else the next statement alone.
    return situation.previous_line.rstrip().endswith(BLOCK_OPENERS)
