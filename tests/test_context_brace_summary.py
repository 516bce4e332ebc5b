"""The far part of a long prefix in the brace languages: blocks summarized by brace depth, so
a summary keeps balanced braces and never a body's first lines as a header's continuation."""

from __future__ import annotations

import re

import pytest

from memosight_lsp.context import build_context
from memosight_lsp.context.brace_summary import brace_levels, line_depths
from memosight_lsp.context.far_prefix import (
    compress_prefix,
    split_prefix,
    summarize_above,
    top_level_blocks,
)
from memosight_lsp.context.tokens import TokenCounter


def words(text: str) -> int:
    return len(text.split())


WORDS = TokenCounter(words)

GO_FUNC = """func TestOpen(t *testing.T) {
\tfs := NewMemMapFs()
\tif err != nil {
\t\tt.Fatal(err)
\t}
\tt.Run("read", func(t *testing.T) {
\t\tassertRead(t, fs)
\t})
}
"""

JAVA_CLASS = """public class Ledger {
    /** The rows read so far. */
    private final List<String> rows = new ArrayList<>();

    public Ledger(final Reader reader) throws IOException {
        for (String line : lines(reader)) {
            rows.add(line);
        }
    }

    @Override
    public String toString() { return String.join(",", rows); }
"""


def balanced(text: str) -> bool:
    return text.count("{") == text.count("}")


def test_a_go_function_steps_down_to_its_statements_then_to_its_header():
    full, statements, header, dropped = brace_levels(GO_FUNC, "go")
    assert full == GO_FUNC and dropped == ""
    # Depth <= 1: the function's own statements, each nested block's body dropped.
    assert statements == (
        "func TestOpen(t *testing.T) {\n\tfs := NewMemMapFs()\n\tif err != nil {\n\t}\n"
        '\tt.Run("read", func(t *testing.T) {\n\t})\n}\n'
    )
    assert header == "func TestOpen(t *testing.T) {\n}\n"  # not its body's first lines
    assert all(balanced(level) for level in (statements, header))


def test_a_java_class_keeps_its_members_headers_and_no_comments():
    levels = brace_levels(JAVA_CLASS, "java")
    members = levels[1]
    assert "public Ledger(final Reader reader) throws IOException {" in members
    assert "private final List<String> rows = new ArrayList<>();" in members
    assert '    public String toString() { return String.join(",", rows); }' in members
    assert "@Override" in members
    assert "rows.add(line);" not in members and "for (String line" not in members
    assert "The rows read so far" not in members  # a comment-only line costs tokens, names none
    assert levels[2] == "public class Ledger {\n"  # depth 0: the class's own header
    assert levels[-1] == ""


def test_braces_in_strings_and_comments_do_not_count():
    lines = [
        "int f(const char *s) {",  # depth 0 -> 1
        '    puts("{ not a block");  // nor { this',
        "    /* a comment { that spans",
        "       two lines } { */ char c = '{';",
        "}",
    ]
    depths = [depth for depth, _ in line_depths(lines, "c")]
    assert depths == [0, 1, 1, 1, 0]
    comments = [comment for _, comment in line_depths(lines, "c")]
    assert comments == [False, False, True, False, False]
    # A C dereference at a line's start is code, not a comment's `*`.
    assert line_depths(["*out = value;"], "c") == [(0, False)]


def test_a_c_functions_brace_on_its_own_line_stays_in_its_block():
    lines = ["#include <stdio.h>", "", "static int", "count(int n)", "{", "    return n;", "}"]
    starts = [lines[start] for start, _ in top_level_blocks(lines, "c")]
    assert "{" not in starts and "count(int n)" in starts
    # Python's rules are unchanged: a `{` line starts a statement of its own there.
    assert "{" in [lines[start] for start, _ in top_level_blocks(lines)]


def go_file(functions: int) -> str:
    body = "".join(
        f"func step{i}(value int) int {{\n\tif value > {i} {{\n\t\treturn value - {i}\n\t}}\n"
        f"\treturn value + {i}\n}}\n\n"
        for i in range(functions)
    )
    return "package ledger\n\n" + GO_FUNC + "\n" + body


@pytest.mark.parametrize("ratio", [3, 6])
def test_a_long_go_prefix_compresses_to_balanced_headers(ratio: int):
    prefix = go_file(60) + "func main() {\n\ttotal := step3(1)\n\t"
    budget = words(prefix) // ratio
    out = compress_prefix(prefix, budget, WORDS, language="go")
    assert words(out) <= budget
    assert out.endswith("func main() {\n\ttotal := step3(1)\n\t")
    _, far, _ = split_prefix(prefix.split("\n"), budget, WORDS, language="go")
    assert far and out.startswith(far)
    assert len(re.findall(r"^func (\w+)\(", far, flags=re.M)) >= 3
    assert balanced(far)  # every far function closed, none cut after its body's first lines
    assert "func step3(value int) int {\n\tif value > 3 {\n" in far  # the one called: whole


def test_a_go_block_defining_a_name_used_near_the_cursor_is_kept_whole():
    lines = go_file(12).split("\n")
    near = "\tresult := step7(total)\n\t"
    budget = words("\n".join(lines)) // 3
    far = summarize_above(lines, len(lines), near, budget, WORDS, language="go")
    assert words(far) <= budget
    assert "return value - 7" in far  # the function the cursor's line calls: whole
    assert "return value - 2" not in far  # another one: its header at most
    assert balanced(far)


def test_the_packer_compresses_a_go_file_by_brace_depth():
    # Long functions: whole, few fit; as Python's header rule read them, each kept a dozen
    # body lines after its `{`; by brace depth each is its header and closing brace.
    body = "".join(f"\ttotal += {i}\n" for i in range(30))
    functions = "".join(
        f"func step{i}(total int) int {{\n{body}\treturn total\n}}\n\n" for i in range(40)
    )
    text = "package ledger\n\n" + functions + "func main() {\n\tresult := step3(1)\n\t\n}\n"
    line = text.count("\n") - 2
    packed = build_context(
        text=text,
        path="ledger.go",
        line=line,
        column=1,
        language_id="go",
        count_tokens=words,
        budget_tokens=300,
    )
    far = next(s for s in packed.snippets if s.kind == "far").text
    assert far in packed.prefix
    headers = re.findall(r"^func step\d+\(total int\) int \{\n\}\n", far, flags=re.M)
    assert len(headers) >= 3
    assert far.count("total += 0\n") <= 1  # at most the function the cursor's line calls
