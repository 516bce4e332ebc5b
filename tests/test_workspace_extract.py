"""Outline extraction per language, with the real tree-sitter grammars."""

from __future__ import annotations

import pytest

from memosight_lsp.workspace import language_for, parse_source
from memosight_lsp.workspace.symbols import FileSymbols


def outline(path: str, source: str) -> FileSymbols:
    spec = language_for(path)
    assert spec is not None
    return parse_source(spec, path, source.encode())


def kinds(symbols: FileSymbols) -> dict[str, str]:
    return {d.qualname: d.kind for d in symbols.definitions}


def test_language_registry() -> None:
    assert language_for("a.py").name == "python"
    assert language_for("x.tsx").name == "tsx"
    assert language_for("x.h").name == "c"
    assert language_for("x.hpp").name == "cpp"
    assert language_for("whatever.txt", "typescriptreact").name == "tsx"
    assert language_for("file.unknown") is None
    assert language_for(None, "cobol") is None
    assert language_for("x.py").path_marker("pkg/x.py") == "# file: pkg/x.py\n"
    assert language_for("x.go").path_marker("x.go") == "// file: x.go\n"


PYTHON = '''import os.path
from ..pkg.mod import a, b as c
from . import sibling

LIMIT = 3


@decorator
def f(x, y=2,
      z=3) -> int:
    """Doc of f."""
    return helper(x) + os.path.join(y)


class C(Base):
    """C doc."""

    attr = 1

    def m(self, q):
        return self.n(q)
'''


def test_python_definitions_and_ranges() -> None:
    symbols = outline("m.py", PYTHON)
    assert kinds(symbols) == {
        "LIMIT": "constant",
        "f": "function",
        "C": "class",
        "C.attr": "constant",
        "C.m": "method",
    }
    f = next(d for d in symbols.definitions if d.name == "f")
    assert (f.start_line, f.sig_end_line, f.end_line) == (7, 9, 11)  # decorator .. header .. body
    assert (f.doc_start, f.doc_end) == (10, 10)
    assert f.signature == "@decorator def f(x, y=2, z=3) -> int:"
    assert "helper" in f.idents and "os" in f.idents and "f" not in f.idents
    m = next(d for d in symbols.definitions if d.name == "m")
    assert symbols.definitions[m.parent].name == "C"
    imports = [(i.module, i.name, i.alias) for i in symbols.imports]
    assert imports == [
        ("os.path", None, "os"),
        ("..pkg.mod", "a", "a"),
        ("..pkg.mod", "b", "c"),
        (".", "sibling", "sibling"),
    ]


@pytest.mark.parametrize(
    ("path", "source", "expected", "imports"),
    [
        (
            "a.ts",
            "import { foo as bar } from './util';\nimport * as ns from '../x';\n"
            "// leading\nexport function f(a: number): string { return '' }\n"
            "export const g = (x: number) => x + 1;\n"
            "export class K { m(x: number) { return 1 } }\n"
            "interface I { a: number }\ntype T = string;\nenum E { A }\n",
            {
                "f": "function",
                "g": "function",
                "K": "class",
                "K.m": "method",
                "I": "interface",
                "T": "type",
                "E": "enum",
            },
            [("./util", "foo", "bar"), ("../x", None, "ns")],
        ),
        (
            "a.js",
            "import def from './d.js';\nfunction f() {}\nclass A { go() {} }\nconst K = 3;\n",
            {"f": "function", "A": "class", "A.go": "method", "K": "constant"},
            [("./d.js", "default", "def")],
        ),
        (
            "a.go",
            'package main\nimport (\n  "fmt"\n  m "example.com/x/mathx"\n)\n'
            "// Add adds.\nfunc Add(a, b int) int { return a + b }\n"
            "func (s *S) Get() int { return 1 }\ntype S struct { x int }\n"
            "type I interface { Get() int }\nconst K = 1\n",
            {"Add": "function", "Get": "method", "S": "struct", "I": "interface", "K": "constant"},
            [("fmt", None, "fmt"), ("example.com/x/mathx", None, "m")],
        ),
        (
            "a.rs",
            "use crate::util::{helper, Other as O};\n/// doc\npub fn f(x: i32) -> i32 { x }\n"
            "struct S { a: i32 }\ntrait T { fn t(&self); }\nimpl T for S { fn t(&self) {} }\n"
            "const C: i32 = 1;\n",
            {
                "f": "function",
                "S": "impl",
                "T": "trait",
                "T.t": "method",
                "S.t": "method",
                "C": "constant",
            },  # the impl block shadows the struct in this dict
            [("crate::util", "helper", "helper"), ("crate::util", "Other", "O")],
        ),
        (
            "A.java",
            "package com.x;\nimport com.x.util.Helper;\n/** doc */\n"
            "public class A { static final int K = 1; public A() {} int m(int x) { return x; } }\n"
            "interface I { void f(); }\n",
            {
                "A": "class",
                "A.K": "constant",
                "A.A": "method",
                "A.m": "method",
                "I": "interface",
                "I.f": "method",
            },
            [("com.x.util", "Helper", "Helper")],
        ),
        (
            "a.c",
            '#include "util.h"\n#include <stdio.h>\n#define K 1\n/* doc */\n'
            "static int add(int a, int b) { return a + b; }\nstruct S { int a; };\n"
            "typedef struct { int b; } T;\nint proto(int x);\n",
            {"K": "constant", "add": "function", "S": "struct", "T": "struct", "proto": "function"},
            [("util.h", "*", None)],
        ),
        (
            "a.cpp",
            '#include "util.hpp"\nnamespace ns {\n'
            "class C : public B { public: int m(int x) { return x; } void decl(); };\n"
            "template <typename T> T id(T x) { return x; }\n}\n",
            {"C": "class", "C.m": "method", "C.decl": "method", "id": "function"},
            [("util.hpp", "*", None)],
        ),
    ],
)
def test_other_languages(path: str, source: str, expected: dict, imports: list) -> None:
    symbols = outline(path, source)
    assert kinds(symbols) == expected
    assert [(i.module, i.name, i.alias) for i in symbols.imports] == imports


def test_leading_comments_are_the_doc_of_c_like_languages() -> None:
    symbols = outline("a.go", "package p\n\n// Add adds.\n// Twice.\nfunc Add() {}\n")
    add = symbols.definitions[0]
    assert (add.doc_start, add.doc_end, add.start_line, add.first_line) == (2, 3, 4, 2)
    detached = outline("b.go", "package p\n// unrelated\n\nfunc Sub() {}\n").definitions[0]
    assert detached.doc_start == -1


def test_broken_code_still_yields_an_outline() -> None:
    symbols = outline(
        "x.py", "def ok(a):\n    return a\n\ndef broken(:\n    pass\nclass K:\n  x = (\n"
    )
    assert "ok" in kinds(symbols)


def test_python_imports_inside_functions_are_found() -> None:
    symbols = outline(
        "m.py", "import os\n\ndef f():\n    from .lazy import thing\n    return thing\n"
    )
    assert [(i.module, i.name, i.line) for i in symbols.imports] == [
        ("os", None, 0),
        (".lazy", "thing", 3),
    ]
