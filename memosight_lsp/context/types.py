"""What the packer returns: the prompt halves and an account of every chunk in them."""

from __future__ import annotations

from dataclasses import dataclass

SNIPPET_KINDS = ("enclosing", "full", "signature", "window", "prefix", "suffix")


@dataclass(frozen=True, kw_only=True, slots=True)
class Snippet:
    path: str  # workspace-relative ('/'-separated); absolute for files outside the workspace
    start_line: int  # 0-based, inclusive
    end_line: int  # 0-based, inclusive
    symbol: str | None  # qualified name of the definition, if the chunk is one
    kind: str  # one of SNIPPET_KINDS
    tokens: int  # tokens of `text` alone (path markers are counted in prompt_tokens only)
    score: float  # relevance in [0, 1]; 1 for the current file's own chunks
    text: str


@dataclass(frozen=True, kw_only=True, slots=True)
class PackedContext:
    prefix: str  # everything before the cursor: ranked snippets, path markers, the file's prefix
    suffix: str  # the code after the cursor
    snippets: list[Snippet]
    prompt_tokens: int  # count_tokens(prefix) + count_tokens(suffix) <= budget

    @classmethod
    def empty(cls) -> PackedContext:
        return cls(prefix="", suffix="", snippets=[], prompt_tokens=0)
