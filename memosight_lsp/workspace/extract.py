"""Definitions and imports of one parsed file.

Only the outline is walked (module level, class bodies, namespaces, preprocessor blocks), never
function bodies: that keeps extraction of a large workspace to a few Python calls per definition.
Identifiers used in a definition come from a regex over its bytes, which is far cheaper than
visiting every node.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

import tree_sitter as ts

from .languages import LanguageSpec, grammar
from .symbols import Definition, Import

_IDENT = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")
_MAX_IDENTS = 128
_MAX_SIGNATURE_CHARS = 400
_MAX_SIGNATURE_LINES = 6
_WRAPPERS = frozenset(
    {
        "decorated_definition",
        "export_statement",
        "template_declaration",
        "lexical_declaration",
        "variable_declaration",
        "type_declaration",
        "const_declaration",
        "var_declaration",
        "ambient_declaration",
    }
)
_JS_FUNCTION_VALUES = frozenset(
    {"arrow_function", "function_expression", "function", "generator_function"}
)
_C_NAME_NODES = frozenset(
    {
        "identifier",
        "field_identifier",
        "type_identifier",
        "operator_name",
        "destructor_name",
        "primitive_type",
    }
)


def _text(node: ts.Node | None) -> str:
    if node is None or node.text is None:
        return ""
    return node.text.decode("utf-8", "replace")


class _Extractor:
    def __init__(self, spec: LanguageSpec, source: bytes) -> None:
        self.spec = spec
        self.source = source
        self.defs: list[Definition] = []
        self.imports: list[Import] = []

    # -- walking -------------------------------------------------------------------------------
    def walk(
        self, nodes: Iterable[ts.Node], parent: int, outer: ts.Node | None, depth: int
    ) -> None:
        if depth > 40:  # pathological nesting (generated code): the outline is deep enough
            return
        spec = self.spec
        for node in nodes:
            if not node.is_named:
                continue
            kind = node.type
            if kind in spec.imports:
                self._imports(node)
            elif kind == "export_statement" and node.child_by_field_name("source") is not None:
                self._reexports(node)
            elif kind in spec.definitions:
                index = self._definition(node, parent, outer or node)
                if index is not None and self.defs[index].kind in spec.containers:
                    body = node.child_by_field_name("body")
                    if body is not None:
                        self.walk(body.children, index, None, depth + 1)
            elif kind in spec.descend:
                wrapper = outer
                if wrapper is None and kind in _WRAPPERS:
                    # A group (`const ( A = 1; B = 2 )`) is no wrapper: each member stands alone.
                    members = sum(1 for c in node.named_children if c.type in spec.definitions)
                    wrapper = node if members <= 1 else None
                self.walk(node.children, parent, wrapper, depth + 1)

    # -- definitions ---------------------------------------------------------------------------
    def _definition(self, node: ts.Node, parent: int, outer: ts.Node) -> int | None:
        named = self._name_and_kind(node, parent)
        if named is None:
            return None
        name, kind = named
        if not name:
            return None
        start = outer.start_point.row
        end = max(_last_row(node), _last_row(outer))
        body = self._body(node)
        if body is not None and body.start_point.row > node.start_point.row:
            sig_end = body.start_point.row
            if self.spec.name == "python":
                sig_end = self._python_header_end(node, body)
        elif body is not None:
            sig_end = body.start_point.row
        else:
            sig_end = min(end, start + _MAX_SIGNATURE_LINES - 1)
        sig_end = max(start, min(sig_end, end))
        doc_start, doc_end = self._doc(node, body, outer)
        parent_def = self.defs[parent] if parent >= 0 else None
        qualname = f"{parent_def.qualname}.{name}" if parent_def else name
        if kind in self.spec.containers:
            ident_end = body.start_byte if body is not None else node.end_byte
        else:
            ident_end = node.end_byte
        idents = self._idents(outer.start_byte, ident_end, name)
        self.defs.append(
            Definition(
                name=name,
                kind=kind,
                qualname=qualname,
                start_line=start,
                end_line=end,
                sig_end_line=sig_end,
                doc_start=doc_start,
                doc_end=doc_end,
                parent=parent,
                signature=self._signature(outer, node, body),
                idents=idents,
            )
        )
        return len(self.defs) - 1

    def _name_and_kind(self, node: ts.Node, parent: int) -> tuple[str, str] | None:
        spec, t = self.spec, node.type
        kind = spec.definitions[t]
        parent_kind = self.defs[parent].kind if parent >= 0 else None
        in_type = parent_kind in spec.containers
        if spec.name == "python":
            if t == "expression_statement":
                if parent_kind not in (None, "class"):
                    return None
                assign = node.named_children[0] if node.named_child_count else None
                if assign is None or assign.type != "assignment":
                    return None
                left = assign.child_by_field_name("left")
                if left is None or left.type != "identifier":
                    return None
                return _text(left), "constant"
            if t == "function_definition" and parent_kind == "class":
                kind = "method"
            return _text(node.child_by_field_name("name")), kind
        if t == "variable_declarator":
            if parent >= 0:
                return None
            value = node.child_by_field_name("value")
            if value is not None and value.type in _JS_FUNCTION_VALUES:
                kind = "function"
            elif value is not None and value.type == "class":
                kind = "class"
            name_node = node.child_by_field_name("name")
            if name_node is None or name_node.type != "identifier":
                return None
            return _text(name_node), kind
        if t == "type_spec":
            type_node = node.child_by_field_name("type")
            if type_node is not None and type_node.type == "struct_type":
                kind = "struct"
            elif type_node is not None and type_node.type == "interface_type":
                kind = "interface"
            return _text(node.child_by_field_name("name")), kind
        if t == "impl_item":
            return _text(node.child_by_field_name("type")), kind
        if t == "function_item" and parent_kind in ("impl", "trait"):
            return _text(node.child_by_field_name("name")), "method"
        if t == "field_declaration" and spec.name == "java":
            modifiers = next((c for c in node.children if c.type == "modifiers"), None)
            if modifiers is None or b"static" not in (modifiers.text or b""):
                return None
            declarator = node.child_by_field_name("declarator")
            return _text(declarator.child_by_field_name("name") if declarator else None), kind
        if spec.name in ("c", "cpp"):
            return self._c_name_and_kind(node, kind, in_type)
        if t in ("method_declaration", "constructor_declaration", "method_definition") or (
            t == "function_declaration" and in_type
        ):
            kind = "method"
        return _text(node.child_by_field_name("name")), kind

    def _c_name_and_kind(self, node: ts.Node, kind: str, in_type: bool) -> tuple[str, str] | None:
        t = node.type
        if t in ("struct_specifier", "union_specifier", "enum_specifier", "class_specifier"):
            if node.child_by_field_name("body") is None:
                return None  # a use (`struct S *p`), not a definition
            return _text(node.child_by_field_name("name")), kind
        if t in ("preproc_def", "preproc_function_def"):
            return _text(node.child_by_field_name("name")), kind
        if t == "type_definition":
            type_node = node.child_by_field_name("type")
            if type_node is not None and type_node.child_by_field_name("body") is not None:
                kind = "struct" if type_node.type != "enum_specifier" else "enum"
            name, _ = _c_declarator(node.child_by_field_name("declarator"))
            return name, kind
        name, is_function = _c_declarator(node.child_by_field_name("declarator"))
        if t in ("declaration", "field_declaration") and not is_function:
            return None  # variables and fields are shown with their enclosing definition
        if in_type or "::" in _text(node.child_by_field_name("declarator")).split("(")[0]:
            kind = "method"
        return name, kind

    def _body(self, node: ts.Node) -> ts.Node | None:
        body = node.child_by_field_name("body")
        if body is None and node.type == "type_spec":
            type_node = node.child_by_field_name("type")
            if type_node is not None and type_node.type in ("struct_type", "interface_type"):
                return type_node
        return body

    def _python_header_end(self, node: ts.Node, body: ts.Node) -> int:
        colon = None
        for child in node.children:
            if child.type == ":":
                colon = child
            if child.id == body.id:
                break
        return colon.end_point.row if colon is not None else body.start_point.row - 1

    def _doc(self, node: ts.Node, body: ts.Node | None, outer: ts.Node) -> tuple[int, int]:
        if self.spec.name == "python":
            if body is None or node.type == "expression_statement":
                return -1, -1
            first = body.named_children[0] if body.named_child_count else None
            if first is not None and first.type == "expression_statement":
                string = first.named_children[0] if first.named_child_count else None
                if string is not None and string.type in ("string", "concatenated_string"):
                    return first.start_point.row, first.end_point.row
            return -1, -1
        # Leading comments directly above (no blank line between).
        start = end = -1
        expected = outer.start_point.row
        sibling = outer.prev_named_sibling
        while sibling is not None and sibling.type in self.spec.comments:
            if sibling.end_point.row < expected - 1:
                break
            start = sibling.start_point.row
            if end < 0:
                end = sibling.end_point.row
            expected = start
            sibling = sibling.prev_named_sibling
        return start, end

    def _signature(self, outer: ts.Node, node: ts.Node, body: ts.Node | None) -> str:
        """The header: from the definition's start to its body (whole text if it has none)."""
        end = node.end_byte
        if body is not None:
            end = body.start_byte
            if self.spec.name == "python":
                end = self.source.rfind(b":", outer.start_byte, body.start_byte) + 1 or end
        chunk = self.source[
            outer.start_byte : min(end, outer.start_byte + 4 * _MAX_SIGNATURE_CHARS)
        ]
        text = " ".join(chunk.decode("utf-8", "replace").split())
        return text[:_MAX_SIGNATURE_CHARS]

    def _idents(self, start: int, end: int, own: str) -> tuple[str, ...]:
        found = {m.decode() for m in _IDENT.findall(self.source, start, end)}
        found -= self.spec.keywords
        found.discard(own)
        words = sorted(w for w in found if len(w) > 1)
        return tuple(words[:_MAX_IDENTS])

    # -- imports -------------------------------------------------------------------------------
    def _reexports(self, node: ts.Node) -> None:
        """JS/TS `export * from "./x"`, `export {a, b as c} from "./x"`, `export * as ns from
        "./x"`: what a module passes on is followed as its imports are, so the names of a barrel
        file (`internal.ts`, `index.ts`) lead to their definitions."""
        line = node.start_point.row
        module = _text(node.child_by_field_name("source")).strip("'\"`")
        for child in node.children:
            if child.type == "*":
                self.imports.append(Import(module, "*", None, line))
            elif child.type == "namespace_export":
                ident = next((c for c in child.named_children if c.type == "identifier"), None)
                self.imports.append(Import(module, None, _text(ident), line))
            elif child.type == "export_clause":
                for spec in child.named_children:
                    if spec.type != "export_specifier":
                        continue
                    name = _text(spec.child_by_field_name("name"))
                    alias = _text(spec.child_by_field_name("alias")) or name
                    self.imports.append(Import(module, name, alias, line))

    def _imports(self, node: ts.Node) -> None:
        line = node.start_point.row
        add = self.imports.append
        lang = self.spec.name
        if lang == "python":
            if node.type == "import_statement":
                for child in node.children_by_field_name("name"):
                    if child.type == "aliased_import":
                        module = _text(child.child_by_field_name("name"))
                        add(Import(module, None, _text(child.child_by_field_name("alias")), line))
                    else:
                        module = _text(child)
                        add(Import(module, None, module.split(".")[0], line))
                return
            module = _text(node.child_by_field_name("module_name"))
            if any(c.type == "wildcard_import" for c in node.children):
                add(Import(module, "*", None, line))
            for child in node.children_by_field_name("name"):
                if child.type == "aliased_import":
                    name = _text(child.child_by_field_name("name"))
                    add(Import(module, name, _text(child.child_by_field_name("alias")), line))
                else:
                    add(Import(module, _text(child), _text(child), line))
        elif lang in ("javascript", "typescript", "tsx"):
            source = node.child_by_field_name("source")
            module = _text(source).strip("'\"`")
            clause = next((c for c in node.children if c.type == "import_clause"), None)
            if clause is None:
                return
            for child in clause.named_children:
                if child.type == "identifier":
                    add(Import(module, "default", _text(child), line))
                elif child.type == "namespace_import":
                    ident = next((c for c in child.named_children if c.type == "identifier"), None)
                    add(Import(module, None, _text(ident), line))
                elif child.type == "named_imports":
                    for spec in child.named_children:
                        if spec.type != "import_specifier":
                            continue
                        name = _text(spec.child_by_field_name("name"))
                        alias = _text(spec.child_by_field_name("alias")) or name
                        add(Import(module, name, alias, line))
        elif lang == "go":
            for spec in _descendants(node, "import_spec"):
                path = _text(spec.child_by_field_name("path")).strip('"`')
                alias = _text(spec.child_by_field_name("name")) or path.rsplit("/", 1)[-1]
                add(Import(path, None, alias, spec.start_point.row))
        elif lang == "rust":
            argument = node.child_by_field_name("argument")
            if argument is not None:
                _rust_use(argument, "", line, add)
        elif lang == "java":
            target = next(
                (c for c in node.named_children if c.type in ("scoped_identifier", "identifier")),
                None,
            )
            if target is None:
                return
            if any(c.type == "asterisk" for c in node.children):
                add(Import(_text(target), "*", None, line))
            elif target.type == "scoped_identifier":
                name = _text(target.child_by_field_name("name"))
                add(Import(_text(target.child_by_field_name("scope")), name, name, line))
        else:  # C / C++ includes
            include = node.child_by_field_name("path")
            if include is not None and include.type == "string_literal":
                add(Import(_text(include).strip('"'), "*", None, line))


def _last_row(node: ts.Node) -> int:
    """Last line a node covers (a node ending with its newline ends on the previous line)."""
    end = node.end_point
    return end.row - 1 if end.column == 0 and end.row > node.start_point.row else end.row


def _descendants(node: ts.Node, node_type: str) -> Iterable[ts.Node]:
    for child in node.named_children:
        if child.type == node_type:
            yield child
        else:
            yield from _descendants(child, node_type)


def _rust_use(node: ts.Node, prefix: str, line: int, add: object) -> None:
    emit = add  # callable taking an Import
    assert callable(emit)

    def join(a: str, b: str) -> str:
        return f"{a}::{b}" if a and b else a or b

    t = node.type
    if t == "scoped_identifier":
        path = join(prefix, _text(node.child_by_field_name("path")))
        name = _text(node.child_by_field_name("name"))
        emit(Import(path, name, name, line))
    elif t in ("identifier", "crate", "super", "self"):
        name = _text(node)
        if name == "self" and prefix:
            emit(Import(prefix, None, prefix.rsplit("::", 1)[-1], line))
        elif prefix:
            emit(Import(prefix, name, name, line))
        else:
            emit(Import(name, None, name, line))
    elif t == "use_as_clause":
        target = node.child_by_field_name("path")
        alias = _text(node.child_by_field_name("alias"))
        if target is not None and target.type == "scoped_identifier":
            module = join(prefix, _text(target.child_by_field_name("path")))
            emit(Import(module, _text(target.child_by_field_name("name")), alias, line))
        elif target is not None:
            emit(Import(prefix or _text(target), _text(target) if prefix else None, alias, line))
    elif t == "scoped_use_list":
        base = join(prefix, _text(node.child_by_field_name("path")))
        items = node.child_by_field_name("list")
        for item in items.named_children if items is not None else ():
            _rust_use(item, base, line, add)
    elif t == "use_list":
        for item in node.named_children:
            _rust_use(item, prefix, line, add)
    elif t == "use_wildcard":
        emit(
            Import(join(prefix, _text(node).removesuffix("::*").removesuffix("*")), "*", None, line)
        )


def _c_declarator(node: ts.Node | None) -> tuple[str, bool]:
    """Name declared by a C/C++ declarator chain, and whether it declares a function."""
    is_function = False
    depth = 0
    while node is not None and depth < 20:
        depth += 1
        t = node.type
        if t in _C_NAME_NODES:
            return _text(node), is_function
        if t == "function_declarator":
            is_function = True
        if t == "qualified_identifier":
            node = node.child_by_field_name("name")
            continue
        if t == "template_function":
            node = node.child_by_field_name("name")
            continue
        inner = node.child_by_field_name("declarator")
        if inner is None:
            inner = next((c for c in node.named_children if c.type in _C_NAME_NODES), None)
        node = inner
    return "", is_function


def extract(
    spec: LanguageSpec, tree: ts.Tree, source: bytes
) -> tuple[list[Definition], list[Import]]:
    extractor = _Extractor(spec, source)
    extractor.walk(tree.root_node.children, -1, None, 0)
    if spec.name == "python":
        # Python also imports inside functions (lazy imports): find those with a query, which
        # searches in C instead of walking every body in Python.
        extractor.imports.clear()
        captures = ts.QueryCursor(_python_import_query(spec)).captures(tree.root_node)
        nodes = sorted(captures.get("import", []), key=lambda n: n.start_byte)
        for node in nodes:
            extractor._imports(node)
    return extractor.defs, extractor.imports


@functools.cache
def _python_import_query_for(name: str, lang: ts.Language) -> ts.Query:
    return ts.Query(lang, "[(import_statement) (import_from_statement)] @import")


def _python_import_query(spec: LanguageSpec) -> ts.Query:
    return _python_import_query_for(spec.name, grammar(spec))
