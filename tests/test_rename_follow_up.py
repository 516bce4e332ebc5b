"""Rename follow-up: after a rename, the next place still using the old name, with no model.
Real edits go through EditHistory as the server records them; the places come from tree-sitter
(Python, TypeScript, Go) or the line check (a language without a grammar)."""

from __future__ import annotations

from memosight_lsp.next_edit.edit_history import EditHistory
from memosight_lsp.next_edit.predict import NextEditRequest, rename_follow_up_edit
from memosight_lsp.next_edit.rename_follow_up import FollowUp, follow_up, renamed

PY = """def mean(values):
    total = 0
    for value in values:
        total += value
    # total over count
    label = "total"
    print(f"{total} of {len(values)}")
    return total / len(values)


def other(total):
    return total
"""


class Buffer:
    """A document and its edit history, edited as an editor would."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.history = EditHistory()
        self.history.opened("u", text)

    def replace(self, start: int, end: int, new: str) -> None:
        self.text = self.text[:start] + new + self.text[end:]
        self.history.changed("u", self.text)

    def type(self, at: int, word: str) -> None:
        for i, char in enumerate(word):  # one keystroke at a time
            self.replace(at + i, at + i, char)

    def follow_up(self, cursor: int, language_id: str, path: str | None = None) -> FollowUp | None:
        edits = self.history.recent("u")
        return follow_up(self.text, cursor, edits, path=path, language_id=language_id)

    def apply(self, found: FollowUp) -> int:
        """Apply the proposed edit; the cursor after it."""
        place = found.next
        assert place is not None
        start, end, new = place
        self.replace(start, end, new)
        return start + len(new)


def rename_at(buffer: Buffer, needle: str, old: str, new: str) -> int:
    """Select `old` where `needle` starts and type `new` over it, key by key; the cursor after."""
    at = buffer.text.index(needle)
    buffer.replace(at, at + len(old), "")
    buffer.type(at, new)
    return at + len(new)


def proposed(buffer: Buffer, found: FollowUp | None) -> tuple[str, str, int]:
    """(old text, new text, line) of the proposed edit."""
    assert found is not None and found.next is not None
    start, end, new = found.next
    return buffer.text[start:end], new, buffer.text.count("\n", 0, start)


def test_a_local_renamed_at_its_definition_offers_its_next_use():
    buffer = Buffer(PY)
    cursor = rename_at(buffer, "total = 0", "total", "sum_all")
    found = buffer.follow_up(cursor, "python")
    assert proposed(buffer, found) == ("total", "sum_all", 3)


def test_uses_come_nearest_first_then_each_next_one_after_applying():
    buffer = Buffer(PY)
    cursor = rename_at(buffer, "total = 0", "total", "sum_all")
    lines = []
    for _ in range(3):
        found = buffer.follow_up(cursor, "python")
        lines.append(proposed(buffer, found)[2])
        cursor = buffer.apply(found)  # the applied edit is the buffer's last edit now
    assert lines == [3, 6, 7]  # line 4 is a comment, 5 a string; 6's f-string is code
    done = buffer.follow_up(cursor, "python")
    assert done is not None and done.next is None and "left only in" in (done.reason or "")
    assert "sum_all" in buffer.text.split("def other")[0]
    assert buffer.text.split("def other")[1] == "(total):\n    return total\n"  # other scope


def test_strings_comments_and_other_functions_keep_the_old_name():
    buffer = Buffer(PY)
    cursor = rename_at(buffer, "total = 0", "total", "sum_all")
    found = buffer.follow_up(cursor, "python")
    assert found is not None
    lines = sorted(buffer.text.count("\n", 0, at) for at in found.places)
    assert lines == [3, 6, 7]


def test_a_use_before_the_cursor_when_none_is_after():
    text = "def f(n):\n    count = n\n    return count\n"
    buffer = Buffer(text)
    cursor = rename_at(buffer, "count\n", "count", "size")  # the use renamed first
    found = buffer.follow_up(cursor, "python")
    assert proposed(buffer, found) == ("count", "size", 1)
    assert found is not None
    cursor = buffer.apply(found)
    done = buffer.follow_up(cursor, "python")
    assert done is not None and done.next is None and "rename done" in (done.reason or "")


def test_a_word_typed_on_at_the_end_of_a_name_renames_it():
    buffer = Buffer("def f(value):\n    return value + 1\n")
    at = buffer.text.index("value)") + len("value")
    buffer.type(at, "_new")
    found = buffer.follow_up(at + 4, "python")
    assert proposed(buffer, found) == ("value", "value_new", 1)


def test_a_name_erased_key_by_key_is_one_rename():
    buffer = Buffer(PY)
    at = buffer.text.index("total = 0") + len("total")
    for i in range(1, 3):  # backspace twice: `total` -> `tot`, two edits to EditHistory
        buffer.replace(at - i, at - i + 1, "")
    assert len(buffer.history.recent("u")) == 2
    found = buffer.follow_up(at - 2, "python")
    assert proposed(buffer, found) == ("total", "tot", 3)
    cursor = buffer.apply(found)
    buffer.replace(cursor - 1, cursor, "")  # then `tot` -> `to` at that use: the line's run of
    found = buffer.follow_up(cursor - 1, "python")  # edits made `total` into `to`
    assert found is not None and (found.rename.old, found.rename.new) == ("total", "to")


def test_an_edit_after_a_rename_on_its_line_is_not_a_rename():
    buffer = Buffer(PY)
    cursor = rename_at(buffer, "total = 0", "total", "sum_all")
    at = buffer.text.index("sum_all = 0") + len("sum_all = ")
    buffer.replace(at, at + 1, "1")  # `= 0` -> `= 1`: the last edits span two words
    assert buffer.follow_up(cursor, "python") is None


def test_an_edit_that_renames_no_identifier_is_left_to_the_model():
    buffer = Buffer(PY)
    at = buffer.text.index("total = 0") + len("total = ")
    buffer.replace(at, at + 1, "1.0")  # a number changed
    assert buffer.follow_up(at, "python") is None
    buffer = Buffer(PY)
    at = buffer.text.index("    return total /")
    buffer.replace(at, at, "    print(total)\n")  # a new line typed
    assert buffer.follow_up(at, "python") is None
    buffer = Buffer(PY)
    cursor = rename_at(buffer, 'total"', "total", "sum")  # a word in a string
    assert buffer.follow_up(cursor, "python") is None


def test_a_member_and_a_local_of_the_same_name_are_different_names():
    text = "def f(obj):\n    size = obj.size\n    return g(size=3) + size + obj.size\n"
    buffer = Buffer(text)
    cursor = rename_at(buffer, "size =", "size", "n")
    found = buffer.follow_up(cursor, "python")
    assert found is not None and len(found.places) == 1
    start, end, new = found.next or (0, 0, "")
    assert buffer.text[start - 1 : end] == " size" and new == "n"


def test_a_method_or_a_field_renamed_at_its_definition_offers_its_member_uses():
    text = (
        "class Cart:\n"
        "    total = 0\n"
        "\n"
        "    def add(self, n):\n"
        "        self.total += n\n"
        "        return self.add_all(n)\n"
        "\n"
        "    def add_all(self, n):\n"
        "        total = n\n"
        "        return total + self.total\n"
        "\n"
        "\n"
        "Cart().add_all(3)\n"
    )
    buffer = Buffer(text)
    cursor = rename_at(buffer, "total = 0", "total", "sum")
    found = buffer.follow_up(cursor, "python")
    assert found is not None  # the attribute: `self.total`, not the other method's local
    assert [buffer.text.count("\n", 0, at) for at in found.places] == [4, 9]
    found = buffer.follow_up(buffer.apply(found), "python")  # now a member renamed in a method
    assert found is not None
    assert [buffer.text.count("\n", 0, at) for at in found.places] == [9]
    buffer = Buffer(text)
    cursor = rename_at(buffer, "add_all(self", "add_all", "add_each")
    found = buffer.follow_up(cursor, "python")
    assert found is not None
    assert [buffer.text.count("\n", 0, at) for at in found.places] == [12, 5]


TS = """function total$(items: number[]): number {
  let $sum = 0; // $sum of items
  for (const item of items) {
    $sum += item;
  }
  console.log(`${$sum} items: $sum`);
  return $sum;
}
"""


def test_typescript_names_with_dollars_and_template_strings():
    buffer = Buffer(TS)
    cursor = rename_at(buffer, "$sum = 0", "$sum", "$acc")
    found = buffer.follow_up(cursor, "typescript")
    assert found is not None
    assert [buffer.text.count("\n", 0, at) for at in found.places] == [3, 5, 6]
    assert proposed(buffer, found) == ("$sum", "$acc", 3)


def test_in_typescript_a_dollar_is_part_of_the_name():
    buffer = Buffer(TS)
    at = buffer.text.index("$sum = 0") + 1
    buffer.replace(at, at + 3, "acc")  # `sum` after the `$` retyped: `$sum` -> `$acc`
    rename = renamed(buffer.text, buffer.history.recent("u"), "typescript")
    assert rename is not None and (rename.old, rename.new) == ("$sum", "$acc")
    rename = renamed(buffer.text, buffer.history.recent("u"), "python")
    assert rename is not None and (rename.old, rename.new) == ("sum", "acc")


GO = """package stats

func Mean(xs []float64) float64 {
	total := 0.0
	for _, x := range xs {
		total += x
	}
	return total / float64(len(xs))
}

func Sum(xs []float64) (total float64) {
	for _, x := range xs {
		total += x
	}
	return total
}
"""


def test_go_a_local_is_renamed_in_its_function_only():
    buffer = Buffer(GO)
    cursor = rename_at(buffer, "total := 0.0", "total", "acc")
    found = buffer.follow_up(cursor, "go")
    assert found is not None
    assert [buffer.text.count("\n", 0, at) for at in found.places] == [5, 7]


def test_go_a_function_renamed_at_its_definition_offers_its_calls():
    text = GO + "\nfunc Report(xs []float64) float64 {\n\treturn Mean(xs) // Mean of xs\n}\n"
    buffer = Buffer(text)
    cursor = rename_at(buffer, "Mean(xs []", "Mean", "Average")
    found = buffer.follow_up(cursor, "go")
    assert proposed(buffer, found)[1:] == ("Average", 18)
    assert found is not None and len(found.places) == 1  # not the comment


def test_without_a_grammar_the_line_check_skips_comments_and_strings():
    text = "def mean(xs)\n  total = 0\n  # total\n  puts 'total'\n  total / xs.size\nend\n"
    buffer = Buffer(text)
    cursor = rename_at(buffer, "total = 0", "total", "sum")
    found = buffer.follow_up(cursor, "ruby", path="mean.rb")
    assert found is not None
    assert [buffer.text.count("\n", 0, at) for at in found.places] == [4]


def test_a_unicode_name_is_one_word():
    buffer = Buffer("größe = 1\nprint(größe, größe_alt)\n")
    cursor = rename_at(buffer, "größe =", "größe", "maß")
    found = buffer.follow_up(cursor, "python")
    assert found is not None and len(found.places) == 1
    assert proposed(buffer, found) == ("größe", "maß", 1)


def test_the_request_answer_is_marked_as_a_rename_and_needs_no_model():
    buffer = Buffer(PY)
    cursor = rename_at(buffer, "total = 0", "total", "sum_all")
    request = NextEditRequest(
        text=buffer.text,
        cursor_line=1,
        cursor=cursor,
        edits=tuple(buffer.history.recent("u")),
        language_id="python",
    )
    result = rename_follow_up_edit(request)
    assert result is not None and result.source == "rename"
    (hunk,) = result.hunks
    assert buffer.text[hunk.start : hunk.end] == "total" and hunk.new_text == "sum_all"
    assert result.describe() == {"rename": {"old": "total", "new": "sum_all", "remaining": 3}}
