"""Post-processing in brace languages, on real code (cobra, immer, itertools, commons-csv,
nlohmann/json): a block after `{` ends at the brace that closes it, whatever the indentation
(tabs, two spaces, Allman braces); the closing line is kept only when nothing after the cursor
closes the block already; a closer that starts a line (`} else {`) is code; generated files and
data lines are not completed at all."""

from __future__ import annotations

import time

import pytest

from memosight_lsp.pipeline.open_brackets import open_brackets
from memosight_lsp.pipeline.policy import describe_cursor, indent_unit, wants_multiline
from memosight_lsp.pipeline.postprocess import finish, should_stop
from memosight_lsp.pipeline.request import CompletionRequest, plan_cursor

# cobra/command.go (gofmt: tabs)
GO_PREFIX = (
    'package cobra\n\nimport "strings"\n\n'
    "// Name returns the command's name: the first word in the use line.\n"
    "func (c *Command) Name() string {"
)
GO_RAW = (
    '\n\tname := c.Use\n\ti := strings.Index(name, " ")\n\tif i >= 0 {\n\t\tname = name[:i]\n'
    "\t}\n\treturn name\n}\n\n// HasAlias determines if a given string is an alias of the "
    "command.\nfunc (c *Command) HasAlias(s string) bool {\n"
)
GO_BODY = (
    '\n\tname := c.Use\n\ti := strings.Index(name, " ")\n\tif i >= 0 {\n\t\tname = name[:i]\n'
    "\t}\n\treturn name"
)
# immer/src/core/current.ts, re-indented with two spaces as many TypeScript projects are
TS_PREFIX = (
    "export function current<T>(value: T): T\n"
    "export function current(value: any): any {\n"
    "  if (!isDraft(value)) die(10, value)\n"
    "  return currentImpl(value)\n"
    "}\n\n"
    "function currentImpl(value: any): any {"
)
TS_RAW = (
    "\n  if (!isDraftable(value) || isFrozen(value)) return value\n"
    "  const state: ImmerState | undefined = value[DRAFT_STATE]\n"
    "  return copy\n}\n\nexport function other() {\n"
)
# itertools/src/adaptors/mod.rs (rustfmt before 1.0: `{` on its own line after `where`)
RUST_PREFIX = (
    "pub fn interleave<I, J>(i: I, j: J) -> Interleave<I::IntoIter, J::IntoIter>\n"
    "    where I: IntoIterator,\n"
    "          J: IntoIterator<Item = I::Item>\n"
    "{"
)
RUST_RAW = (
    "\n    Interleave {\n        a: i.into_iter().fuse(),\n        b: j.into_iter().fuse(),\n"
    "        flag: false,\n    }\n}\n\nimpl<I, J> Iterator for Interleave<I, J>\n"
)
# commons-csv CSVFormat.java
JAVA_PREFIX = (
    "public final class CSVFormat implements Serializable {\n\n"
    "    @Deprecated\n"
    "    public CSVFormat withQuote(final Character quoteChar) {"
)
JAVA_RAW = (
    "\n        return builder().setQuote(quoteChar).build();\n    }\n\n    /**\n"
    "     * Returns a new {@code CSVFormat} with the output quote policy\n"
)
# nlohmann/json.hpp (Allman braces)
CPP_PREFIX = (
    "    /// @brief checks whether the container is empty.\n    bool empty() const noexcept\n    {"
)
CPP_RAW = (
    "\n        switch (m_type)\n        {\n            case value_t::null:\n"
    "            {\n                return true;\n            }\n"
    "            default:\n            {\n                return false;\n            }\n"
    "        }\n    }\n\n    size_type size() const noexcept\n"
)
CPP_BODY = CPP_RAW.split("\n    }\n\n")[0]


@pytest.mark.parametrize(
    ("language", "prefix", "raw", "body", "closer"),
    [
        ("go", GO_PREFIX, GO_RAW, GO_BODY, "}"),
        ("typescript", TS_PREFIX, TS_RAW, TS_RAW.split("\n}\n")[0], "}"),
        ("rust", RUST_PREFIX, RUST_RAW, RUST_RAW.split("\n}\n")[0], "}"),
        ("java", JAVA_PREFIX, JAVA_RAW, JAVA_RAW.split("\n    }\n")[0], "    }"),
        ("cpp", CPP_PREFIX, CPP_RAW, CPP_BODY, "    }"),
    ],
)
def test_a_block_after_a_brace_ends_at_its_closing_brace(
    language: str, prefix: str, raw: str, body: str, closer: str
) -> None:
    # The editor closed the pair on the next line: the body alone, no second `}`.
    closed = describe_cursor(prefix, "\n" + closer + "\n", language=language)
    assert wants_multiline(closed, "auto")
    assert finish(raw, closed, multiline=True) == body
    # Nothing closes it after the cursor: the completion brings its own closing line.
    open_ = describe_cursor(prefix, "\n\n// more code\n", language=language)
    assert finish(raw, open_, multiline=True) == body + "\n" + closer
    # Decoding stops once the closing line is complete, not at the cap.
    assert should_stop(raw, open_, multiline=True)
    assert not should_stop(body, open_, multiline=True)


def test_tab_and_two_space_files_keep_their_indentation() -> None:
    go = describe_cursor(GO_PREFIX + "\n\tname := c.Use\n\t", "\n}\n", language="go")
    assert go.indent == "\t"
    ts = describe_cursor(TS_PREFIX, "\n}\n", language="typescript")
    assert ts.indent == "  "
    lines = TS_PREFIX.split("\n")
    assert indent_unit(lines) == "  " and indent_unit(GO_RAW.split("\n")) == "\t"
    assert indent_unit(JAVA_RAW.split("\n")) == "    " and indent_unit([]) == "    "
    # Tabs the model writes stay tabs.
    block = finish(GO_RAW, describe_cursor(GO_PREFIX, "\n}\n", language="go"), multiline=True)
    assert "\n\t\tname = name[:i]\n\t}" in block


def test_a_line_that_starts_by_closing_the_block_is_code() -> None:
    prefix = "func f(x bool) {\n\tif x {\n\t\ty()\n\t"
    s = describe_cursor(prefix, "\n\t\tz()\n\t}\n}\n", language="go")
    assert finish("} else {\n\t\tz()", s, multiline=False) == "} else {"
    ts = describe_cursor(
        "  return items.map(item => {\n    use(item)\n  ", "\n", language="typescript"
    )
    assert finish("})\n", ts, multiline=False) == "})"
    # Mid-line, a closer that closes nothing still ends the completion.
    call = describe_cursor("\tf := NewFlagSet(", ")", in_brackets=True, language="go")
    assert finish('"test", ContinueOnError))', call, multiline=False) == '"test", ContinueOnError'


def test_the_closing_text_after_the_cursor_is_never_repeated() -> None:
    s = describe_cursor("\tfmt.Println(", ");", in_brackets=True, language="go")
    assert finish('"done");', s, multiline=False) == '"done"'
    java = describe_cursor("        return builder().setQuote(", ").build();", language="java")
    assert finish("quoteChar).build();", java, multiline=False) == "quoteChar"


def test_brackets_in_strings_and_comments_do_not_close_the_block() -> None:
    raw = '\n\tfmt.Println("}")\n\t// a } in a comment\n\treturn nil\n}\n'
    s = describe_cursor("func f() error {", "\n", language="go")
    assert finish(raw, s, multiline=True) == raw.rstrip("\n")
    c = describe_cursor("int f(void) {", "\n}\n", language="c")
    body = "\n    /* } */ return 1;\n}\n"
    assert finish(body, c, multiline=True) == "\n    /* } */ return 1;"
    rust = describe_cursor("fn f<'a>(s: &'a str) -> &'a str {", "\n}\n", language="rust")
    assert (
        finish("\n    let c = '}';\n    s\n}\n", rust, multiline=True)
        == "\n    let c = '}';\n    s"
    )


def test_a_lines_brackets_in_strings_and_comments_close_nothing() -> None:
    # toml11's parser.hpp: a `}` inside the message, then the two that close the line's `{{`.
    above = "    throw syntax_error(format_underline(\n        "
    cpp = describe_cursor(above, "\n", language="cpp")
    line = '{{source_location(loc), "should be `}`"}}),'
    assert finish(line, cpp, multiline=False) == line
    quoted = describe_cursor("    if(", "\n", language="cpp")
    assert finish("*it == ']') {", quoted, multiline=False) == "*it == ']') {"
    # A bracket the prefix closed is not open: `f(a) + ` leaves nothing for a `)` to close.
    closed = describe_cursor("    x = f(a) + ", "\n", language="python")
    assert finish("g(b)) * 2", closed, multiline=False) == "g(b)"
    # The cursor in a string: the text goes on in it, its brackets are text.
    in_string = describe_cursor('    print("(', "\n", language="python")
    assert finish('see below") + 1', in_string, multiline=False) == 'see below") + 1'
    comment = describe_cursor("    let n = f(", "\n", language="rust")
    assert finish("x) /* ) */ + 1; // )", comment, multiline=False) == "x) /* ) */ + 1; // )"


@pytest.mark.parametrize(
    ("language", "line", "closers_left"),
    [
        ("typescript", "this.#count(", "("),  # a private name, not a comment
        ("c", "#define SQUARE(x", "("),  # a directive, not a comment
        ("python", "f(x  # (", "("),
        ("rust", "fn f<'a>(s: &'a str", "("),  # lifetimes are not quotes
        ("rust", "let c = '(';  g(", "("),
        ("go", "x := `(` + f(", "("),
        ("java", 's = "\\\\" + f(', "("),  # an escaped backslash ends before the quote
        (None, "f(x  # (", "("),  # language unknown: `#` and `//` both start comments
    ],
)
def test_brackets_are_read_by_each_languages_rules(
    language: str | None, line: str, closers_left: str
) -> None:
    assert open_brackets([], line, language)[1] == list(closers_left)


def request(text: str, line: int, column: int, path: str) -> CompletionRequest:
    return CompletionRequest(text=text, line=line, column=column, path=path)


def test_generated_files_are_not_completed() -> None:
    pb = (
        "// Code generated by protoc-gen-go. DO NOT EDIT.\n// source: api.proto\n\n"
        "package api\n\nfunc (x *Request) Reset() {\n\t\n}\n"
    )
    plan = plan_cursor(request(pb, 6, 1, "api.pb.go"))
    assert plan.refused is not None and "generated" in plan.refused
    rust = "// @generated by build.rs\npub const TABLE: &[u8] = &[\n    \n];\n"
    assert plan_cursor(request(rust, 2, 4, "table.rs")).refused is not None
    hand_written = "package cobra\n\nfunc f() {\n\t\n}\n" + "// x\n" * 600 + "// DO NOT EDIT\n"
    assert plan_cursor(request(hand_written, 3, 1, "f.go")).refused is None  # past the top


def test_a_data_line_is_refused_without_parsing_the_file() -> None:
    data = '{"rows": [' + ", ".join(f'{{"id": {i}, "name": "n{i}"}}' for i in range(200_000))
    text = data + "\n"
    started = time.perf_counter()
    plan = plan_cursor(request(text, 0, len(data) - 1, "rows.json"))
    assert plan.refused is not None and "characters" in plan.refused
    assert time.perf_counter() - started < 0.2  # nothing parsed, nothing split into lines
    code = "const x = 1\n" * 1000
    assert plan_cursor(request(code, 500, 0, "a.ts")).refused is None
