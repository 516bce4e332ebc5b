"""String follow-up: the user just changed a string constant; the next place in the same scope
holding the constant as it was, changed the same way. A next edit that needs no model.

A string change: the buffer's last edits on one line (read together as the rename follow-up
reads them, rename_follow_up.renamed) changed text inside one string literal only (between its
quotes, not them), a literal on one line with no interpolation (`f"{x}"`, `${x}`); by
tree-sitter, so only in languages with a grammar here. The constant as it was is the literal's
text before those edits.

The places: the other literals of the scope whose text is that old literal (`'key'` and `"key"`
are the same constant; a prefix, `b'key'`, is not), in the innermost function around the change
(rename_follow_up.rename_scope), else the whole document. Proposed as the rename follow-up does:
the nearest after the cursor, else before it, one at a time, cut to the characters that differ;
once applied, it is the last edit and the next request offers the next place.

None (the model decides) when the last edit changed no string constant that way, or when no
other literal in the scope holds the old constant: most string edits are a message's own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import tree_sitter as ts

from memosight_lsp.workspace.languages import language_for, parser

from .edit_history import Edit, changed_line, common_prefix, common_suffix
from .rename_follow_up import MAX_PARSE_BYTES, ByteOffsets, rename_scope

QUOTES = ("'", '"')
INTERPOLATIONS = ("interpolation", "substitution")


@dataclass(frozen=True, kw_only=True)
class StringChange:
    old: str  # the literal as it was, quotes included
    new: str  # the literal now
    start: int  # where the literal now is (character offset)


@dataclass(frozen=True, kw_only=True)
class FollowUp:
    change: StringChange
    places: list[int]  # offsets of literals holding the old constant, nearest the cursor first
    reason: str | None = None

    @property
    def next(self) -> tuple[int, int, str] | None:
        """(start, end, new text) of the edit proposed at the nearest place, cut to the
        characters that differ."""
        if not self.places:
            return None
        old, new = self.change.old, self.change.new
        prefix = common_prefix(old, new)
        suffix = common_suffix(old, new, min(len(old), len(new)) - prefix)
        at = self.places[0]
        return at + prefix, at + len(old) - suffix, new[prefix : len(new) - suffix]

    def describe(self) -> dict[str, object]:
        return {"old": self.change.old, "new": self.change.new, "remaining": len(self.places)}


def follow_up(
    text: str,
    cursor: int,
    edits: Sequence[Edit],
    *,
    path: str | None = None,
    language_id: str | None = None,
) -> FollowUp | None:
    """The places to change next after a string constant was changed (see the module doc);
    None: the model decides."""
    spec = language_for(path, language_id)
    source = text.encode("utf-8", "surrogatepass")
    if spec is None or not edits or len(source) > MAX_PARSE_BYTES:
        return None
    changed = changed_line(text, edits)
    if changed is None:
        return None
    line_start, befores, after = changed
    root = parser(spec).parse(source).root_node
    to_byte = ByteOffsets(text)
    for before in befores:  # the longest run of edits on the line first
        prefix = common_prefix(before, after)
        suffix = common_suffix(before, after, min(len(before), len(after)) - prefix)
        start, end = line_start + prefix, line_start + len(after) - suffix
        literal = literal_at(root, to_byte(start), to_byte(end))
        if literal is None:
            continue
        opening, closing = literal.children[0], literal.children[-1]
        if not opening.end_byte <= to_byte(start) <= to_byte(end) <= closing.start_byte:
            continue  # the quotes changed too
        new = node_text(literal)
        at = len(source[: literal.start_byte].decode("utf-8", "surrogatepass"))
        column = at - line_start
        old = before[column : column + len(new) - (len(after) - len(before))]
        if old == new or at + len(new) > line_start + len(after):
            continue
        change = StringChange(old=old, new=new, start=at)
        scope = rename_scope(spec, literal)
        places = [
            len(source[: node.start_byte].decode("utf-8", "surrogatepass"))
            for node in literals(scope)
            if node.start_byte != literal.start_byte and same_constant(node_text(node), old)
        ]
        if not places:
            return None
        later = sorted(p for p in places if p >= cursor)
        earlier = sorted((p for p in places if p < cursor), reverse=True)
        return FollowUp(change=change, places=later + earlier)
    return None


def is_literal(node: ts.Node) -> bool:
    """A whole string literal (not a part of one) on one line, with no interpolation."""
    if not node.is_named or "string" not in node.type or len(node.children) < 2:
        return False
    parent = node.parent
    if parent is not None and "string" in parent.type:
        return False
    if node.start_point[0] != node.end_point[0]:
        return False
    return not any(any(part in child.type for part in INTERPOLATIONS) for child in node.children)


def literal_at(root: ts.Node, start: int, end: int) -> ts.Node | None:
    """The string literal holding bytes [start, end), if any."""
    node = root.descendant_for_byte_range(start, end)
    while node is not None and "string" not in node.type:
        node = node.parent
    while node is not None and node.parent is not None and "string" in node.parent.type:
        node = node.parent
    return node if node is not None and is_literal(node) else None


def literals(scope: ts.Node) -> list[ts.Node]:
    """The string literals under `scope`, in order."""
    found: list[ts.Node] = []
    stack = [scope]
    while stack:
        node = stack.pop()
        if is_literal(node):
            found.append(node)
            continue
        stack.extend(reversed(node.children))
    return found


def node_text(node: ts.Node) -> str:
    return (node.text or b"").decode("utf-8", "surrogatepass")


def same_constant(text: str, old: str) -> bool:
    """The same literal, or the same text between the other kind of plain quotes."""
    if text == old:
        return True
    if len(old) < 2 or old[0] not in QUOTES or old[-1] != old[0]:
        return False
    other = QUOTES[1 - QUOTES.index(old[0])]
    return other not in old and text == other + old[1:-1] + other
