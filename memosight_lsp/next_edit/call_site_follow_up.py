"""Call-site follow-up: the user just removed a parameter from a function's definition; the next
call of that function, its argument for that parameter deleted. A next edit that needs no model,
answered at once, as the rename follow-up (rename_follow_up.py) is. Python, JavaScript,
TypeScript and Go (tree-sitter: the definition, its parameters and the calls are read from the
tree, so strings, comments and nested brackets inside arguments are never miscounted).

The change: the buffer's last edits lie inside the parameter list of one function definition (a
Python `def`, a JS/TS `function`, method or `const f = (...) =>`, a Go `func` or method). The
document before the run of such edits is rebuilt by undoing them, and the two parameter lists
are compared by name:
- one parameter removed: the follow-up below;
- parameters added at the end, each with a default (or `?`, or variadic): the calls need no
  change, and the answer says so (no edit, no model);
- anything else (a parameter added without a default, reordered, several changed): None, the
  model decides.
The run is read longest first (a parameter erased key by key is several edits), down to the last
edit alone. Edits after it that each delete text inside a call of the same function (the
proposals applied, or calls fixed by hand) are passed over, so each request offers the next call.

The calls: `name(...)` for a function, `obj.name(...)` (`self.`, `this.`, any receiver) for a
method, `Cart(...)` / `new Cart(...)` for a constructor (Python's `__init__`, called explicitly
too: `super().__init__(...)`; JavaScript's `constructor`), in the whole document, nearest after
the cursor first, then nearest before it. Python's `self` / `cls` (not a static method's) and
TypeScript's `this` parameter are not passed. A call is updated only when it is matched safely:
- it passes the removed parameter by keyword (`f(b=2)`): that keyword argument is deleted;
- else it passes it by position, and its argument count fits the old definition and not the
  new one (a call that fits the new one is already updated, or ambiguous with defaults);
- never with `*args` / `**kw` / `...xs` among its arguments, a keyword naming no parameter,
  errors in its argument list, or a comment inside the text to delete; and never when the
  definition has a variadic parameter (`*args`, `...rest`, Go's `...T`): the argument that
  meets the removed parameter cannot be told then.
The argument goes with one separator: `f(a, b, c)` -> `f(a, c)` (b and the separator after
it), the last -> `f(a, b)` (the separator before it), the only one -> `f()` (all inside).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import tree_sitter as ts

from memosight_lsp.workspace.languages import LanguageSpec, language_for, parser

from .edit_history import MAX_EDIT_CHARS, Edit
from .rename_follow_up import MAX_PARSE_BYTES, ByteOffsets, identifier_pattern

PARAMETER_LISTS = ("parameters", "formal_parameters", "parameter_list")
# Definitions named by their own `name` field, and whether they are called as `obj.name(...)`.
NAMED_FUNCTIONS = {
    "function_definition": False,  # Python: a method when its parent is a class body
    "function_declaration": False,
    "generator_function_declaration": False,
    "method_definition": True,
    "method_declaration": True,  # Go
}
FUNCTION_VALUES = ("arrow_function", "function_expression", "function")  # `const f = (...) =>`
CALLS = ("call", "call_expression", "new_expression")
# Constructors are called through their class: `Cart(...)`, `new Cart(...)`.
CONSTRUCTORS = ("__init__", "constructor")
CLASSES = ("class_definition", "class_declaration", "abstract_class_declaration", "class")
MEMBERS = {
    "attribute": "attribute",
    "member_expression": "property",
    "selector_expression": "field",
}
ARGUMENT_LISTS = ("argument_list", "arguments")
KEYWORD_ARGUMENT = "keyword_argument"
SPREAD_ARGUMENTS = ("list_splat", "dictionary_splat", "spread_element", "variadic_argument")
RECEIVER_DECORATORS = ("staticmethod",)  # a Python method without `self`
DEFAULTED = ("default_parameter", "typed_default_parameter", "assignment_pattern")
VARIADIC = (
    "list_splat_pattern",
    "dictionary_splat_pattern",
    "rest_pattern",
    "variadic_parameter_declaration",
)
NOT_PARAMETERS = ("positional_separator", "keyword_separator", "comment")


@dataclass(frozen=True, kw_only=True)
class Param:
    key: str  # its name, or its text when it has none (a pattern, Go's unnamed parameter)
    default: bool = False  # may be left out of a call (a default value, TypeScript's `?`)
    variadic: bool = False  # *args, **kw, ...rest, Go's ...T
    keyword_only: bool = False  # Python: after `*`
    passed: bool = True  # False: Python's self / cls, TypeScript's `this`: no argument


@dataclass(frozen=True, kw_only=True)
class Definition:
    # How its calls name it: (name, through a member: `obj.name(...)`), its own name first
    # (a constructor's: its class's).
    callees: tuple[tuple[str, bool], ...]
    params: tuple[Param, ...]
    span: tuple[int, int]  # character offsets of its parameter list, parentheses included

    @property
    def name(self) -> str:
        return self.callees[0][0]


@dataclass(frozen=True, kw_only=True)
class CallSiteFollowUp:
    function: str
    removed: str | None  # the removed parameter; None: parameters with defaults were added
    edits: list[tuple[int, int, str]]  # (start, end, new text) per call to update, nearest first
    reason: str | None = None  # why there is no edit, when there is none

    @property
    def next(self) -> tuple[int, int, str] | None:
        return self.edits[0] if self.edits else None

    def describe(self) -> dict[str, object]:
        return {"function": self.function, "removed": self.removed, "remaining": len(self.edits)}


def follow_up(
    text: str,
    cursor: int,
    edits: Sequence[Edit],
    *,
    path: str | None = None,
    language_id: str | None = None,
) -> CallSiteFollowUp | None:
    """The calls to update after a parameter was removed (see the module doc); None: the last
    edits changed no parameter list that way (the model decides)."""
    spec = language_for(path, language_id)
    source = text.encode("utf-8", "surrogatepass")
    if spec is None or not edits or len(source) > MAX_PARSE_BYTES:
        return None
    found = signature_change(spec, text, edits)
    if found is None:
        return None
    old, new, tree = found
    index = removed_index(old.params, new.params)
    if index is None:
        reason = "parameters with defaults added at the end: the calls need no change"
        return CallSiteFollowUp(function=new.name, removed=None, edits=[], reason=reason)
    removed = old.params[index]
    if any(p.variadic for p in old.params):
        reason = "a variadic parameter: the calls' arguments cannot be matched to it"
        return CallSiteFollowUp(function=new.name, removed=removed.key, edits=[], reason=reason)
    places = []  # byte ranges
    for call in calls_of(tree, text, new, spec.name):
        hunk = call_update(call, old.params, new.params, removed)
        if hunk is not None:
            places.append(hunk)
    at = ByteOffsets(text)(cursor)
    after = sorted(h for h in places if h[0] >= at)
    before = sorted((h for h in places if h[0] < at), reverse=True)
    chosen = [chars(source, hunk) for hunk in after + before]
    left = None if chosen else f"no call of `{new.name}` left to update"
    return CallSiteFollowUp(function=new.name, removed=removed.key, edits=chosen, reason=left)


def undo(text: str, edit: Edit) -> str | None:
    """The text before `edit`, or None when it cannot be rebuilt (out of date, or cut)."""
    end = edit.start + len(edit.new)
    if max(len(edit.old), len(edit.new)) >= MAX_EDIT_CHARS or text[edit.start : end] != edit.new:
        return None
    return text[: edit.start] + edit.old + text[end:]


def signature_change(
    spec: LanguageSpec, text: str, edits: Sequence[Edit]
) -> tuple[Definition, Definition, ts.Tree] | None:
    """(definition before, definition now, the tree of `text`) when the last edits removed one
    parameter or added parameters with defaults at the end (see the module doc)."""
    texts = [text]  # texts[k]: the document before the last k edits
    trees: list[ts.Tree] = []
    recent = list(reversed(edits))
    found: tuple[int, ts.Node] | None = None
    for k, edit in enumerate(recent):
        trees.append(parse(spec, texts[k]))
        params = enclosing_parameters(trees[k], texts[k], edit)
        if params is not None:
            found = k, params
            break
        # Passed over: only deletions inside a call's arguments (calls updated), so that any
        # other edit costs one parse.
        if edit.new or arguments_at(trees[k], texts[k], edit) is None:
            return None
        previous = undo(texts[k], edit)
        if previous is None:
            return None
        texts.append(previous)
    if found is None:
        return None
    first, params = found
    now = definition(spec, texts[first], params)
    if now is None or not all(in_call_of(trees[k], texts[k], recent[k], now) for k in range(first)):
        return None
    start, end = now.span
    runs: list[str] = []  # the text before each run of edits in the parameter list
    older = texts[first]
    for edit in recent[first:]:
        if not start < edit.start <= edit.start + len(edit.new) < end:
            break
        previous = undo(older, edit)
        if previous is None:
            break
        end += len(edit.old) - len(edit.new)
        older = previous
        runs.append(older)
    for older in reversed(runs):  # the longest run first
        before = definition_at(spec, older, start, now.name)
        if before is not None and changed(before.params, now.params):
            return before, now, trees[0]
    return None


def parse(spec: LanguageSpec, text: str) -> ts.Tree:
    return parser(spec).parse(text.encode("utf-8", "surrogatepass"))


def enclosing_parameters(tree: ts.Tree, text: str, edit: Edit) -> ts.Node | None:
    """The parameter list of a definition strictly inside whose parentheses `edit` lies."""
    to_byte = ByteOffsets(text)
    start, end = to_byte(edit.start), to_byte(edit.start + len(edit.new))
    node: ts.Node | None = tree.root_node.descendant_for_byte_range(start, end)
    while node is not None:
        if node.type in PARAMETER_LISTS and is_definition_parameters(node):
            inside = node.start_byte < start and end < node.end_byte
            return node if inside else None
        node = node.parent
    return None


def is_definition_parameters(params: ts.Node) -> bool:
    function = params.parent
    if function is None:
        return False
    own = function.child_by_field_name("parameters")
    return own is not None and own.id == params.id and callees(function) is not None


def callees(function: ts.Node) -> tuple[tuple[str, bool], ...] | None:
    """How calls of a function node name it (see Definition); None: it has no name. Python's
    `__init__` is called through its class and explicitly (`super().__init__(...)`)."""
    if function.type in NAMED_FUNCTIONS:
        node = function.child_by_field_name("name")
        if node is None:
            return None
        name, member = text_of(node), NAMED_FUNCTIONS[function.type] or in_class_body(function)
        owner = class_name(function) if member and name in CONSTRUCTORS else None
        if owner is None:
            return ((name, member),)
        return ((owner, False), (name, True)) if name == "__init__" else ((owner, False),)
    declarator = function.parent
    if function.type not in FUNCTION_VALUES or parent_type(function) != "variable_declarator":
        return None
    node = declarator.child_by_field_name("name") if declarator is not None else None
    if node is None or node.type != "identifier":
        return None
    return ((text_of(node), False),)


def in_class_body(function: ts.Node) -> bool:
    """A Python def directly in a class body (through its decorators): a method."""
    node = function.parent
    if node is not None and node.type == "decorated_definition":
        node = node.parent
    return node is not None and node.type == "block" and parent_type(node) == "class_definition"


def class_name(method: ts.Node) -> str | None:
    """The name of the class a method is defined in."""
    node = method.parent
    while node is not None and node.type not in CLASSES:
        node = node.parent
    name = node.child_by_field_name("name") if node is not None else None
    return text_of(name) if name is not None else None


def parent_type(node: ts.Node) -> str | None:
    return node.parent.type if node.parent is not None else None


def definition(spec: LanguageSpec, text: str, params: ts.Node) -> Definition | None:
    function = params.parent
    named = callees(function) if function is not None else None
    if function is None or named is None or params.has_error:
        return None
    entries = parameters(spec, params)
    receiver = bool(entries) and not entries[0].variadic and takes_receiver(function)
    if spec.name == "python" and in_class_body(function) and receiver:
        entries[0] = Param(key=entries[0].key, passed=False)
    source = text.encode("utf-8", "surrogatepass")
    span = char_at(source, params.start_byte), char_at(source, params.end_byte)
    return Definition(callees=named, params=tuple(entries), span=span)


def definition_at(spec: LanguageSpec, text: str, start: int, name: str) -> Definition | None:
    """The definition named `name` whose parameter list opens at character `start`."""
    tree = parse(spec, text)
    at = ByteOffsets(text)(start)
    node = tree.root_node.descendant_for_byte_range(at, at + 1)
    params = node if node is None or node.type in PARAMETER_LISTS else node.parent
    if params is None or params.start_byte != at or not is_definition_parameters(params):
        return None
    found = definition(spec, text, params)
    return found if found is not None and found.name == name else None


def takes_receiver(function: ts.Node) -> bool:
    """A Python method's first parameter is its receiver unless it is a static method."""
    wrapper = function.parent
    if wrapper is None or wrapper.type != "decorated_definition":
        return True
    decorators = (text_of(d) for d in wrapper.children if d.type == "decorator")
    return not any(d.strip().lstrip("@") in RECEIVER_DECORATORS for d in decorators)


def parameters(spec: LanguageSpec, params: ts.Node) -> list[Param]:
    """The parameters of a parameter list, in order."""
    out: list[Param] = []
    keyword_only = False
    for node in params.named_children:
        if node.type == "keyword_separator":
            keyword_only = True
        if node.type in NOT_PARAMETERS:
            continue
        variadic = node.type in VARIADIC or any(c.type in VARIADIC for c in node.named_children)
        if spec.name == "go" and node.type == "parameter_declaration":
            names = node.children_by_field_name("name")
            for name in names or [node]:
                out.append(Param(key=text_of(name)))
            continue
        default = node.type in DEFAULTED or node.type == "optional_parameter"
        default = default or node.child_by_field_name("value") is not None
        passed = not (node.type == "required_parameter" and first_named(node) == "this")
        out.append(
            Param(
                key=parameter_key(node),
                default=default,
                variadic=variadic,
                keyword_only=keyword_only and not variadic,
                passed=passed,
            )
        )
        if node.type == "list_splat_pattern" or (variadic and spec.name == "python"):
            keyword_only = True  # after *args, Python's parameters are keyword-only
    return out


def first_named(node: ts.Node) -> str | None:
    children = node.named_children
    return children[0].type if children else None


def parameter_key(node: ts.Node) -> str:
    """A parameter's name (the first identifier of its declaration), else its whole text."""
    if node.type == "identifier":
        return text_of(node)
    for field in ("name", "pattern", "left"):
        named = node.child_by_field_name(field)
        if named is not None and named.type == "identifier":
            return text_of(named)
    for child in node.named_children:
        if child.type == "identifier":
            return text_of(child)
        if child.type in VARIADIC:
            return parameter_key(child)
    return text_of(node)


def text_of(node: ts.Node) -> str:
    return (node.text or b"").decode("utf-8", "surrogatepass")


def changed(old: tuple[Param, ...], new: tuple[Param, ...]) -> bool:
    """Whether `new` is `old` with one parameter removed, or with parameters that callers may
    leave out (a default, variadic) added at the end."""
    if removed_index(old, new) is not None:
        return True
    keys, new_keys = [p.key for p in old], [p.key for p in new]
    if len(new) > len(old) and new_keys[: len(old)] == keys:
        return all(p.default or p.variadic for p in new[len(old) :])
    return False


def removed_index(old: tuple[Param, ...], new: tuple[Param, ...]) -> int | None:
    """Which of `old` is gone when `new` is `old` less one parameter (by name) that calls pass;
    None otherwise."""
    keys, new_keys = [p.key for p in old], [p.key for p in new]
    if len(new) != len(old) - 1:
        return None
    index = next(
        (i for i, (a, b) in enumerate(zip(keys, new_keys, strict=False)) if a != b), len(new)
    )
    same = keys[:index] + keys[index + 1 :] == new_keys
    return index if same and old[index].passed else None


def arguments_at(tree: ts.Tree, text: str, edit: Edit) -> ts.Node | None:
    """The innermost argument list of a call that `edit` (in `text`, after it) lies inside."""
    at = ByteOffsets(text)(edit.start)
    node: ts.Node | None = tree.root_node.descendant_for_byte_range(at, at)
    while node is not None and node.type not in ARGUMENT_LISTS:
        node = node.parent
    if node is None or node.parent is None or not node.start_byte < at < node.end_byte:
        return None
    return node


def in_call_of(tree: ts.Tree, text: str, edit: Edit, function: Definition) -> bool:
    """Whether `edit` (in `text`, after it) lies inside the arguments of a call of `function`."""
    arguments = arguments_at(tree, text, edit)
    call = arguments.parent if arguments is not None else None
    return call is not None and callee_name(call) in function.callees


def callee_name(call: ts.Node) -> tuple[str, bool] | None:
    """(name, through a member) of what a call node calls; None: not a call of a name."""
    if call.type not in CALLS:
        return None
    function = call.child_by_field_name(
        "constructor" if call.type == "new_expression" else "function"
    )
    if function is None:
        return None
    if function.type == "identifier":
        return text_of(function), False
    field = MEMBERS.get(function.type)
    name = function.child_by_field_name(field) if field is not None else None
    return (text_of(name), True) if name is not None else None


def calls_of(tree: ts.Tree, text: str, function: Definition, language: str) -> list[ts.Node]:
    """The argument lists of the document's calls of `function` (whole-word occurrences of its
    name that the tree says are a call's callee: never in strings or comments)."""
    word, _ = identifier_pattern(language)
    to_byte = ByteOffsets(text)
    found: dict[int, ts.Node] = {}
    for name in dict.fromkeys(name for name, _ in function.callees):
        pattern = re.compile(rf"(?<!{word}){re.escape(name)}(?!{word})")
        size = len(name.encode("utf-8", "surrogatepass"))
        for match in pattern.finditer(text):
            start = to_byte(match.start())
            node = tree.root_node.descendant_for_byte_range(start, start + size)
            call = node.parent if node is not None else None
            if call is not None and call.type in MEMBERS:
                call = call.parent
            if call is None or callee_name(call) not in function.callees:
                continue
            arguments = call.child_by_field_name("arguments")
            if arguments is not None and arguments.type in ARGUMENT_LISTS:
                found[arguments.id] = arguments
    return list(found.values())


def call_update(
    arguments: ts.Node, old: tuple[Param, ...], new: tuple[Param, ...], removed: Param
) -> tuple[int, int, str] | None:
    """(start byte, end byte, "") deleting the removed parameter's argument from a call's
    argument list, or None when the call cannot be matched safely or needs no change."""
    if arguments.has_error:
        return None
    args = [a for a in arguments.named_children if a.type != "comment"]
    if any(a.type in SPREAD_ARGUMENTS for a in args):
        return None
    keywords = {}
    for arg in args:
        if arg.type == KEYWORD_ARGUMENT:
            name = arg.child_by_field_name("name")
            keywords[text_of(name) if name is not None else ""] = arg
    if not set(keywords) <= {p.key for p in old}:
        return None  # a keyword naming no parameter: another function of the same name
    positional = [a for a in args if a.type != KEYWORD_ARGUMENT]
    count = len(args)
    target = keywords.get(removed.key)
    if target is None:
        index = positional_index(old, removed)
        if index is None or index >= len(positional):
            return None
        if not fits(old, count) or fits(new, count):
            return None  # already updated, or ambiguous (defaults)
        target = positional[index]
    return deletion(arguments, args, args.index(target))


def positional_index(params: tuple[Param, ...], removed: Param) -> int | None:
    """The argument position of `removed` in a call, None when it is keyword-only."""
    if removed.keyword_only:
        return None
    passed = [p for p in params if p.passed and not p.keyword_only]
    return passed.index(removed) if removed in passed else None


def fits(params: tuple[Param, ...], count: int) -> bool:
    """Whether a call with `count` arguments fits these parameters (none variadic)."""
    passed = [p for p in params if p.passed]
    required = sum(not p.default for p in passed)
    return required <= count <= len(passed)


def deletion(arguments: ts.Node, args: list[ts.Node], k: int) -> tuple[int, int, str] | None:
    """The byte range deleting args[k] with one separator, None when a comment is in it."""
    if len(args) == 1:
        start, end = arguments.start_byte + 1, arguments.end_byte - 1  # all inside the ()
    elif k < len(args) - 1:
        start, end = args[k].start_byte, args[k + 1].start_byte  # `b, ` of `a, b, c`
    else:
        start, end = args[k - 1].end_byte, args[k].end_byte  # `, c` of `a, b, c`
    comments = (c for c in arguments.children if c.type == "comment")
    if any(start < c.end_byte and c.start_byte < end for c in comments):
        return None
    return start, end, ""


def chars(source: bytes, hunk: tuple[int, int, str]) -> tuple[int, int, str]:
    """A byte range of `source` as character offsets."""
    start, end, new = hunk
    return char_at(source, start), char_at(source, end), new


def char_at(source: bytes, byte: int) -> int:
    return len(source[:byte].decode("utf-8", "surrogatepass"))
