"""Where to complete and how much: single line vs block, mid-word, block end."""

from __future__ import annotations

from dataclasses import dataclass

BLOCK_OPENERS = (":", "{", "(", "[", "=>", "->")
INDENT_UNIT = "    "


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

    @property
    def mid_word(self) -> bool:
        return bool(self.line_prefix[-1:].isalnum() or self.line_prefix[-1:] == "_") and bool(
            self.line_suffix[:1].isalnum() or self.line_suffix[:1] == "_"
        )


def leading_ws(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


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
    line_suffix = suffix.split("\n", 1)[0]
    previous = next((row for row in reversed(before_lines[:-1]) if row.strip()), "")
    if line_prefix.rstrip().endswith(BLOCK_OPENERS):
        indent = leading_ws(line_prefix) + INDENT_UNIT  # the body of the header being completed
    elif line_prefix.strip():
        indent = leading_ws(line_prefix)
    elif previous.rstrip().endswith(BLOCK_OPENERS) and len(line_prefix) <= len(
        leading_ws(previous)
    ):
        indent = leading_ws(previous) + INDENT_UNIT
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
    )


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
