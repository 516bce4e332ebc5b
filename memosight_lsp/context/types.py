"""What the packer returns: the prompt halves and an account of every chunk in them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

# "far": the code above the prefix window, compressed (far_prefix.py), when there is no index.
SNIPPET_KINDS = ("enclosing", "full", "signature", "window", "prefix", "suffix", "far")


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
    reranked: bool = False  # a second-stage ranker (Rerank) ordered the candidates
    # prefix[:cross_chars] is the other files' part (path markers and snippets); cross_files
    # has the same snippets per file, (path, text) in prompt order, for engines that take them
    # apart from the current file (llama.cpp's /infill input_extra).
    cross_chars: int = 0
    cross_files: tuple[tuple[str, str], ...] = ()
    # The current file: how the context names it, and the length of its path marker, which
    # starts prefix[cross_chars:] (0: no marker), for prompt layouts that name files their way.
    current_path: str = ""
    marker_chars: int = 0

    @classmethod
    def empty(cls) -> PackedContext:
        return cls(prefix="", suffix="", snippets=[], prompt_tokens=0)


@dataclass(frozen=True, kw_only=True)
class Rerank:
    """A second-stage ranker (e.g. inference/chunk_scoring.py: how much each chunk lowers the
    model's perplexity of the code above the cursor). Asked only when the structural ranker's
    best candidates overflow the room, about the first `max_candidates` of them."""

    # (chunk texts, target text) -> one score per chunk, higher: keep first
    score: Callable[[Sequence[str], str], list[float]]
    max_candidates: int = 32  # one model pass each: caps the latency
    min_overflow: float = 1.5  # their tokens / the room for snippets before it pays
    target_lines: int = 16  # lines up to the cursor that the chunks are judged on


@dataclass(frozen=True, kw_only=True)
class Packing:
    """How the budget is shared between the current file and other files' snippets (with an
    index; the current file alone ignores it). The defaults are today's packing (pack.py)."""

    # Lines right above the cursor kept before any snippet (as many as fit; 0: none beyond
    # the token share below).
    prefix_floor_lines: int = 0
    # The suffix's share of the budget (None: B/8 with an index, as pack.py says; B/4 for the
    # current file packed as alone).
    suffix_share: float | None = None
    # Other files' snippets only for names the file uses near the cursor or imports and does not
    # define itself; no similar-window chunks.
    foreign_only: bool = False
    # Other files' snippets first, in at most this share of the budget, then the current file
    # packed as it is alone (its nearest lines, the code above them compressed, the suffix at
    # B/4) in what they left; None: the shares above (pack.py).
    cross_share: float | None = None
    # With cross_share: this many windows of other files most like the lines above the cursor
    # (similar.py) come before the ranked definitions; `similar_only` leaves the definitions out.
    similar: int = 0
    similar_only: bool = False
    # With cross_share: other files' code only where it is likely to pay (pack.cross_pays):
    # the best similar window scores at least `gate_similarity`, or (with `gate_names`) the
    # cursor's line or the line above it uses a name that another file defines and this one
    # does not; else the current file alone. None: the language's own rule (pack.GATE_RULES).
    gate: bool = False
    gate_similarity: float | None = None
    gate_names: bool | None = None
    # The current file's code above its nearest lines compressed into the room left (signatures,
    # far_prefix.py) when the file does not fit; False: the nearest lines verbatim fill it, as
    # llama.cpp's `/infill` keeps them.
    far_prefix: bool = True
    # The current file's path marker comment (`// file: path`) when no other file's code comes
    # before it; False: the file's code alone, as a file-level FIM prompt.
    current_marker: bool = True


DEFAULT_PACKING = Packing()
