"""The multi-line decision asks tree-sitter whether the cursor is in a string, comment or
expression: cases that end like a block header but are not one."""

from __future__ import annotations

import pytest

from memosight_lsp.pipeline.policy import describe_cursor, wants_multiline
from memosight_lsp.pipeline.syntax import inside_expression


@pytest.mark.parametrize(
    ("before", "after", "inside"),
    [
        ('x = {"key":', "}", True),  # a dictionary, not a block
        ('x = {"key":', "", True),  # unclosed: the line fallback
        ('s = "usage:', '"', True),
        ('s = "usage:', "", True),
        ("# Example:", "", True),
        ("x = foo(a, ", ")", True),
        ("def f(x):", "", False),
        ("def f(x):\n    ", "", False),
        ("x = [", "\n]", False),  # right after the opener: the body of the list
        ("class A:\n    def g(self):", "\n", False),
        ("    if x > 1:", "\n        pass\n", False),
    ],
)
def test_python(before, after, inside):
    assert inside_expression(before, after, path="a.py", language_id=None) is inside


def test_other_grammars_and_unknown_languages():
    assert inside_expression("const o = {a:", "}", path=None, language_id="javascript") is True
    assert inside_expression("function f() {", "", path="a.js", language_id=None) is False
    assert inside_expression("x = 1", "", path="notes.txt", language_id=None) is None


def test_a_dictionary_value_gets_one_line_a_header_a_block():
    dict_value = describe_cursor('x = {"key":', "}", in_expression=True)
    header = describe_cursor("def f(x):", "", in_expression=False)
    assert not wants_multiline(dict_value, "auto")
    assert wants_multiline(header, "auto")
    assert wants_multiline(dict_value, "always")
