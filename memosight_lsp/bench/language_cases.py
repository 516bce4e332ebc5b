"""Quality cases in any language the index knows: random code lines and cross-file call lines of a
real project (bench/corpora.py), the line removed and the cursor at its indentation.

- random: seeded lines of the project's source files that hold code (not blank, not a comment,
  not punctuation alone such as `});`), as bench/model_quality.py samples Python;
- call: lines that call or construct a name (`name(`, `Type::`, `new Type(`, `Type{`) that
  another file of the project defines and the line's own file does not, as
  bench/context_recall.py finds Python calls with `ast`. The definitions come from the workspace
  index's tree-sitter outlines (every language has a grammar there, none has an `ast`).

`in_call` moves a case's cursor into the line's first call, right after its `(` (with or without
the editor's auto-closed `)` after it): the middle of a line, where a person pauses after `(`.

Generated files (`DO NOT EDIT`, `@generated` near the top) and files over MAX_FILE_BYTES are left
out: nobody types them.
"""

from __future__ import annotations

import random
import re
from collections import defaultdict
from pathlib import Path

from memosight_lsp.bench import context_recall, corpora, model_quality
from memosight_lsp.pipeline.open_brackets import marks_at
from memosight_lsp.workspace import WorkspaceIndex

MIN_FILE_BYTES = 2000
MAX_FILE_BYTES = 200_000
FIRST_LINE = 20  # a case has at least this many lines above it (as model_quality samples)
GENERATED = re.compile(r"DO NOT EDIT|@generated|Code generated .* DO NOT EDIT", re.I)
COMMENT_STARTS = {
    "python": ("#", '"""', "'''"),
}
C_LIKE_COMMENTS = ("//", "/*", "*", "*/")
# Methods are called through an object (`x.drop()`), which the pattern below leaves out anyway.
CALLABLE_KINDS = {"function", "class", "struct", "interface", "trait", "enum", "type"}
MAX_DEFINING_FILES = 2  # a name defined in many files (`new`, `String`) says nothing
IMPORT_LINE = re.compile(r"^\s*(import\b|from\b|use\b|#include\b|package\b|export\s+\*|mod\b)")


def code_line(line: str, language: str) -> bool:
    """A line worth completing: at least 4 characters, a letter or digit, and not a comment."""
    content = line.strip()
    if len(content) < 4 or not any(ch.isalnum() for ch in content):
        return False
    return not content.startswith(COMMENT_STARTS.get(language, C_LIKE_COMMENTS))


def generated(text: str) -> bool:
    """A generated file says so near its top (`Code generated ... DO NOT EDIT.`, `@generated`)."""
    return GENERATED.search(text[:2000]) is not None


def project_files(root: Path, language: str) -> list[Path]:
    """The project's hand-written source files of `language` worth sampling, sorted."""
    out = []
    for path in corpora.source_files(root, language):
        size = path.stat().st_size
        if not MIN_FILE_BYTES < size <= MAX_FILE_BYTES:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if not generated(text):
            out.append(path)
    return out


def cut(path: Path, lines: list[str], number: int) -> model_quality.Case:
    """The file without line `number`'s content; the cursor at its indentation."""
    text, column = context_recall.cut_line("\n".join(lines), number)
    return model_quality.Case(
        path=str(path), text=text, line=number, column=column, target=lines[number].strip()
    )


def random_lines(
    files: list[Path], language: str, count: int, seed: int
) -> list[model_quality.Case]:
    """`count` seeded random code lines of the files."""
    texts = {path: path.read_text(encoding="utf-8").split("\n") for path in files}
    pool = [
        (path, i)
        for path, lines in texts.items()
        for i in range(FIRST_LINE, len(lines))
        if code_line(lines[i], language) and not IMPORT_LINE.match(lines[i])
    ]
    rng = random.Random(seed)
    return [cut(path, texts[path], i) for path, i in rng.sample(pool, min(count, len(pool)))]


def call_pattern(name: str) -> re.Pattern[str]:
    """A use of `name` that calls or constructs it: `name(` not after a dot (a method of some
    other object), or a capitalised type before `(`, `::` or a member (`Type::new`, `new Type(`,
    `Type.of(`, `Kind.VALUE`) or right before `{` (Go's `&Type{...}`; `-> fmt::Result {` is a
    function's body, not a literal)."""
    escaped = re.escape(name)
    if name[:1].isupper():
        return re.compile(rf"(?<![\w.]){escaped}(?:\s*(?:\(|::)|\{{|\.\w)")
    return re.compile(rf"(?<![\w.]){escaped}\s*\(")


# String literals and end-of-line comments are not calls: removed before matching.
STRINGS_AND_COMMENTS = re.compile(r'"(?:\\.|[^"\\])*"|`[^`]*`|\s//.*$|\s#\s.*$')


def call_lines(
    root: Path, language: str, index: WorkspaceIndex, files: list[Path], count: int, seed: int
) -> list[tuple[model_quality.Case, context_recall.Case]]:
    """`count` seeded lines that call a name defined in another file of the project (and not in
    the line's own file), with what they call and where it is defined."""
    defined: dict[str, set[str]] = defaultdict(set)
    own: dict[str, set[str]] = defaultdict(set)
    for rel in index.files():
        symbols = index.symbols(rel)
        if symbols is None:
            continue
        for d in symbols.definitions:
            own[rel].add(d.name)
            if d.kind in CALLABLE_KINDS and len(d.name) >= 3 and not d.name.startswith("_"):
                defined[d.name].add(rel)
    names = {n: rels for n, rels in defined.items() if len(rels) <= MAX_DEFINING_FILES}
    patterns = {n: call_pattern(n) for n in names}
    pool: list[tuple[Path, int, str, tuple[str, ...]]] = []
    for path in files:
        rel = path.relative_to(root).as_posix()
        lines = path.read_text(encoding="utf-8").split("\n")
        words_by_line = [set(re.findall(r"[A-Za-z_]\w*", line)) for line in lines]
        for i in range(FIRST_LINE, len(lines)):
            line = lines[i]
            if not code_line(line, language) or IMPORT_LINE.match(line):
                continue
            code = STRINGS_AND_COMMENTS.sub(" ", line)
            for name in sorted(words_by_line[i] & names.keys()):
                targets = tuple(sorted(names[name] - {rel}))
                if targets and name not in own[rel] and patterns[name].search(code):
                    pool.append((path, i, name, targets))
                    break
    rng = random.Random(seed)
    out = []
    for path, i, name, targets in rng.sample(pool, min(count, len(pool))):
        lines = path.read_text(encoding="utf-8").split("\n")
        rel = path.relative_to(root).as_posix()
        out.append((cut(path, lines, i), context_recall.Case(rel, i, name, targets)))
    return out


def in_call(case: model_quality.Case, language: str, closed: bool) -> model_quality.Case | None:
    """The case with the cursor right after its line's first `(` whose `)` is on the line and
    holds something, as a person pauses after typing a call's `(`: with `closed`, the editor's
    auto-closed `)` follows the cursor and the expected text is what goes between; else nothing
    follows and it is the rest of the line. None when the line has no such call. Brackets in
    strings and comments do not count (open_brackets.marks_at)."""
    lines = case.text.split("\n")
    full = lines[case.line][: case.column] + case.target
    opened = close = None
    depth = 0
    for at, mark in marks_at(full, language):
        if mark == "(" and opened is None:
            opened = at
        elif opened is not None and mark in "([{":
            depth += 1
        elif opened is not None and mark in ")]}":
            if not depth:
                close = at
                break
            depth -= 1
    if opened is None or close is None or not full[opened + 1 : close].strip():
        return None
    cursor = opened + 1
    lines[case.line] = full[:cursor] + (")" if closed else "")
    target = full[cursor:close] if closed else full[cursor:]
    return model_quality.Case(
        path=case.path,
        text="\n".join(lines),
        line=case.line,
        column=cursor,
        target=target.strip(),
        line_rest=full[cursor:].strip() if closed else "",
    )
