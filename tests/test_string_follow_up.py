"""String follow-up: after a string constant was changed, the next literal of the same scope still
holding it, with no model. Real edits go through EditHistory as the server records them; the
literals come from tree-sitter (Python, TypeScript, Go)."""

from __future__ import annotations

from test_rename_follow_up import Buffer

from memosight_lsp.next_edit.predict import (
    NextEditRequest,
    rename_follow_up_edit,
    string_follow_up_edit,
)
from memosight_lsp.next_edit.string_follow_up import follow_up

PY = """def load(data):
    if "name" in data:
        value = data["name"]
    label = 'name'
    note = "name of it"
    key = b"name"
    text = f"{name}"
    return data.get("name", value)


def other(data):
    return data["name"]
"""


def change_at(buffer: Buffer, needle: str, old: str, new: str) -> int:
    """Select `old` where `needle` starts and type `new` over it, a key at a time; the cursor
    after."""
    at = buffer.text.index(needle)
    buffer.replace(at, at + len(old), "")
    buffer.type(at, new)
    return at + len(new)


def proposed(buffer: Buffer, cursor: int, language_id: str = "python", path: str = "m.py"):
    found = follow_up(buffer.text, cursor, buffer.history.recent("u"), path=path,
                      language_id=language_id)  # fmt: skip
    if found is None or found.next is None:
        return None
    start, end, new = found.next
    line = buffer.text.count("\n", 0, start)
    return line, buffer.text[start:end], new


def test_a_constant_changed_offers_its_next_use_in_the_function():
    buffer = Buffer(PY)
    cursor = change_at(buffer, 'name" in data', "name", "key")
    # Line 2 next: `data["name"]`; the other quotes count (line 3), the longer string, the bytes,
    # the f-string and the other function do not.
    assert proposed(buffer, cursor) == (2, "name", "key")
    found = follow_up(buffer.text, cursor, buffer.history.recent("u"), path="m.py")
    assert found is not None and len(found.places) == 3
    assert found.describe() == {"old": '"name"', "new": '"key"', "remaining": 3}


def test_each_next_use_in_turn_after_applying():
    buffer = Buffer(PY)
    cursor = change_at(buffer, 'name" in data', "name", "key")
    seen = []
    while found := follow_up(buffer.text, cursor, buffer.history.recent("u"), path="m.py"):
        assert found.next is not None
        start, end, new = found.next
        seen.append((buffer.text.count("\n", 0, start), buffer.text[start:end], new))
        buffer.replace(start, end, new)
        cursor = start + len(new)
    assert seen == [(2, "name", "key"), (3, "name", "key"), (7, "name", "key")]
    assert buffer.text.count('"key"') + buffer.text.count("'key'") == 4
    assert 'data["name"]' in buffer.text  # other()'s


def test_a_part_of_a_constant_changed_is_cut_to_what_differs():
    buffer = Buffer(PY)
    cursor = change_at(buffer, 'name" in data', "name", "name_new")
    assert proposed(buffer, cursor) == (2, "", "_new")


def test_a_use_before_the_cursor_when_none_is_after():
    buffer = Buffer(PY)
    cursor = change_at(buffer, 'name", value)', "name", "id")
    assert proposed(buffer, cursor) == (3, "name", "id")  # nearest before it first


def test_a_constant_used_once_or_a_changed_quote_is_left_to_the_model():
    buffer = Buffer(PY)
    change_at(buffer, "name of it", "name", "names")
    assert follow_up(buffer.text, 0, buffer.history.recent("u"), path="m.py") is None
    quoted = Buffer(PY)
    at = quoted.text.index("'name'")
    quoted.replace(at, at + 1, '"')  # the quote, not the text between
    assert follow_up(quoted.text, at, quoted.history.recent("u"), path="m.py") is None
    code = Buffer(PY)
    change_at(code, "value = ", "value", "v")  # not in a string
    assert follow_up(code.text, 0, code.history.recent("u"), path="m.py") is None


def test_typescript_and_go_literals():
    ts = Buffer("function f(o) {\n  o['mode'] = 1;\n  return `${x}` + o['mode'];\n}\n")
    cursor = change_at(ts, "mode'] = 1", "mode", "kind")
    assert proposed(ts, cursor, "typescript", "m.ts") == (2, "mode", "kind")
    go = Buffer('package m\n\nfunc f(m map[string]int) int {\n  m["a"] = 1\n  return m["a"]\n}\n')
    cursor = change_at(go, 'a"] = 1', "a", "b")
    assert proposed(go, cursor, "go", "m.go") == (4, "a", "b")


def test_the_request_answer_is_marked_as_a_string_follow_up():
    buffer = Buffer(PY)
    cursor = change_at(buffer, 'name" in data', "name", "key")
    request = NextEditRequest(
        text=buffer.text,
        cursor_line=1,
        cursor=cursor,
        edits=tuple(buffer.history.recent("u")),
        path="m.py",
        language_id="python",
    )
    assert rename_follow_up_edit(request) is None  # a word in a string is no rename
    answer = string_follow_up_edit(request)
    assert answer is not None and answer.source == "string" and len(answer.hunks) == 1
    hunk = answer.hunks[0]
    assert buffer.text[hunk.start : hunk.end] == "name" and hunk.new_text == "key"
    assert answer.stats == {"string": {"old": '"name"', "new": '"key"', "remaining": 3}}
