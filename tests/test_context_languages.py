"""Context per language on real projects (bench/corpora.py): a name used at the cursor brings
its definition when it is in scope through a TypeScript barrel file's re-exports (`export *
from`), a Rust crate's own name in its tests (`use itertools::x`), or, in Go and Java, the
package, which is every file of the folder (no import); and Packing.gate packs other files'
code only where it pays (tests/test_context_gate.py: each language's rule)."""

from __future__ import annotations

from pathlib import Path

import pytest

from memosight_lsp.bench import context_recall, corpora
from memosight_lsp.context import Packing, build_context
from memosight_lsp.workspace import WorkspaceIndex


def project_index(name: str, tmp_path: Path) -> WorkspaceIndex:
    (project,) = [p for p in corpora.PROJECTS if p.name == name]
    try:
        root = corpora.fetch(project)
    except corpora.CorpusError as err:  # offline and not cached: nothing to measure on
        pytest.skip(str(err))
    index = WorkspaceIndex(root, cache_dir=tmp_path)
    index.scan()
    return index


def chars(text: str) -> int:
    return (len(text) + 3) // 4


@pytest.mark.parametrize(
    ("project", "rel", "line", "language", "name", "defined_in"),
    [
        # immer core/proxy.ts: `die(13)`, imported from "../internal", a barrel file of
        # `export * from "./utils/errors"` lines: the re-export leads to the definition.
        ("immer", "core/proxy.ts", 224, "typescript", "die", "utils/errors.ts"),
        # mobx api/computed.ts: `if (!isFunction(arg1)) {` through the same kind of barrel
        ("mobx", "api/computed.ts", 55, "typescript", "isFunction", "utils/utils.ts"),
        # itertools tests/quick.rs: `multizip(...)` after `use itertools::{multizip, ...}`: a
        # crate's tests name it as an outside crate would; lib.rs re-exports crate::ziptuple's
        ("itertools", "tests/quick.rs", 1581, "rust", "multizip", "src/ziptuple.rs"),
        # cobra/command_test.go: `Args: ExactArgs(2),` (ExactArgs is in args.go, no import)
        ("cobra", "command_test.go", 311, "go", "ExactArgs", "args.go"),
        # spdlog async.h: `details::registry::instance().set_tp(...)`, a class of a C++
        # header named .h (read as C, its classes would be lost)
        ("spdlog", "async.h", 79, "cpp", "registry", "details/registry.h"),
        # commons-csv CSVFormat.java: `return new CSVPrinter(System.out, this);`
        (
            "commons-csv",
            "org/apache/commons/csv/CSVFormat.java",
            1856,
            "java",
            "CSVPrinter",
            "org/apache/commons/csv/CSVPrinter.java",
        ),
    ],
)
def test_a_name_in_scope_brings_its_definition(
    tmp_path: Path, project: str, rel: str, line: int, language: str, name: str, defined_in: str
) -> None:
    index = project_index(project, tmp_path)
    original = index.abspath(rel).read_text(encoding="utf-8")
    assert name in original.split("\n")[line]
    # The cursor right after the name's first use on the line, as when it was just typed.
    row = original.split("\n")[line]
    column = row.index(name) + len(name)
    context = build_context(
        text=original,
        path=str(index.abspath(rel)),
        line=line,
        column=column,
        language_id=language,
        budget_tokens=1024,
        count_tokens=chars,
        index=index,
        packing=Packing(),
    )
    found = [s for s in context.snippets if s.path == defined_in and s.symbol]
    assert any(s.symbol.split(".")[-1] == name for s in found), [s.symbol for s in found]


def test_the_gate_packs_other_files_only_where_it_pays(tmp_path: Path) -> None:
    index = project_index("cobra", tmp_path)
    rel = "command_test.go"
    original = index.abspath(rel).read_text(encoding="utf-8")
    # The names rule, named: Go's own rule leaves it out (pack.GATE_RULES).
    gated = Packing(cross_share=0.35, similar=4, gate=True, gate_names=True, gate_similarity=0.5)
    always = Packing(cross_share=0.35, similar=4)
    go_default = Packing(cross_share=0.35, similar=4, gate=True)

    def cross(line: int, column: int, text: str, packing: Packing) -> int:
        return build_context(
            text=text,
            path=str(index.abspath(rel)),
            line=line,
            column=column,
            language_id="go",
            budget_tokens=1024,
            count_tokens=chars,
            index=index,
            packing=packing,
        ).cross_chars

    # At `Args: ExactArgs(` the line names what args.go defines: other files' code comes.
    row = original.split("\n")[311]
    column = row.index("ExactArgs") + len("ExactArgs(")
    assert cross(311, column, original, gated) > 0
    # Go's own rule: a name of the package is no reason, and nothing elsewhere is this alike.
    assert cross(311, column, original, go_default) == 0
    # `return c.ctx` in a method of command.go that names nothing of another file (the line
    # above is its own header), with nothing like it elsewhere: the file alone, where the
    # ungated packing spends its share anyway.
    text, column = context_recall.cut_line(original_of(index, "command.go"), 256)
    assert text.split("\n")[255].strip() == "func (c *Command) Context() context.Context {"
    path = str(index.abspath("command.go"))

    def packed(packing: Packing) -> int:
        return build_context(
            text=text,
            path=path,
            line=256,
            column=column,
            language_id="go",
            budget_tokens=1024,
            count_tokens=chars,
            index=index,
            packing=packing,
        ).cross_chars

    assert packed(always) > 0
    assert packed(gated) == 0


def original_of(index: WorkspaceIndex, rel: str) -> str:
    return index.abspath(rel).read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("project", "rel", "language"),
    [
        ("spdlog", "logger.h", "cpp"),
        ("spdlog", "details/registry.h", "cpp"),
        ("stb", "stb_image.h", "c"),
    ],
)
def test_a_header_is_c_or_cpp_by_its_text(tmp_path: Path, project: str, rel: str, language: str):
    index = project_index(project, tmp_path)
    assert index.language(rel).name == language
    opened = index.abspath(rel).read_text(encoding="utf-8", errors="replace")
    assert index.symbols_for_text(str(index.abspath(rel)), opened, "c").language == language
