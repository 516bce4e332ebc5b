"""bench/edits.py's cases: the user's edit and the edit expected next, cut from real code."""

from __future__ import annotations

import ast

from memosight_lsp.bench.edits import applied, callsite_cases

SOURCE = """class Box:
    def put(self, key, value):
        self.items[key] = value

    def fill(self, pairs):
        for key, value in pairs:
            self.put(key, value)


def area(width, height):
    return width * height


print(area(2, 3))
"""


def test_a_removed_parameter_expects_its_argument_removed_at_the_nearest_call():
    cases = list(callsite_cases("box.py", SOURCE, ast.parse(SOURCE)))
    assert len(cases) == 2
    (method,) = [c for c in cases if "def put(self, key):" in c.after]
    (function,) = [c for c in cases if "def area(width):" in c.after]
    assert "def put(self, key):" in method.after  # the user's edit
    assert "self.put(key)" in applied(method.after, method.expected)
    assert "def area(width):" in function.after
    assert applied(function.after, function.expected).endswith("print(area(2))\n")
    # The cursor is where the parameter was taken out, on the definition's line.
    assert function.after.splitlines()[function.cursor_line] == "def area(width):"
