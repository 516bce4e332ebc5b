"""Trim raw model output into what an editor should show at the cursor."""

from __future__ import annotations

from .policy import CursorSituation, leading_ws

MAX_BLOCK_LINES = 16
CLOSERS = {")": "(", "]": "[", "}": "{"}


def first_line_done(text: str) -> bool:
    """True once a single-line completion has a line break after some content (or at once)."""
    return "\n" in text


def block_end(text: str, situation: CursorSituation) -> int | None:
    """Offset where a block completion should end: a line dedented below the block, or the cap."""
    lines = text.split("\n")
    offset = len(lines[0]) + 1
    started = bool(lines[0].strip())
    for number, line in enumerate(lines[1:-1], start=1):  # the last line may be incomplete
        if line.strip():
            if started and len(leading_ws(line)) < len(situation.indent):
                return offset - 1
            started = True
        if number >= MAX_BLOCK_LINES:
            return offset - 1
        offset += len(line) + 1
    return None


def should_stop(text: str, situation: CursorSituation, multiline: bool) -> bool:
    if not multiline:
        return first_line_done(text)
    return block_end(text, situation) is not None or "\n\n\n" in text


def remove_suffix_overlap(text: str, line_suffix: str) -> str:
    """Drop the end of the completion that repeats what already follows the cursor."""
    tail = line_suffix.strip()
    if not tail:
        return text
    last_newline = text.rfind("\n")
    last_line = text[last_newline + 1 :]
    for size in range(min(len(tail), len(last_line)), 0, -1):
        if last_line.rstrip().endswith(tail[:size]):
            cut = len(last_line.rstrip()) - size
            return text[: last_newline + 1] + last_line[:cut]
    return text


def cut_unmatched_closer(text: str, line_prefix: str) -> str:
    """Stop before a closing bracket that closes nothing opened on the line or in the text."""
    stack = [ch for ch in line_prefix if ch in "([{"]
    depth_in_text: list[str] = []
    for index, ch in enumerate(text):
        if ch in "([{":
            depth_in_text.append(ch)
        elif ch in CLOSERS:
            if depth_in_text and depth_in_text[-1] == CLOSERS[ch]:
                depth_in_text.pop()
            elif stack and stack[-1] == CLOSERS[ch]:
                stack.pop()
            else:
                return text[:index]
    return text


def drop_repetition(text: str) -> str:
    """Cut a line that repeats three times in a row (a degenerate loop) to its first copy."""
    lines = text.split("\n")
    stripped = [line.strip() for line in lines]  # the first line has no indentation of its own
    for i in range(len(lines) - 2):
        if stripped[i] and stripped[i] == stripped[i + 1] == stripped[i + 2]:
            return "\n".join(lines[: i + 1])
    return text


def finish(text: str, situation: CursorSituation, multiline: bool) -> str:
    if not situation.line_prefix.strip() and not text.startswith("\n"):
        # The cursor already sits after the indentation; models write a line's indentation
        # themselves, so what they add before the first code would indent it twice.
        text = text.lstrip(" \t")
    if multiline:
        end = block_end(text + "\n", situation)
        if end is not None:
            text = text[:end]
        text = text.split("\n\n\n", 1)[0]
    else:
        text = text.split("\n", 1)[0]
    text = drop_repetition(text).rstrip()
    if not multiline:
        text = cut_unmatched_closer(text, situation.line_prefix)
    text = remove_suffix_overlap(text, situation.line_suffix)
    return text if text.strip() else ""
