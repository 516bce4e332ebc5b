"""Shorter renderings of a block of brace-language code (C, C++, Java, Go, Rust, TypeScript,
JavaScript) for the far part of a long prefix (far_prefix.py).

Python's summary keeps the `def` / `class` headers (recursive.signature_summary). In a brace
language a header ends in the `{` that opens its body, so that rule reads the body as the
header's continuation (a Go function kept its first dozen lines and no closing brace), and a
Java method or a C function has no keyword it would know. Here the nesting of braces decides:
first the lines that reach brace depth 1 at most (a class's members, each with its header and
closing brace, their bodies dropped; a function's own statements, without their nested blocks),
then the lines at depth 0 (the block's header and its closing brace). Either way the braces stay
balanced, so the model reads well-formed code. Comment-only lines are left out of both: in a
summary the code's names are what pays for the tokens.

A text scan, not a parse: strings and comments are skipped by the language's rules
(open_brackets.marks_at), `/* ... */` comments across lines too.
"""

from __future__ import annotations

from memosight_lsp.pipeline.open_brackets import COMMENT, marks_at

# The depths a summary keeps, most detailed first.
SUMMARY_DEPTHS = (1, 0)


def brace_levels(text: str, language: str | None) -> tuple[str, ...]:
    """The renderings of `text`, most detailed first: itself, then each SUMMARY_DEPTHS summary
    that is shorter than the one before, then "" (dropped)."""
    lines = text.splitlines()
    depths = line_depths(lines, language)
    levels = [text]
    for keep in SUMMARY_DEPTHS:
        kept = [
            line
            for line, (depth, comment) in zip(lines, depths, strict=True)
            if depth <= keep and not comment and line.strip()
        ]
        summary = "".join(line + "\n" for line in kept)
        if summary and len(summary) < len(levels[-1]):
            levels.append(summary)
    levels.append("")
    return tuple(levels)


def line_depths(lines: list[str], language: str | None) -> list[tuple[int, bool]]:
    """Per line: the least brace depth it reaches (at its start or after a `}` on it; relative
    to the first line) and whether it holds only a comment."""
    out: list[tuple[int, bool]] = []
    depth = 0
    in_comment = False  # inside a `/* ... */` that an earlier line opened
    for line in lines:
        code = line
        if in_comment:
            end = line.find("*/")
            if end == -1:
                out.append((depth, True))
                continue
            in_comment = False
            code = line[end + 2 :]
        least = depth
        for index, mark in marks_at(code, language):
            if mark == "{":
                depth += 1
            elif mark == "}":
                depth -= 1
                least = min(least, depth)
            elif mark == COMMENT:
                in_comment = code.startswith("/*", index)  # one the line does not close
        out.append((least, comment_only(code)))
    return out


def comment_only(code: str) -> bool:
    """A line that is a comment and nothing else (or blank)."""
    stripped = code.strip()
    if stripped.startswith("//"):
        return True
    if stripped.startswith("/*"):
        end = stripped.find("*/")
        return end == -1 or end + 2 == len(stripped)
    return not stripped
