"""Call-site follow-up: after a parameter is removed from a definition, the next call with that
argument deleted, with no model. Real edits go through EditHistory as the server records them;
the definitions and calls come from tree-sitter (Python, JavaScript, TypeScript, Go). The last
test drives the real server over stdio (`"source": "callsite"`)."""

from __future__ import annotations

import asyncio
import time

import pytest
from lsp_session import (
    edit,
    next_edit,
    next_edit_after_typing,
    open_doc,
    start,
    stats,
    stop,
    tiny_options,
)

from memosight_lsp.next_edit.call_site_follow_up import CallSiteFollowUp, follow_up
from memosight_lsp.next_edit.edit_history import EditHistory
from memosight_lsp.next_edit.predict import NextEditRequest, call_site_follow_up_edit


class Buffer:
    """A document and its edit history, edited as an editor would."""

    def __init__(self, text: str, language: str) -> None:
        self.text, self.language = text, language
        self.history = EditHistory()
        self.history.opened("u", text)

    def replace(self, start: int, end: int, new: str) -> None:
        self.text = self.text[:start] + new + self.text[end:]
        self.history.changed("u", self.text)

    def delete(self, needle: str, part: str | None = None, keys: bool = False) -> int:
        """Delete `part` (all of `needle` by default) where `needle` starts, at once or with one
        backspace per character; the cursor after it."""
        part = needle if part is None else part
        at = self.text.index(needle) + needle.index(part)
        if not keys:
            self.replace(at, at + len(part), "")
            return at
        for end in range(at + len(part), at, -1):
            self.replace(end - 1, end, "")
        return at

    def insert(self, needle: str, text: str) -> int:
        """Type `text` right after `needle`, key by key; the cursor after it."""
        at = self.text.index(needle) + len(needle)
        for i, char in enumerate(text):
            self.replace(at + i, at + i, char)
        return at + len(text)

    def follow_up(self, cursor: int) -> CallSiteFollowUp | None:
        edits = self.history.recent("u")
        return follow_up(self.text, cursor, edits, language_id=self.language)

    def applied(self, cursor: int) -> tuple[str, int]:
        """Apply the proposed edit: the line it made and the cursor after it."""
        found = self.follow_up(cursor)
        assert found is not None and found.next is not None, found
        start, end, new = found.next
        self.replace(start, end, new)
        first = self.text.rfind("\n", 0, start) + 1
        return self.text[first : self.text.find("\n", start)], start + len(new)


def updates(buffer: Buffer, cursor: int) -> list[str]:
    """Each call's line as the follow-up updates it, applied one after another, then none left."""
    lines = []
    while (found := buffer.follow_up(cursor)) is not None and found.next is not None:
        line, cursor = buffer.applied(cursor)
        lines.append(line.strip())
    assert found is not None and found.reason == f"no call of `{found.function}` left to update"
    return lines


# After the shape of stdlib code (textwrap, shutil): calls with nested brackets and strings,
# over several lines, by keyword, already updated, in a string and a comment.
PY = '''def shorten(text, width, placeholder, fix):
    """Call as shorten(text, width, placeholder, fix)."""
    return text[:width] + placeholder


def report(rows):
    head = shorten(rows[0], len(rows), " [...]", True)  # shorten(a, b, c, d)
    body = shorten(
        ", ".join(str(r) for r in rows),
        max(10, min(80, len(rows) * 2)),
        "(...)",
        False,
    )
    tail = shorten(text=rows[-1], width=20, placeholder="...", fix=False)
    done = shorten(rows[1], 3, "..")
    return head + body + tail + done
'''


def test_a_middle_parameter_removed_updates_each_call_in_turn():
    buffer = Buffer(PY, "python")
    cursor = buffer.delete("width, placeholder", "width, ")
    assert updates(buffer, cursor) == [
        'head = shorten(rows[0], " [...]", True)  # shorten(a, b, c, d)',
        '"(...)",',  # the line after it deleted: `max(...),` and its line break
        'tail = shorten(text=rows[-1], placeholder="...", fix=False)',
    ]
    assert "        max(10" not in buffer.text and '"(...)",\n' in buffer.text
    assert 'done = shorten(rows[1], 3, "..")' in buffer.text  # fits the new definition already
    assert "shorten(text, width, placeholder, fix)." in buffer.text  # the docstring kept


def test_the_last_parameter_removed_takes_the_separator_before_it():
    buffer = Buffer(PY, "python")
    cursor = buffer.delete(", fix):", ", fix")
    assert updates(buffer, cursor) == [
        'head = shorten(rows[0], len(rows), " [...]")  # shorten(a, b, c, d)',
        '"(...)",',
        'tail = shorten(text=rows[-1], width=20, placeholder="...")',
    ]
    assert '"(...)",\n    )' in buffer.text  # the multi-line call keeps its trailing comma


def test_the_first_parameter_erased_key_by_key_is_one_removal():
    buffer = Buffer(PY, "python")
    cursor = buffer.delete("text, width, placeholder", "text, ", keys=True)
    assert len(buffer.history.recent("u")) == 6  # six backspaces
    line, _ = buffer.applied(cursor)
    assert line.strip() == 'head = shorten(len(rows), " [...]", True)  # shorten(a, b, c, d)'


def test_the_only_argument_goes_with_everything_inside_the_parentheses():
    text = "def ping(host):\n    pass\n\n\nping( 'localhost' )\nping(\n    'a',\n)\n"
    buffer = Buffer(text, "python")
    cursor = buffer.delete("(host)", "host")
    assert updates(buffer, cursor) == ["ping()", "ping()"]


METHODS = """class Cache:
    def put(self, key, value, ttl):
        self.store[key] = value

    @staticmethod
    def make(size, policy):
        return Cache()

    def fill(self, other):
        self.put("a", 1, 60)
        other.put("b", compute(2, 3), ttl=30)
        put("c", 3, 90)  # a function of the same name, not the method
        Cache.make(10, "lru")
"""


def test_a_method_is_called_through_its_receiver_without_self():
    buffer = Buffer(METHODS, "python")
    cursor = buffer.delete("key, value, ttl", ", ttl")
    assert updates(buffer, cursor) == ['self.put("a", 1)', 'other.put("b", compute(2, 3))']
    assert 'put("c", 3, 90)' in buffer.text
    buffer = Buffer(METHODS, "python")
    cursor = buffer.delete("size, policy", "size, ")
    assert updates(buffer, cursor) == ['Cache.make("lru")']  # a static method: no self


def test_calls_that_cannot_be_matched_safely_are_passed_over():
    text = (
        "def scale(xs, factor, offset):\n"
        "    return [x * factor + offset for x in xs]\n"
        "\n"
        "scale(*args)\n"
        "scale(xs, **options)\n"
        "scale(xs, 2)  # already updated\n"
        "scale(xs, 2, 1, 0)  # too many: another function's call\n"
        "scale(xs, gain=2, offset=1)  # no parameter `gain`\n"
        "scale(xs, 2, # the factor\n"
        "      1)\n"
        "scale(xs, 3, 1)\n"
    )
    buffer = Buffer(text, "python")
    cursor = buffer.delete("factor, offset):", "factor, ")
    assert updates(buffer, cursor) == ["scale(xs, 1)"]


def test_a_variadic_definition_or_an_addition_proposes_nothing():
    buffer = Buffer("def log(level, msg, *args):\n    pass\n\nlog(1, 'a', 2)\n", "python")
    found = buffer.follow_up(buffer.delete("level, msg", "level, "))
    assert found is not None and found.next is None and "variadic" in (found.reason or "")
    text = "def area(w, h):\n    return w * h\n\narea(2, 3)\n"
    buffer = Buffer(text, "python")
    found = buffer.follow_up(buffer.insert("w, h", ", unit='cm'"))
    assert found is not None and found.next is None and "need no change" in (found.reason or "")
    buffer = Buffer(text, "python")
    assert buffer.follow_up(buffer.insert("w, h", ", unit")) is None  # the model's to answer


def test_other_edits_are_left_to_the_model():
    buffer = Buffer(PY, "python")
    assert buffer.follow_up(buffer.insert("return text[:width]", " + '!'")) is None
    buffer = Buffer(PY, "python")  # a parameter renamed is a rename, not a removal
    at = buffer.text.index("fix):")
    buffer.replace(at, at + 3, "fixed")
    assert buffer.follow_up(at) is None
    buffer = Buffer(PY, "python")  # a call's argument deleted with no definition changed
    assert buffer.follow_up(buffer.delete('" [...]", ')) is None
    buffer = Buffer(PY, "python")  # removed, then something else deleted in the body
    buffer.delete(", fix):", ", fix")
    cursor = buffer.delete("[:width]")
    assert buffer.follow_up(cursor) is None


JS = """export function format(value, digits, unit) {
  return `${value.toFixed(digits)} ${unit}`;
}
const pad = (s, n, fill) => s.padStart(n, fill);
class Gauge {
  show(label, value) {
    return this.show(label, format(value, 2, "%")) + pad("x", 3, " ");
  }
}
console.log(format(0.5, 1, "kg"), format(...xs));
"""


def test_javascript_functions_arrows_and_methods():
    buffer = Buffer(JS, "javascript")
    cursor = buffer.delete("digits, unit", ", unit")
    assert updates(buffer, cursor) == [
        'return this.show(label, format(value, 2)) + pad("x", 3, " ");',
        "console.log(format(0.5, 1), format(...xs));",
    ]
    buffer = Buffer(JS, "javascript")
    assert updates(buffer, buffer.delete("s, n, fill", "s, ")) == [
        'return this.show(label, format(value, 2, "%")) + pad(3, " ");'
    ]
    buffer = Buffer(JS, "javascript")
    assert updates(buffer, buffer.delete("label, value)", "label, ")) == [
        'return this.show(format(value, 2, "%")) + pad("x", 3, " ");'
    ]


def test_typescript_this_and_optional_parameters():
    text = (
        "function draw(this: Canvas, x: number, y: number, color?: string): void {}\n"
        "draw.call(canvas, 1, 2);\n"
        "draw(1, 2, 'red');\n"
        "draw(3, 4);\n"
    )
    buffer = Buffer(text, "typescript")
    cursor = buffer.delete("x: number, y", "x: number, ")
    # `draw(3, 4)` fits `(y, color?)` too: ambiguous, left alone.
    assert updates(buffer, cursor) == ["draw(2, 'red');"]


GO = """package geo

func Distance(x1, y1, x2, y2 float64, unit string) float64 {
	return math.Hypot(x2-x1, y2-y1)
}

func (p *Point) Move(dx, dy float64, log bool) {
	p.Move(1, 2, false)
}

func main() {
	d := Distance(0, 0, 3, 4, "m")
	fmt.Println(Distance(1, 1, f(2, 3), 4, "km"), d) // Distance(a, b, c, d, e)
}
"""


def test_go_grouped_parameters_and_methods():
    buffer = Buffer(GO, "go")
    cursor = buffer.delete(", unit string")
    assert updates(buffer, cursor) == [
        "d := Distance(0, 0, 3, 4)",
        "fmt.Println(Distance(1, 1, f(2, 3), 4), d) // Distance(a, b, c, d, e)",
    ]
    buffer = Buffer(GO, "go")
    cursor = buffer.delete("x1, y1, x2", "y1, ")  # one name of a group of four
    assert updates(buffer, cursor) == [
        'd := Distance(0, 3, 4, "m")',
        'fmt.Println(Distance(1, f(2, 3), 4, "km"), d) // Distance(a, b, c, d, e)',
    ]
    buffer = Buffer(GO, "go")
    assert updates(buffer, buffer.delete("dx, dy", "dx, ")) == ["p.Move(2, false)"]


def test_the_request_answer_is_marked_as_a_call_site_update():
    buffer = Buffer(PY, "python")
    cursor = buffer.delete(", fix):", ", fix")
    request = NextEditRequest(
        text=buffer.text,
        cursor_line=0,
        cursor=cursor,
        edits=tuple(buffer.history.recent("u")),
        language_id="python",
    )
    result = call_site_follow_up_edit(request)
    assert result is not None and result.source == "callsite"
    (hunk,) = result.hunks
    assert buffer.text[hunk.start : hunk.end] == ", True" and hunk.new_text == ""
    expected = {"function": "shorten", "removed": "fix", "remaining": 3}
    assert result.describe() == {"callsite": expected}


@pytest.mark.asyncio
@pytest.mark.slow
async def test_the_server_updates_each_call_then_nothing_and_the_model_answers_the_rest(
    tiny_model_dir,
):
    client = await start("neovim", tiny_options(tiny_model_dir, maxWaitMs=4000))
    try:
        before = await stats(client)
        uri = "file:///r/rates.py"
        text = (
            "def rate(amount, years, base):\n"
            "    return amount * base ** years\n"
            "\n"
            "a = rate(100, 2, 1.05)\n"
            'b = rate(amount=5, years=1, base=f("x, y"))\n'
        )
        open_doc(client, uri, text)
        edit(client, uri, 2, (0, 17), (0, 24), "")  # `years, ` deleted
        started = time.monotonic()
        answer = await asyncio.wait_for(next_edit(client, uri, 0, 17), 30)
        assert time.monotonic() - started < 5  # no model job: answered at once
        assert answer["source"] == "callsite" and answer["window"] is None
        assert answer["model"] is None
        assert answer["stats"]["callsite"] == {"function": "rate", "removed": "years",
                                               "remaining": 2}  # fmt: skip
        (proposal,) = answer["edits"]
        assert proposal["range"] == {"start": {"line": 3, "character": 14},
                                     "end": {"line": 3, "character": 17}}  # fmt: skip
        assert proposal["newText"] == ""
        edit(client, uri, 3, (3, 14), (3, 17), "")  # applied: `2, ` deleted
        answer = await asyncio.wait_for(next_edit(client, uri, 3, 14), 30)
        (proposal,) = answer["edits"]
        assert proposal["range"]["start"] == {"line": 4, "character": 19}
        assert proposal["range"]["end"] == {"line": 4, "character": 28}  # `years=1, `
        edit(client, uri, 4, (4, 19), (4, 28), "")
        answer = await asyncio.wait_for(next_edit(client, uri, 4, 19), 30)
        assert answer["source"] == "callsite" and answer["edits"] == []
        assert answer["reason"] == "no call of `rate` left to update"
        # An edit of no parameter list: the model's, as before.
        answer, _ = await next_edit_after_typing(client, "file:///r/scale.py", 120)
        assert answer["source"] == "model"
        after = await stats(client)
        assert after["nextEditCallSites"] == before["nextEditCallSites"] + 3
        assert after["nextEditModelCalls"] == before["nextEditModelCalls"] + 1
    finally:
        await stop(client)


def test_a_constructor_is_called_through_its_class():
    text = (
        "class Cart:\n"
        "    def __init__(self, owner, items, currency):\n"
        "        self.owner = owner\n"
        "\n"
        "\n"
        "\n"
        "class Basket(Cart):\n"
        "    def __init__(self, owner, items, currency):\n"
        "        super().__init__(owner, items, currency)\n"
        "\n"
        "\n"
        "cart = Cart('ann', [1, 2], 'EUR')\n"
        "Cart.__init__(cart, 'bob', [], 'USD')  # the receiver passed: left alone\n"
    )
    buffer = Buffer(text, "python")
    cursor = buffer.delete("owner, items", ", items")
    assert updates(buffer, cursor) == [
        "super().__init__(owner, currency)",  # any `__init__`, as any method of that name
        "cart = Cart('ann', 'EUR')",
    ]
    text = (
        "class Cart {\n"
        "  constructor(owner: string, items: number[]) {}\n"
        "}\n"
        "const cart = new Cart('ann', [1, 2]);\n"
    )
    buffer = Buffer(text, "typescript")
    cursor = buffer.delete("string, items: number[]", ", items: number[]")
    assert updates(buffer, cursor) == ["const cart = new Cart('ann');"]
