"""Post-processing, the multi-line policy, token healing and positions: pure text logic."""

from __future__ import annotations

import pytest
from tiny_models import tiny_tokenizer

from memosight_lsp.context import build_context
from memosight_lsp.pipeline.healing import HealingConstraint, VocabularyText, healing_split
from memosight_lsp.pipeline.policy import describe_cursor, wants_multiline
from memosight_lsp.pipeline.positions import index_to_utf16, split_at, utf16_to_index
from memosight_lsp.pipeline.postprocess import finish, should_stop, through_rest
from memosight_lsp.pipeline.prompt import build_prompt


def situation(before: str, after: str = ""):
    return describe_cursor(before, after)


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        ("def f(x):", "", True),  # end of a block header
        ("def f(x):\n    ", "", True),  # empty body
        ("    x = foo(", ")", False),  # mid-expression with code after the cursor
        ("    x = 1\n    ", "", False),  # next statement in a body
        ("    return x +", "", False),
        ("class A:\n", "", True),
    ],
)
def test_multiline_policy(before, after, expected):
    assert wants_multiline(situation(before, after), "auto") is expected


def test_multiline_overrides():
    s = situation("    x = 1", "")
    assert wants_multiline(s, "always") and not wants_multiline(situation("def f():"), "never")


def test_block_stops_at_dedent():
    s = situation("def f(x):\n    ")
    raw = "y = x + 1\n    return y\n\ndef g():\n    pass\n"
    assert should_stop(raw, s, multiline=True)
    assert finish(raw, s, multiline=True) == "y = x + 1\n    return y"


def test_header_line_completion_keeps_the_body():
    s = situation("    def area(self):")
    raw = "\n        return self.w * self.h\n    def next(self):"
    assert finish(raw, s, multiline=True) == "\n        return self.w * self.h"


def test_single_line_cut_and_suffix_overlap():
    s = situation("    total = compute(a, ", ")")
    assert finish("b)\n    return total", s, multiline=False) == "b"


def test_unmatched_closer_is_cut():
    s = situation("    x = value")
    assert finish(" + 1) * 2", s, multiline=False) == " + 1"


@pytest.mark.parametrize(
    ("before", "after", "language", "closes"),
    [
        ("    append(", ");", "java", True),  # an editor's auto-closed pair
        ("    f(", "bar)", "python", True),  # typed in front of an argument
        ("    f(g(", "))", "python", True),
        ('    print("(', '")', "python", True),  # the `(` in the string is text
        ("    f(", "", "python", False),  # nothing after the cursor
        ("    f(a) + ", "", "python", False),  # nothing open at the cursor
        ("    x = [", ")", "python", False),  # closes another bracket
        ("    f(", ")  # (", "python", True),
        ("    f(  // (", ")", "cpp", False),  # the cursor is in a comment
    ],
)
def test_the_code_after_the_cursor_may_close_the_bracket_open_at_it(
    before, after, language, closes
):
    assert describe_cursor(before, after, language=language).suffix_closes_bracket is closes


@pytest.mark.parametrize(
    ("before", "after", "language", "raw", "expected"),
    [
        # cobra's tests: the editor's `)` follows; the model's `) {` would close it twice.
        ("func TestNormPassedOnLocal(", ")", "go", "t *testing.T) {", "t *testing.T"),
        # semver's tests: `));` where the line ends with the editor's `)`.
        ("    assert!(", ")", "rust", 'v("1.2.0") <= v("1.2.3"));', 'v("1.2.0") <= v("1.2.3")'),
        ("    f(g(", ")", "python", "x), y)", "x"),
        # Without the code after the cursor the same text closes what it opened.
        ("    f(g(", "", "python", "x), y)", "x), y)"),
        ("    f(", ")", "python", "g(x), y", "g(x), y"),  # its own brackets close
        # The model wrote the line's call again (zod's tests, commons-csv, jansson): what it
        # meant to follow the code before the cursor is the rest.
        ("  const aot = compile(", ")", "typescript", "compile(z.tuple([]));", "z.tuple([])"),
        (
            "    append(",
            ");",
            "java",
            "append(getDelimiterString(), out);",
            "getDelimiterString(), out",
        ),
        ("    free(", ");", "c", "free(data), data = NULL);", "data"),
        ("        t.Erro", "", "go", 'Errorf("got %v", err)', 'rf("got %v", err)'),
        # A tail shorter than RESTART_MIN_CHARS is a word token healing finishes.
        ("    x = f(", ")", "python", "f(1)", "f(1)"),
        ("    if e", "", "go", "err != nil {", "err != nil {"),
    ],
)
def test_a_line_ends_at_the_bracket_the_code_after_the_cursor_closes(
    before, after, language, raw, expected
):
    s = describe_cursor(before, after, language=language)
    assert finish(raw, s, multiline=False) == expected


@pytest.mark.parametrize(
    ("before", "after", "language", "raw", "line"),
    [
        # cobra's tests: the line through the editor's `)` (it replaces that `)`).
        ("func TestNormPassedOnLocal(", ")", "go", "t *testing.T) {", "t *testing.T) {"),
        # semver's tests: the statement's `;` after the editor's `)`.
        ("    assert!(", ")", "rust", 'v("1.2.0") <= v("1.2.3"));', 'v("1.2.0") <= v("1.2.3"));'),
        ("    if (", ")", "c", "n == f(x)) {\n", "n == f(x)) {"),
        ("    f(g(", "))", "python", "x)) + 1", "x)) + 1"),
        ("    foo(", ")", "c", ") {", ") {"),  # no arguments: the rest of the line still counts
        ("    free(", ");", "c", "data); // freed", "data); // freed"),
        # Nothing past the code after the cursor: `finish` already gives the line (`data`).
        ("    free(", ");", "c", "data);", None),
        # What follows the bracket is not the code after the cursor.
        ("    foo(", ", y)", "c", "x, y);", None),
        ("    foo(", ")", "c", "x]) {", None),
        # The code after the cursor again later on the line: a client could not find it.
        ("    foo(", ")", "c", "a) + g(b)", None),
        # Trailing blanks after the cursor: the line does not hold them.
        ("    foo(", ")  ", "c", "a) {", None),
        # No bracket open at the cursor that the code after it closes, or a block answer.
        ("    x = ", "y;", "c", "1 + y;", None),
    ],
)
def test_a_line_through_the_code_after_the_cursor_replaces_it(before, after, language, raw, line):
    s = describe_cursor(before, after, language=language)
    assert through_rest(raw, s, multiline=False) == line
    assert through_rest(raw, s, multiline=True) is None


def test_decoding_goes_on_through_the_code_after_the_cursor_and_stops_where_it_differs():
    s = describe_cursor("func TestNormPassedOnLocal(", ")", language="go")
    assert not should_stop("t *testing", s, multiline=False)
    assert not should_stop("t *testing.T", s, multiline=False)
    assert not should_stop("t *testing.T)", s, multiline=False)  # may go on through the `)`
    assert not should_stop("t *testing.T) {", s, multiline=False)
    assert should_stop("t *testing.T) {\n", s, multiline=False)  # the line is done
    assert not should_stop("f(t)", s, multiline=False)  # its own bracket
    call = describe_cursor("    foo(", ", y);", language="c")
    assert not should_stop("x, y", call, multiline=False)
    assert should_stop("x, y)", call, multiline=False)  # `)` is not `, y);`: the line ends
    # Nothing after the cursor: the line goes on to its end.
    open_line = describe_cursor("func TestNormPassedOnLocal(", "", language="go")
    assert not should_stop("t *testing.T) {", open_line, multiline=False)
    assert should_stop("t *testing.T) {\n", open_line, multiline=False)


STATIC_ASSERT = """struct sax {
    static_assert(has_start_array<SAX>::value,
                  "Missing/invalid function: bool start_object(std::size_t)");
    static_assert(has_end_array<SAX>::value,
                  """


@pytest.mark.parametrize(
    ("after", "expected"),
    [
        # Nothing after the cursor closes `static_assert(`: the line ends the call.
        ("\n    int depth = 0;\n};\n", '"Missing/invalid function: bool end_array()");'),
        # The closer is the editor's already, on the next line or after the cursor.
        ("\n                  );\n};\n", '"Missing/invalid function: bool end_array()"'),
        (");", '"Missing/invalid function: bool end_array()"'),
        # A closer further down that is not its own (a `}`) leaves the `(` to this line.
        ("\n    void f() { g(1); }\n};", '"Missing/invalid function: bool end_array()");'),
    ],
)
def test_a_line_may_close_the_bracket_the_lines_above_left_open(after, expected):
    s = situation(STATIC_ASSERT, after)
    raw = '"Missing/invalid function: bool end_array()");\n    static_assert('
    assert finish(raw, s, multiline=False) == expected


def test_every_bracket_the_lines_above_left_open_may_close_in_order():
    # toml11's get.hpp: three calls opened on the line above, the first closed mid-line.
    before = (
        "    if (idx >= ar.size()) {\n"
        "        throw std::out_of_range(detail::format_underline(concat_to_string(\n"
        "            "
    )
    s = situation(before, "\n    }\n    return ar.at(idx);\n")
    assert s.line_may_close == ")))"
    raw = '"index ", idx, " is out of range"), {{v.location(), "in this array"}}));'
    assert finish(raw, s, multiline=False) == raw
    # With the editor's `));` on the next line, the two outer ones are its, not the line's.
    closed = situation(before, "\n        ));\n    }\n")
    assert closed.line_may_close == ")"
    assert finish(raw, closed, multiline=False) == raw[: raw.index("));")]


def test_the_closers_below_are_read_a_bounded_way_down():
    before = "namespace json {\nstruct sax {\n    static_assert(is_sax<S>::value,\n        "
    # The struct's `}` within reach, the namespace's 60 lines further: the `(` is the line's.
    far = situation(before, "\n};\n" + "int y;\n" * 60 + "}\n")
    assert far.line_may_close == ")"
    # Nothing within reach that closes anything: no closer is kept.
    nothing = situation(before, "\n" + "int y;\n" * 60 + "};\n}\n")
    assert nothing.line_may_close == ""


def test_only_one_closer_of_the_lines_above_stays():
    s = situation("    total = compute(a,\n        b,\n        ", "\nprint(total)\n")
    assert s.line_may_close == ")"
    assert finish("c)) + 1", s, multiline=False) == "c)"
    # Its own brackets first: `f(c)` closes the line's, then the call's `)` may follow.
    own = situation("    total = compute(a,\n        f(", "\nprint(total)\n")
    assert finish("c))]", own, multiline=False) == "c))"
    # Brackets in strings and comments do not count.
    quoted = situation('    x = 1  # (see below\n    s = "(("\n    ', "\n")
    assert quoted.line_may_close == ""


def test_a_python_statement_below_means_the_line_closes_what_is_open():
    # toolz's test_itertoolz.py: the dict's last line; the file goes on for hundreds of lines.
    before = (
        "    assert groupby([0, 0], [(1, 2), (2, 4)]) == \\\n"
        "        {(1, 1): [(1, 2), (1, 3)],\n"
        "         "
    )
    after = "\n\n\ndef test_merge_sorted():\n" + "    assert f([1, 2]) == [1, 2]\n" * 60
    s = describe_cursor(before, after, language="python")
    assert s.line_may_close == "}"
    assert finish("(2, 2): [(2, 2), (2, 4)]}", s, multiline=False) == "(2, 2): [(2, 2), (2, 4)]}"
    # A comprehension's `for` line is no statement: the scan goes on (and finds nothing).
    inside = describe_cursor(before, "\n    for x in y\n" + "    z = [1]\n" * 60, language="python")
    assert inside.line_may_close == ""
    # Without the language the scan cannot tell: as few closers as it can.
    assert describe_cursor(before, after).line_may_close == ""


def test_indentation_is_not_doubled_after_an_indented_cursor():
    s = situation("def f(x):\n    ")
    assert finish("       return x\n", s, multiline=True) == "return x"


def test_repetition_and_whitespace_only():
    s = situation("def f():\n    ")
    assert finish("x = 1\n    x = 1\n    x = 1\n    x = 1", s, True) == "x = 1"
    assert finish("   \n  ", s, True) == ""


def test_mid_word_detection():
    assert situation("    val", "ue = 1").mid_word
    assert not situation("    value", " = 1").mid_word


@pytest.mark.parametrize(
    ("prefix", "kept", "healed"),
    [
        ("x = TypeErr", "x =", " TypeErr"),
        ("foo.", "foo.", ""),
        ("    ", "   ", " "),
        ("a\n", "a\n", ""),
    ],
)
def test_healing_split(prefix, kept, healed):
    assert healing_split(prefix) == (kept, healed)


def test_healing_constraint_spells_out_the_backed_off_text():
    tokenizer = tiny_tokenizer()
    vocab = VocabularyText(tokenizer)
    constraint = HealingConstraint(" return", vocab, tokenizer)
    first = constraint([])
    assert first
    for token_id in first:
        piece = tokenizer.decode([token_id])
        assert piece.startswith(" return") or " return".startswith(piece)
    full = tokenizer.encode(" return", add_special_tokens=False)
    assert constraint(full) is None  # covered: free generation


def test_utf16_positions():
    line = "s = '😀x'"
    assert utf16_to_index(line, 5) == 5  # the emoji starts at unit 5 and takes two units
    assert utf16_to_index(line, 7) == 6
    assert utf16_to_index(line, 99) == len(line)
    assert index_to_utf16(line, 6) == 7
    assert split_at("ab\ncd", 1, 1) == ("ab\nc", "d")
    assert split_at("ab", 5, 9) == ("ab", "")


def test_context_without_index_keeps_nearest_lines_within_budget():
    lines = [f"line{i}" for i in range(100)] + ["x = "] + [f"after{i}" for i in range(100)]

    def count(s: str) -> int:
        return len(s.split())

    packed = build_context(
        text="\n".join(lines),
        path=None,
        line=100,
        column=4,
        language_id=None,
        budget_tokens=40,
        count_tokens=count,
    )
    assert packed.prefix.endswith("line99\nx = ")
    assert packed.suffix.startswith("\nafter0")
    assert count(packed.prefix) + count(packed.suffix) <= 40
    prompt = build_prompt(packed, None, heal=False)
    assert prompt.text == packed.prefix and prompt.context is packed


def test_a_line_that_repeats_the_code_below_is_dropped():
    """On a blank line, the model writing the next line's code again (it skipped the line the
    person is about to write) is no suggestion; elsewhere, and for closers, nothing changes."""
    s = situation("def f(items):\n    total = 0\n    ", "\n    return total\n")
    assert finish("return total\n", s, multiline=False) == ""
    assert finish("\n    return total", s, multiline=False) == ""  # after a blank line first
    assert finish("for item in items:\n        total += item", s, multiline=True) != ""
    assert finish("return total + 1", s, multiline=False) == "return total + 1"
    closers = situation("if (a) {\n  if (b) {\n    run();\n  ", "\n}\n")
    assert finish("}", closers, multiline=False) == "}"  # a block's end after another's
    mid_line = situation("    x = ", "\n    return total\n")  # not a blank line
    assert finish("total", mid_line, multiline=False) == "total"
