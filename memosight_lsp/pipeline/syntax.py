"""What the syntax tree says about the cursor: inside a string, a comment, or mid-expression.

Text rules alone get `x = {"key":`, `s = "usage:` or `# Example:` wrong (they end like a block
header); tree-sitter knows the cursor is in a dictionary, a string, a comment.
"""

from __future__ import annotations

from typing import Literal

from memosight_lsp.workspace.languages import language_for, parser

from .open_brackets import COMMENT, OPEN_QUOTE, code_marks

MAX_PARSE_BYTES = 1_000_000  # beyond this, the text rules decide alone

STRING_OR_COMMENT = {
    "string",
    "string_content",
    "string_literal",
    "raw_string_literal",
    "template_string",
    "interpreted_string_literal",
    "char_literal",
    "character_literal",
    "comment",
    "line_comment",
    "block_comment",
    "text_block",
}
BRACKETED = {
    "argument_list",
    "arguments",
    "parameters",
    "formal_parameters",
    "parameter_list",
    "list",
    "tuple",
    "dictionary",
    "set",
    "parenthesized_expression",
    "subscript",
    "array",
    "object",
    "generator_expression",
    "list_comprehension",
    "dictionary_comprehension",
    "set_comprehension",
    "initializer_list",
    "composite_literal",
    "literal_value",
    "tuple_expression",
    "array_expression",
}
OPENERS = "([{"


Place = Literal["string", "comment", "brackets", "code"]


def inside_expression(
    prefix: str, suffix: str, *, path: str | None, language_id: str | None
) -> bool | None:
    """True when the cursor is in a string, a comment or a bracketed expression it does not
    open; False when it is not; None when the language has no grammar (the text rules decide)."""
    place = cursor_place(prefix, suffix, path=path, language_id=language_id)
    return None if place is None else place != "code"


def cursor_place(
    prefix: str, suffix: str, *, path: str | None, language_id: str | None
) -> Place | None:
    """Where the cursor is: in a string, a comment, a bracketed expression it does not open, or
    plain code; None when the language has no grammar."""
    spec = language_for(path, language_id)
    if spec is None:
        return None
    before = prefix.encode("utf-8", "surrogatepass")
    source = before + suffix.encode("utf-8", "surrogatepass")
    if len(source) > MAX_PARSE_BYTES or not before:
        return None
    tree = parser(spec).parse(source)
    offset = len(before)
    if tree.root_node.has_error:
        # Unclosed brackets or quotes parse as ERROR: read the cursor's line instead.
        return unclosed_on_line(prefix.rsplit("\n", 1)[-1], spec.name)
    node = tree.root_node.descendant_for_byte_range(offset - 1, offset - 1)
    last_code = prefix.rstrip()[-1:]
    while node is not None:
        inside = node.start_byte < offset < node.end_byte
        if inside and node.type in STRING_OR_COMMENT:
            return "comment" if node.type.endswith("comment") else "string"
        if (
            node.type in STRING_OR_COMMENT
            and node.end_byte == offset
            and node.type.endswith("comment")
        ):
            return "comment"  # a line comment ends where the line does
        if inside and node.type in BRACKETED and last_code not in OPENERS:
            return "brackets"
        node = node.parent
    return "code"


def unclosed_on_line(line: str, language: str | None = None) -> Place:
    """An open quote, a comment, or an open bracket the cursor is not right after, in the
    line's text ("code" when none)."""
    depth = 0
    for mark in code_marks(line, language):
        if mark == COMMENT:
            return "comment"  # the cursor is in a comment
        if mark == OPEN_QUOTE:
            return "string"
        depth = depth + 1 if mark in OPENERS else max(0, depth - 1)
    return "brackets" if depth > 0 and line.rstrip()[-1:] not in OPENERS else "code"
