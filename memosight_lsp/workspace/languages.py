"""The languages the index understands: one tree-sitter grammar wheel each, chosen by LSP languageId
or file extension. Anything else is an unknown language (None) and gets plain prefix/suffix context.
"""

from __future__ import annotations

import importlib
import re
import threading
from dataclasses import dataclass, field
from pathlib import PurePath

import tree_sitter as ts


@dataclass(frozen=True, kw_only=True)
class LanguageSpec:
    name: str
    language_ids: tuple[str, ...]
    extensions: tuple[str, ...]
    module: str  # the grammar wheel
    function: str  # its function returning the language pointer
    comment: str  # line-comment leader, used for path markers
    # node type -> definition kind
    definitions: dict[str, str]
    # node types walked through to find definitions inside (wrappers, groups, bodies)
    descend: frozenset[str]
    # kinds whose body holds member definitions
    containers: frozenset[str] = frozenset(
        {"class", "struct", "interface", "trait", "impl", "enum"}
    )
    imports: frozenset[str] = frozenset()
    comments: frozenset[str] = frozenset({"comment"})
    keywords: frozenset[str] = field(default_factory=frozenset)

    def path_marker(self, relpath: str) -> str:
        """The comment naming a file above its snippet (the marker the default model learned)."""
        return f"{self.comment} file: {relpath}\n"


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_C_KEYWORDS = _words(
    "auto break case char const continue default do double else enum extern float for "
    "goto if inline int long register restrict return short signed sizeof static struct "
    "switch typedef union unsigned void volatile while bool true false NULL nullptr class "
    "public private protected virtual template typename namespace using new delete this "
    "operator override final const_cast static_cast dynamic_cast reinterpret_cast try "
    "catch throw std size_t define include ifdef ifndef endif undef pragma "
)
_JS_KEYWORDS = _words(
    "break case catch class const continue debugger default delete do else export extends "
    "finally for function if import in instanceof let new return super switch this throw "
    "try typeof var void while with yield async await of null undefined true false static "
    "get set interface type enum implements private public protected readonly as from "
    "number string boolean any unknown never object declare abstract keyof infer is "
    "namespace module require console "
)

_PY_DESCEND = frozenset({"decorated_definition", "block", "if_statement", "try_statement"})
_JS_DEFS = {
    "function_declaration": "function",
    "generator_function_declaration": "function",
    "class_declaration": "class",
    "abstract_class_declaration": "class",
    "method_definition": "method",
    "variable_declarator": "constant",
    "interface_declaration": "interface",
    "type_alias_declaration": "type",
    "enum_declaration": "enum",
    "abstract_method_signature": "method",
    "method_signature": "method",
}
_JS_DESCEND = frozenset(
    {
        "export_statement",
        "lexical_declaration",
        "variable_declaration",
        "class_body",
        "interface_body",
        "object_type",
        "ambient_declaration",
        "internal_module",
        "statement_block",
    }
)
_C_DEFS = {
    "function_definition": "function",
    "declaration": "function",  # prototypes only: see extract
    "field_declaration": "method",  # C++ member prototypes only
    "struct_specifier": "struct",
    "union_specifier": "struct",
    "enum_specifier": "enum",
    "type_definition": "type",
    "preproc_def": "constant",
    "preproc_function_def": "function",
}
_C_DESCEND = frozenset(
    {
        "preproc_ifdef",
        "preproc_if",
        "preproc_else",
        "preproc_elif",
        "linkage_specification",
        "declaration_list",
        "field_declaration_list",
    }
)

LANGUAGES: tuple[LanguageSpec, ...] = (
    LanguageSpec(
        name="python",
        language_ids=("python",),
        extensions=(".py", ".pyi"),
        module="tree_sitter_python",
        function="language",
        comment="#",
        definitions={
            "function_definition": "function",
            "class_definition": "class",
            "expression_statement": "constant",  # module/class-level `NAME = ...`
        },
        descend=_PY_DESCEND,
        imports=frozenset({"import_statement", "import_from_statement"}),
        keywords=_words(
            "False None True and as assert async await break class continue def del elif else "
            "except finally for from global if import in is lambda nonlocal not or pass raise "
            "return try while with yield self cls print len str int float bool list dict set "
            "tuple object type super isinstance range enumerate zip open repr hasattr getattr "
            "setattr Exception ValueError TypeError KeyError "
        ),
    ),
    LanguageSpec(
        name="javascript",
        language_ids=("javascript", "javascriptreact"),
        extensions=(".js", ".jsx", ".mjs", ".cjs"),
        module="tree_sitter_javascript",
        function="language",
        comment="//",
        definitions=_JS_DEFS,
        descend=_JS_DESCEND,
        imports=frozenset({"import_statement"}),
        keywords=_JS_KEYWORDS,
    ),
    LanguageSpec(
        name="typescript",
        language_ids=("typescript",),
        extensions=(".ts", ".mts", ".cts"),
        module="tree_sitter_typescript",
        function="language_typescript",
        comment="//",
        definitions=_JS_DEFS,
        descend=_JS_DESCEND,
        imports=frozenset({"import_statement"}),
        keywords=_JS_KEYWORDS,
    ),
    LanguageSpec(
        name="tsx",
        language_ids=("typescriptreact",),
        extensions=(".tsx",),
        module="tree_sitter_typescript",
        function="language_tsx",
        comment="//",
        definitions=_JS_DEFS,
        descend=_JS_DESCEND,
        imports=frozenset({"import_statement"}),
        keywords=_JS_KEYWORDS,
    ),
    LanguageSpec(
        name="go",
        language_ids=("go",),
        extensions=(".go",),
        module="tree_sitter_go",
        function="language",
        comment="//",
        definitions={
            "function_declaration": "function",
            "method_declaration": "method",
            "type_spec": "type",  # struct / interface decided from its type
            "type_alias": "type",
            "const_spec": "constant",
            "var_spec": "constant",
        },
        descend=frozenset({"type_declaration", "const_declaration", "var_declaration"}),
        imports=frozenset({"import_declaration"}),
        keywords=_words(
            "break case chan const continue default defer else fallthrough for func go goto if "
            "import interface map package range return select struct switch type var nil true "
            "false int string bool error byte rune float64 int64 uint make len append new "
        ),
    ),
    LanguageSpec(
        name="rust",
        language_ids=("rust",),
        extensions=(".rs",),
        module="tree_sitter_rust",
        function="language",
        comment="//",
        definitions={
            "function_item": "function",
            "function_signature_item": "method",
            "struct_item": "struct",
            "enum_item": "enum",
            "union_item": "struct",
            "trait_item": "trait",
            "impl_item": "impl",
            "type_item": "type",
            "const_item": "constant",
            "static_item": "constant",
            "macro_definition": "function",
        },
        descend=frozenset({"declaration_list", "mod_item"}),
        imports=frozenset({"use_declaration"}),
        comments=frozenset({"line_comment", "block_comment"}),
        keywords=_words(
            "as async await break const continue crate dyn else enum extern false fn for if impl "
            "in let loop match mod move mut pub ref return self Self static struct super trait "
            "true type unsafe use where while Some None Ok Err Option Result Vec String Box i32 "
            "i64 u8 u32 u64 usize f64 bool str "
        ),
    ),
    LanguageSpec(
        name="java",
        language_ids=("java",),
        extensions=(".java",),
        module="tree_sitter_java",
        function="language",
        comment="//",
        definitions={
            "class_declaration": "class",
            "interface_declaration": "interface",
            "enum_declaration": "enum",
            "record_declaration": "class",
            "annotation_type_declaration": "interface",
            "method_declaration": "method",
            "constructor_declaration": "method",
            "field_declaration": "constant",  # static final only: see extract
        },
        descend=frozenset({"class_body", "interface_body", "enum_body", "enum_body_declarations"}),
        imports=frozenset({"import_declaration"}),
        comments=frozenset({"line_comment", "block_comment"}),
        keywords=_words(
            "abstract assert boolean break byte case catch char class const continue default do "
            "double else enum extends final finally float for goto if implements import "
            "instanceof int interface long native new package private protected public return "
            "short static strictfp super switch synchronized this throw throws transient try void "
            "volatile while true false null var String Object Override "
        ),
    ),
    LanguageSpec(
        name="c",
        language_ids=("c",),
        extensions=(".c", ".h"),
        module="tree_sitter_c",
        function="language",
        comment="//",
        definitions=_C_DEFS,
        descend=_C_DESCEND,
        imports=frozenset({"preproc_include"}),
        keywords=_C_KEYWORDS,
    ),
    LanguageSpec(
        name="cpp",
        language_ids=("cpp", "cuda-cpp"),
        extensions=(".cc", ".cpp", ".cxx", ".c++", ".hpp", ".hh", ".hxx", ".h++", ".ipp"),
        module="tree_sitter_cpp",
        function="language",
        comment="//",
        definitions={**_C_DEFS, "class_specifier": "class"},
        descend=_C_DESCEND | {"namespace_definition", "template_declaration"},
        imports=frozenset({"preproc_include"}),
        keywords=_C_KEYWORDS,
    ),
)

_BY_ID = {lid: spec for spec in LANGUAGES for lid in spec.language_ids}
_BY_EXT = {ext: spec for spec in LANGUAGES for ext in spec.extensions}
_BY_NAME = {spec.name: spec for spec in LANGUAGES}
_local = threading.local()
_grammars: dict[str, ts.Language] = {}
_grammar_lock = threading.Lock()


def language_for(
    path: str | PurePath | None = None, language_id: str | None = None
) -> LanguageSpec | None:
    """The language of a document: the LSP languageId wins, then the file extension; else None."""
    if language_id and language_id in _BY_ID:
        return _BY_ID[language_id]
    if path is not None:
        return _BY_EXT.get(PurePath(path).suffix.lower())
    return None


# What only C++ writes, at the start of a line: a header (.h) holding any of it is C++ (C and
# C++ projects both name headers .h; the C grammar loses classes, namespaces and templates).
_CPP_ONLY = re.compile(
    rb"^[ \t]*(?:namespace[ \t]+\w+[ \t]*\{|template[ \t]*<|(?:public|private|protected)[ \t]*:"
    rb"|class[ \t]+\w+[^;\n]*\{|using[ \t]+namespace[ \t]|extern[ \t]+\"C\+\+\")",
    re.MULTILINE,
)
HEADER_SNIFF_BYTES = 65_536  # how much of a header is looked at


def for_content(spec: LanguageSpec, path: str | PurePath | None, text: str | bytes) -> LanguageSpec:
    """`spec` (language_for's answer) corrected by the text: a .h header written in C++ is C++."""
    if spec.name != "c" or path is None or PurePath(path).suffix.lower() != ".h":
        return spec
    head = text[:HEADER_SNIFF_BYTES]
    data = head.encode("utf-8", "surrogatepass") if isinstance(head, str) else head
    return _BY_NAME["cpp"] if _CPP_ONLY.search(data) else spec


def language_named(name: str) -> LanguageSpec | None:
    return _BY_NAME.get(name)


def grammar(spec: LanguageSpec) -> ts.Language:
    with _grammar_lock:
        lang = _grammars.get(spec.name)
        if lang is None:
            module = importlib.import_module(spec.module)
            lang = ts.Language(getattr(module, spec.function)())
            _grammars[spec.name] = lang
        return lang


def parser(spec: LanguageSpec) -> ts.Parser:
    """A parser for this thread (tree-sitter parsers must not be shared between threads)."""
    parsers: dict[str, ts.Parser] | None = getattr(_local, "parsers", None)
    if parsers is None:
        parsers = _local.parsers = {}
    p = parsers.get(spec.name)
    if p is None:
        p = parsers[spec.name] = ts.Parser(grammar(spec))
    return p
