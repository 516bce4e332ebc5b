"""Rename follow-up: the user just renamed an identifier; the next place still using the old name,
renamed the same way. A next edit that needs no model, answered at once.

A rename: the buffer's last edit, its old and new text widened to the whole word around them in
their line, is one identifier on each side (Unicode word characters not starting with a digit,
and `$` in JavaScript and TypeScript), the two different. Typing a new name over several
keystrokes is one edit already (EditHistory merges them); erasing one key by key is several,
so the last edits on one line are read together (`renamed`).

The places still using the old name: its whole-word, same-case occurrences in the rename's scope,
minus those that are not the same name:
- in a string or a comment (tree-sitter where the language has a grammar; else a check of the
  line before it for quotes and line comments, which cannot see block comments or strings over
  several lines); an interpolation inside a string (`f"{total}"`, `${total}`) is code;
- a keyword (an anonymous tree-sitter token);
- a member (after `.` or `->`) when the renamed word was not one, or the reverse: `obj.total`
  is another name than a local `total`. With a grammar, a function's own name is both
  (`def total(self)` is called as `self.total()`), and a field (a name in a class or struct
  body outside its methods) is used as a member, or plain in that body only (Java's and C++'s
  implicit `this` inside methods is not followed); likewise a keyword argument's name
  (`f(total=1)`, with a grammar: the callee's parameter).

Scope (with a grammar): a name renamed inside a function (its body or its parameters) is looked
for in that function only, as locals are; a function's own name, a member, or a name outside
every function, in the whole document. Without a grammar, the whole document.

Proposed: one edit, the occurrence nearest after the cursor, else the nearest before it: one at a
time, as Copilot's next-edit suggestions go. Once the editor applies it, that change is the
buffer's last edit, again a rename of the same name, and the next request offers the next place.
It never undoes the last edit: it only turns the old name into the new one, never at the place
just edited (that place holds the new name).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import tree_sitter as ts

from memosight_lsp.workspace.languages import LanguageSpec, language_for, parser

from .edit_history import Edit, changed_line, common_prefix, common_suffix

MAX_PARSE_BYTES = 1_000_000  # beyond this the lexical check decides (a parse would be slow)
DOLLAR_LANGUAGES = frozenset(
    {"javascript", "javascriptreact", "typescript", "typescriptreact", "tsx"}
)
# Line-comment leaders for languages without a grammar here ("//" for the rest).
LINE_COMMENTS = {
    **dict.fromkeys(
        ("ruby", "shellscript", "sh", "bash", "zsh", "perl", "r", "yaml", "toml", "elixir",
         "julia", "nim", "makefile", "dockerfile", "powershell", "coffeescript"),
        ("#",),
    ),
    **dict.fromkeys(("lua", "sql", "haskell", "elm", "ada"), ("--",)),
    "php": ("//", "#"),
}  # fmt: skip
# Function-like nodes that are not named definitions (their locals are theirs too).
FUNCTION_NODES = frozenset(
    {
        "arrow_function",
        "function_expression",
        "function",
        "lambda",
        "closure_expression",
        "func_literal",
        "lambda_expression",
    }
)
TYPE_BODIES = ("class", "struct", "interface", "impl_item", "trait_item")  # node types with members
CODE_IN_STRINGS = ("interpolation", "substitution")  # `f"{x}"`, `${x}`: code inside a string
STRING_OR_COMMENT = ("string", "comment", "char_literal", "character_literal", "text_block")


@dataclass(frozen=True, kw_only=True)
class Rename:
    """The last edit made `old` into `new`, the new name now at text[start:end]."""

    old: str
    new: str
    start: int
    end: int
    member: bool  # after `.` or `->`


@dataclass(frozen=True, kw_only=True)
class FollowUp:
    rename: Rename
    places: list[int]  # offsets of the old name still used, nearest to the cursor first
    reason: str | None = None  # why there is no place, when there is none

    @property
    def next(self) -> tuple[int, int, str] | None:
        """(start, end, new text) of the edit proposed: the nearest place."""
        if not self.places:
            return None
        at = self.places[0]
        return at, at + len(self.rename.old), self.rename.new

    def describe(self) -> dict[str, object]:
        return {"old": self.rename.old, "new": self.rename.new, "remaining": len(self.places)}


def identifier_pattern(language_id: str | None) -> tuple[str, str]:
    """(word character class, identifier regex) for the language."""
    word = r"[\w$]" if (language_id or "").lower() in DOLLAR_LANGUAGES else r"\w"
    first = r"[^\W\d]" if word == r"\w" else r"(?:[^\W\d]|\$)"
    return word, f"{first}{word}*"


def renamed(text: str, edits: Sequence[Edit], language_id: str | None = None) -> Rename | None:
    """The rename the buffer's last edits made in the last edit's line, or None when they renamed
    no identifier into another. Tried from the longest run of edits on that line (each starting
    from the line the one before left: a name erased key by key is several edits to EditHistory,
    erasing goes back past where an edit began) down to the last edit alone. `text` is the
    document now (else None: the edits are out of date)."""
    changed = changed_line(text, edits) if edits else None
    if changed is None:
        return None
    line_start, befores, now = changed
    for before in befores:  # the longest run first
        found = renamed_in_line(before, now, language_id)
        if found is not None:
            left, old, new = found
            start = line_start + left
            member = is_member(text, start)
            return Rename(old=old, new=new, start=start, end=start + len(new), member=member)
    return None


def renamed_in_line(
    before: str, after: str, language_id: str | None
) -> tuple[int, str, str] | None:
    """(column, old name, new name) when the line's one changed span, widened to the whole word,
    is one identifier before and another after."""
    word, identifier = identifier_pattern(language_id)
    is_word = re.compile(word).fullmatch
    prefix = common_prefix(before, after)
    suffix = common_suffix(before, after, min(len(before), len(after)) - prefix)
    left = prefix
    while left > 0 and is_word(after[left - 1]):
        left -= 1
    right_old, right_new = len(before) - suffix, len(after) - suffix
    while right_new < len(after) and is_word(after[right_new]):
        right_old, right_new = right_old + 1, right_new + 1
    old, new = before[left:right_old], after[left:right_new]
    if old == new or not re.fullmatch(identifier, old) or not re.fullmatch(identifier, new):
        return None
    return left, old, new


def is_member(text: str, at: int) -> bool:
    return text[max(0, at - 1) : at] == "." or text[max(0, at - 2) : at] == "->"


def follow_up(
    text: str,
    cursor: int,
    edits: Sequence[Edit],
    *,
    path: str | None = None,
    language_id: str | None = None,
) -> FollowUp | None:
    """The places to rename next after a rename (see the module doc); None: the last edit was no
    rename (the model decides)."""
    rename = renamed(text, edits, language_id)
    if rename is None:
        return None
    word, _ = identifier_pattern(language_id)
    pattern = re.compile(rf"(?<!{word}){re.escape(rename.old)}(?!{word})")
    found = [m.start() for m in pattern.finditer(text)]
    spec = language_for(path, language_id)
    source = text.encode("utf-8", "surrogatepass")
    if spec is not None and len(source) <= MAX_PARSE_BYTES:
        places = in_code_and_scope(spec, text, source, rename, found)
    else:
        comments = LINE_COMMENTS.get((language_id or "").lower(), ("//",))
        code = [
            at
            for at in [rename.start, *found]
            if not in_string_or_comment_of_line(text, at, comments)
        ]
        places = None
        if code[:1] == [rename.start]:
            places = [at for at in code[1:] if is_member(text, at) == rename.member]
    if places is None:
        return None  # a word changed in a string or a comment: not a rename of a name
    if not found:
        return FollowUp(rename=rename, places=[], reason=f"no `{rename.old}` left: rename done")
    if not places:
        reason = f"`{rename.old}` is left only in strings, comments or other scopes"
        return FollowUp(rename=rename, places=[], reason=reason)
    after = sorted(at for at in places if at >= cursor)
    before = sorted((at for at in places if at < cursor), reverse=True)
    return FollowUp(rename=rename, places=after + before)


def in_code_and_scope(
    spec: LanguageSpec, text: str, source: bytes, rename: Rename, found: list[int]
) -> list[int] | None:
    """The occurrences (character offsets) that are code in the rename's scope, by tree-sitter;
    None when the renamed word itself is not code (in a string or a comment)."""
    tree = parser(spec).parse(source)
    root = tree.root_node
    to_byte = ByteOffsets(text)
    renamed_at = root.descendant_for_byte_range(to_byte(rename.start), to_byte(rename.end))
    if renamed_at is None or not is_code(renamed_at):
        return None
    keyword = is_keyword_argument_name(renamed_at)
    defines = member_definition(spec, renamed_at)
    # A member's uses are anywhere (`self.total` in every method), a local's in its function.
    scope = root if rename.member or defines else rename_scope(spec, renamed_at)
    places = []
    for at in found:
        member = is_member(text, at)
        if defines is None and member != rename.member:
            continue
        start = to_byte(at)
        end = start + len(rename.old.encode("utf-8", "surrogatepass"))
        if not scope.start_byte <= start < scope.end_byte:
            continue
        node = root.descendant_for_byte_range(start, end)
        if node is None or not node.is_named or not is_code(node):
            continue
        if is_keyword_argument_name(node) != keyword:
            continue
        if defines == "field" and not member and in_function(spec, node):
            continue  # a plain name in a method is its own local
        places.append(at)
    return places


def is_code(node: ts.Node) -> bool:
    """Not inside a string or a comment (an interpolation inside a string is code)."""
    current: ts.Node | None = node
    while current is not None:
        kind = current.type
        if any(part in kind for part in CODE_IN_STRINGS):
            return True
        if any(part in kind for part in STRING_OR_COMMENT):
            return False
        current = current.parent
    return True


def is_keyword_argument_name(node: ts.Node) -> bool:
    """`total` in `f(total=1)`: the name of the callee's parameter, not a variable here."""
    parent = node.parent
    if parent is None or parent.type != "keyword_argument":
        return False
    name = parent.child_by_field_name("name")
    return name is not None and name.start_byte == node.start_byte


def member_definition(spec: LanguageSpec, renamed_at: ts.Node) -> str | None:
    """What the renamed word defines that is used as `obj.name` too: "function" (a function's
    or method's own name: called as `total()` and `self.total()`), "field" (a name in a class or
    struct body outside its methods: `self.total`, or plain in the body itself), else None."""
    parent = renamed_at.parent
    if parent is not None and is_function(spec, parent) and is_own_name(parent, renamed_at):
        return "function"
    if in_function(spec, renamed_at):
        return None
    node = parent
    while node is not None:
        if any(part in node.type for part in TYPE_BODIES):
            return "field"
        node = node.parent
    return None


def in_function(spec: LanguageSpec, node: ts.Node) -> bool:
    current = node.parent
    while current is not None:
        if is_function(spec, current):
            return True
        current = current.parent
    return False


def rename_scope(spec: LanguageSpec, renamed_at: ts.Node) -> ts.Node:
    """The innermost function around the renamed word (not a member), unless the word is that
    function's own name (then the next one out); the whole tree when none is around it."""
    scope = renamed_at
    while scope.parent is not None:
        scope = scope.parent
        if is_function(spec, scope) and not is_own_name(scope, renamed_at):
            return scope
    return scope


def is_own_name(function: ts.Node, word: ts.Node) -> bool:
    name = function.child_by_field_name("name")
    return name is not None and name.start_byte <= word.start_byte <= word.end_byte <= name.end_byte


def is_function(spec: LanguageSpec, node: ts.Node) -> bool:
    """A function, method or lambda with a body (C's `declaration`, a prototype, has none)."""
    if node.type in FUNCTION_NODES:
        return True
    kind = spec.definitions.get(node.type)
    return kind in ("function", "method") and node.child_by_field_name("body") is not None


def in_string_or_comment_of_line(text: str, at: int, comments: tuple[str, ...]) -> bool:
    """Whether text[at] follows an open quote or a line comment on its line (no grammar: the
    line alone is read, so block comments and strings over several lines are not seen)."""
    line = text[text.rfind("\n", 0, at) + 1 : at]
    quote: str | None = None
    i = 0
    while i < len(line):
        char = line[i]
        if quote is not None:
            if char == "\\":
                i += 1
            elif char == quote:
                quote = None
        elif char in "\"'`":
            quote = char
        elif any(line.startswith(leader, i) for leader in comments):
            return True
        i += 1
    return quote is not None


class ByteOffsets:
    """Character offsets to UTF-8 byte offsets of one text, for ascending (or any) queries."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._char = 0
        self._byte = 0

    def __call__(self, offset: int) -> int:
        if offset < self._char:
            self._char = self._byte = 0
        self._byte += len(self.text[self._char : offset].encode("utf-8", "surrogatepass"))
        self._char = offset
        return self._byte
