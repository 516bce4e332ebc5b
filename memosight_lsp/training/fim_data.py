"""Turn source files into training documents: chunks with a path marker, half of them in FIM order.

Files are cut into chunks of whole lines that fit one training window, so each FIM example is seen
whole. A FIM document is `<prefix-token>P<suffix-token>S<middle-token>M<eot>`, the same order the
engine prompts in.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

from memosight_lsp.inference.fim import FimFormat

from .tokenizer_training import END_OF_TEXT


@dataclass(frozen=True, kw_only=True)
class FimSettings:
    fim_rate: float = 0.5  # share of chunks transformed to prefix-suffix-middle order
    line_split_rate: float = 0.5  # share of FIM splits at line boundaries (the rest at characters)
    chunk_chars: int = 3000  # about one training window of code
    max_middle_lines: int = 8


def path_marker(relpath: str) -> str:
    """The comment that names a file; the context packer writes the same marker above snippets."""
    return f"# file: {relpath}\n"


def split_into_chunks(text: str, chunk_chars: int) -> list[str]:
    chunks: list[str] = []
    current: list[str] = []
    size = 0
    for line in text.splitlines(keepends=True):
        if size + len(line) > chunk_chars and current:
            chunks.append("".join(current))
            current, size = [], 0
        current.append(line)
        size += len(line)
    if current:
        chunks.append("".join(current))
    return chunks


def choose_middle(chunk: str, rng: random.Random, settings: FimSettings) -> tuple[int, int]:
    """Character span [start, end) of the middle: whole lines or an arbitrary span."""
    if rng.random() < settings.line_split_rate:
        starts = [0] + [i + 1 for i, ch in enumerate(chunk) if ch == "\n" and i + 1 < len(chunk)]
        first = rng.randrange(len(starts))
        count = rng.randint(1, settings.max_middle_lines)
        last = min(first + count, len(starts))
        end = starts[last] if last < len(starts) else len(chunk)
        # Editors ask mid-line too: sometimes start the middle inside the first line.
        start = starts[first]
        line_end = chunk.find("\n", start)
        if line_end > start and rng.random() < 0.5:
            start = rng.randint(start, line_end)
        return start, max(start, end)
    a, b = sorted(rng.randint(0, len(chunk)) for _ in range(2))
    return a, b


def make_documents(
    relpath: str, text: str, fim: FimFormat, rng: random.Random, settings: FimSettings
) -> Iterator[str]:
    for chunk in split_into_chunks(text, settings.chunk_chars):
        chunk = path_marker(relpath) + chunk
        if rng.random() >= settings.fim_rate:
            yield chunk + END_OF_TEXT
            continue
        start, end = choose_middle(chunk, rng, settings)
        # Never split the path marker: the marker is what the engine's prompts start with.
        start = max(start, len(path_marker(relpath)))
        end = max(end, start)
        prefix, middle, suffix = chunk[:start], chunk[start:end], chunk[end:]
        yield fim.build_psm(prefix, suffix) + middle + END_OF_TEXT
